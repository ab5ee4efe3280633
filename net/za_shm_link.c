/*  za_shm_link.c: a connection's messages through shared memory
    (za_shm_link.h).

    A record named by "at" holds one message's tensors (its header goes
    over ZeroMQ): a table (the count, then each tensor's bytes, as uint64)
    and the tensors' bytes one after the other. A whole record (dtype
    LINK_WHOLE, read in order) holds the header as its first part, and each
    tensor after it starts at a multiple of 64 bytes of the payload.      */
#include "za/za_shm_link.h"
#include "za/za_shm.h"
#include "za/za_util.h"

#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

//  A segment made by an end that answers (offers 0): at least this many
//  times the first message's tensors.
#define LINK_SEGMENT_MESSAGES 2

struct _za_shm_link_t {
    int offers;
    size_t bytes;
    za_shm_t *out;                  //  ours, to send through
    char out_nonce [33];
    int peer_reads;                 //  the peer said "ok" to out_nonce
    za_shm_t *in;                   //  the peer's, mapped
    char in_nonce [33];
    char failed_nonce [33];         //  a segment that could not be mapped: not tried again
    int task;
    char word [ZA_WIRE_MAX_SHM_BYTES];
    //  The word's start while our segment and bell stay: the offer and the
    //  bell, unclosed (made once, not for every message).
    char prefix [ZA_SHM_OFFER_MAX + 32];
    size_t prefix_len;
    int prefix_made;
    za_shm_bell_t *bell;            //  ours (the caller's), offered in the word
    int peer_bell;                  //  the peer's, opened (-1: none)
    long peer_bell_pid;             //  whose, and its number there
    int peer_bell_fd;
    long failed_bell_pid;           //  a bell that could not be opened
    int failed_bell_fd;
    int whole;                      //  our segment carries whole messages now
    long in_pid;                    //  the process whose segment `in` is
    uint64_t taken_seq;             //  the seq of the last whole record taken
    zframe_t *route;                //  the caller's: the peer's routing id
    char *header;                   //  a whole message's header, packed
    //  The tensors of the record read, in place, until za_shm_link_done (a
    //  whole message's header first).
    const void *held_data [1 + ZA_WIRE_MAX_TENSORS];
    size_t held_size [1 + ZA_WIRE_MAX_TENSORS];
    int held_count;
    int held_first;                 //  1: held_data [0] is a whole message's header
    int holding;
};

//  A record that is a whole message (its header, then its tensors), read in
//  order, not found by an "at": its dtype.
#define LINK_WHOLE 0x776c
//  ... whose tensors start at multiples of this from the payload's start.
#define LINK_ALIGN 64

static int
s_make_segment (za_shm_link_t *self, size_t bytes)
{
    self->out = za_shm_create (bytes);
    if (!self->out)
        return -1;
    za_shm_nonce (self->out, self->out_nonce);
    self->peer_reads = 0;
    self->prefix_made = 0;
    return 0;
}

//  Makes self->prefix: our segment's offer (without its '}') and our bell.
static void
s_make_prefix (za_shm_link_t *self)
{
    size_t len = 0;
    if (self->out) {
        char offer [ZA_SHM_OFFER_MAX];
        size_t offer_len = za_shm_offer (self->out, offer);
        if (offer_len > 1) {
            memcpy (self->prefix, offer, offer_len - 1);
            len = offer_len - 1;
        }
    }
    if (self->bell) {
        if (!len)
            len = (size_t) snprintf (self->prefix, sizeof self->prefix, "{\"pid\":%ld",
                                     (long) getpid ());
        len += (size_t) snprintf (self->prefix + len, sizeof self->prefix - len,
                                  ",\"bell\":%d", za_shm_bell_offer_fd (self->bell));
    }
    self->prefix_len = len;
    self->prefix_made = 1;
}

