/*  za_shm.c: a one-way pipe of records through a memfd segment (za_shm.h).

    The segment: a header (the nonce, the size, then the writer's and the
    reader's counters on cache lines of their own) and a ring of bytes.
    head and tail count bytes ever published and released; a record starts
    at head mod size, is a multiple of 64 bytes and never wraps (a pad
    record fills the end when the next does not fit).                   */
#define _GNU_SOURCE
#include "za/za_shm.h"
#include "za/za_util.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <linux/futex.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define SHM_MAGIC UINT64_C (0x7a6163746f72736d)      //  "zactorsm"
#define SHM_LINE 64
#define SHM_NONCE_BYTES 16
#define SHM_OP_PAD (-1)

typedef struct {
    uint64_t magic;
    uint64_t bytes;                         //  the ring's size
    uint8_t nonce [SHM_NONCE_BYTES];
    char pad0 [SHM_LINE - 32];
    _Atomic uint64_t head;                  //  written by the writer
    _Atomic uint32_t published;             //  the futex word: bumped by every write
    char pad1 [SHM_LINE - 12];
    _Atomic uint64_t tail;                  //  written by the reader
    _Atomic uint32_t sleeping;              //  the reader sleeps on `published`
    char pad2 [SHM_LINE - 12];
} shm_header_t;

typedef struct {
    uint64_t length;                        //  the record's bytes, this header included
    uint64_t seq;
    int64_t step;
    uint64_t bytes;                         //  the payload's
    int32_t op, dtype, task;
} shm_record_t;

_Static_assert (sizeof (shm_header_t) == 3 * SHM_LINE, "one line for each party");
_Static_assert (sizeof (shm_record_t) <= SHM_LINE, "a record's header fits a line");

struct _za_shm_t {
    int fd;
    int writer;                             //  1: the creating (sending) end
    shm_header_t *header;
    unsigned char *ring;
    uint64_t bytes;
    size_t mapped;
    uint64_t head, tail;                    //  this end's view: the writer's head, the
                                            //  reader's tail (and what it read past it)
    uint64_t reading;                       //  the length of the record read, 0 when none
    uint64_t written;                       //  where the last record written starts
    int broken;
};

static uint64_t
s_round_up (uint64_t n)
{
    return (n + SHM_LINE - 1) / SHM_LINE * SHM_LINE;
}

int
za_shm_enabled (void)
{
    const char *off = getenv ("ZA_SHM_DISABLE");
    return !(off && *off && strcmp (off, "0"));
}

//  The writer populates the pages it made; the reader maps them as they are
//  (an offer's size is the peer's to say: nothing is committed for it here).
static int
s_map (za_shm_t *self)
{
    void *at = mmap (NULL, self->mapped, PROT_READ | PROT_WRITE,
                     MAP_SHARED | (self->writer? MAP_POPULATE: 0), self->fd, 0);
    if (at == MAP_FAILED)
        return za_error ("shm: cannot map %zu bytes: %s", self->mapped, strerror (errno));
    self->header = (shm_header_t *) at;
    self->ring = (unsigned char *) at + sizeof (shm_header_t);
    return 0;
}

