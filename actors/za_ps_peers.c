/*  za_ps_peers.c: the connections a parameter server keeps in mind (the
    silent ones forgotten), and the same-host links through which its
    peers' tensors come in shared memory.  */
#include "za_ps_private.h"

//  Connections silent longer than a task may be (timeout_secs) are
//  forgotten: a task that comes back after that is a new one anyway.
static void
s_forget_silent (za_ps_t *self, double now)
{
    zlist_t *silent = zlist_new ();
    for (double *last = (double *) zhashx_first (self->peers); last && silent;
         last = (double *) zhashx_next (self->peers))
        if (now - *last > self->config->timeout_secs)
            zlist_append (silent, (void *) zhashx_cursor (self->peers));
    for (const char *key = silent? (const char *) zlist_first (silent): NULL; key;
         key = (const char *) zlist_next (silent)) {
        zhashx_delete (self->links, key);       //  before its key goes with the peer
        zhashx_delete (self->peers, key);
    }
    zlist_destroy (&silent);
}

//  Remembers that connection `peer` spoke now (unless `remember` is 0, or
//  PS_MAX_PEERS that are not silent are known). Returns 1 when it had spoken
//  before.
int
za_ps_peer_heard (za_ps_t *self, const char *peer, int remember)
{
    double now = za_clock_mono ();
    double *last = (double *) zhashx_lookup (self->peers, peer);
    if (last) {
        *last = now;
        return 1;
    }
    if (remember && zhashx_size (self->peers) >= PS_MAX_PEERS)
        s_forget_silent (self, now);
    if (remember && zhashx_size (self->peers) < PS_MAX_PEERS
        && (last = (double *) malloc (sizeof *last))) {
        *last = now;
        zhashx_insert (self->peers, peer, last);
    }
    return 0;
}

//  The peer's routing id as a key for self->peers.
void
za_ps_peer_key (zframe_t *routing_id, char *key, size_t size)
{
    static const char digits [] = "0123456789abcdef";
    const byte *id = zframe_data (routing_id);
    size_t n = zframe_size (routing_id);
    if (n > (size - 1) / 2)
        n = (size - 1) / 2;
    for (size_t i = 0; i < n; i++) {
        key [2 * i] = digits [id [i] >> 4];
        key [2 * i + 1] = digits [id [i] & 15];
    }
    key [2 * n] = 0;
}

//  The link of connection `peer`: known, or made when msg carries a word
//  (a peer on this host offers its segment) and fewer than PS_MAX_LINKS
//  are known. NULL: its tensors come as frames.
za_shm_link_t *
za_ps_link_of (za_ps_t *self, zframe_t *routing_id, const char *peer, zmsg_t *msg)
{
    za_shm_link_t *link = (za_shm_link_t *) zhashx_lookup (self->links, peer);
    char word [ZA_WIRE_MAX_SHM_BYTES + 1];
    if (link || !self->shm || zhashx_size (self->links) >= PS_MAX_LINKS
        || za_wire_peek_shm (msg, word, sizeof word, NULL) <= 0)
        return link;
    link = za_shm_link_new (0, 0);
    if (link) {
        za_shm_link_set_bell (link, self->bell);
        za_shm_link_set_route (link, routing_id);
    }
    if (link && zhashx_insert (self->links, peer, link))
        za_shm_link_destroy (&link);
    return link;
}

//  A link's peer said which task it is: a link of that task on another
//  connection is of an earlier life of it (restarted), and goes.
void
za_ps_link_task (za_ps_t *self, const char *peer, za_shm_link_t *link, int task)
{
    za_shm_link_set_task (link, task);
    zlist_t *gone = zlist_new ();
    for (za_shm_link_t *other = (za_shm_link_t *) zhashx_first (self->links); other && gone;
         other = (za_shm_link_t *) zhashx_next (self->links))
        if (other != link && task >= 0 && za_shm_link_task (other) == task)
            zlist_append (gone, (void *) zhashx_cursor (self->links));
    for (const char *key = gone? (const char *) zlist_first (gone): NULL; key;
         key = (const char *) zlist_next (gone))
        if (strcmp (key, peer))
            zhashx_delete (self->links, key);
    zlist_destroy (&gone);
}