za_shm_link_t *
za_shm_link_new (int offers, size_t bytes)
{
    za_shm_link_t *self = (za_shm_link_t *) calloc (1, sizeof *self);
    if (!self) {
        za_error ("shm link: out of memory");
        return NULL;
    }
    self->offers = offers;
    self->bytes = bytes;
    self->task = -1;
    self->peer_bell = -1;
    if (offers && s_make_segment (self, bytes))
        za_shm_link_destroy (&self);
    return self;
}

void
za_shm_link_destroy (za_shm_link_t **self_p)
{
    za_shm_link_t *self = *self_p;
    if (!self)
        return;
    za_shm_link_done (self);
    za_shm_destroy (&self->out);
    za_shm_destroy (&self->in);
    if (self->peer_bell >= 0)
        close (self->peer_bell);
    zframe_destroy (&self->route);
    free (self->header);
    free (self);
    *self_p = NULL;
}

int
za_shm_link_state (const za_shm_link_t *self)
{
    return (self->out && self->peer_reads) + 2 * (self->in != NULL);
}

int
za_shm_link_task (const za_shm_link_t *self)
{
    return self->task;
}

void
za_shm_link_set_task (za_shm_link_t *self, int task)
{
    self->task = task;
}

void
za_shm_link_set_bell (za_shm_link_t *self, za_shm_bell_t *bell)
{
    self->bell = bell;
    self->prefix_made = 0;
}

int
za_shm_link_rings (const za_shm_link_t *self)
{
    return self->peer_bell >= 0;
}

void
za_shm_link_set_route (za_shm_link_t *self, zframe_t *route)
{
    zframe_destroy (&self->route);
    self->route = route? zframe_dup (route): NULL;
}

zframe_t *
za_shm_link_route (const za_shm_link_t *self)
{
    return self->route;
}

//  Writes msg's tensors into our segment as one record: 0 and *at where it
//  starts, or 1 when they do not go (no room now, or never).
static int
s_write_tensors (za_shm_link_t *self, const za_wire_msg_t *msg, uint64_t *at)
{
    uint64_t table [1 + ZA_WIRE_MAX_TENSORS];
    struct iovec parts [1 + ZA_WIRE_MAX_TENSORS];
    table [0] = (uint64_t) msg->tensor_count;
    for (int i = 0; i < msg->tensor_count; i++) {
        table [1 + i] = msg->tensors [i].bytes;
        parts [1 + i].iov_base = (void *) msg->tensors [i].data;
        parts [1 + i].iov_len = msg->tensors [i].bytes;
    }
    parts [0].iov_base = table;
    parts [0].iov_len = (1 + (size_t) msg->tensor_count) * sizeof table [0];
    //  A message larger than the segment goes as frames, quietly.
    size_t bytes = 0;
    for (int i = 0; i <= msg->tensor_count; i++)
        bytes += parts [i].iov_len;
    if (!za_shm_fits (self->out, bytes))
        return 1;
    za_shm_record_t record = {.op = (int32_t) msg->op, .seq = msg->seq, .step = msg->step,
                              .task = msg->task};
    int rc = za_shm_writev (self->out, &record, parts, 1 + msg->tensor_count);
    if (rc)
        return 1;
    *at = za_shm_written (self->out);
    return 0;
}

