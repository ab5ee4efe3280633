/*  za_peer.c: one peer's heartbeat clock: heard, ping due, silent, back.    */
#include "za/za_peer.h"

#include <czmq.h>

za_heartbeat_t
za_heartbeat_default (void)
{
    za_heartbeat_t beat = {ZA_HEARTBEAT_IVL_MS / 1000.0, ZA_HEARTBEAT_LIVENESS};
    return beat;
}

void
za_heartbeat_zmtp (void *sock, za_heartbeat_t beat)
{
    int ivl_ms = (int) (beat.ivl_secs * 1000);
    if (ivl_ms > 0) {
        zsock_set_heartbeat_ivl (sock, ivl_ms);
        zsock_set_heartbeat_timeout (sock, ivl_ms * beat.liveness);
    }
}

void
za_peer_init (za_peer_t *self, za_heartbeat_t beat, double now)
{
    self->beat = beat;
    self->heard = 0;
    self->silent = 0;
    za_peer_expect (self, now);
}

void
za_peer_expect (za_peer_t *self, double now)
{
    self->last_heard = now;
    self->next_ping = now + self->beat.ivl_secs;
}

int
za_peer_heard (za_peer_t *self, double now)
{
    int back = self->silent;
    self->last_heard = now;
    self->heard = 1;
    self->silent = 0;
    return back;
}

int
za_peer_ping_due (za_peer_t *self, double now)
{
    if (self->beat.ivl_secs <= 0 || now < self->next_ping)
        return 0;
    self->next_ping = now + self->beat.ivl_secs;
    return 1;
}

double
za_peer_silence (const za_peer_t *self, double now)
{
    return now - self->last_heard;
}

double
za_peer_silent_max (const za_peer_t *self)
{
    return self->beat.ivl_secs * self->beat.liveness;
}

int
za_peer_expired (const za_peer_t *self, double now)
{
    return self->beat.ivl_secs > 0 && now - self->last_heard > za_peer_silent_max (self);
}

int
za_peer_went_silent (za_peer_t *self, double now)
{
    if (self->silent || !za_peer_expired (self, now))
        return 0;
    self->silent = 1;
    return 1;
}

double
za_peer_next_due (const za_peer_t *self, double now)
{
    if (self->beat.ivl_secs <= 0)
        return 1e9;
    double ping = self->next_ping - now;
    double expiry = self->last_heard + za_peer_silent_max (self) - now;
    double next = self->silent || expiry < 0? ping: ping < expiry? ping: expiry;
    return next > 0? next: 0;
}

void
za_peer_postpone (za_peer_t *self, double secs)
{
    self->last_heard += secs;
    self->next_ping += secs;
}
