/*  za_tcp_pipe.c: records over a tcp connection of their own
    (za_tcp_pipe.h). Non-blocking both ways: a writer holds at most one
    record partly sent, a reader fills a header and then a payload buffer. */
#define _GNU_SOURCE
#include "za/za_tcp_pipe.h"
#include "za/za_util.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#define PIPE_HEADER_BYTES 64
#define PIPE_NONCE_HEX 32

//  A record's header on the wire: little-endian fields, then zeros to 64.
typedef struct {
    uint64_t bytes;
    uint64_t seq;
    int64_t step;
    int32_t op, dtype, task;
    uint32_t magic;
} pipe_header_t;
#define PIPE_MAGIC 0x7a617470u                      //  "zatp"
_Static_assert (sizeof (pipe_header_t) <= PIPE_HEADER_BYTES, "a header fits its bytes");
//  Headers go in host order: the protocol's little-endian.
_Static_assert (__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "a little-endian machine");

struct _za_tcp_pipe_t {
    int listener, fd;
    char nonce [PIPE_NONCE_HEX + 1];
    size_t max_payload;
    //  Writing: the record partly sent.
    unsigned char out_header [PIPE_HEADER_BYTES];
    const unsigned char *out_data;
    size_t out_bytes, out_sent;                     //  of header + payload
    //  Reading: the header, then the payload.
    unsigned char in_header [PIPE_HEADER_BYTES];
    unsigned char *in_data;
    size_t in_got, in_bytes;
};

static za_tcp_pipe_t *
s_new (size_t max_payload)
{
    za_tcp_pipe_t *self = (za_tcp_pipe_t *) calloc (1, sizeof *self);
    if (!self) {
        za_error ("tcp pipe: out of memory");
        return NULL;
    }
    self->listener = self->fd = -1;
    self->max_payload = max_payload;
    return self;
}

void
za_tcp_pipe_destroy (za_tcp_pipe_t **self_p)
{
    za_tcp_pipe_t *self = *self_p;
    if (!self)
        return;
    if (self->listener >= 0)
        close (self->listener);
    if (self->fd >= 0)
        close (self->fd);
    free (self->in_data);
    free (self);
    *self_p = NULL;
}

static int
s_resolve (const char *host, int port, struct sockaddr_in *addr)
{
    memset (addr, 0, sizeof *addr);
    addr->sin_family = AF_INET;
    addr->sin_port = htons ((uint16_t) port);
    if (!host || !*host || strcmp (host, "*") == 0 || strcmp (host, "0.0.0.0") == 0) {
        addr->sin_addr.s_addr = htonl (INADDR_ANY);
        return 0;
    }
    if (inet_pton (AF_INET, host, &addr->sin_addr) == 1)
        return 0;
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *found = NULL;
    if (getaddrinfo (host, NULL, &hints, &found) || !found) {
        if (found)
            freeaddrinfo (found);
        return za_error ("tcp pipe: cannot resolve %s", host);
    }
    addr->sin_addr = ((struct sockaddr_in *) found->ai_addr)->sin_addr;
    freeaddrinfo (found);
    return 0;
}