//  Writes msg whole into our segment (the header, packed with the word, then
//  its tensors) and rings the peer's bell: 0, 1 when it does not go (no
//  room now; the peer gone: its bell closed), -1 with an error (a message
//  that cannot be packed).
static int
s_write_whole (za_shm_link_t *self, za_wire_msg_t *msg)
{
    if (!self->header && !(self->header = (char *) malloc (ZA_WIRE_MAX_HEADER_BYTES)))
        return za_error ("shm link: out of memory");
    msg->payload_elsewhere = 1;
    int header = za_wire_pack (msg, self->header, ZA_WIRE_MAX_HEADER_BYTES);
    msg->payload_elsewhere = 0;
    if (header < 0)
        return -1;
    //  The table, the header, then each tensor where the record's payload
    //  has a multiple of 64 bytes before it (read in place: aligned).
    static const char zeros [LINK_ALIGN];
    uint64_t table [2 + ZA_WIRE_MAX_TENSORS];
    struct iovec parts [2 + 2 * ZA_WIRE_MAX_TENSORS];
    table [0] = 1 + (uint64_t) msg->tensor_count;
    table [1] = (uint64_t) header;
    parts [0].iov_base = table;
    parts [0].iov_len = (2 + (size_t) msg->tensor_count) * sizeof table [0];
    parts [1].iov_base = self->header;
    parts [1].iov_len = (size_t) header;
    size_t at = parts [0].iov_len + parts [1].iov_len;
    int count = 2;
    for (int i = 0; i < msg->tensor_count; i++) {
        size_t pad = (LINK_ALIGN - at % LINK_ALIGN) % LINK_ALIGN;
        if (pad)
            parts [count++] = (struct iovec) {(void *) zeros, pad};
        table [2 + i] = msg->tensors [i].bytes;
        parts [count++] = (struct iovec) {(void *) msg->tensors [i].data, msg->tensors [i].bytes};
        at += pad + msg->tensors [i].bytes;
    }
    za_shm_record_t record = {.op = (int32_t) msg->op, .dtype = LINK_WHOLE, .seq = msg->seq,
                              .step = msg->step, .task = msg->task};
    //  A message larger than the segment goes as frames, quietly.
    if (!za_shm_fits (self->out, at) || za_shm_writev (self->out, &record, parts, count))
        return 1;
    self->whole = 1;
    if (za_shm_bell_ring (self->peer_bell) == 0)
        return 0;
    //  The peer is gone: the record stays unread (a peer's next life skips
    //  what was written before it mapped the segment).
    za_info ("shm link: the peer's bell is gone (it stopped or restarts); messages go over "
             "ZeroMQ");
    close (self->peer_bell);
    self->peer_bell = -1;
    return 1;
}

int
za_shm_link_send (za_shm_link_t *self, zsock_t *sock, zframe_t *routing_id,
                  za_wire_msg_t *msg, za_wire_lease_t *lease)
{
    //  An end that answers makes its segment once the peer's shows that
    //  both are on this host, and a message has tensors to size it by.
    if (!self->out && self->in && msg->tensor_count > 0) {
        size_t bytes = 0;
        for (int i = 0; i < msg->tensor_count; i++)
            bytes += msg->tensors [i].bytes;
        bytes = LINK_SEGMENT_MESSAGES * (bytes + 4096);
        if (s_make_segment (self, bytes < ZA_SHM_DEFAULT_BYTES? ZA_SHM_DEFAULT_BYTES: bytes))
            za_info ("shm link: %s; tensors go as frames", za_last_error ());
    }
    if (!self->prefix_made)
        s_make_prefix (self);
    size_t len = self->prefix_len;
    memcpy (self->word, self->prefix, len);
    if (self->in)
        len += (size_t) snprintf (self->word + len, sizeof self->word - len, "%s\"ok\":\"%s\"",
                                  len? ",": "{", self->in_nonce);
    msg->shm = len? self->word: NULL;
    msg->shm_len = len;
    //  A peer without a bell (any more) reads records named by "at" again,
    //  once it has read every whole one.
    if (self->whole && self->peer_bell < 0 && self->out && za_shm_empty (self->out))
        self->whole = 0;
    //  The whole message through the segment, when the peer reads it and
    //  has a bell (once its at-records are read: the peer reads whole ones
    //  in order). The word goes in its header, closed.
    if (len && self->out && self->peer_reads && self->peer_bell >= 0
        && msg->tensor_count <= ZA_WIRE_MAX_TENSORS
        && (self->whole || za_shm_empty (self->out))) {
        len += (size_t) snprintf (self->word + len, sizeof self->word - len, "}");
        msg->shm_len = len;
        int rc = s_write_whole (self, msg);
        len--;
        if (rc <= 0) {
            msg->shm = NULL;
            msg->shm_len = 0;
            return rc;
        }
    }
    //  Else its header over ZeroMQ, its tensors in a record it names ("at"),
    //  unless our segment carries whole messages now, or they do not fit.
    uint64_t at;
    int through = self->out && self->peer_reads && !self->whole && msg->tensor_count > 0
               && msg->tensor_count <= ZA_WIRE_MAX_TENSORS && len
               && s_write_tensors (self, msg, &at) == 0;
    if (through)
        len += (size_t) snprintf (self->word + len, sizeof self->word - len, ",\"at\":%" PRIu64,
                                  at);
    if (len)
        len += (size_t) snprintf (self->word + len, sizeof self->word - len, "}");
    msg->shm = len? self->word: NULL;
    msg->shm_len = len;
    msg->payload_elsewhere = through;
    int rc = za_wire_send (sock, routing_id, msg, through? NULL: lease);
    msg->shm = NULL;
    msg->shm_len = 0;
    msg->payload_elsewhere = 0;
    return rc;
}

