/*  za_shm.h: a one-way pipe of records between two processes of one host,
    through a shared-memory segment (the same-host data path of the ring's
    links, and of a worker's and its ps's: za_shm_link.h).

    The sending process makes the segment (memfd: no name anywhere, gone
    with the last process that maps it, sealed against resizing) and offers
    it to the receiver over their ZeroMQ link (za_shm_offer; CURVE-protected
    with --certs):
    its pid, its fd and a random nonce. The receiver opens /proc/PID/fd/FD,
    which Linux allows only to the same user (or root), maps it and checks
    the size and the nonce (za_shm_attach). Records then go in order through
    a ring of bytes: the writer copies a record in and publishes it; the
    reader reads it in place and releases it. One writer, one reader.

    What the reader takes from the segment is checked before it is read: a
    record's length, its place and its payload's size must fit what was
    published; a record that does not is the end of the pipe (an error, the
    pipe refuses everything after).                                       */
#ifndef ZA_SHM_H_INCLUDED
#define ZA_SHM_H_INCLUDED

#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#ifdef __cplusplus
extern "C" {
#endif

//  A segment's records, in bytes, when the caller says 0.
#define ZA_SHM_DEFAULT_BYTES (4u << 20)
//  The most a segment may hold (and so a record).
#define ZA_SHM_MAX_BYTES (UINT64_C (1) << 32)
//  An offer's text (za_shm_offer): at most this many bytes.
#define ZA_SHM_OFFER_MAX 160

typedef struct _za_shm_t za_shm_t;

//  0 when ZA_SHM_DISABLE is set (and not "0") in the environment: every
//  same-host path stays on ZeroMQ.
int za_shm_enabled (void);

//  One record: a message of the ring without its ZeroMQ frame.
typedef struct {
    int32_t op, dtype, task;
    uint64_t seq;
    int64_t step;
    const void *data;               //  write: the caller's bytes; read: in the segment,
                                    //  valid until za_shm_release
    size_t bytes;
} za_shm_record_t;

//  The sending end: a new segment of `bytes` of records (0: the default;
//  rounded up to 64), mapped and sealed. Returns NULL with an error.
za_shm_t *za_shm_create (size_t bytes);

//  The receiving end: opens and maps the segment an offer describes, and
//  checks that it is the one offered (its size, its nonce). Returns NULL
//  with an error (the sender gone, another pid namespace, another user, a
//  segment not as offered).
za_shm_t *za_shm_attach (const char *offer, size_t offer_len);

//  Unmaps and closes (the segment itself goes with the last process).
void za_shm_destroy (za_shm_t **self_p);

//  The sending end's offer, "{"pid":P,"fd":F,"bytes":B,"nonce":"HEX"}", in
//  `text` (at least ZA_SHM_OFFER_MAX bytes). Returns its length.
size_t za_shm_offer (const za_shm_t *self, char *text);

//  The segment's nonce as 32 hex digits and a NUL, into `hex` (33 bytes).
void za_shm_nonce (const za_shm_t *self, char *hex);

//  Copies a record in and publishes it. Returns 0, 1 when it does not fit
//  now (the reader has not released enough: try again later), or -1 with
//  an error when it can never fit.
int za_shm_write (za_shm_t *self, const za_shm_record_t *record);

//  1 when a record of `bytes` of payload can fit the segment at all (when
//  it is empty), 0 when za_shm_write would say it never can.
int za_shm_fits (const za_shm_t *self, size_t bytes);
//  The same, the payload gathered from `count` parts (record->data and
//  record->bytes are not read).
int za_shm_writev (za_shm_t *self, const za_shm_record_t *record, const struct iovec *parts,
                   int count);

//  The next record, in place. Returns 1 with *record, 0 when none is
//  published yet, -1 with an error when the segment holds something no
//  writer of ours wrote (then always -1).
int za_shm_read (za_shm_t *self, za_shm_record_t *record);

//  The record that starts at `at` (a position za_shm_written gave the
//  writer), in place: everything before it is released unread (a reader
//  that attached late, or records of a peer's earlier life). Returns 1 with
//  *record, or -1 with an error when no whole record was published there
//  (a position already released, not yet published, or not a record's).
int za_shm_read_at (za_shm_t *self, uint64_t at, za_shm_record_t *record);

//  Gives the record last read back to the writer.
void za_shm_release (za_shm_t *self);

//  Where the record last written starts (for za_shm_read_at).
uint64_t za_shm_written (const za_shm_t *self);

//  Waits until the writer publishes something new (or not), at most
//  `usecs`: spins first for up to spin_usecs, then sleeps (futex) until a
//  write wakes it. Returns 1 when a record may be there, 0 when not.
int za_shm_wait (za_shm_t *self, int spin_usecs, int usecs);

//  1 when the reader has released everything written.
int za_shm_empty (const za_shm_t *self);

//  The ring's first byte and its size, as this end maps it (what a record
//  read in place must lie inside: the fuzz harness checks it).
const void *za_shm_ring (const za_shm_t *self, size_t *bytes);

//  1 when nothing was ever written (the sending end).
int za_shm_unused (const za_shm_t *self);

//  The reader: releases everything published so far unread (a reader that
//  attached reads only what is written after).
void za_shm_skip (za_shm_t *self);
//  The reader: the record just read stays unread (the next read returns it
//  again).
void za_shm_put_back (za_shm_t *self);

//  A bell: how a process that reads several segments, and waits on its
//  ZeroMQ sockets as well, learns that a record was written. A pipe: its
//  owner polls the read end with its sockets; the write end's number goes
//  next to a segment's offer, and a writer opens it through /proc/PID/fd/N
//  as it opens the segment (the same user only). A ring is a hint, never a
//  message: the owner drains the bell, then reads every segment it maps.
typedef struct _za_shm_bell_t za_shm_bell_t;
//  Returns NULL with an error.
za_shm_bell_t *za_shm_bell_new (void);
void za_shm_bell_destroy (za_shm_bell_t **self_p);
//  The read end, to poll (POLLIN).
int za_shm_bell_fd (const za_shm_bell_t *self);
//  The write end's number, for offers.
int za_shm_bell_offer_fd (const za_shm_bell_t *self);
//  Drains what rang so far.
void za_shm_bell_quiet (za_shm_bell_t *self);
//  The writer: opens process pid's bell `fd` (nonblocking, a pipe or not at
//  all). Returns the fd, or -1 with an error.
int za_shm_bell_open (long pid, int fd);
//  Rings a bell za_shm_bell_open opened (never blocks, never raises
//  SIGPIPE). Returns 0, or -1 when its owner is gone (no error set).
int za_shm_bell_ring (int fd);

#ifdef __cplusplus
}
#endif
#endif
