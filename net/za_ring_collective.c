/*  za_ring_collective.c: the ring's collectives, the all-reduce (mean)
    and the broadcast, over one link's messages (za_ring_msg.c).

    Rank r, N ranks, the block cut into N segments. Reduce-scatter: at hop
    h (0..N-2) r sends segment (r - h) mod N and receives (r - h - 1) mod N,
    which it adds to its own; after hop N-2 it holds the whole sum of segment
    (r + 1) mod N and divides it by N. All-gather: at hop N-1+g r sends
    segment (r + 1 - g) mod N and receives (r - g) mod N, which it copies.
    What r receives at one hop is what it sends at the next, so each chunk
    is passed on the moment it is done: one schedule, 2(N-1) hops.      */
#include "za_ring_private.h"

//  Segment s of n floats over `size` ranks: [*begin, *begin + *count).
static void
s_segment (size_t n, int size, int s, size_t *begin, size_t *count)
{
    size_t each = (n + (size_t) size - 1) / (size_t) size;
    size_t from = each * (size_t) s;
    *begin = from < n? from: n;
    *count = from < n? (n - from < each? n - from: each): 0;
}

static int
s_mod (int a, int n)
{
    return ((a % n) + n) % n;
}

//  Sends data [0..len) of an all-reduce: as it is, or in bf16 from the
//  staging half `half` at `at`, where it stays until the call's end (each
//  position goes once a phase). Half 0, the reduce phase: data's cast goes
//  there now. Half 1, the gather: the bf16 is there already (the mean this
//  rank rounded, what the gather received) and goes as it is.
static int
s_send_chunk (za_ring_t *self, int64_t round, const float *data, size_t len, size_t n,
              int half, size_t at)
{
    if (self->config.wire_dtype != ZA_DTYPE_BF16)
        return za_ring_send (self, ZA_OP_RING, round, data, ZA_DTYPE_F32, len);
    uint16_t *low = self->low + (size_t) half * n + at;
    if (half == 0)
        za_f32_to_bf16 (data, low, len);
    return za_ring_send (self, ZA_OP_RING, round, low, ZA_DTYPE_BF16, len);
}

//  A small tensor: every rank's whole tensor goes round the ring (each rank
//  sends its own, then passes on what comes from the left, size - 1
//  messages in all), and every rank sums the size tensors in rank order:
//  the same bits everywhere (for 2 ranks the same sum as the segments' way,
//  a + b being b + a). In bf16 each tensor counts as its cast, the rank's
//  own too, and the mean is rounded as the segments' owners round theirs.
//  Returns 0, ZA_RING_RESYNC, or -1 with an error.
static int
s_allreduce_whole (za_ring_t *self, float *data, size_t n, int64_t round, za_dtype_t dtype)
{
    int rank = self->config.rank, size = self->config.size;
    size_t need = (size_t) size * n;
    if (need > self->whole_floats || (dtype == ZA_DTYPE_BF16 && need > self->low_halves)) {
        //  The last call's messages must be back before their buffers go.
        int drained = za_ring_busy (self)? za_ring_drain (self): 0;
        if (drained)
            return drained;
        float *whole = (float *) malloc (need * sizeof (float));
        uint16_t *low = dtype == ZA_DTYPE_BF16? (uint16_t *) malloc (need * sizeof (uint16_t))
                                               : NULL;
        if (!whole || (dtype == ZA_DTYPE_BF16 && !low)) {
            free (whole);
            free (low);
            return za_error ("ring: rank %d: out of memory for %zu floats", rank, need);
        }
        free (self->whole);
        self->whole = whole;
        self->whole_floats = need;
        if (low) {
            free (self->low);
            self->low = low;
            self->low_halves = need;
        }
    }
    //  Our own, sent from our copy (the caller's block gets the mean while
    //  libzmq may still hold the message).
    float *own = self->whole + (size_t) rank * n;
    if (dtype == ZA_DTYPE_BF16) {
        uint16_t *low = self->low + (size_t) rank * n;
        za_f32_to_bf16 (data, low, n);
        za_bf16_to_f32 (low, own, n);
        if (za_ring_send (self, ZA_OP_RING, round, low, ZA_DTYPE_BF16, n))
            return -1;
    }
    else {
        memcpy (own, data, n * sizeof (float));
        if (za_ring_send (self, ZA_OP_RING, round, own, ZA_DTYPE_F32, n))
            return -1;
    }
    for (int hop = 0; hop < size - 1; hop++) {
        int origin = s_mod (rank - hop - 1, size);
        int got = za_ring_receive (self, ZA_OP_RING, round, dtype, n);
        if (got)
            return got;
        //  Received frames are not always aligned: read them bytewise.
        const unsigned char *from = (const unsigned char *) self->in->tensors [0].data;
        float *to = self->whole + (size_t) origin * n;
        if (dtype == ZA_DTYPE_BF16) {
            uint16_t *low = self->low + (size_t) origin * n;
            memcpy (low, from, n * sizeof (uint16_t));
            za_bf16_to_f32 (low, to, n);
        }
        else
            memcpy (to, from, n * sizeof (float));
        za_ring_release (self);
        //  Passed on, but to the rank it came from.
        if (hop < size - 2
            && (dtype == ZA_DTYPE_BF16
                ? za_ring_send (self, ZA_OP_RING, round, self->low + (size_t) origin * n,
                                ZA_DTYPE_BF16, n)
                : za_ring_send (self, ZA_OP_RING, round, to, ZA_DTYPE_F32, n)))
            return -1;
    }
    for (size_t i = 0; i < n; i++) {
        float sum = self->whole [i];
        for (int r = 1; r < size; r++)
            sum += self->whole [(size_t) r * n + i];
        data [i] = sum / (float) size;
    }
    if (dtype == ZA_DTYPE_BF16)
        za_bf16_round (data, n);
    return za_ring_drain (self);
}