//  Holds the tensors of a record just read, in place: its table must name
//  at most `most` tensors whose sizes add up to the record's. Returns 0, or
//  -1 with an error (nothing held; the record released).
static int
s_hold (za_shm_link_t *self, const za_shm_record_t *record, uint64_t most, int whole)
{
    const unsigned char *bytes = (const unsigned char *) record->data;
    uint64_t count = 0, size;
    int rc = 0;
    if (record->bytes < sizeof count)
        rc = -1;
    else {
        memcpy (&count, bytes, sizeof count);
        if (count > most || record->bytes < (1 + count) * sizeof count)
            rc = -1;
    }
    uint64_t left = rc? 0: record->bytes - (1 + count) * sizeof count;
    //  (Past the table only once the table is known to fit: a count read
    //  from the record may be anything.)
    const unsigned char *from = rc? bytes: bytes + (1 + count) * sizeof count;
    for (uint64_t i = 0; rc == 0 && i < count; i++) {
        memcpy (&size, bytes + (1 + i) * sizeof size, sizeof size);
        //  A whole message's tensors (after its header) start aligned.
        size_t pad = whole && i > 0? (LINK_ALIGN - (size_t) (from - bytes) % LINK_ALIGN)
                                     % LINK_ALIGN: 0;
        if (pad > left)
            rc = -1;
        else {
            from += pad;
            left -= pad;
        }
        if (rc == 0 && size > left)
            rc = -1;
        if (rc == 0) {
            self->held_data [i] = from;
            self->held_size [i] = (size_t) size;
            from += size;
            left -= size;
        }
    }
    if (rc || left) {
        za_shm_release (self->in);
        return za_error ("shm link: a record that is not a message's tensors");
    }
    self->held_count = (int) count;
    self->held_first = 0;
    self->holding = 1;
    return 0;
}

//  What the peer's segment holds cannot be read: we stop saying "ok", so
//  that it sends frames again.
static void
s_refuse_in (za_shm_link_t *self)
{
    snprintf (self->failed_nonce, sizeof self->failed_nonce, "%s", self->in_nonce);
    za_shm_destroy (&self->in);
}