za_shm_t *
za_shm_create (size_t bytes)
{
    uint64_t ring = s_round_up (bytes? bytes: ZA_SHM_DEFAULT_BYTES);
    if (ring > ZA_SHM_MAX_BYTES) {
        za_error ("shm: a segment of %zu bytes (at most %" PRIu64 ")", bytes, ZA_SHM_MAX_BYTES);
        return NULL;
    }
    za_shm_t *self = (za_shm_t *) calloc (1, sizeof *self);
    if (!self) {
        za_error ("shm: out of memory");
        return NULL;
    }
    self->writer = 1;
    self->bytes = ring;
    self->mapped = sizeof (shm_header_t) + (size_t) ring;
    self->fd = memfd_create ("zactor-ring", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (self->fd < 0) {
        za_error ("shm: cannot make a segment: %s", strerror (errno));
        free (self);
        return NULL;
    }
    //  Sealed at its size: the reader's mapping can never lose its pages.
    if (ftruncate (self->fd, (off_t) self->mapped)
        || fcntl (self->fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL)) {
        za_error ("shm: cannot size a segment of %zu bytes: %s", self->mapped, strerror (errno));
        goto fail;
    }
    if (s_map (self))
        goto fail;
    shm_header_t *header = self->header;
    header->bytes = ring;
    if (getrandom (header->nonce, SHM_NONCE_BYTES, 0) != SHM_NONCE_BYTES) {
        za_error ("shm: no random bytes for a nonce: %s", strerror (errno));
        goto fail;
    }
    atomic_store (&header->head, 0);
    atomic_store (&header->tail, 0);
    header->magic = SHM_MAGIC;
    return self;
fail:
    za_shm_destroy (&self);
    return NULL;
}

void
za_shm_nonce (const za_shm_t *self, char *hex)
{
    for (int i = 0; i < SHM_NONCE_BYTES; i++)
        snprintf (hex + 2 * i, 3, "%02x", self->header->nonce [i]);
}

size_t
za_shm_offer (const za_shm_t *self, char *text)
{
    char nonce [2 * SHM_NONCE_BYTES + 1];
    za_shm_nonce (self, nonce);
    int len = snprintf (text, ZA_SHM_OFFER_MAX,
                        "{\"pid\":%ld,\"fd\":%d,\"bytes\":%" PRIu64 ",\"nonce\":\"%s\"}",
                        (long) getpid (), self->fd, self->bytes, nonce);
    return len > 0 && len < ZA_SHM_OFFER_MAX? (size_t) len: 0;
}

za_shm_t *
za_shm_attach (const char *offer, size_t offer_len)
{
    json_error_t error;
    json_t *root = json_loadb (offer, offer_len, 0, &error);
    json_int_t pid = 0, fd = -1, bytes = 0;
    const char *nonce = NULL;
    if (!root || json_unpack (root, "{s:I,s:I,s:I,s:s}", "pid", &pid, "fd", &fd, "bytes", &bytes,
                              "nonce", &nonce)
        || pid <= 0 || fd < 0 || bytes <= 0 || (uint64_t) bytes > ZA_SHM_MAX_BYTES
        || (uint64_t) bytes % SHM_LINE || strlen (nonce) != 2 * SHM_NONCE_BYTES) {
        json_decref (root);
        za_error ("shm: an offer that is not one");
        return NULL;
    }
    za_shm_t *self = (za_shm_t *) calloc (1, sizeof *self);
    char path [64];
    snprintf (path, sizeof path, "/proc/%" JSON_INTEGER_FORMAT "/fd/%" JSON_INTEGER_FORMAT,
              pid, fd);
    if (!self) {
        za_error ("shm: out of memory");
        json_decref (root);
        return NULL;
    }
    self->bytes = (uint64_t) bytes;
    self->mapped = sizeof (shm_header_t) + (size_t) bytes;
    //  Whatever the fd is now, opening it must not wait or take a terminal.
    self->fd = open (path, O_RDWR | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    struct stat st;
    if (self->fd < 0 || fstat (self->fd, &st) || !S_ISREG (st.st_mode)
        || (size_t) st.st_size != self->mapped) {
        za_error ("shm: cannot open the segment offered (%s): %s", path,
                  self->fd < 0? strerror (errno): "not of the size offered");
        goto fail;
    }
    //  Sealed at its size, or a peer could truncate it under our reads (SIGBUS).
    int seals = fcntl (self->fd, F_GET_SEALS);
    if (seals < 0 || (seals & (F_SEAL_SHRINK | F_SEAL_GROW)) != (F_SEAL_SHRINK | F_SEAL_GROW)) {
        za_error ("shm: %s is not sealed at its size", path);
        goto fail;
    }
    if (s_map (self))
        goto fail;
    char have [2 * SHM_NONCE_BYTES + 1];
    za_shm_nonce (self, have);
    if (self->header->magic != SHM_MAGIC || self->header->bytes != self->bytes
        || strcmp (have, nonce)) {
        za_error ("shm: %s is not the segment offered", path);
        goto fail;
    }
    self->tail = atomic_load (&self->header->tail);
    json_decref (root);
    return self;
fail:
    json_decref (root);
    za_shm_destroy (&self);
    return NULL;
}

void
za_shm_destroy (za_shm_t **self_p)
{
    za_shm_t *self = *self_p;
    if (!self)
        return;
    if (self->header)
        munmap (self->header, self->mapped);
    if (self->fd >= 0)
        close (self->fd);
    free (self);
    *self_p = NULL;
}

static long
s_futex (_Atomic uint32_t *word, int op, uint32_t value, const struct timespec *timeout)
{
    return syscall (SYS_futex, (uint32_t *) word, op, value, timeout, NULL, 0);
}

int
za_shm_fits (const za_shm_t *self, size_t bytes)
{
    return bytes <= self->bytes && s_round_up (SHM_LINE + bytes) <= self->bytes;
}

int
za_shm_writev (za_shm_t *self, const za_shm_record_t *record, const struct iovec *parts,
               int count)
{
    uint64_t bytes = 0;
    for (int i = 0; i < count; i++)
        bytes += parts [i].iov_len;
    uint64_t length = s_round_up (SHM_LINE + bytes);
    if (!za_shm_fits (self, bytes))
        return za_error ("shm: a record of %" PRIu64 " bytes in a segment of %" PRIu64, bytes,
                         self->bytes);
    shm_header_t *header = self->header;
    uint64_t tail = atomic_load_explicit (&header->tail, memory_order_acquire);
    uint64_t at = self->head % self->bytes;
    uint64_t pad = self->bytes - at < length? self->bytes - at: 0;
    if (self->head + pad + length - tail > self->bytes)
        return 1;
    if (pad) {
        shm_record_t mark = {.length = pad, .op = SHM_OP_PAD};
        memcpy (self->ring + at, &mark, sizeof mark);
        at = 0;
    }
    shm_record_t head = {.length = length, .seq = record->seq, .step = record->step,
                         .bytes = bytes, .op = record->op, .dtype = record->dtype,
                         .task = record->task};
    memcpy (self->ring + at, &head, sizeof head);
    self->written = self->head + pad;
    unsigned char *to = self->ring + at + SHM_LINE;
    for (int i = 0; i < count; i++) {
        if (parts [i].iov_len)
            memcpy (to, parts [i].iov_base, parts [i].iov_len);
        to += parts [i].iov_len;
    }
    self->head += pad + length;
    atomic_store_explicit (&header->head, self->head, memory_order_seq_cst);
    atomic_fetch_add_explicit (&header->published, 1, memory_order_seq_cst);
    if (atomic_load_explicit (&header->sleeping, memory_order_seq_cst))
        s_futex (&header->published, FUTEX_WAKE, 1, NULL);
    return 0;
}

int
za_shm_write (za_shm_t *self, const za_shm_record_t *record)
{
    struct iovec part = {(void *) record->data, record->bytes};
    return za_shm_writev (self, record, &part, 1);
}

int
za_shm_read (za_shm_t *self, za_shm_record_t *record)
{
    if (self->broken)
        return za_error ("shm: the segment held something unreadable");
    if (self->reading)
        za_shm_release (self);
    shm_header_t *header = self->header;
    for (;;) {
        uint64_t head = atomic_load_explicit (&header->head, memory_order_acquire);
        if (head == self->tail)
            return 0;
        //  What was published, and where: checked before anything is read.
        uint64_t at = self->tail % self->bytes, published = head - self->tail;
        shm_record_t mark;
        //  Records start on lines: a tail elsewhere (the reader's counter is
        //  in the segment too, where the peer can write) is not ours.
        if (published > self->bytes || published < SHM_LINE || self->bytes - at < SHM_LINE
            || at % SHM_LINE)
            goto broken;
        memcpy (&mark, self->ring + at, sizeof mark);
        if (mark.length < SHM_LINE || mark.length % SHM_LINE || mark.length > published
            || mark.length > self->bytes - at)
            goto broken;
        if (mark.op == SHM_OP_PAD) {
            self->tail += mark.length;
            atomic_store_explicit (&header->tail, self->tail, memory_order_release);
            continue;
        }
        if (mark.bytes > mark.length - SHM_LINE)
            goto broken;
        record->op = mark.op;
        record->dtype = mark.dtype;
        record->task = mark.task;
        record->seq = mark.seq;
        record->step = mark.step;
        record->bytes = (size_t) mark.bytes;
        record->data = self->ring + at + SHM_LINE;
        self->reading = mark.length;
        return 1;
    }
broken:
    self->broken = 1;
    return za_error ("shm: the segment held something unreadable");
}

int
za_shm_read_at (za_shm_t *self, uint64_t at, za_shm_record_t *record)
{
    if (self->reading)
        za_shm_release (self);
    if (self->broken)
        return za_error ("shm: the segment held something unreadable");
    uint64_t head = atomic_load_explicit (&self->header->head, memory_order_acquire);
    if (at < self->tail || at >= head || head - self->tail > self->bytes || at % SHM_LINE)
        return za_error ("shm: no record at %" PRIu64 " (%" PRIu64 " to %" PRIu64 " readable)",
                         at, self->tail, head);
    self->tail = at;
    atomic_store_explicit (&self->header->tail, self->tail, memory_order_release);
    int got = za_shm_read (self, record);
    if (got == 0)
        return za_error ("shm: nothing published at %" PRIu64, at);
    if (got == 1 && self->tail != at)
        return za_error ("shm: a pad, not a record, at %" PRIu64, at);
    return got;
}

uint64_t
za_shm_written (const za_shm_t *self)
{
    return self->written;
}

const void *
za_shm_ring (const za_shm_t *self, size_t *bytes)
{
    *bytes = (size_t) self->bytes;
    return self->ring;
}

void
za_shm_release (za_shm_t *self)
{
    if (!self->reading)
        return;
    self->tail += self->reading;
    self->reading = 0;
    atomic_store_explicit (&self->header->tail, self->tail, memory_order_release);
}

int
za_shm_empty (const za_shm_t *self)
{
    return atomic_load_explicit (&self->header->tail, memory_order_acquire) == self->head;
}

int
za_shm_unused (const za_shm_t *self)
{
    return self->head == 0;
}

static int
s_ready (const za_shm_t *self)
{
    return atomic_load_explicit (&self->header->head, memory_order_acquire)
           != self->tail + self->reading;
}

int
za_shm_wait (za_shm_t *self, int spin_usecs, int usecs)
{
    if (s_ready (self))
        return 1;
    double start = za_clock_mono ();
    if (spin_usecs > 0) {
        double until = start + spin_usecs * 1e-6;
        for (int i = 1;; i++) {
            if (s_ready (self))
                return 1;
            //  A process waiting for this core runs (more ranks than cores);
            //  none waiting, the call returns at once.
            sched_yield ();
            if (i % 8 == 0 && za_clock_mono () >= until)
                break;
        }
    }
    int left = usecs - (int) ((za_clock_mono () - start) * 1e6);
    if (left <= 0)
        return s_ready (self);
    shm_header_t *header = self->header;
    uint32_t seen = atomic_load_explicit (&header->published, memory_order_seq_cst);
    atomic_store_explicit (&header->sleeping, 1, memory_order_seq_cst);
    if (!s_ready (self)) {
        struct timespec timeout = {left / 1000000, (long) (left % 1000000) * 1000};
        s_futex (&header->published, FUTEX_WAIT, seen, &timeout);
    }
    atomic_store_explicit (&header->sleeping, 0, memory_order_relaxed);
    return s_ready (self);
}

void
za_shm_skip (za_shm_t *self)
{
    self->reading = 0;
    self->tail = atomic_load_explicit (&self->header->head, memory_order_acquire);
    atomic_store_explicit (&self->header->tail, self->tail, memory_order_release);
}

void
za_shm_put_back (za_shm_t *self)
{
    self->reading = 0;
}

// ---------------------------------------------------------------------------
//  The bell.

struct _za_shm_bell_t {
    int fds [2];                    //  the pipe: read, write
};

za_shm_bell_t *
za_shm_bell_new (void)
{
    za_shm_bell_t *self = (za_shm_bell_t *) calloc (1, sizeof *self);
    if (!self) {
        za_error ("shm: out of memory");
        return NULL;
    }
    if (pipe2 (self->fds, O_CLOEXEC | O_NONBLOCK)) {
        za_error ("shm: cannot make a bell: %s", strerror (errno));
        free (self);
        return NULL;
    }
    return self;
}

void
za_shm_bell_destroy (za_shm_bell_t **self_p)
{
    za_shm_bell_t *self = *self_p;
    if (!self)
        return;
    close (self->fds [0]);
    close (self->fds [1]);
    free (self);
    *self_p = NULL;
}

int
za_shm_bell_fd (const za_shm_bell_t *self)
{
    return self->fds [0];
}

int
za_shm_bell_offer_fd (const za_shm_bell_t *self)
{
    return self->fds [1];
}

void
za_shm_bell_quiet (za_shm_bell_t *self)
{
    char drain [512];
    while (read (self->fds [0], drain, sizeof drain) == (ssize_t) sizeof drain)
        ;
}

int
za_shm_bell_open (long pid, int fd)
{
    char path [64];
    snprintf (path, sizeof path, "/proc/%ld/fd/%d", pid, fd);
    //  A pipe opened for writing does not wait for a reader with O_NONBLOCK
    //  (it fails when there is none).
    int bell = pid > 0 && fd >= 0? open (path, O_WRONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK)
                                 : -1;
    struct stat st;
    if (bell < 0 || fstat (bell, &st) || !S_ISFIFO (st.st_mode)) {
        //  The caller says what it means.
        char text [160];
        snprintf (text, sizeof text, "shm: cannot open the bell offered (%s): %s", path,
                  bell < 0? strerror (errno): "not a pipe");
        za_error_adopt (text);
        if (bell >= 0)
            close (bell);
        return -1;
    }
    return bell;
}

int
za_shm_bell_ring (int fd)
{
    //  A pipe whose reader is gone raises SIGPIPE in the writing thread:
    //  held back here, and taken if it came.
    sigset_t pipe_set, old;
    sigemptyset (&pipe_set);
    sigaddset (&pipe_set, SIGPIPE);
    pthread_sigmask (SIG_BLOCK, &pipe_set, &old);
    ssize_t n = write (fd, "", 1);
    int err = errno;
    if (n < 0 && err == EPIPE) {
        struct timespec none = {0, 0};
        sigtimedwait (&pipe_set, NULL, &none);
    }
    pthread_sigmask (SIG_SETMASK, &old, NULL);
    //  A full pipe has rung already. (The caller says what a gone owner means.)
    return n < 0 && err != EAGAIN? -1: 0;
}