static void
s_tune (int fd)
{
    int one = 1;
    setsockopt (fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    fcntl (fd, F_SETFL, fcntl (fd, F_GETFL) | O_NONBLOCK);
}

za_tcp_pipe_t *
za_tcp_pipe_listen (const char *host, size_t max_payload)
{
    za_tcp_pipe_t *self = s_new (max_payload);
    struct sockaddr_in addr;
    unsigned char random [PIPE_NONCE_HEX / 2];
    if (!self || s_resolve (host, 0, &addr))
        goto fail;
    if (getrandom (random, sizeof random, 0) != (ssize_t) sizeof random) {
        za_error ("tcp pipe: no random bytes for a nonce");
        goto fail;
    }
    for (size_t i = 0; i < sizeof random; i++)
        snprintf (self->nonce + 2 * i, 3, "%02x", random [i]);
    self->listener = socket (AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (self->listener < 0 || bind (self->listener, (struct sockaddr *) &addr, sizeof addr)
        || listen (self->listener, 4)) {
        za_error ("tcp pipe: cannot listen on %s: %s", host? host: "*", strerror (errno));
        goto fail;
    }
    return self;
fail:
    za_tcp_pipe_destroy (&self);
    return NULL;
}

int
za_tcp_pipe_port (const za_tcp_pipe_t *self)
{
    struct sockaddr_in addr;
    socklen_t len = sizeof addr;
    if (self->listener < 0 || getsockname (self->listener, (struct sockaddr *) &addr, &len))
        return -1;
    return ntohs (addr.sin_port);
}

void
za_tcp_pipe_nonce (const za_tcp_pipe_t *self, char *hex)
{
    memcpy (hex, self->nonce, PIPE_NONCE_HEX + 1);
}

//  Reads exactly n bytes from a blocking-free fd before `deadline`.
static int
s_read_all (int fd, void *to, size_t n, double deadline)
{
    size_t got = 0;
    while (got < n) {
        int left_ms = (int) ((deadline - za_clock_mono ()) * 1000);
        struct pollfd item = {fd, POLLIN, 0};
        int ready = left_ms > 0? poll (&item, 1, left_ms): 0;
        if (ready < 0 && errno == EINTR)
            continue;
        if (ready <= 0)
            return -1;
        ssize_t rc = read (fd, (char *) to + got, n - got);
        if (rc <= 0 && !(rc < 0 && (errno == EAGAIN || errno == EINTR)))
            return -1;
        if (rc > 0)
            got += (size_t) rc;
    }
    return 0;
}

int
za_tcp_pipe_accept (za_tcp_pipe_t *self, double timeout_secs)
{
    double deadline = za_clock_mono () + timeout_secs;
    fcntl (self->listener, F_SETFL, fcntl (self->listener, F_GETFL) | O_NONBLOCK);
    while (za_clock_mono () < deadline) {
        struct pollfd item = {self->listener, POLLIN, 0};
        int left_ms = (int) ((deadline - za_clock_mono ()) * 1000) + 1;
        if (poll (&item, 1, left_ms) <= 0)
            continue;
        int fd = accept4 (self->listener, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0) {
            usleep (1000);              //  out of fds, say: not a busy loop
            continue;
        }
        char said [PIPE_NONCE_HEX];
        //  A connection that is not the sender's gets a second at most.
        double until = za_clock_mono () + 1.0 < deadline? za_clock_mono () + 1.0: deadline;
        if (s_read_all (fd, said, sizeof said, until) == 0
            && memcmp (said, self->nonce, sizeof said) == 0) {
            s_tune (fd);
            self->fd = fd;
            close (self->listener);
            self->listener = -1;
            return 0;
        }
        close (fd);
    }
    return za_error ("tcp pipe: no connection with the nonce within %.1f s", timeout_secs);
}

za_tcp_pipe_t *
za_tcp_pipe_connect (const char *host, int port, const char *nonce, double timeout_secs)
{
    za_tcp_pipe_t *self = s_new (0);
    struct sockaddr_in addr;
    if (!self || s_resolve (host, port, &addr) || strlen (nonce) != PIPE_NONCE_HEX)
        goto fail;
    self->fd = socket (AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (self->fd < 0)
        goto fail;
    if (connect (self->fd, (struct sockaddr *) &addr, sizeof addr) && errno != EINPROGRESS) {
        za_error ("tcp pipe: cannot connect to %s:%d: %s", host, port, strerror (errno));
        goto fail;
    }
    struct pollfd item = {self->fd, POLLOUT, 0};
    int error = 0;
    socklen_t len = sizeof error;
    if (poll (&item, 1, (int) (timeout_secs * 1000) + 1) != 1
        || getsockopt (self->fd, SOL_SOCKET, SO_ERROR, &error, &len) || error) {
        za_error ("tcp pipe: cannot connect to %s:%d: %s", host, port,
                  error? strerror (error): "timed out");
        goto fail;
    }
    s_tune (self->fd);
    //  The nonce first: 32 bytes always go into an empty socket buffer.
    if (send (self->fd, nonce, PIPE_NONCE_HEX, MSG_NOSIGNAL) != PIPE_NONCE_HEX) {
        za_error ("tcp pipe: cannot send to %s:%d", host, port);
        goto fail;
    }
    return self;
fail:
    za_tcp_pipe_destroy (&self);
    return NULL;
}

int
za_tcp_pipe_fd (const za_tcp_pipe_t *self)
{
    return self->fd;
}

int
za_tcp_pipe_busy (const za_tcp_pipe_t *self)
{
    return self->out_sent < self->out_bytes;
}

int
za_tcp_pipe_flush (za_tcp_pipe_t *self)
{
    while (self->out_sent < self->out_bytes) {
        struct iovec parts [2];
        int count = 0;
        size_t sent = self->out_sent;
        if (sent < PIPE_HEADER_BYTES) {
            parts [count].iov_base = self->out_header + sent;
            parts [count++].iov_len = PIPE_HEADER_BYTES - sent;
            sent = 0;
        }
        else
            sent -= PIPE_HEADER_BYTES;
        if (self->out_bytes > PIPE_HEADER_BYTES) {
            parts [count].iov_base = (void *) (self->out_data + sent);
            parts [count++].iov_len = self->out_bytes - PIPE_HEADER_BYTES - sent;
        }
        //  sendmsg, not writev: a peer gone raises no SIGPIPE here.
        struct msghdr message = {.msg_iov = parts, .msg_iovlen = (size_t) count};
        ssize_t rc = sendmsg (self->fd, &message, MSG_NOSIGNAL);
        if (rc < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
            return 1;
        if (rc <= 0)
            return za_error ("tcp pipe: the connection is gone: %s", strerror (errno));
        self->out_sent += (size_t) rc;
    }
    return 0;
}

int
za_tcp_pipe_write (za_tcp_pipe_t *self, const za_shm_record_t *record)
{
    if (self->fd < 0)
        return za_error ("tcp pipe: not connected");
    if (za_tcp_pipe_busy (self)) {
        int rc = za_tcp_pipe_flush (self);
        if (rc)
            return rc;
    }
    pipe_header_t header = {.bytes = record->bytes, .seq = record->seq, .step = record->step,
                            .op = record->op, .dtype = record->dtype, .task = record->task,
                            .magic = PIPE_MAGIC};
    memset (self->out_header, 0, sizeof self->out_header);
    memcpy (self->out_header, &header, sizeof header);
    self->out_data = (const unsigned char *) record->data;
    self->out_bytes = PIPE_HEADER_BYTES + record->bytes;
    self->out_sent = 0;
    return za_tcp_pipe_flush (self) < 0? -1: 0;
}

//  Reads what is there into to [*got, want): 0, or -1 when the peer closed.
static int
s_read_some (int fd, unsigned char *to, size_t want, size_t *got)
{
    while (*got < want) {
        ssize_t rc = read (fd, to + *got, want - *got);
        if (rc > 0)
            *got += (size_t) rc;
        else
        if (rc < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
            return 0;
        else
            return -1;
    }
    return 0;
}

int
za_tcp_pipe_read (za_tcp_pipe_t *self, za_shm_record_t *record)
{
    if (self->fd < 0)
        return za_error ("tcp pipe: not connected");
    if (self->in_got == PIPE_HEADER_BYTES + self->in_bytes && self->in_got > 0)
        self->in_got = self->in_bytes = 0;          //  the last record was taken
    if (self->in_got < PIPE_HEADER_BYTES) {
        if (s_read_some (self->fd, self->in_header, PIPE_HEADER_BYTES, &self->in_got))
            goto closed;
        if (self->in_got < PIPE_HEADER_BYTES)
            return 0;
        pipe_header_t header;
        memcpy (&header, self->in_header, sizeof header);
        //  Its size, checked before anything of the payload is read.
        if (header.magic != PIPE_MAGIC || header.bytes > self->max_payload) {
            za_error ("tcp pipe: the peer sent what is no record (%" PRIu64 " bytes)",
                      header.bytes);
            goto broken;
        }
        self->in_bytes = (size_t) header.bytes;
        if (!self->in_data && self->max_payload
            && !(self->in_data = (unsigned char *) malloc (self->max_payload))) {
            za_error ("tcp pipe: out of memory");
            goto broken;
        }
    }
    size_t got = self->in_got - PIPE_HEADER_BYTES;
    int rc = s_read_some (self->fd, self->in_data, self->in_bytes, &got);
    self->in_got = PIPE_HEADER_BYTES + got;
    if (rc)
        goto closed;
    if (got < self->in_bytes)
        return 0;
    pipe_header_t header;
    memcpy (&header, self->in_header, sizeof header);
    record->op = header.op;
    record->dtype = header.dtype;
    record->task = header.task;
    record->seq = header.seq;
    record->step = header.step;
    record->data = self->in_data;
    record->bytes = self->in_bytes;
    return 1;
closed:
    za_error ("tcp pipe: the peer closed the connection");
broken:
    close (self->fd);
    self->fd = -1;
    return -1;
}
