/*  test_shm.c: the same-host pipe of records (za_shm.h): records arrive in
    order and whole across the ring's end, a full segment says so, another
    process attaches and reads while it is written, and what is not the
    segment offered, or a segment scribbled on, is refused with an error.
    And a connection's link (za_shm_link.h) over real sockets: tensors go
    through shared memory once both ends can, a restarted end reads on,
    and what cannot be read is refused; with bells, whole messages (header
    and tensors) go through the segments and nothing over ZeroMQ, a bell
    whose owner is gone sends frames, and a whole record that is not one is
    refused.                                                              */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "za/za_shm.h"
#include "za/za_shm_link.h"
#include "za/za_util.h"
#include "za/za_wire.h"

//  Record k: k's bytes, a size that is no multiple of 64 and varies.
static size_t
s_size (int k)
{
    return (size_t) (k * 37) % 3001;
}

static void
s_fill (unsigned char *bytes, int k, size_t n)
{
    for (size_t i = 0; i < n; i++)
        bytes [i] = (unsigned char) (k * 31 + i * 7);
}

static int
s_check (const za_shm_record_t *record, int k)
{
    if (record->seq != (uint64_t) k || record->step != -k || record->op != 26
        || record->dtype != 1 || record->task != 3 || record->bytes != s_size (k))
        return 0;
    unsigned char want [3001];
    s_fill (want, k, record->bytes);
    return memcmp (record->data, want, record->bytes) == 0;
}

static int
s_write (za_shm_t *out, int k)
{
    unsigned char bytes [3001];
    s_fill (bytes, k, s_size (k));
    za_shm_record_t record = {.op = 26, .dtype = 1, .task = 3, .seq = (uint64_t) k,
                              .step = -k, .data = bytes, .bytes = s_size (k)};
    return za_shm_write (out, &record);
}

static za_shm_t *
s_attach (za_shm_t *out)
{
    char offer [ZA_SHM_OFFER_MAX];
    size_t len = za_shm_offer (out, offer);
    cr_assert_gt (len, 0);
    za_shm_t *in = za_shm_attach (offer, len);
    cr_assert_not_null (in, "%s", za_last_error ());
    return in;
}

Test (shm, records_arrive_in_order_and_whole_across_the_end)
{
    //  A small segment: the records go round it many times.
    za_shm_t *out = za_shm_create (16384);
    cr_assert_not_null (out, "%s", za_last_error ());
    za_shm_t *in = s_attach (out);
    za_shm_record_t record;
    cr_assert_eq (za_shm_read (in, &record), 0, "nothing written yet");
    int written = 0, read = 0;
    while (read < 2000) {
        //  Write until full, then read some: the writer is told, not blocked.
        int rc;
        while (written < 2000 && (rc = s_write (out, written)) == 0)
            written++;
        if (written < 2000)
            cr_assert_eq (rc, 1);
        for (int i = 0; i < 3 && read < written; i++, read++) {
            cr_assert_eq (za_shm_read (in, &record), 1, "record %d", read);
            cr_assert (s_check (&record, read), "record %d came changed", read);
        }
    }
    cr_expect_eq (za_shm_read (in, &record), 0);
    cr_expect (za_shm_empty (out));
    za_shm_destroy (&in);
    za_shm_destroy (&out);
}

Test (shm, a_record_larger_than_the_segment_is_an_error)
{
    za_shm_t *out = za_shm_create (4096);
    cr_assert_not_null (out);
    static unsigned char big [8192];
    za_shm_record_t record = {.data = big, .bytes = sizeof big};
    cr_expect_eq (za_shm_write (out, &record), -1);
    cr_expect (strstr (za_last_error (), "a record of 8192 bytes"), "%s", za_last_error ());
    record.bytes = 4096 - 64;
    cr_expect_eq (za_shm_write (out, &record), 0, "the largest that fits");
    za_shm_destroy (&out);
}

//  Another process attaches and reads while this one writes; it sleeps
//  when there is nothing and a write wakes it.
Test (shm, another_process_reads_while_it_is_written)
{
    za_shm_t *out = za_shm_create (65536);
    cr_assert_not_null (out);
    char offer [ZA_SHM_OFFER_MAX];
    size_t len = za_shm_offer (out, offer);
    pid_t child = fork ();
    if (child == 0) {
        za_shm_t *in = za_shm_attach (offer, len);
        if (!in)
            _exit (10);
        for (int k = 0; k < 5000; k++) {
            za_shm_record_t record;
            int got;
            while ((got = za_shm_read (in, &record)) == 0)
                za_shm_wait (in, k % 2? 0: 20, 5000000);
            if (got != 1 || !s_check (&record, k))
                _exit (11);
            za_shm_release (in);
        }
        za_shm_destroy (&in);
        _exit (0);
    }
    int status, ended = 0;
    for (int k = 0; k < 5000 && !ended; k++)
        while (s_write (out, k) == 1 && !ended) {
            usleep (k % 100 == 0? 1000: 0);     //  now and then the reader sleeps
            ended = waitpid (child, &status, WNOHANG) == child;     //  it gave up
        }
    if (!ended)
        cr_assert_eq (waitpid (child, &status, 0), child);
    cr_expect (WIFEXITED (status) && WEXITSTATUS (status) == 0, "the reader: %d",
               WEXITSTATUS (status));
    za_shm_destroy (&out);
}