//  Room in self->low for a bf16 all-reduce of n floats (its two halves).
//  Returns 0, ZA_RING_RESYNC, or -1 with an error.
static int
s_low_reserve (za_ring_t *self, size_t n)
{
    if (2 * n > self->low_halves) {
        //  The last call's chunks must be back (one that failed may not have drained).
        int drained = za_ring_busy (self)? za_ring_drain (self): 0;
        if (drained)
            return drained;
        uint16_t *grown = (uint16_t *) malloc (2 * n * sizeof (uint16_t));
        if (!grown)
            return za_error ("ring: rank %d: out of memory for %zu bf16 values",
                             self->config.rank, 2 * n);
        free (self->low);
        self->low = grown;
        self->low_halves = 2 * n;
    }
    return 0;
}

static int
s_allreduce_mean (za_ring_t *self, float *data, size_t n, int64_t round)
{
    int rank = self->config.rank, size = self->config.size;
    if (size == 1)
        return 0;
    if (n > 0 && n * sizeof (float) <= RING_WHOLE_BYTES)
        return s_allreduce_whole (self, data, n, round,
                                  self->config.wire_dtype == ZA_DTYPE_BF16? ZA_DTYPE_BF16
                                                                          : ZA_DTYPE_F32);
    za_dtype_t dtype = self->config.wire_dtype == ZA_DTYPE_BF16? ZA_DTYPE_BF16: ZA_DTYPE_F32;
    int reserved = dtype == ZA_DTYPE_BF16? s_low_reserve (self, n): 0;
    if (reserved)
        return reserved;
    size_t chunk = self->chunk_floats, begin, count;
    //  Hop 0: this rank's own segment, every chunk of it.
    s_segment (n, size, rank, &begin, &count);
    for (size_t at = 0; at < count; at += chunk)
        if (s_send_chunk (self, round, data + begin + at,
                          count - at < chunk? count - at: chunk, n, 0, begin + at))
            return -1;
    int hops = 2 * (size - 1);
    for (int hop = 0; hop < hops; hop++) {
        int reduce = hop < size - 1;
        int segment = reduce? s_mod (rank - hop - 1, size): s_mod (rank - (hop - size + 1), size);
        s_segment (n, size, segment, &begin, &count);
        for (size_t at = 0; at < count; at += chunk) {
            size_t len = count - at < chunk? count - at: chunk;
            int got = za_ring_receive (self, ZA_OP_RING, round, dtype, len);
            if (got)
                return got;
            //  Received frames are not always aligned: read them bytewise.
            const unsigned char *from = (const unsigned char *) self->in->tensors [0].data;
            float *to = data + begin + at;
            if (reduce) {
                if (dtype == ZA_DTYPE_BF16)
                    for (size_t i = 0; i < len; i++)
                        to [i] += za_bf16_load (from + i * sizeof (uint16_t));
                else
                    for (size_t i = 0; i < len; i++) {
                        float v;
                        memcpy (&v, from + i * sizeof v, sizeof v);
                        to [i] += v;
                    }
                //  The last reduce hop completes this segment's sum: the mean,
                //  computed here once, is what every rank gets (in bf16, this
                //  rank rounds its own copy as the others will read it).
                if (hop == size - 2) {
                    for (size_t i = 0; i < len; i++)
                        to [i] /= (float) size;
                    if (dtype == ZA_DTYPE_BF16) {
                        uint16_t *low = self->low + n + begin + at;
                        za_f32_to_bf16 (to, low, len);
                        za_bf16_to_f32 (low, to, len);
                    }
                }
            }
            else
            if (dtype == ZA_DTYPE_BF16) {
                //  Kept as it came for the next rank (if any), and widened for us.
                const void *low = from;
                if (hop < hops - 1)
                    low = memcpy (self->low + n + begin + at, from, len * sizeof (uint16_t));
                za_bf16_to_f32 (low, to, len);
            }
            else
                memcpy (to, from, len * sizeof (float));
            za_ring_release (self);
            if (hop < hops - 1
                && s_send_chunk (self, round, to, len, n, hop >= size - 2, begin + at))
                return -1;
        }
    }
    return za_ring_drain (self);
}