//  Reads the peer's word (len bytes): whether it reads our segment, its
//  segment (mapped when new, if `may_map`), its bell; *at where the
//  message's tensors are (-1: not in a record). Returns 0, or -1 with an
//  error (a word that is not one).
static int
s_read_word (za_shm_link_t *self, const char *word, int len, int may_map, int64_t *at)
{
    *at = -1;
    //  Every message says whether the peer reads our segment now: one that
    //  says nothing (a peer restarted without shared memory) gets frames.
    self->peer_reads = 0;
    if (len <= 0)
        return 0;                   //  no word, or a header that will not decode
    json_error_t error;
    json_t *root = json_loadb (word, (size_t) len, 0, &error);
    const char *nonce = NULL, *ok = NULL;
    json_int_t where = -1, pid = 0, bell = -1;
    if (!root || json_unpack (root, "{s?s,s?s,s?I,s?I,s?I}", "nonce", &nonce, "ok", &ok,
                              "at", &where, "pid", &pid, "bell", &bell)) {
        json_decref (root);
        return za_error ("shm link: a word that is not one");
    }
    self->peer_reads = ok && self->out && streq (ok, self->out_nonce);
    if (may_map && nonce && (!self->in || strcmp (nonce, self->in_nonce))
        && strcmp (nonce, self->failed_nonce)) {
        za_shm_t *in = za_shm_attach (word, (size_t) len);
        if (in) {
            za_shm_destroy (&self->in);
            self->in = in;
            self->in_pid = (long) pid;
            self->failed_bell_pid = 0;      //  a new segment: its bell is tried
            //  Whole messages are read in order from here: what was written
            //  before this message (for an earlier life of ours) is not for
            //  us. (A record this message names is found where it says.)
            if (where < 0)
                za_shm_skip (in);
            snprintf (self->in_nonce, sizeof self->in_nonce, "%s", nonce);
        }
        else {
            snprintf (self->failed_nonce, sizeof self->failed_nonce, "%s", nonce);
            za_info ("shm link: the peer's segment cannot be used (%s); its tensors must "
                     "come as frames", za_last_error ());
        }
    }
    //  The peer's bell: opened when it names one we do not have open, of
    //  the process whose segment we mapped (its nonce proved it the peer:
    //  no word makes us write into another process's pipe). A bell that
    //  cannot be opened is not tried again for that segment.
    if (bell >= 0 && pid > 0 && self->in && pid == self->in_pid
        && (self->peer_bell < 0 || pid != self->peer_bell_pid || bell != self->peer_bell_fd)
        && !(pid == self->failed_bell_pid && bell == self->failed_bell_fd)) {
        if (self->peer_bell >= 0)
            close (self->peer_bell);
        self->peer_bell_pid = (long) pid;
        self->peer_bell_fd = (int) bell;
        self->peer_bell = za_shm_bell_open ((long) pid, (int) bell);
        if (self->peer_bell < 0) {
            self->failed_bell_pid = (long) pid;
            self->failed_bell_fd = (int) bell;
            za_info ("shm link: %s; messages go over ZeroMQ", za_last_error ());
        }
    }
    int rc = 0;
    if (where >= 0 && !(self->in && nonce && streq (nonce, self->in_nonce)))
        rc = za_error ("shm link: tensors in a segment not mapped here");
    *at = where;
    json_decref (root);
    return rc;
}

int
za_shm_link_receive_in_place (za_shm_link_t *self, zmsg_t *msg, const void *const **data,
                              const size_t **sizes, int *count)
{
    za_shm_link_done (self);
    char word [ZA_WIRE_MAX_SHM_BYTES + 1];
    int len = za_wire_peek_shm (msg, word, sizeof word, NULL);
    int64_t at;
    if (s_read_word (self, word, len, 1, &at))
        return -1;
    if (at < 0)
        return 0;
    za_shm_record_t record;
    if (za_shm_read_at (self->in, (uint64_t) at, &record) != 1
        || s_hold (self, &record, ZA_WIRE_MAX_TENSORS, 0)) {
        s_refuse_in (self);
        return -1;
    }
    *data = self->held_data;
    *sizes = self->held_size;
    *count = self->held_count;
    return 1;
}