Test (shm, what_is_not_the_segment_offered_is_refused)
{
    za_shm_t *out = za_shm_create (0);
    cr_assert_not_null (out);
    char offer [ZA_SHM_OFFER_MAX], nonce [33];
    za_shm_offer (out, offer);
    za_shm_nonce (out, nonce);
    int fd;
    cr_assert_eq (sscanf (strstr (offer, "\"fd\":"), "\"fd\":%d", &fd), 1);
    //  Another nonce, another size, a fd that is no segment, a process that is
    //  gone, and what is no offer at all.
    char other [33];
    snprintf (other, sizeof other, "%s", nonce);
    other [0] = other [0] == '0'? '1': '0';
    pid_t gone = fork ();
    if (gone == 0)
        _exit (0);
    waitpid (gone, NULL, 0);
    char cases [6][2 * ZA_SHM_OFFER_MAX];
    snprintf (cases [0], sizeof cases [0], "{\"pid\":%d,\"fd\":%d,\"bytes\":%u,\"nonce\":\"%s\"}",
              (int) getpid (), fd, ZA_SHM_DEFAULT_BYTES, other);
    snprintf (cases [1], sizeof cases [1], "{\"pid\":%d,\"fd\":%d,\"bytes\":%u,\"nonce\":\"%s\"}",
              (int) getpid (), fd, ZA_SHM_DEFAULT_BYTES / 2, nonce);
    int fds [2];
    cr_assert_eq (pipe (fds), 0);
    snprintf (cases [2], sizeof cases [2], "{\"pid\":%d,\"fd\":%d,\"bytes\":%u,\"nonce\":\"%s\"}",
              (int) getpid (), fds [0], ZA_SHM_DEFAULT_BYTES, nonce);
    snprintf (cases [3], sizeof cases [3], "{\"pid\":%d,\"fd\":%d,\"bytes\":%u,\"nonce\":\"%s\"}",
              (int) gone, fd, ZA_SHM_DEFAULT_BYTES, nonce);
    snprintf (cases [4], sizeof cases [4], "{\"pid\":%d,\"fd\":%d,\"bytes\":70,\"nonce\":\"%s\"}",
              (int) getpid (), fd, nonce);
    snprintf (cases [5], sizeof cases [5], "not json");
    for (int k = 0; k < 6; k++) {
        za_error_clear ();
        za_shm_t *in = za_shm_attach (cases [k], strlen (cases [k]));
        cr_expect_null (in, "case %d attached: %s", k, cases [k]);
        cr_expect (strstr (za_last_error (), "shm: "), "case %d: '%s'", k, za_last_error ());
        za_shm_destroy (&in);
    }
    close (fds [0]);
    close (fds [1]);
    za_shm_destroy (&out);
}