static int
s_broadcast (za_ring_t *self, float *data, size_t n, int root, int64_t round)
{
    int rank = self->config.rank, size = self->config.size;
    if (size == 1)
        return 0;
    if (root < 0 || root >= size)
        return za_error ("ring: broadcast from rank %d of %d", root, size);
    size_t chunk = self->chunk_floats;
    int last = rank == s_mod (root - 1, size);      //  nobody to pass it on to
    for (size_t at = 0; at < n; at += chunk) {
        size_t len = n - at < chunk? n - at: chunk;
        if (rank != root) {
            int got = za_ring_receive (self, ZA_OP_BROADCAST, round, ZA_DTYPE_F32, len);
            if (got)
                return got;
            memcpy (data + at, self->in->tensors [0].data, len * sizeof (float));
            za_ring_release (self);
        }
        if (!last && za_ring_send (self, ZA_OP_BROADCAST, round, data + at, ZA_DTYPE_F32, len))
            return -1;
    }
    return za_ring_drain (self);
}

//  A call that did not end well leaves no record pointing into the
//  caller's block (who may free it): they were of this call only.
static int
s_ended (za_ring_t *self, int rc)
{
    if (rc) {
        self->pending_count = 0;
        if (self->out_tcp && za_tcp_pipe_busy (self->out_tcp))
            za_ring_tcp_lost (self, "a call ended with a chunk partly sent");
    }
    return rc;
}

int
za_ring_allreduce_mean (za_ring_t *self, float *data, size_t n, int64_t round)
{
    return s_ended (self, s_allreduce_mean (self, data, n, round));
}

int
za_ring_allreduce_mean_f32 (za_ring_t *self, float *data, size_t n, int64_t round)
{
    if (self->config.size == 1 || n == 0)
        return 0;
    if (n * sizeof (float) > RING_WHOLE_BYTES)
        return za_error ("ring: %zu floats to all-reduce in f32 (at most %zu)", n,
                         RING_WHOLE_BYTES / sizeof (float));
    return s_ended (self, s_allreduce_whole (self, data, n, round, ZA_DTYPE_F32));
}

int
za_ring_broadcast (za_ring_t *self, float *data, size_t n, int root, int64_t round)
{
    return s_ended (self, s_broadcast (self, data, n, root, round));
}