int
za_shm_link_take (za_shm_link_t *self, zmsg_t **msg_p, const void *const **data,
                  const size_t **sizes, int *count)
{
    za_shm_link_done (self);
    *msg_p = NULL;
    self->taken_seq = 0;
    if (!self->in)
        return 0;
    za_shm_record_t record;
    int got = za_shm_read (self->in, &record);
    if (got == 0)
        return 0;
    if (got == 1)
        self->taken_seq = record.seq;
    if (got == 1 && record.dtype != LINK_WHOLE) {
        //  Tensors whose header comes over ZeroMQ: read when it does.
        za_shm_put_back (self->in);
        return 0;
    }
    if (got < 0 || s_hold (self, &record, 1 + ZA_WIRE_MAX_TENSORS, 1) || self->held_count < 1) {
        za_shm_link_done (self);
        s_refuse_in (self);
        return -1;
    }
    zmsg_t *msg = zmsg_new ();
    if (!msg || zmsg_addmem (msg, self->held_data [0], self->held_size [0])) {
        zmsg_destroy (&msg);
        za_shm_link_done (self);
        return za_error ("shm link: out of memory");
    }
    //  Its word as any message's, but the segment it came through stays.
    char word [ZA_WIRE_MAX_SHM_BYTES + 1];
    int len = za_wire_peek_shm (msg, word, sizeof word, NULL);
    int64_t at;
    int rc = s_read_word (self, word, len, 0, &at);
    if (rc == 0 && at >= 0)
        rc = za_error ("shm link: a whole message that names a record");
    if (rc) {
        zmsg_destroy (&msg);
        za_shm_link_refuse (self);
        return -1;
    }
    *msg_p = msg;
    self->held_first = 1;
    *data = self->held_data + 1;
    *sizes = self->held_size + 1;
    *count = self->held_count - 1;
    return 1;
}

uint64_t
za_shm_link_taken_seq (const za_shm_link_t *self)
{
    return self->taken_seq;
}

void
za_shm_link_refuse (za_shm_link_t *self)
{
    za_shm_link_done (self);
    if (self->in)
        s_refuse_in (self);
}

int
za_shm_link_take_copy (za_shm_link_t *self, zmsg_t **msg_p)
{
    const void *const *data;
    const size_t *sizes;
    int count;
    int rc = za_shm_link_take (self, msg_p, &data, &sizes, &count);
    for (int i = 0; rc == 1 && i < count; i++)
        if (zmsg_addmem (*msg_p, data [i], sizes [i])) {
            zmsg_destroy (msg_p);
            rc = za_error ("shm link: out of memory");
        }
    za_shm_link_done (self);
    return rc;
}

int
za_shm_link_names_record (zmsg_t *msg, uint64_t *seq)
{
    char word [ZA_WIRE_MAX_SHM_BYTES + 1];
    int len = za_wire_peek_shm (msg, word, sizeof word, seq);
    json_error_t error;
    json_t *root = len > 0? json_loadb (word, (size_t) len, 0, &error): NULL;
    int names = root && json_is_integer (json_object_get (root, "at"));
    json_decref (root);
    return names;
}

int
za_shm_link_copy_held (za_shm_link_t *self, zmsg_t *msg)
{
    for (int i = self->held_first; self->holding && i < self->held_count; i++) {
        zframe_t *frame = zframe_new (self->held_data [i], self->held_size [i]);
        if (!frame || zmsg_append (msg, &frame))
            return za_error ("shm link: out of memory");
    }
    return 0;
}

void
za_shm_link_done (za_shm_link_t *self)
{
    if (self->holding && self->in)
        za_shm_release (self->in);
    self->holding = 0;
    self->held_count = 0;
}

int
za_shm_link_receive (za_shm_link_t *self, zmsg_t *msg)
{
    const void *const *data;
    const size_t *sizes;
    int count;
    int rc = za_shm_link_receive_in_place (self, msg, &data, &sizes, &count);
    if (rc == 1)
        rc = za_shm_link_copy_held (self, msg);
    za_shm_link_done (self);
    return rc;
}
