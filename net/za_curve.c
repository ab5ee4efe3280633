/*  za_curve.c: the cluster certificate, CURVE on sockets, and the ZAP
    handler (za_curve.h).

    The handler is an actor: a REP socket on inproc://zeromq.zap.01 (where
    libzmq asks about every handshake of the process) and one PAIR per
    server socket on that socket's monitor, for the handshakes that fail
    before ZAP is asked (no keys, or another cluster's keys).            */
#include "za/za_curve.h"
#include "za/za_util.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define ZAP_ENDPOINT "inproc://zeromq.zap.01"
#define ZAP_DOMAIN "zactor"
#define MAX_MONITORS 64
#define KEY_BYTES 32
#define PEER_TEXT 160

//  What the process uses: set by za_curve_use, read by every thread after.
typedef struct {
    char dir [4096];
    zcert_t *cert;                          //  the cluster's pair
    byte allowed [ZA_CURVE_MAX_KEYS][KEY_BYTES];
    int allowed_count;
    zactor_t *handler;
    uint64_t monitors;                      //  monitor endpoints made
} s_curve_t;

static s_curve_t s_curve;
static pthread_mutex_t s_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t s_refused;                  //  atomic

// ---------------------------------------------------------------------------
//  Keys

int
za_curve_keygen (const char *dir)
{
    struct stat st;
    if (stat (dir, &st) == 0 && !S_ISDIR (st.st_mode))
        return za_error ("keygen: %s exists and is not a directory", dir);
    if (stat (dir, &st) && mkdir (dir, 0700))
        return za_error ("keygen: cannot make %s: %s", dir, strerror (errno));
    char public_path [4200], secret_path [4200];
    snprintf (public_path, sizeof public_path, "%s/%s", dir, ZA_CURVE_PUBLIC_FILE);
    snprintf (secret_path, sizeof secret_path, "%s/%s", dir, ZA_CURVE_SECRET_FILE);
    if (access (public_path, F_OK) == 0 || access (secret_path, F_OK) == 0)
        return za_error ("keygen: %s already holds a cluster certificate; a new one would "
                         "lock out every process using it. Delete it first, or give "
                         "another directory", dir);
    zcert_t *cert = zcert_new ();
    if (!cert)
        return za_error ("keygen: cannot make a key pair (libzmq without CURVE?)");
    char host [256] = "";
    gethostname (host, sizeof host - 1);
    zcert_set_meta (cert, "made-by", "zactor-run keygen");
    zcert_set_meta (cert, "host", "%s", host);
    zcert_set_meta (cert, "time", "%.0f", za_clock_wall ());
    //  Owner-only from the first byte: no window where others may read.
    mode_t old = umask (077);
    int rc = zcert_save (cert, public_path);
    umask (old);
    zcert_destroy (&cert);
    if (rc || chmod (public_path, 0600) || chmod (secret_path, 0600)) {
        unlink (public_path);
        unlink (secret_path);
        return za_error ("keygen: cannot write %s: %s", secret_path, strerror (errno));
    }
    return 0;
}

//  Reads the public key of every *.key file in dir into s_curve.allowed.
static int
s_read_allowed (const char *dir)
{
    DIR *d = opendir (dir);
    if (!d)
        return za_error ("--certs %s: %s", dir, strerror (errno));
    s_curve.allowed_count = 0;
    struct dirent *entry;
    while ((entry = readdir (d))) {
        size_t n = strlen (entry->d_name);
        if (n < 5 || !streq (entry->d_name + n - 4, ".key"))
            continue;
        if (s_curve.allowed_count == ZA_CURVE_MAX_KEYS) {
            za_info ("curve: %s holds more than %d public keys; the rest are ignored", dir,
                     ZA_CURVE_MAX_KEYS);
            break;
        }
        char path [4400];
        snprintf (path, sizeof path, "%s/%s", dir, entry->d_name);
        //  Every key here is let in: one that others may write is anyone's.
        struct stat st;
        if (stat (path, &st) == 0 && (st.st_mode & 022)) {
            za_error ("--certs %s: %s can be written by others (mode %04o), and every key "
                      "there is let in: chmod go-w %s", dir, entry->d_name,
                      (unsigned) (st.st_mode & 07777), path);
            closedir (d);           //  (entry is the directory's: said first)
            return -1;
        }
        zcert_t *cert = zcert_load (path);
        if (!cert) {
            za_info ("curve: %s is not a certificate; ignored", path);
            continue;
        }
        memcpy (s_curve.allowed [s_curve.allowed_count++], zcert_public_key (cert), KEY_BYTES);
        zcert_destroy (&cert);
    }
    closedir (d);
    return 0;
}

