/*  za_curve.h: CURVE on every socket of a job, and the ZAP handler that
    refuses whoever lacks the cluster's certificate (docs/PROTOCOL.md 15).

    One key pair per cluster: `zactor-run keygen DIR` writes DIR/cluster.key
    (the public half) and DIR/cluster.key_secret, both readable by the owner
    alone. Every process of the job is given the same DIR (--certs): it is
    the server key of every socket that binds (broker, ps, ring) and the
    client key of every socket that connects (roles, zactor-top). A task may
    be restarted as any role on any host, so every process needs the same
    trust anyway; one directory to copy is the whole setup, and a new keygen
    revokes everyone at once. A client is let in when its public key is
    that of any *.key file in DIR (cluster.key; more may be copied in).

    CURVE is a property of the process, as its ZeroMQ context is: libzmq
    asks the one ZAP handler of the context about every handshake. So
    za_curve_use starts that handler once, before any socket binds, and
    za_curve_server / za_curve_client apply the certificate to a socket
    (they do nothing while CURVE is not in use).

    A refused peer is logged and counted once: a peer is what it offered
    (its address and key when the ZAP handler saw them; else the kind of
    handshake failure, since libzmq 4.3's monitor does not say which address
    failed on a bound socket), and a peer that keeps trying (a DEALER
    reconnects every 0.1 .. 30 s) stays the same peer until it has been
    quiet for ZA_CURVE_QUIET_SECS. At most ZA_CURVE_MAX_PEERS are kept in
    mind; the memory does not grow with the attempts.                     */
#ifndef ZA_CURVE_H_INCLUDED
#define ZA_CURVE_H_INCLUDED

#include <czmq.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define ZA_CURVE_PUBLIC_FILE "cluster.key"
#define ZA_CURVE_SECRET_FILE "cluster.key_secret"
#define ZA_CURVE_QUIET_SECS 60.0
#define ZA_CURVE_MAX_PEERS 64
#define ZA_CURVE_MAX_KEYS 256
#define ZA_CURVE_HANDSHAKE_SECS 5.0       //  public key files read from DIR

//  Writes a new cluster certificate into dir (made with mode 0700 when it
//  does not exist): cluster.key and cluster.key_secret, mode 0600. Refuses
//  (and writes nothing) when dir already holds one. Returns 0, or -1 with
//  an error.
int za_curve_keygen (const char *dir);

//  From now on this process uses CURVE with the certificate in dir: loads
//  dir/cluster.key_secret (refused when others may read it), reads the
//  public key of every *.key file in dir, and starts the ZAP handler. Calling it
//  again with the same dir does nothing. Returns 0, or -1 with an error
//  that says what to do.
int za_curve_use (const char *dir);

//  1 while this process uses CURVE.
int za_curve_enabled (void);

//  Every socket that binds goes through here before it binds. With CURVE it
//  becomes a CURVE server with the cluster's key, its handshakes judged by
//  the ZAP handler, whose failures it counts. With or without, a connection
//  that has not finished its handshake after ZA_CURVE_HANDSHAKE_SECS is
//  closed: a peer that connects and never speaks costs nothing lasting.
//  Returns 0, or -1 with an error.
int za_curve_server (zsock_t *sock);

//  Makes sock a CURVE client with the cluster's key, talking to a server
//  with the cluster's key. Call it before the socket connects. Does
//  nothing without CURVE.
void za_curve_client (zsock_t *sock);

//  Peers refused so far in this process (each counted once, as above).
uint64_t za_curve_refused (void);

//  Stops the ZAP handler and forgets the certificate (the end of a
//  process, or of a test; za_curve_use also registers it with atexit).
//  Sockets made CURVE before stay so.
void za_curve_stop (void);

//  1 when a bind endpoint reaches this machine only: inproc://, ipc://,
//  tcp:// on 127.x.x.x, localhost or [::1]. "tcp://*:PORT", 0.0.0.0 and
//  any other address reach the network.
int za_curve_loopback (const char *endpoint);

#ifdef __cplusplus
}
#endif

#endif
