/*  za_peer.h: a peer's liveness as heartbeats judge it (docs/PROTOCOL.md
    7.4): any message from the peer counts as one; a ping goes out every
    interval while we wait for it; silent for interval x liveness it is
    stopped, hung or gone, and that is news once, until it is heard again.
    The worker (its ps), the ps (the holder of a hold), the broker (its
    tasks), the broker client (its broker) and the --local launcher (its
    broker) all judge their peers with this one class. A plain value: no
    allocation, no clock of its own (callers pass za_clock_mono ()).      */
#ifndef ZA_PEER_H_INCLUDED
#define ZA_PEER_H_INCLUDED

#ifdef __cplusplus
extern "C" {
#endif

//  The heartbeat every class judges its peers by. The defaults are the
//  option table's (--heartbeat-ivl-ms, --heartbeat-liveness), written here
//  once for the classes that are used without the table.
#define ZA_HEARTBEAT_IVL_MS 1000
#define ZA_HEARTBEAT_LIVENESS 3
typedef struct {
    double ivl_secs;                //  a ping every interval while we wait
    int liveness;                   //  silent after this many intervals
} za_heartbeat_t;

//  ZA_HEARTBEAT_IVL_MS and ZA_HEARTBEAT_LIVENESS.
za_heartbeat_t za_heartbeat_default (void);

//  ZMTP's own heartbeats on a socket (a zsock_t): a PING every interval,
//  the connection closed after interval x liveness without a word, so a
//  peer whose machine vanished without closing it is found. Nothing with
//  an interval of 0. The one place a beat becomes libzmq's milliseconds.
void za_heartbeat_zmtp (void *sock, za_heartbeat_t beat);

typedef struct {
    za_heartbeat_t beat;
    double last_heard;              //  the last sign of life (or when we began to wait)
    double next_ping;
    int heard;                      //  1 once anything came from it
    int silent;                     //  its silence was told, until it is heard again
} za_peer_t;

//  A peer judged by `beat` (interval x liveness), waited for from `now`.
void za_peer_init (za_peer_t *self, za_heartbeat_t beat, double now);

//  We start waiting for the peer at `now` (a worker does not listen between
//  two requests): its silence counts from here, the next ping is due in one
//  interval. What was told of it stays told.
void za_peer_expect (za_peer_t *self, double now);

//  Something came from the peer at `now`. Returns 1 when its silence had
//  been told (it is back: say so), else 0.
int za_peer_heard (za_peer_t *self, double now);

//  1 when a ping is due at `now` (an interval after the last one, or after
//  we began to wait); the next is then due an interval later.
int za_peer_ping_due (za_peer_t *self, double now);

//  Seconds since the peer was last heard (or since we began to wait).
double za_peer_silence (const za_peer_t *self, double now);

//  interval x liveness: the silence after which the peer is lost.
double za_peer_silent_max (const za_peer_t *self);

//  1 when the peer has been silent longer than interval x liveness.
int za_peer_expired (const za_peer_t *self, double now);

//  1 once per silence: the peer expired and that was not told yet (it is
//  now). A caller that only cares for peers it has heard from checks heard.
int za_peer_went_silent (za_peer_t *self, double now);

//  Seconds until the next ping or expiry is due (0 when one is), for poll
//  timeouts.
double za_peer_next_due (const za_peer_t *self, double now);

//  Moves the peer's clocks by `secs`: our own pause (SIGSTOP, starvation)
//  is no silence of the peer, which gets a fresh window.
void za_peer_postpone (za_peer_t *self, double secs);

#ifdef __cplusplus
}
#endif
#endif