static int
s_allowed (const byte *key)
{
    for (int k = 0; k < s_curve.allowed_count; k++)
        if (memcmp (s_curve.allowed [k], key, KEY_BYTES) == 0)
            return 1;
    return 0;
}

// ---------------------------------------------------------------------------
//  The ZAP handler

typedef struct {
    char what [PEER_TEXT];
    double last;
} s_peer_t;

typedef struct {
    zsock_t *pipe;
    zsock_t *zap;
    zpoller_t *poller;
    zsock_t *monitors [MAX_MONITORS];
    s_peer_t peers [ZA_CURVE_MAX_PEERS];
    int peer_count;
} s_handler_t;

//  A refusal of `what`: counted and logged when it is a peer not seen in
//  the last ZA_CURVE_QUIET_SECS.
static void
s_refused_peer (s_handler_t *self, const char *what)
{
    double now = za_clock_mono ();
    int oldest = 0, slot = -1;
    for (int p = 0; p < self->peer_count && slot < 0; p++) {
        if (streq (self->peers [p].what, what)) {
            int quiet = now - self->peers [p].last >= ZA_CURVE_QUIET_SECS;
            self->peers [p].last = now;
            if (!quiet)
                return;
            slot = p;           //  back after a quiet while: counted again
        }
        else
        if (self->peers [p].last < self->peers [oldest].last)
            oldest = p;
    }
    if (slot < 0)
        slot = self->peer_count < ZA_CURVE_MAX_PEERS? self->peer_count++: oldest;
    snprintf (self->peers [slot].what, sizeof self->peers [slot].what, "%s", what);
    self->peers [slot].last = now;
    uint64_t count = __atomic_add_fetch (&s_refused, 1, __ATOMIC_RELAXED);
    za_info ("curve: refused %s; it gets nothing (%" PRIu64 " peer%s refused so far)", what,
             count, count == 1? "": "s");
}

//  One ZAP request (RFC 27): version, request id, domain, address, routing
//  id, mechanism, credentials. CURVE passes when the client's key is the
//  cluster's (or another allowed one); the other mechanisms are not ours to
//  judge (our CURVE sockets never see them).
static void
s_on_zap (s_handler_t *self)
{
    zmsg_t *request = zmsg_recv (self->zap);
    if (!request)
        return;
    char *version = zmsg_popstr (request);
    char *sequence = zmsg_popstr (request);
    char *domain = zmsg_popstr (request);
    char *address = zmsg_popstr (request);
    zframe_t *identity = zmsg_pop (request);
    char *mechanism = zmsg_popstr (request);
    zframe_t *key = zmsg_pop (request);
    int ok = 1;
    if (mechanism && streq (mechanism, "CURVE")) {
        ok = key && zframe_size (key) == KEY_BYTES && s_allowed (zframe_data (key));
        if (!ok) {
            char text [41] = "?", what [PEER_TEXT];
            if (key && zframe_size (key) == KEY_BYTES)
                zmq_z85_encode (text, zframe_data (key), KEY_BYTES);
            snprintf (what, sizeof what, "%s with key %s, not the cluster's",
                      address? address: "?", text);
            s_refused_peer (self, what);
        }
    }
    zmsg_t *reply = zmsg_new ();
    zmsg_addstr (reply, "1.0");
    zmsg_addstr (reply, sequence? sequence: "");
    zmsg_addstr (reply, ok? "200": "400");
    zmsg_addstr (reply, ok? "OK": "not a key of this cluster");
    zmsg_addstr (reply, "");
    zmsg_addmem (reply, NULL, 0);
    zmsg_send (&reply, self->zap);
    zstr_free (&version);
    zstr_free (&sequence);
    zstr_free (&domain);
    zstr_free (&address);
    zstr_free (&mechanism);
    zframe_destroy (&identity);
    zframe_destroy (&key);
    zmsg_destroy (&request);
}

//  One monitor event (libzmq's v1: 2 bytes event, 4 bytes value; then the
//  endpoint, which on a bound socket is its own address, not the peer's).
static void
s_on_monitor (s_handler_t *self, int m)
{
    zmsg_t *event = zmsg_recv (self->monitors [m]);
    zframe_t *head = event? zmsg_first (event): NULL;
    char *endpoint = event && zmsg_size (event) > 1
                   ? zframe_strdup (zmsg_next (event)): NULL;
    if (head && zframe_size (head) == 6) {
        uint16_t kind;
        uint32_t value;
        memcpy (&kind, zframe_data (head), 2);
        memcpy (&value, zframe_data (head) + 2, 4);
        char what [PEER_TEXT];
        if (kind == ZMQ_EVENT_MONITOR_STOPPED) {
            zpoller_remove (self->poller, self->monitors [m]);
            zsock_destroy (&self->monitors [m]);
        }
        else
        if (kind == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL
            || kind == ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL) {
            //  A peer without keys sees the mismatch too: when it hangs up
            //  first we only see the handshake broken off (NO_DETAIL).
            snprintf (what, sizeof what, "a peer on %s %s", endpoint? endpoint: "?",
                      kind == ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL
                      || value == ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH
                      ? "without keys (no CURVE)"
                      : value == ZMQ_PROTOCOL_ERROR_ZMTP_CRYPTOGRAPHIC
                      ? "with another cluster's keys"
                      : "that broke the CURVE handshake");
            s_refused_peer (self, what);
        }
    }
    zstr_free (&endpoint);
    zmsg_destroy (&event);
}