//  A segment scribbled on (a record's length that runs past what was
//  published): the reader says so, reads nothing of it, and stays shut.
Test (shm, a_scribbled_record_is_an_error_and_the_pipe_stays_shut)
{
    za_shm_t *out = za_shm_create (8192);
    cr_assert_not_null (out);
    za_shm_t *in = s_attach (out);
    cr_assert_eq (s_write (out, 5), 0);
    char offer [ZA_SHM_OFFER_MAX];
    za_shm_offer (out, offer);
    int fd;
    cr_assert_eq (sscanf (strstr (offer, "\"fd\":"), "\"fd\":%d", &fd), 1);
    //  The first record's length, just past the header's three lines.
    unsigned char *map = mmap (NULL, 3 * 64 + 8192, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    cr_assert_neq (map, MAP_FAILED);
    uint64_t length = 1u << 20;
    memcpy (map + 3 * 64, &length, sizeof length);
    za_shm_record_t record;
    cr_expect_eq (za_shm_read (in, &record), -1);
    cr_expect (strstr (za_last_error (), "unreadable"), "%s", za_last_error ());
    length = 128;
    memcpy (map + 3 * 64, &length, sizeof length);
    cr_expect_eq (za_shm_read (in, &record), -1, "a broken pipe stays broken");
    munmap (map, 3 * 64 + 8192);
    za_shm_destroy (&in);
    za_shm_destroy (&out);
}

// ---------------------------------------------------------------------------
//  za_shm_link: a worker's DEALER and a ps's ROUTER on loopback tcp, each
//  end with the link a worker and a ps have.

typedef struct {
    zsock_t *dealer, *router;
    za_shm_link_t *worker, *ps;
    za_shm_bell_t *worker_bell, *ps_bell;   //  s_pair_ring: whole messages both ways
    za_wire_msg_t *msg;
    za_wire_lease_t lease;
    zframe_t *id;                   //  the worker's routing id at the ps
    float floats [5000];
} s_pair_t;

static void
s_pair_make (s_pair_t *p)
{
    memset (p, 0, sizeof *p);
    p->router = zsock_new (ZMQ_ROUTER);
    p->dealer = zsock_new (ZMQ_DEALER);
    cr_assert_not_null (p->router);
    int port = zsock_bind (p->router, "tcp://127.0.0.1:*");
    cr_assert_gt (port, 0);
    cr_assert_eq (zsock_connect (p->dealer, "tcp://127.0.0.1:%d", port), 0);
    zsock_set_rcvtimeo (p->dealer, 10000);
    zsock_set_rcvtimeo (p->router, 10000);
    p->worker = za_shm_link_new (1, 0);
    p->ps = za_shm_link_new (0, 0);
    cr_assert (p->worker && p->ps, "%s", za_last_error ());
    p->msg = malloc (sizeof *p->msg);
    za_wire_lease_init (&p->lease);
}

static void
s_pair_destroy (s_pair_t *p)
{
    zsock_destroy (&p->dealer);
    zsock_destroy (&p->router);
    za_wire_lease_wait (&p->lease);
    za_shm_link_destroy (&p->worker);
    za_shm_link_destroy (&p->ps);
    za_shm_bell_destroy (&p->worker_bell);
    za_shm_bell_destroy (&p->ps_bell);
    zframe_destroy (&p->id);
    free (p->msg);
}

//  One message of 5000 floats of `value` from one end (its link and
//  socket) to the other; returns how many frames went over ZeroMQ, and
//  checks that the other end decodes the floats.
//  Sends the 5000 floats of `value` (seq: the value) through one end.
static void
s_send_floats (s_pair_t *p, int to_ps, float value)
{
    for (int i = 0; i < 5000; i++)
        p->floats [i] = value + (float) i;
    za_wire_msg_init (p->msg, to_ps? ZA_OP_PUSH: ZA_OP_VALUES);
    p->msg->seq = (uint64_t) value;
    int64_t shape [1] = {5000};
    za_wire_msg_add (p->msg, "w", ZA_DTYPE_F32, 1, shape, p->floats);
    int rc = to_ps? za_shm_link_send (p->worker, p->dealer, NULL, p->msg, &p->lease)
                  : za_shm_link_send (p->ps, p->router, p->id, p->msg, &p->lease);
    cr_assert_eq (rc, 0, "%s", za_last_error ());
    za_wire_lease_wait (&p->lease);
}

static int
s_pass (s_pair_t *p, int to_ps, float value)
{
    s_send_floats (p, to_ps, value);
    zmsg_t *msg = zmsg_recv (to_ps? p->router: p->dealer);
    cr_assert_not_null (msg);
    if (to_ps) {
        zframe_destroy (&p->id);
        p->id = zmsg_pop (msg);
    }
    int frames = (int) zmsg_size (msg);
    cr_assert_eq (za_shm_link_receive (to_ps? p->ps: p->worker, msg), 0, "%s",
                  za_last_error ());
    cr_assert_eq (za_wire_decode (msg, p->msg), 0, "%s", za_last_error ());
    cr_assert_eq (p->msg->tensor_count, 1);
    float got [5000];
    memcpy (got, p->msg->tensors [0].data, sizeof got);
    for (int i = 0; i < 5000; i++)
        cr_assert_eq (got [i], value + (float) i, "[%d]", i);
    zmsg_destroy (&msg);
    return frames;
}

//  Gives both ends of a pair a bell.
static void
s_pair_ring (s_pair_t *p)
{
    p->worker_bell = za_shm_bell_new ();
    p->ps_bell = za_shm_bell_new ();
    cr_assert (p->worker_bell && p->ps_bell, "%s", za_last_error ());
    za_shm_link_set_bell (p->worker, p->worker_bell);
    za_shm_link_set_bell (p->ps, p->ps_bell);
}

//  As s_pass, but the receiving end waits as a role does, on its socket
//  and its bell: returns 0 when the message came whole through the
//  segment (nothing over ZeroMQ), else the frames it came in.
static int
s_pass_rung (s_pair_t *p, int to_ps, float value)
{
    s_send_floats (p, to_ps, value);
    za_shm_link_t *link = to_ps? p->ps: p->worker;
    za_shm_bell_t *bell = to_ps? p->ps_bell: p->worker_bell;
    zmq_pollitem_t items [2] = {
        {zsock_resolve (to_ps? p->router: p->dealer), 0, ZMQ_POLLIN, 0},
        {NULL, za_shm_bell_fd (bell), ZMQ_POLLIN, 0},
    };
    cr_assert_gt (zmq_poll (items, 2, 10000), 0, "nothing came");
    int frames = 0;
    zmsg_t *msg = NULL;
    const void *const *data = NULL;
    const size_t *sizes = NULL;
    int count = 0;
    if (items [1].revents & ZMQ_POLLIN) {
        za_shm_bell_quiet (bell);
        cr_assert_eq (za_shm_link_take (link, &msg, &data, &sizes, &count), 1, "%s",
                      za_last_error ());
        cr_expect_eq ((uintptr_t) data [0] % 64, 0, "a tensor read in place is aligned");
        cr_assert_eq (za_wire_decode_payloads (msg, data, sizes, count, p->msg), 0, "%s",
                      za_last_error ());
    }
    else {
        msg = zmsg_recv ((zsock_t *) (to_ps? p->router: p->dealer));
        cr_assert_not_null (msg);
        if (to_ps) {
            zframe_destroy (&p->id);
            p->id = zmsg_pop (msg);
        }
        frames = (int) zmsg_size (msg);
        cr_assert_eq (za_shm_link_receive (link, msg), 0, "%s", za_last_error ());
        cr_assert_eq (za_wire_decode (msg, p->msg), 0, "%s", za_last_error ());
    }
    cr_assert_eq (p->msg->tensor_count, 1);
    cr_expect_eq (p->msg->seq, (uint64_t) value);
    for (int i = 0; i < 5000; i++)
        cr_assert_eq (((const float *) p->msg->tensors [0].data) [i], value + (float) i, "[%d]", i);
    za_shm_link_done (link);
    zmsg_destroy (&msg);
    return frames;
}

//  With bells, once each end reads the other's segment, messages go whole
//  through it (the header too: nothing over ZeroMQ), ring the reader, and
//  arrive the same; the segment's records go round many times.
Test (shm_link, with_bells_whole_messages_go_through_shared_memory)
{
    s_pair_t p;
    s_pair_make (&p);
    s_pair_ring (&p);
    cr_expect_eq (s_pass_rung (&p, 1, 1), 2, "the first push: frames");
    cr_expect_eq (s_pass_rung (&p, 0, 2), 2, "the answer: frames (the worker never said ok)");
    cr_expect (za_shm_link_rings (p.worker) && za_shm_link_rings (p.ps), "bells opened");
    cr_expect_eq (s_pass_rung (&p, 1, 3), 0, "the worker's push: whole, through its segment");
    for (int round = 0; round < 300; round++) {
        cr_expect_eq (s_pass_rung (&p, 0, 4 + round), 0, "round %d: values whole", round);
        cr_expect_eq (s_pass_rung (&p, 1, 5 + round), 0, "round %d: push whole", round);
    }
    cr_expect_eq (zsock_events (p.router) & ZMQ_POLLIN, 0, "nothing left over ZeroMQ");
    cr_expect_eq (zsock_events (p.dealer) & ZMQ_POLLIN, 0);
    s_pair_destroy (&p);
}

//  A message larger than the sender's segment goes as frames, with no error
//  (the next small one goes whole again).
Test (shm_link, a_message_larger_than_the_segment_goes_as_frames_quietly)
{
    s_pair_t p;
    s_pair_make (&p);
    za_shm_link_destroy (&p.worker);
    p.worker = za_shm_link_new (1, 65536);
    cr_assert_not_null (p.worker);
    s_pair_ring (&p);
    s_pass_rung (&p, 1, 1);
    s_pass_rung (&p, 0, 2);
    cr_assert_eq (s_pass_rung (&p, 1, 3), 0, "20 KB: whole");
    static float big [20000];
    za_wire_msg_init (p.msg, ZA_OP_PUSH);
    int64_t shape [1] = {20000};
    za_wire_msg_add (p.msg, "w", ZA_DTYPE_F32, 1, shape, big);
    za_error_clear ();
    cr_assert_eq (za_shm_link_send (p.worker, p.dealer, NULL, p.msg, &p.lease), 0);
    cr_expect_str_eq (za_last_error (), "", "an error for a message that only goes as frames");
    za_wire_lease_wait (&p.lease);
    zmsg_t *msg = zmsg_recv (p.router);
    cr_assert_not_null (msg, "80 KB: over ZeroMQ");
    zframe_destroy (&p.id);
    p.id = zmsg_pop (msg);
    cr_expect_eq (zmsg_size (msg), 2, "the header and its frame");
    cr_assert_eq (za_shm_link_receive (p.ps, msg), 0, "%s", za_last_error ());
    cr_assert_eq (za_wire_decode (msg, p.msg), 0, "%s", za_last_error ());
    cr_expect_eq (p.msg->tensors [0].bytes, sizeof big);
    zmsg_destroy (&msg);
    cr_expect_eq (s_pass_rung (&p, 1, 4), 0, "whole again");
    s_pair_destroy (&p);
}

//  A reader gone (its bell's pipe has no reader): the ring fails without a
//  SIGPIPE and the message goes as frames; its next life, a new link on
//  the same segment, reads none of what was written for the earlier one.
Test (shm_link, a_bell_whose_owner_is_gone_sends_frames_and_a_new_reader_skips_the_old)
{
    s_pair_t p;
    s_pair_make (&p);
    s_pair_ring (&p);
    s_pass_rung (&p, 1, 1);
    s_pass_rung (&p, 0, 2);
    cr_assert_eq (s_pass_rung (&p, 1, 3), 0);
    //  A record for the ps that it never reads: then the ps goes.
    za_wire_msg_init (p.msg, ZA_OP_PUSH);
    int64_t shape [1] = {5000};
    za_wire_msg_add (p.msg, "w", ZA_DTYPE_F32, 1, shape, p.floats);
    cr_assert_eq (za_shm_link_send (p.worker, p.dealer, NULL, p.msg, &p.lease), 0);
    za_shm_link_destroy (&p.ps);
    za_shm_bell_destroy (&p.ps_bell);
    p.ps = za_shm_link_new (0, 0);
    p.ps_bell = za_shm_bell_new ();
    za_shm_link_set_bell (p.ps, p.ps_bell);
    cr_expect_eq (s_pass_rung (&p, 1, 4), 2, "the bell's owner is gone: frames");
    cr_expect_not (za_shm_link_rings (p.worker));
    za_shm_bell_quiet (p.ps_bell);
    zmsg_t *msg;
    const void *const *data;
    const size_t *sizes;
    int count;
    cr_expect_eq (za_shm_link_take (p.ps, &msg, &data, &sizes, &count), 0,
                  "the new ps reads nothing written before it mapped the segment");
    cr_expect_eq (s_pass_rung (&p, 0, 5), 2, "the new ps's answer: frames, its bell offered");
    cr_expect_eq (s_pass_rung (&p, 1, 6), 0, "whole again, to the new ps's bell");
    cr_expect_eq (s_pass_rung (&p, 0, 7), 0);
    s_pair_destroy (&p);
}

//  Whole messages that are not: a table that does not add up, a header
//  that names a record: the reader refuses the segment (an error, no ok
//  from then on: the peer sends frames); a header that does not decode is
//  the caller's to drop (the wire says why).
Test (shm_link, a_whole_message_that_is_not_one_is_refused)
{
    for (int kind = 0; kind < 7; kind++) {
        s_pair_t p;
        s_pair_make (&p);
        s_pair_ring (&p);
        s_pass_rung (&p, 1, 1);
        s_pass_rung (&p, 0, 2);
        //  A segment of our making, offered over the pair's sockets to a
        //  link of its own, which maps it.
        za_shm_t *seg = za_shm_create (65536);
        cr_assert_not_null (seg);
        char offer [ZA_SHM_OFFER_MAX], word [ZA_WIRE_MAX_SHM_BYTES];
        size_t len = za_shm_offer (seg, offer);
        za_shm_link_t *reader = za_shm_link_new (0, 0);
        za_wire_msg_init (p.msg, ZA_OP_PING);
        snprintf (word, sizeof word, "%.*s}", (int) len - 1, offer);
        p.msg->shm = word;
        p.msg->shm_len = strlen (word);
        cr_assert_eq (za_wire_send (p.dealer, NULL, p.msg, NULL), 0);
        zmsg_t *msg = zmsg_recv (p.router);
        zframe_t *id = zmsg_pop (msg);
        cr_assert_eq (za_shm_link_receive (reader, msg), 0, "%s", za_last_error ());
        cr_assert_eq (za_shm_link_state (reader), 2, "the reader mapped our segment");
        zmsg_destroy (&msg);
        zframe_destroy (&id);
        //  The record: a ping's header whose word names a record (kind 1),
        //  and a table of 2 (kind 0: one short) or a header scribbled on.
        snprintf (word, sizeof word, "%.*s,\"at\":64}", (int) len - 1, offer);
        p.msg->shm_len = strlen (word);
        p.msg->payload_elsewhere = 1;
        char header [1024];
        int header_bytes = za_wire_pack (p.msg, header, sizeof header);
        cr_assert_gt (header_bytes, 0, "%s", za_last_error ());
        p.msg->shm = NULL;
        p.msg->payload_elsewhere = 0;
        uint64_t table [3] = {kind == 0? 2: 1, (uint64_t) header_bytes, 4096};
        if (kind == 2)
            memcpy (header, "\x81\xa1v", 3);              //  a map of one key and no value
        struct iovec parts [2] = {{table, 2 * sizeof (uint64_t)},
                                  {header, (size_t) header_bytes}};
        int part_count = 2;
        //  3: no parts; 4: a tensor of 2^64-1 bytes; 5: fewer bytes than a
        //  count; 6: a tensor whose padding runs past the record's end.
        uint64_t odd [4] = {0, 8, 64, 0};
        if (kind == 3)
            parts [0].iov_len = sizeof (uint64_t);
        if (kind == 4)
            odd [0] = 2, odd [1] = 8, odd [2] = UINT64_MAX;
        if (kind == 5)
            parts [0].iov_len = 4;
        if (kind == 6)
            odd [0] = 2, odd [1] = 8, odd [2] = 8;      //  the tensor's 8 bytes follow
        if (kind >= 3) {
            parts [0].iov_base = odd;
            if (kind == 4 || kind == 6)
                parts [0].iov_len = 3 * sizeof (uint64_t);
            parts [1] = (struct iovec) {header, 16};   //  8 of header, 8 more
            part_count = kind == 4 || kind == 6? 2: 1;
        }
        za_shm_record_t record = {.op = ZA_OP_PING, .dtype = 0x776c};
        cr_assert_eq (za_shm_writev (seg, &record, parts, part_count), 0);
        const void *const *data;
        const size_t *sizes;
        int count;
        int got = za_shm_link_take (reader, &msg, &data, &sizes, &count);
        if (kind == 0) {
            cr_expect_eq (got, -1, "a table that does not add up");
            cr_expect_eq (za_shm_link_state (reader), 0, "the segment is refused");
        }
        else
        if (kind == 1) {
            cr_expect_eq (got, -1, "a whole message that names a record");
            cr_expect (strstr (za_last_error (), "names a record"), "%s", za_last_error ());
        }
        else
        if (kind >= 3) {
            cr_expect_eq (got, -1, "kind %d: a record that is not a whole message", kind);
            cr_expect_eq (za_shm_link_state (reader), 0, "kind %d: the segment is refused", kind);
        }
        else {
            cr_expect_eq (got, 1, "a header that does not decode: the caller's to drop");
            za_wire_msg_t decoded;
            cr_expect_eq (za_wire_decode_payloads (msg, data, sizes, count, &decoded), -1);
            za_shm_link_done (reader);
        }
        zmsg_destroy (&msg);
        za_shm_link_destroy (&reader);
        za_shm_destroy (&seg);
        s_pair_destroy (&p);
    }
}

//  The first push offers the worker's segment (its tensors as frames); the
//  ps maps it, and its answer offers its own and says ok; from then on
//  both ways the tensors go through shared memory (the header alone over
//  ZeroMQ), and arrive the same.
Test (shm_link, tensors_go_through_shared_memory_once_both_ends_can)
{
    s_pair_t p;
    s_pair_make (&p);
    cr_expect_eq (s_pass (&p, 1, 1), 2, "the first push: frames");
    cr_expect_eq (za_shm_link_state (p.ps), 2, "the ps reads the worker's");
    cr_expect_eq (s_pass (&p, 0, 2), 2, "the answer: frames (the worker never said ok)");
    cr_expect_eq (za_shm_link_state (p.worker), 3);
    for (int round = 0; round < 50; round++) {
        cr_expect_eq (s_pass (&p, 1, 3 + round), 1, "round %d: push by the header alone", round);
        cr_expect_eq (s_pass (&p, 0, 4 + round), 1, "round %d: values too", round);
    }
    cr_expect_eq (za_shm_link_state (p.ps), 3);
    s_pair_destroy (&p);
}

//  A ps that restarts has a new link: it maps the worker's segment from the
//  next word and reads the record where the word says, whatever an earlier
//  life read.
Test (shm_link, a_restarted_end_maps_the_segment_from_the_next_word)
{
    s_pair_t p;
    s_pair_make (&p);
    s_pass (&p, 1, 1);
    s_pass (&p, 0, 2);
    cr_assert_eq (s_pass (&p, 1, 3), 1);
    za_shm_link_destroy (&p.ps);
    p.ps = za_shm_link_new (0, 0);
    cr_expect_eq (s_pass (&p, 1, 4), 1, "still through the segment: read by the new ps");
    cr_expect_eq (s_pass (&p, 0, 5), 2, "the new ps's answer: frames, and its offer");
    cr_expect_eq (s_pass (&p, 1, 6), 1);
    cr_expect_eq (s_pass (&p, 0, 7), 1, "the new ps's segment, once the worker said ok");
    s_pair_destroy (&p);
}

//  A word that is not one, a record where there is none, a record whose
//  table does not add up, a segment that cannot be mapped: an error, or
//  frames, never a wrong tensor.
Test (shm_link, what_cannot_be_read_is_refused)
{
    s_pair_t p;
    s_pair_make (&p);
    s_pass (&p, 1, 1);
    s_pass (&p, 0, 2);
    //  A header whose word names a record at a place never written.
    za_shm_t *seg = za_shm_create (65536);
    char offer [ZA_SHM_OFFER_MAX], word [ZA_WIRE_MAX_SHM_BYTES];
    size_t len = za_shm_offer (seg, offer);
    snprintf (word, sizeof word, "%.*s,\"at\":4096}", (int) len - 1, offer);
    za_wire_msg_init (p.msg, ZA_OP_PUSH);
    p.msg->shm = word;
    p.msg->shm_len = strlen (word);
    cr_assert_eq (za_wire_send (p.dealer, NULL, p.msg, NULL), 0, "%s", za_last_error ());
    zmsg_t *msg = zmsg_recv (p.router);
    zframe_t *id = zmsg_pop (msg);
    za_shm_link_t *fresh = za_shm_link_new (0, 0);
    cr_expect_eq (za_shm_link_receive (fresh, msg), -1);
    cr_expect (strstr (za_last_error (), "no record at 4096"), "%s", za_last_error ());
    cr_expect_eq (za_shm_link_state (fresh), 0, "it stops reading that segment");
    zmsg_destroy (&msg);
    //  A record whose table claims 1000 tensors.
    uint64_t table [2] = {1000, 8};
    za_shm_record_t record = {.data = table, .bytes = sizeof table};
    cr_assert_eq (za_shm_write (seg, &record), 0);
    snprintf (word, sizeof word, "%.*s,\"at\":%llu}", (int) len - 1, offer,
              (unsigned long long) za_shm_written (seg));
    p.msg->shm_len = strlen (word);
    cr_assert_eq (za_wire_send (p.dealer, NULL, p.msg, NULL), 0);
    msg = zmsg_recv (p.router);
    zframe_destroy (&id);
    id = zmsg_pop (msg);
    //  (fresh stopped reading that segment at its bad record: another link.)
    za_shm_link_destroy (&fresh);
    fresh = za_shm_link_new (0, 0);
    cr_expect_eq (za_shm_link_receive (fresh, msg), -1);
    cr_expect (strstr (za_last_error (), "not a message's tensors"), "%s", za_last_error ());
    zmsg_destroy (&msg);
    //  An offer that cannot be mapped (another nonce): the message is whole
    //  (no tensors in a segment), nothing is mapped, and no ok goes back.
    snprintf (word, sizeof word, "%.*s", (int) len, offer);
    char *nonce = strstr (word, "\"nonce\":\"") + 9;
    nonce [0] = nonce [0] == 'a'? 'b': 'a';
    p.msg->shm_len = strlen (word);
    cr_assert_eq (za_wire_send (p.dealer, NULL, p.msg, NULL), 0);
    msg = zmsg_recv (p.router);
    zframe_destroy (&id);
    id = zmsg_pop (msg);
    za_shm_link_t *other = za_shm_link_new (0, 0);
    cr_expect_eq (za_shm_link_receive (other, msg), 0);
    cr_expect_eq (za_shm_link_state (other), 0);
    zmsg_destroy (&msg);
    //  Not JSON at all.
    snprintf (word, sizeof word, "{\"nonce\": 12");
    p.msg->shm_len = strlen (word);
    cr_assert_eq (za_wire_send (p.dealer, NULL, p.msg, NULL), 0);
    msg = zmsg_recv (p.router);
    zframe_destroy (&id);
    id = zmsg_pop (msg);
    cr_expect_eq (za_shm_link_receive (other, msg), -1);
    zmsg_destroy (&msg);
    p.msg->shm = NULL;
    zframe_destroy (&id);
    za_shm_link_destroy (&fresh);
    za_shm_link_destroy (&other);
    za_shm_destroy (&seg);
    s_pair_destroy (&p);
}

// ---------------------------------------------------------------------------
//  za_tcp_pipe: records over a tcp connection of their own (the ring's path
//  between hosts): only the connection that says the nonce is taken, and
//  what is no record closes it.

#include "za/za_tcp_pipe.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

//  A plain client of the pipe's port that says `said` (32 bytes).
static int
s_stranger (int port, const char *said)
{
    int fd = socket (AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons ((uint16_t) port)};
    addr.sin_addr.s_addr = htonl (INADDR_LOOPBACK);
    cr_assert_eq (connect (fd, (struct sockaddr *) &addr, sizeof addr), 0);
    cr_assert_eq (send (fd, said, 32, 0), 32);
    return fd;
}

Test (tcp_pipe, only_the_nonce_s_connection_is_taken_and_records_arrive_whole)
{
    za_tcp_pipe_t *in = za_tcp_pipe_listen ("127.0.0.1", 1 << 22);
    cr_assert_not_null (in, "%s", za_last_error ());
    int port = za_tcp_pipe_port (in);
    char nonce [33];
    za_tcp_pipe_nonce (in, nonce);
    //  A stranger first, saying something else: closed, and the sender taken.
    int stranger = s_stranger (port, "0123456789abcdef0123456789abcdef");
    za_tcp_pipe_t *out = za_tcp_pipe_connect ("127.0.0.1", port, nonce, 5);
    cr_assert_not_null (out, "%s", za_last_error ());
    cr_assert_eq (za_tcp_pipe_accept (in, 10), 0, "%s", za_last_error ());
    close (stranger);
    //  Records of 0 bytes to 4 MiB, read while they are written (the socket
    //  takes a part of the large ones at a time).
    static unsigned char big [1 << 22];
    for (size_t i = 0; i < sizeof big; i++)
        big [i] = (unsigned char) (i * 13);
    const size_t sizes [] = {0, 1, 4096, 1 << 22, 77, 1 << 20};
    size_t written = 0, read = 0, count = sizeof sizes / sizeof sizes [0];
    double deadline = za_clock_mono () + 30;
    while (read < count && za_clock_mono () < deadline) {
        if (written < count && !za_tcp_pipe_busy (out)) {
            za_shm_record_t record = {.op = 26, .dtype = 1, .task = 2, .seq = written,
                                      .step = 5, .data = big, .bytes = sizes [written]};
            cr_assert_geq (za_tcp_pipe_write (out, &record), 0);
            written++;
        }
        else
            cr_assert_geq (za_tcp_pipe_flush (out), 0);
        za_shm_record_t got;
        int rc = za_tcp_pipe_read (in, &got);
        cr_assert_geq (rc, 0, "%s", za_last_error ());
        if (rc == 1) {
            cr_assert_eq (got.seq, read);
            cr_assert_eq (got.bytes, sizes [read]);
            cr_assert (got.op == 26 && got.dtype == 1 && got.task == 2 && got.step == 5);
            cr_assert (memcmp (got.data, big, got.bytes) == 0, "record %zu came changed", read);
            read++;
        }
    }
    cr_expect_eq (read, count);
    //  A header that is no record's: the reader closes the connection.
    unsigned char garbage [64];
    memset (garbage, 0x5a, sizeof garbage);
    cr_assert_eq (send (za_tcp_pipe_fd (out), garbage, sizeof garbage, 0), 64);
    za_shm_record_t got;
    int rc;
    while ((rc = za_tcp_pipe_read (in, &got)) == 0 && za_clock_mono () < deadline)
        usleep (1000);
    cr_expect_eq (rc, -1);
    cr_expect (strstr (za_last_error (), "no record"), "%s", za_last_error ());
    cr_expect_eq (za_tcp_pipe_fd (in), -1);
    za_tcp_pipe_destroy (&in);
    za_tcp_pipe_destroy (&out);
}

Test (tcp_pipe, nobody_with_the_nonce_is_an_error_after_the_timeout)
{
    za_tcp_pipe_t *in = za_tcp_pipe_listen ("127.0.0.1", 4096);
    cr_assert_not_null (in);
    int stranger = s_stranger (za_tcp_pipe_port (in), "not the nonce, not at all, no....");
    cr_expect_eq (za_tcp_pipe_accept (in, 1.5), -1);
    cr_expect (strstr (za_last_error (), "no connection with the nonce"), "%s",
               za_last_error ());
    close (stranger);
    za_tcp_pipe_destroy (&in);
}
