/*  za_shm_link.c: a connection's tensors through shared memory, its headers
    over ZeroMQ (za_shm_link.h).

    A record holds one message's tensors: a table (the count, then each
    tensor's bytes, as uint64) and the tensors' bytes one after the other. */
#include "za/za_shm_link.h"
#include "za/za_shm.h"
#include "za/za_util.h"

#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    //  The tensors of the record read, in place, until za_shm_link_done.
    const void *held_data [ZA_WIRE_MAX_TENSORS];
    size_t held_size [ZA_WIRE_MAX_TENSORS];
    int held_count;
    int holding;
};

static int
s_make_segment (za_shm_link_t *self, size_t bytes)
{
    self->out = za_shm_create (bytes);
    if (!self->out)
        return -1;
    za_shm_nonce (self->out, self->out_nonce);
    self->peer_reads = 0;
    return 0;
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
    za_shm_record_t record = {.op = (int32_t) msg->op, .seq = msg->seq, .step = msg->step,
                              .task = msg->task};
    int rc = za_shm_writev (self->out, &record, parts, 1 + msg->tensor_count);
    if (rc)
        return 1;
    *at = za_shm_written (self->out);
    return 0;
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
    size_t len = 0;
    char offer [ZA_SHM_OFFER_MAX];
    if (self->out) {
        size_t offer_len = za_shm_offer (self->out, offer);
        if (offer_len > 1) {
            memcpy (self->word, offer, offer_len - 1);      //  without its '}'
            len = offer_len - 1;
        }
    }
    if (self->in)
        len += (size_t) snprintf (self->word + len, sizeof self->word - len, "%s\"ok\":\"%s\"",
                                  len? ",": "{", self->in_nonce);
    uint64_t at;
    int through = self->out && self->peer_reads && msg->tensor_count > 0
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

//  Holds the tensors of the record at `at` of the peer's segment, in place:
//  the table must name at most ZA_WIRE_MAX_TENSORS tensors whose sizes add
//  up to the record's. Returns 0, or -1 with an error (nothing held).
static int
s_hold_tensors (za_shm_link_t *self, uint64_t at)
{
    za_shm_record_t record;
    if (za_shm_read_at (self->in, at, &record) != 1)
        return -1;
    const unsigned char *bytes = (const unsigned char *) record.data;
    uint64_t count = 0, size;
    int rc = 0;
    if (record.bytes < sizeof count)
        rc = -1;
    else {
        memcpy (&count, bytes, sizeof count);
        if (count > ZA_WIRE_MAX_TENSORS || record.bytes < (1 + count) * sizeof count)
            rc = -1;
    }
    uint64_t left = rc? 0: record.bytes - (1 + count) * sizeof count;
    const unsigned char *from = bytes + (1 + count) * sizeof count;
    for (uint64_t i = 0; rc == 0 && i < count; i++) {
        memcpy (&size, bytes + (1 + i) * sizeof size, sizeof size);
        if (size > left)
            rc = -1;
        else {
            self->held_data [i] = from;
            self->held_size [i] = (size_t) size;
            from += size;
            left -= size;
        }
    }
    if (rc || left) {
        za_shm_release (self->in);
        return za_error ("shm link: the record at %" PRIu64 " is not a message's tensors", at);
    }
    self->held_count = (int) count;
    self->holding = 1;
    return 0;
}

int
za_shm_link_receive_in_place (za_shm_link_t *self, zmsg_t *msg, const void *const **data,
                              const size_t **sizes, int *count)
{
    za_shm_link_done (self);
    char word [ZA_WIRE_MAX_SHM_BYTES + 1];
    int len = za_wire_peek_shm (msg, word, sizeof word, NULL);
    //  Every message says whether the peer reads our segment now: one that
    //  says nothing (a peer restarted without shared memory) gets frames.
    self->peer_reads = 0;
    if (len <= 0)
        return 0;                   //  no word, or a header that will not decode
    json_error_t error;
    json_t *root = json_loadb (word, (size_t) len, 0, &error);
    const char *nonce = NULL, *ok = NULL;
    json_int_t at = -1;
    if (!root || json_unpack (root, "{s?s,s?s,s?I}", "nonce", &nonce, "ok", &ok, "at", &at)) {
        json_decref (root);
        return za_error ("shm link: a word that is not one");
    }
    self->peer_reads = ok && self->out && streq (ok, self->out_nonce);
    if (nonce && (!self->in || strcmp (nonce, self->in_nonce))
        && strcmp (nonce, self->failed_nonce)) {
        za_shm_t *in = za_shm_attach (word, (size_t) len);
        if (in) {
            za_shm_destroy (&self->in);
            self->in = in;
            snprintf (self->in_nonce, sizeof self->in_nonce, "%s", nonce);
        }
        else {
            snprintf (self->failed_nonce, sizeof self->failed_nonce, "%s", nonce);
            za_info ("shm link: the peer's segment cannot be used (%s); its tensors must "
                     "come as frames", za_last_error ());
        }
    }
    int rc = 0;
    if (at >= 0)
        rc = !(self->in && nonce && streq (nonce, self->in_nonce))
           ? za_error ("shm link: tensors in a segment not mapped here")
           : s_hold_tensors (self, (uint64_t) at)? -1: 1;
    if (rc < 0 && self->in && at >= 0 && nonce && streq (nonce, self->in_nonce)) {
        //  What the peer's segment holds cannot be read: stop saying "ok",
        //  so that it sends frames again.
        snprintf (self->failed_nonce, sizeof self->failed_nonce, "%s", self->in_nonce);
        za_shm_destroy (&self->in);
    }
    json_decref (root);
    if (rc == 1) {
        *data = self->held_data;
        *sizes = self->held_size;
        *count = self->held_count;
    }
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
    for (int i = 0; self->holding && i < self->held_count; i++) {
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