//  "WATCH" ENDPOINT: a server socket's monitor to read; signals 0, or -1
//  when MAX_MONITORS are watched already.
static void
s_on_command (s_handler_t *self, int *terminated)
{
    char *command = NULL, *endpoint = NULL;
    if (zstr_recvx (self->pipe, &command, &endpoint, NULL) < 1 || streq (command, "$TERM"))
        *terminated = 1;
    else
    if (streq (command, "WATCH") && endpoint) {
        int m = 0;
        while (m < MAX_MONITORS && self->monitors [m])
            m++;
        zsock_t *pair = m < MAX_MONITORS? zsock_new (ZMQ_PAIR): NULL;
        if (pair && zsock_connect (pair, "%s", endpoint) == 0) {
            self->monitors [m] = pair;
            zpoller_add (self->poller, pair);
            zsock_signal (self->pipe, 0);
        }
        else {
            zsock_destroy (&pair);
            zsock_signal (self->pipe, 1);
        }
    }
    zstr_free (&command);
    zstr_free (&endpoint);
}

//  args: an int the actor sets to 0 when it judges, -1 when it cannot
//  (zactor_new does not look at the signal, so the caller reads this).
static void
s_handler_actor (zsock_t *pipe, void *args)
{
    int *status = (int *) args;
    s_handler_t self = {.pipe = pipe};
    self.zap = zsock_new (ZMQ_REP);
    if (!self.zap || zsock_bind (self.zap, ZAP_ENDPOINT) < 0) {
        zsock_destroy (&self.zap);
        *status = -1;
        zsock_signal (pipe, 1);
        //  Wait for $TERM, so that nobody reads our end's signal as an answer.
        char *command;
        while ((command = zstr_recv (pipe)) && !streq (command, "$TERM"))
            zstr_free (&command);
        zstr_free (&command);
        return;
    }
    *status = 0;
    self.poller = zpoller_new (pipe, self.zap, NULL);
    //  Ctrl-C ends the process's loops, not this one: its sockets still
    //  handshake until they are closed, and the process stops it last.
    zpoller_set_nonstop (self.poller, true);
    zsock_signal (pipe, 0);
    int terminated = 0;
    while (!terminated) {
        void *which = zpoller_wait (self.poller, -1);
        if (!which) {
            //  EINTR goes on (nonstop); a context that ends, ends us.
            if (zmq_errno () == ETERM)
                break;
            continue;
        }
        if (which == pipe)
            s_on_command (&self, &terminated);
        else
        if (which == self.zap)
            s_on_zap (&self);
        else
            for (int m = 0; m < MAX_MONITORS; m++)
                if (which == self.monitors [m])
                    s_on_monitor (&self, m);
    }
    for (int m = 0; m < MAX_MONITORS; m++)
        zsock_destroy (&self.monitors [m]);
    zpoller_destroy (&self.poller);
    zsock_destroy (&self.zap);
}

// ---------------------------------------------------------------------------
//  The process's use

int
za_curve_use (const char *dir)
{
    pthread_mutex_lock (&s_lock);
    int rc = 0;
    if (s_curve.cert) {
        if (!streq (s_curve.dir, dir))
            rc = za_error ("--certs %s: this process uses %s already", dir, s_curve.dir);
        pthread_mutex_unlock (&s_lock);
        return rc;
    }
    char secret_path [4200];
    snprintf (secret_path, sizeof secret_path, "%s/%s", dir, ZA_CURVE_SECRET_FILE);
    struct stat st;
    if (stat (dir, &st) || !S_ISDIR (st.st_mode))
        rc = za_error ("--certs %s: no such directory; make one with: zactor-run keygen %s",
                       dir, dir);
    else
    if (st.st_mode & 022)
        rc = za_error ("--certs %s can be written by others (mode %04o): anyone could add a "
                       "key, and every *.key there is let in; chmod go-w %s", dir,
                       (unsigned) (st.st_mode & 07777), dir);
    else
    if (stat (secret_path, &st))
        rc = za_error ("--certs %s: no %s in it; make the cluster's certificate with: "
                       "zactor-run keygen DIR, and copy DIR to every host", dir,
                       ZA_CURVE_SECRET_FILE);
    else
    if (st.st_mode & 077)
        rc = za_error ("--certs %s: %s can be read by others (mode %04o); the cluster's "
                       "secret must be the owner's alone: chmod 600 %s", dir,
                       ZA_CURVE_SECRET_FILE, (unsigned) (st.st_mode & 07777), secret_path);
    else
    if (!(s_curve.cert = zcert_load (secret_path)))
        rc = za_error ("--certs %s: %s is not a certificate (zactor-run keygen writes one)",
                       dir, secret_path);
    if (!rc && (rc = s_read_allowed (dir)) == 0 && !s_allowed (zcert_public_key (s_curve.cert)))
        rc = za_error ("--certs %s: no %s beside %s; keygen writes both", dir,
                       ZA_CURVE_PUBLIC_FILE, ZA_CURVE_SECRET_FILE);
    if (!rc) {
        //  Without a ZAP handler libzmq lets in any client that knows the
        //  server's public key: no handler, no CURVE at all.
        static int status;
        status = -1;
        s_curve.handler = zactor_new (s_handler_actor, &status);
        if (!s_curve.handler || status) {
            zactor_destroy (&s_curve.handler);
            rc = za_error ("--certs: cannot start the ZAP handler (another one in this "
                           "process?)");
        }
        //  Stopped before CZMQ's own exit handler (registered earlier, with
        //  the first socket) closes what is left, its sockets among them.
        static int registered;
        if (!rc && !registered++)
            atexit (za_curve_stop);
    }
    if (rc)
        zcert_destroy (&s_curve.cert);
    else
        snprintf (s_curve.dir, sizeof s_curve.dir, "%s", dir);
    pthread_mutex_unlock (&s_lock);
    return rc;
}

int
za_curve_enabled (void)
{
    pthread_mutex_lock (&s_lock);
    int enabled = s_curve.cert != NULL;
    pthread_mutex_unlock (&s_lock);
    return enabled;
}

int
za_curve_server (zsock_t *sock)
{
    zsock_set_handshake_ivl (sock, (int) (ZA_CURVE_HANDSHAKE_SECS * 1000));
    pthread_mutex_lock (&s_lock);
    if (!s_curve.cert) {
        pthread_mutex_unlock (&s_lock);
        return 0;
    }
    zcert_apply (s_curve.cert, sock);
    zsock_set_curve_server (sock, 1);
    zsock_set_zap_domain (sock, ZAP_DOMAIN);
    char endpoint [64];
    snprintf (endpoint, sizeof endpoint, "inproc://za-curve-monitor-%d-%" PRIu64,
              (int) getpid (), s_curve.monitors++);
    int rc = zmq_socket_monitor (zsock_resolve (sock), endpoint,
                                 ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL
                                 | ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL
                                 | ZMQ_EVENT_MONITOR_STOPPED);
    if (rc == 0) {
        zstr_sendx (s_curve.handler, "WATCH", endpoint, NULL);
        if (zsock_wait (s_curve.handler) != 0) {
            //  Still refused, only not counted.
            zmq_socket_monitor (zsock_resolve (sock), NULL, 0);
            za_info ("curve: too many sockets to watch; refusals on this one are not "
                     "counted");
        }
    }
    pthread_mutex_unlock (&s_lock);
    return rc == 0? 0: za_error ("curve: cannot watch a socket: %s",
                                 zmq_strerror (zmq_errno ()));
}

void
za_curve_client (zsock_t *sock)
{
    pthread_mutex_lock (&s_lock);
    if (s_curve.cert) {
        zcert_apply (s_curve.cert, sock);
        zsock_set_curve_serverkey_bin (sock, zcert_public_key (s_curve.cert));
    }
    pthread_mutex_unlock (&s_lock);
}

uint64_t
za_curve_refused (void)
{
    return __atomic_load_n (&s_refused, __ATOMIC_RELAXED);
}

void
za_curve_stop (void)
{
    pthread_mutex_lock (&s_lock);
    zactor_destroy (&s_curve.handler);
    zcert_destroy (&s_curve.cert);
    s_curve.dir [0] = '\0';
    s_curve.allowed_count = 0;
    pthread_mutex_unlock (&s_lock);
}

int
za_curve_loopback (const char *endpoint)
{
    if (strncmp (endpoint, "inproc://", 9) == 0 || strncmp (endpoint, "ipc://", 6) == 0)
        return 1;
    if (strncmp (endpoint, "tcp://", 6))
        return 0;
    const char *host = endpoint + 6;
    return strncmp (host, "127.", 4) == 0 || strncmp (host, "localhost:", 10) == 0
        || strncmp (host, "[::1]:", 6) == 0;
}
