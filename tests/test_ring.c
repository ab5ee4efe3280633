/*  test_ring.c: the all-reduce ring (za_ring.h), ranks as threads of one
    process over inproc, tcp and shared memory, and as processes: the mean
    is right and the same bits on every rank, whatever the size, the
    chunking and the path; a broadcast copies; what is not the message
    expected is dropped and counted; a silent neighbour is an error after
    the timeout, not a hang; a rank killed mid-transfer rejoins and leaves
    no segment behind.                                                    */
#include <criterion/criterion.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "za/za_ring.h"
#include "za/za_util.h"
#include "za/za_wire.h"
#include "za_test.h"

#define MAX_RANKS 5

typedef struct {
    za_ring_t *ring;
    float *data;
    size_t n;
    int rc;
    int broadcast_root;             //  >= 0: broadcast instead of all-reduce
    int f32;                        //  za_ring_allreduce_mean_f32
    int rounds;
    char error [256];
} s_rank_t;

static void *
s_rank_run (void *arg)
{
    s_rank_t *rank = (s_rank_t *) arg;
    rank->rc = 0;
    for (int r = 0; r < rank->rounds && rank->rc == 0; r++)
        rank->rc = rank->broadcast_root >= 0
                 ? za_ring_broadcast (rank->ring, rank->data, rank->n, rank->broadcast_root, r)
                 : rank->f32? za_ring_allreduce_mean_f32 (rank->ring, rank->data, rank->n, r + 1)
                 : za_ring_allreduce_mean (rank->ring, rank->data, rank->n, r + 1);
    if (rank->rc)
        snprintf (rank->error, sizeof rank->error, "%s", za_last_error ());
    return NULL;
}

typedef struct {
    int size;
    char endpoints [MAX_RANKS][64];
    s_rank_t ranks [MAX_RANKS];
} s_ring_case_t;

//  The chunks' dtype of the rings s_make makes (a test sets it first), and
//  whether a neighbour on this host may be reached through shared memory.
static za_dtype_t s_wire_dtype = ZA_DTYPE_F32;
static int s_no_shm;

//  With s_note_waits set when s_make makes them, its rings set s_waited
//  once a call of theirs waits (config.cancelled, which never cancels).
static int s_note_waits;
static atomic_int s_waited;

static int
s_note_wait (void *arg)
{
    (void) arg;
    atomic_store (&s_waited, 1);
    return 0;
}

//  `size` rings on endpoints PREFIX-0.. (inproc) or free tcp ports (tcp 1:
//  the ring's choice, ipc, for these loopback neighbours; 2: tcp only; 3:
//  tcp only from the odd ranks, as two hosts of two ranks each would be).
static void
s_make (s_ring_case_t *c, int size, int tcp, size_t chunk_floats, double timeout_secs)
{
    static int made;
    memset (c, 0, sizeof *c);
    c->size = size;
    for (int r = 0; r < size; r++) {
        if (tcp)
            snprintf (c->endpoints [r], sizeof c->endpoints [r], "tcp://127.0.0.1:%d",
                      za_test_free_port ());
        else
            snprintf (c->endpoints [r], sizeof c->endpoints [r], "inproc://ring-%d-%d", made,
                      r);
    }
    made++;
    for (int r = 0; r < size; r++) {
        za_ring_config_t config = {
            .rank = r, .size = size, .bind = c->endpoints [r],
            .right = c->endpoints [(r + 1) % size], .chunk_floats = chunk_floats,
            .timeout_secs = timeout_secs, .wire_dtype = s_wire_dtype,
            .tcp_only = tcp == 2 || (tcp == 3 && r % 2 == 1),
            .no_shm = s_no_shm, .cancelled = s_note_waits? s_note_wait: NULL,
        };
        c->ranks [r].ring = za_ring_new (&config);
        cr_assert_not_null (c->ranks [r].ring, "%s", za_last_error ());
        c->ranks [r].broadcast_root = -1;
        c->ranks [r].rounds = 1;
    }
}

static void
s_run_all (s_ring_case_t *c)
{
    pthread_t threads [MAX_RANKS];
    for (int r = 0; r < c->size; r++)
        pthread_create (&threads [r], NULL, s_rank_run, &c->ranks [r]);
    for (int r = 0; r < c->size; r++)
        pthread_join (threads [r], NULL);
}

//  Highest rank first: over inproc a rank's unread chunks are lent from its
//  left neighbour, who can only let go once they are dropped.
static void
s_destroy (s_ring_case_t *c)
{
    for (int r = c->size - 1; r >= 0; r--) {
        za_ring_destroy (&c->ranks [r].ring);
        free (c->ranks [r].data);
    }
}

//  Rank r's value i: different on every rank, not exactly representable sums.
static float
s_value (int r, size_t i)
{
    return (float) sin ((double) (i * 7 + (size_t) r * 13 + 1)) * (float) (r + 1) * 0.37f;
}

//  All-reduces n floats over `size` ranks (chunks of s_wire_dtype); checks
//  every rank holds the same bits, each close to the mean: within 1e-5 in
//  f32; in bf16 each a bf16 value (the owner of a segment rounds its mean as
//  the others read it), off by at most 2^-9 of what each of the (size - 1)
//  partial sums sent and the mean itself sum.
static void
s_check_mean (int size, size_t n, size_t chunk, int tcp)
{
    s_ring_case_t c;
    s_make (&c, size, tcp, chunk, 10);
    for (int r = 0; r < size; r++) {
        c.ranks [r].n = n;
        c.ranks [r].data = malloc ((n + 1) * sizeof (float));
        for (size_t i = 0; i < n; i++)
            c.ranks [r].data [i] = s_value (r, i);
    }
    s_run_all (&c);
    for (int r = 0; r < size; r++)
        cr_assert_eq (c.ranks [r].rc, 0, "rank %d: %s", r, c.ranks [r].error);
    for (size_t i = 0; i < n; i++) {
        double mean = 0, magnitude = 0;
        for (int r = 0; r < size; r++)
            mean += s_value (r, i), magnitude += fabs (s_value (r, i));
        mean /= size;
        float got = c.ranks [0].data [i];
        double tolerance = 1e-5;
        if (s_wire_dtype == ZA_DTYPE_BF16) {
            uint32_t bits;
            memcpy (&bits, &got, sizeof bits);
            cr_assert_eq (bits & 0xffff, 0, "size %d, n %zu: [%zu] = %.9g is no bf16 value",
                          size, n, i, (double) got);
            tolerance = size * 0x1p-9 * magnitude + 1e-7;
        }
        cr_assert_leq (fabs (got - mean), tolerance, "n %zu, size %d: [%zu] %g != %g", n, size,
                       i, (double) got, mean);
        for (int r = 1; r < size; r++)
            cr_assert (memcmp (&c.ranks [r].data [i], &c.ranks [0].data [i], sizeof (float))
                       == 0, "n %zu, size %d: rank %d's [%zu] differs from rank 0's", n, size,
                       r, i);
    }
    for (int r = 0; r < size; r++)
        cr_expect_eq (za_ring_dropped (c.ranks [r].ring), 0);
    s_destroy (&c);
}

Test (ring, the_mean_is_the_same_bits_on_every_rank_whatever_the_split)
{
    //  Sizes around the segment and chunk edges, fewer floats than ranks, none.
    const size_t sizes [] = {0, 1, 2, 3, 7, 64, 100, 1000, 4097};
    for (int size = 1; size <= 4; size++)
        for (size_t s = 0; s < sizeof sizes / sizeof sizes [0]; s++)
            s_check_mean (size, sizes [s], 16, 0);
    s_check_mean (5, 91350, 0, 0);          //  the seed CNN's gradient block size
}

Test (ring, the_same_inputs_give_the_same_bits_every_run)
{
    float first [3][1000];
    for (int run = 0; run < 2; run++) {
        s_ring_case_t c;
        s_make (&c, 3, 0, 64, 10);
        for (int r = 0; r < 3; r++) {
            c.ranks [r].n = 1000;
            c.ranks [r].data = malloc (1000 * sizeof (float));
            for (size_t i = 0; i < 1000; i++)
                c.ranks [r].data [i] = s_value (r, i);
        }
        s_run_all (&c);
        for (int r = 0; r < 3; r++) {
            cr_assert_eq (c.ranks [r].rc, 0);
            if (run == 0)
                memcpy (first [r], c.ranks [r].data, sizeof first [r]);
            else
                cr_expect (memcmp (first [r], c.ranks [r].data, sizeof first [r]) == 0);
        }
        s_destroy (&c);
    }
}

//  A loopback neighbour is reached over ipc://@zactor-ring-PORT (the ring
//  binds that beside its tcp port) unless tcp_only; both carry the rounds.
Test (ring, over_ipc_and_tcp_many_rounds)
{
    for (int tcp = 1; tcp <= 2; tcp++) {
        s_ring_case_t c;
        s_make (&c, 2, tcp, 1000, 10);
        for (int r = 0; r < 2; r++) {
            const char *right = c.endpoints [(r + 1) % 2];
            char alias [64];
            snprintf (alias, sizeof alias, "ipc://@zactor-ring-%s", strrchr (right, ':') + 1);
            cr_expect_str_eq (za_ring_right_endpoint (c.ranks [r].ring), tcp == 1? alias: right);
            c.ranks [r].n = 91350;
            c.ranks [r].rounds = 20;
            c.ranks [r].data = malloc (91350 * sizeof (float));
            for (size_t i = 0; i < 91350; i++)
                c.ranks [r].data [i] = (float) r;
        }
        s_run_all (&c);
        for (int r = 0; r < 2; r++) {
            cr_assert_eq (c.ranks [r].rc, 0, "%s", c.ranks [r].error);
            //  The mean of 0 and 1, then of 0.5 and 0.5, ...
            cr_expect_eq (c.ranks [r].data [91349], 0.5f);
        }
        s_destroy (&c);
    }
}

//  Only loopback names mean this host: anything else stays tcp.
Test (ring, only_a_loopback_neighbour_is_reached_over_ipc)
{
    struct {
        const char *right, *sends_to;
    } cases [] = {
        {"tcp://localhost:5601", "ipc://@zactor-ring-5601"},
        {"tcp://127.0.0.2:5602", "ipc://@zactor-ring-5602"},
        {"tcp://[::1]:5603", "ipc://@zactor-ring-5603"},
        {"tcp://192.0.2.1:5604", "tcp://192.0.2.1:5604"},
        {"tcp://10.127.0.1:5605", "tcp://10.127.0.1:5605"},
        {"ipc:///tmp/za-ring-test", "ipc:///tmp/za-ring-test"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases [0]; k++) {
        char bind [64];
        snprintf (bind, sizeof bind, "inproc://ring-names-%zu", k);
        za_ring_config_t config = {.rank = 0, .size = 2, .bind = bind,
                                   .right = cases [k].right, .timeout_secs = 1};
        za_ring_t *ring = za_ring_new (&config);
        cr_assert_not_null (ring, "%s: %s", cases [k].right, za_last_error ());
        cr_expect_str_eq (za_ring_right_endpoint (ring), cases [k].sends_to);
        za_ring_destroy (&ring);
    }
}

Test (ring, a_broadcast_copies_the_roots_bits)
{
    s_ring_case_t c;
    s_make (&c, 4, 0, 7, 10);
    for (int r = 0; r < 4; r++) {
        c.ranks [r].n = 50;
        c.ranks [r].broadcast_root = 2;
        c.ranks [r].data = malloc (50 * sizeof (float));
        for (size_t i = 0; i < 50; i++)
            c.ranks [r].data [i] = s_value (r, i);
    }
    //  Bits, not values: a NaN with a payload arrives as it left.
    uint32_t nan_bits = 0x7fc01234u;
    memcpy (&c.ranks [2].data [3], &nan_bits, sizeof nan_bits);
    s_run_all (&c);
    for (int r = 0; r < 4; r++) {
        cr_assert_eq (c.ranks [r].rc, 0, "%s", c.ranks [r].error);
        cr_expect (memcmp (c.ranks [r].data, c.ranks [2].data, 50 * sizeof (float)) == 0,
                   "rank %d", r);
    }
    s_destroy (&c);
}

//  Sends one raw message of `frames` to endpoint.
static void
s_send_raw (const char *endpoint, const za_wire_msg_t *msg, const char *garbage)
{
    zsock_t *sock = zsock_new (ZMQ_DEALER);
    cr_assert_eq (zsock_connect (sock, "%s", endpoint), 0);
    if (garbage)
        zstr_send (sock, garbage);
    else {
        za_wire_lease_t lease;
        za_wire_lease_init (&lease);
        cr_assert_eq (za_wire_send (sock, NULL, msg, &lease), 0, "%s", za_last_error ());
        za_wire_lease_wait (&lease);
    }
    zclock_sleep (50);                  //  on its way before the socket goes
    zsock_destroy (&sock);
}

//  Two ranks all-reduce 150 floats, 0 on rank 0 and 2 on rank 1: each
//  must end with 1.0 everywhere (exact in f32 and bf16).
static void
s_run_zeros_and_twos (s_ring_case_t *c)
{
    for (int r = 0; r < 2; r++) {
        c->ranks [r].n = 150;
        c->ranks [r].data = malloc (150 * sizeof (float));
        for (size_t i = 0; i < 150; i++)
            c->ranks [r].data [i] = (float) (r * 2);
    }
    s_run_all (c);
    for (int r = 0; r < 2; r++) {
        cr_assert_eq (c->ranks [r].rc, 0, "%s", c->ranks [r].error);
        for (size_t i = 0; i < 150; i++)
            cr_assert_eq (c->ranks [r].data [i], 1.0f);
    }
}

Test (ring, garbage_and_messages_out_of_turn_are_dropped_and_counted)
{
    s_ring_case_t c;
    s_make (&c, 2, 1, 100, 10);
    //  Before the round: garbage, a chunk from the wrong rank, one of another
    //  round, one of the wrong size, one out of turn.
    za_wire_msg_t *msg = malloc (sizeof *msg);
    float chunk [100] = {0};
    int64_t shape [1] = {100}, short_shape [1] = {3};
    s_send_raw (c.endpoints [1], NULL, "not a wire message");
    struct {
        int task;
        int64_t step;
        uint64_t seq;
        const int64_t *shape;
    } bad [] = {{1, 1, 0, shape}, {0, 9, 0, shape}, {0, 1, 0, short_shape}, {0, 1, 5, shape}};
    for (size_t b = 0; b < sizeof bad / sizeof bad [0]; b++) {
        za_wire_msg_init (msg, ZA_OP_RING);
        msg->task = bad [b].task;
        msg->step = bad [b].step;
        msg->seq = bad [b].seq;
        za_wire_msg_add (msg, "chunk", ZA_DTYPE_F32, 1, bad [b].shape, chunk);
        s_send_raw (c.endpoints [1], msg, NULL);
    }
    free (msg);
    //  The ROUTER takes turns between the stranger's connection and rank 0's:
    //  each receive of rank 1 may read one of the five first, so six rounds
    //  (each a receive at least) read them all, whatever the timing.
    for (int r = 0; r < 2; r++)
        c.ranks [r].rounds = 6;
    s_run_zeros_and_twos (&c);
    cr_expect_eq (za_ring_dropped (c.ranks [1].ring), 5);
    cr_expect_eq (za_ring_dropped (c.ranks [0].ring), 0);
    s_destroy (&c);
}

//  --wire-dtype bf16: chunks travel as bf16, sums are made in fp32, and
//  every rank ends with the same bits (s_check_mean says how close).
Test (ring, bf16_chunks_sum_in_fp32_and_every_rank_ends_with_the_same_bits)
{
    s_wire_dtype = ZA_DTYPE_BF16;
    const size_t sizes [] = {1, 7, 100, 1000, 4097};
    for (int size = 2; size <= 4; size++)
        for (size_t k = 0; k < sizeof sizes / sizeof sizes [0]; k++)
            s_check_mean (size, sizes [k], k % 2? 16: 0, 0);
    //  Past 64 KiB the segments' way: the gather passes on the bf16 it got.
    for (int size = 2; size <= 4; size++)
        s_check_mean (size, 20001 + (size_t) size, size == 3? 3000: 0, 0);
}

//  The all-reduce's counts and flags (the members' change each rank knows,
//  at its own place) go in f32 on a bf16 ring: 259 over two ranks is 129.5,
//  which bf16 made 130 (the ranks then waited for a change 260 that never
//  came).
Test (ring, counts_go_in_f32_on_a_bf16_ring)
{
    s_wire_dtype = ZA_DTYPE_BF16;
    s_ring_case_t c;
    s_make (&c, 2, 0, 0, 10);
    for (int r = 0; r < 2; r++) {
        c.ranks [r].n = 2;
        c.ranks [r].f32 = 1;
        c.ranks [r].data = calloc (3, sizeof (float));
        c.ranks [r].data [r] = r? 1.0f: 259.0f;
    }
    s_run_all (&c);
    for (int r = 0; r < 2; r++) {
        cr_assert_eq (c.ranks [r].rc, 0, "rank %d: %s", r, c.ranks [r].error);
        long count = lrintf (c.ranks [r].data [0] * 2.0f);
        cr_expect_eq (count, 259, "rank %d: %ld", r, count);
        cr_expect_eq (lrintf (c.ranks [r].data [1] * 2.0f), 1);
    }
    s_destroy (&c);
}

//  A chunk in f32 to a bf16 ring (a rank that runs another --wire-dtype)
//  is dropped and counted, as any chunk that is not the one expected.
Test (ring, an_f32_chunk_to_a_bf16_ring_is_dropped)
{
    s_wire_dtype = ZA_DTYPE_BF16;
    s_ring_case_t c;
    s_make (&c, 2, 1, 100, 10);
    za_wire_msg_t *msg = malloc (sizeof *msg);
    float chunk [75] = {0};
    int64_t shape [1] = {75};
    za_wire_msg_init (msg, ZA_OP_RING);
    msg->task = 0;
    msg->step = 1;
    msg->seq = 0;
    za_wire_msg_add (msg, "chunk", ZA_DTYPE_F32, 1, shape, chunk);
    s_send_raw (c.endpoints [1], msg, NULL);
    free (msg);
    s_run_zeros_and_twos (&c);
    cr_expect_eq (za_ring_dropped (c.ranks [1].ring), 1);
    s_destroy (&c);
}

Test (ring, a_silent_neighbour_is_an_error_after_the_timeout)
{
    s_ring_case_t c;
    s_make (&c, 2, 0, 0, 0.3);
    c.ranks [0].n = 10;
    c.ranks [0].data = calloc (10, sizeof (float));
    double start = za_clock_mono ();
    s_rank_run (&c.ranks [0]);              //  rank 1 never calls
    double waited = za_clock_mono () - start;
    cr_expect_eq (c.ranks [0].rc, -1);
    cr_expect (strstr (c.ranks [0].error, "heard nothing from rank 1"), "%s",
               c.ranks [0].error);
    cr_expect (waited >= 0.3 && waited < 3, "waited %.2f s", waited);
    s_destroy (&c);
}

Test (ring, bad_configs_are_refused)
{
    za_ring_config_t config = {.rank = 2, .size = 2, .bind = "inproc://x", .right = "inproc://y"};
    cr_expect_null (za_ring_new (&config));
    config.rank = 0;
    config.size = ZA_RING_MAX_RANKS + 1;
    cr_expect_null (za_ring_new (&config));
    config.size = 2;
    config.bind = "tcp://300.1.1.1:1";
    cr_expect_null (za_ring_new (&config));
}

static void *
s_resync_run (void *arg)
{
    za_ring_resync ((za_ring_t *) arg);
    return NULL;
}

//  The survivor of a restart: a step that the restart ends, then the new
//  generation's broadcast and a step.
typedef struct {
    za_ring_t *ring;
    float data [64];
    int rcs [4];
    int64_t gen;
} s_survivor_t;

static void *
s_survivor_run (void *arg)
{
    s_survivor_t *self = (s_survivor_t *) arg;
    self->rcs [0] = za_ring_allreduce_mean (self->ring, self->data, 64, 2);
    self->rcs [1] = za_ring_resync (self->ring);
    self->rcs [2] = za_ring_broadcast (self->ring, self->data, 64, 0, 0);
    self->rcs [3] = za_ring_allreduce_mean (self->ring, self->data, 64, 2);
    self->gen = za_ring_generation (self->ring);
    return NULL;
}

Test (ring, a_restarted_member_asks_and_the_ring_reforms_with_the_roots_state)
{
    s_ring_case_t c;
    s_make (&c, 2, 1, 16, 10);
    //  Generation one: both agree, one step.
    pthread_t thread;
    for (int r = 0; r < 2; r++) {
        c.ranks [r].n = 64;
        c.ranks [r].data = malloc (64 * sizeof (float));
        for (int i = 0; i < 64; i++)
            c.ranks [r].data [i] = (float) (r + 1);
    }
    s_rank_t *rank1 = &c.ranks [1];
    pthread_create (&thread, NULL, s_resync_run, rank1->ring);
    cr_assert_eq (za_ring_resync (c.ranks [0].ring), 0);
    pthread_join (thread, NULL);
    int64_t first = za_ring_generation (c.ranks [0].ring);
    cr_assert_gt (first, 0);
    cr_assert_eq (za_ring_generation (rank1->ring), first);
    s_run_all (&c);
    cr_assert_eq (c.ranks [0].rc, 0, "%s", c.ranks [0].error);
    cr_assert_eq (c.ranks [0].data [5], 1.5f);
    //  Rank 1 dies and comes back at the same endpoint, with nothing.
    za_ring_destroy (&rank1->ring);
    s_survivor_t survivor = {.ring = c.ranks [0].ring};
    for (int i = 0; i < 64; i++)
        survivor.data [i] = 7.0f;
    pthread_create (&thread, NULL, s_survivor_run, &survivor);
    zclock_sleep (100);                 //  the survivor waits in its step
    za_ring_config_t config = {
        .rank = 1, .size = 2, .bind = c.endpoints [1], .right = c.endpoints [0],
        .chunk_floats = 16, .timeout_secs = 10,
    };
    rank1->ring = za_ring_new (&config);
    cr_assert_not_null (rank1->ring);
    float fresh [64] = {0};
    cr_assert_eq (za_ring_ask_resync (rank1->ring), 0);
    cr_assert_eq (za_ring_resync (rank1->ring), 0, "%s", za_last_error ());
    cr_assert_eq (za_ring_broadcast (rank1->ring, fresh, 64, 0, 0), 0, "%s", za_last_error ());
    //  It has the survivor's values, not a rewind; then they step together.
    cr_expect_eq (fresh [10], 7.0f);
    cr_assert_eq (za_ring_allreduce_mean (rank1->ring, fresh, 64, 2), 0);
    pthread_join (thread, NULL);
    cr_expect_eq (survivor.rcs [0], ZA_RING_RESYNC, "the step in progress was not ended");
    cr_expect_eq (survivor.rcs [1], 0);
    cr_expect_eq (survivor.rcs [2], 0);
    cr_expect_eq (survivor.rcs [3], 0);
    cr_expect_gt (survivor.gen, first);
    cr_expect_eq (za_ring_generation (rank1->ring), survivor.gen);
    cr_expect (memcmp (fresh, survivor.data, sizeof fresh) == 0);
    s_destroy (&c);
}

//  Runs rounds of 1000 floats until every link of the case is on shared
//  memory (at most 100 times 20 rounds): a few messages after the start.
static int
s_until_shared (s_ring_case_t *c)
{
    int links = 0;
    for (int r = 0; r < c->size; r++) {
        c->ranks [r].n = 1000;
        c->ranks [r].rounds = 20;
    }
    for (int tries = 0; tries < 100 && links < 2 * c->size; tries++) {
        s_run_all (c);
        links = 0;
        for (int r = 0; r < c->size; r++) {
            cr_assert_eq (c->ranks [r].rc, 0, "rank %d: %s", r, c->ranks [r].error);
            links += za_ring_direct_links (c->ranks [r].ring);
        }
    }
    for (int r = 0; r < c->size; r++)
        c->ranks [r].rounds = 1;
    return links;
}

//  Neighbours on this host (loopback endpoints) move their chunks through
//  shared memory once the link is on, and neighbours over tcp (tcp_only,
//  as another host would be) through a tcp connection of the link's own;
//  the means are the bits ZeroMQ gives (no_shm: the links stay on it).
static void
s_check_direct_same_bits (int tcp)
{
    const size_t n = 91350;
    float *result [2][3];
    for (int off = 0; off <= 1; off++) {
        s_no_shm = off;
        s_ring_case_t c;
        s_make (&c, 3, tcp, 0, 10);
        for (int r = 0; r < 3; r++)
            c.ranks [r].data = calloc (n, sizeof (float));
        int links = s_until_shared (&c);
        cr_expect_eq (links, off? 0: 6, "tcp %d: direct links: %d", tcp, links);
        for (int r = 0; r < 3; r++) {
            c.ranks [r].n = n;
            for (size_t i = 0; i < n; i++)
                c.ranks [r].data [i] = s_value (r, i);
        }
        s_run_all (&c);
        for (int r = 0; r < 3; r++) {
            cr_assert_eq (c.ranks [r].rc, 0, "%s", c.ranks [r].error);
            result [off][r] = c.ranks [r].data;
            c.ranks [r].data = NULL;
            cr_expect_eq (za_ring_dropped (c.ranks [r].ring), 0);
        }
        s_destroy (&c);
    }
    for (int r = 0; r < 3; r++) {
        cr_expect (memcmp (result [0][r], result [1][r], n * sizeof (float)) == 0, "rank %d",
                   r);
        cr_expect (memcmp (result [0][r], result [0][0], n * sizeof (float)) == 0, "rank %d",
                   r);
    }
    for (int r = 0; r < 3; r++) {
        free (result [0][r]);
        free (result [1][r]);
    }
    s_no_shm = 0;
}

Test (ring, a_neighbour_on_this_host_is_reached_through_shared_memory_same_bits)
{
    s_check_direct_same_bits (1);
}

Test (ring, a_neighbour_over_tcp_gets_a_connection_of_its_own_same_bits)
{
    s_check_direct_same_bits (2);
}

//  16 MiB: a rank's first hop alone is more than its segment holds (or its
//  socket buffer takes), so records wait for room (and nothing deadlocks);
//  the mean is right. With chunks of 8 MiB, more than the default segment,
//  the segment is sized for them. Through shared memory, then over tcp.
Test (ring, a_tensor_larger_than_the_segment_goes_through_it)
{
    const size_t n = 4u << 20, chunks [2] = {0, 2u << 20};
    for (int k = 0; k < 4; k++) {
        s_ring_case_t c;
        s_make (&c, 2, 1 + k / 2, chunks [k % 2], 20);
        for (int r = 0; r < 2; r++)
            c.ranks [r].data = calloc (n, sizeof (float));
        cr_assert_eq (s_until_shared (&c), 4);
        for (int r = 0; r < 2; r++) {
            c.ranks [r].n = n;
            c.ranks [r].rounds = 2;
            for (size_t i = 0; i < n; i++)
                c.ranks [r].data [i] = (float) (i % 1000) * (float) (r + 1);
        }
        s_run_all (&c);
        for (int r = 0; r < 2; r++) {
            cr_assert_eq (c.ranks [r].rc, 0, "%s", c.ranks [r].error);
            cr_assert_eq (za_ring_direct_links (c.ranks [r].ring), 2);
            //  The mean of x and 2x is 1.5x; of 1.5x and 1.5x the same.
            for (size_t i = 0; i < n; i++)
                cr_assert_eq (c.ranks [r].data [i], 1.5f * (float) (i % 1000), "[%zu]", i);
        }
        s_destroy (&c);
    }
}

//  The memfd segments this process maps (their distinct inodes).
static int
s_segments_mapped (void)
{
    FILE *maps = fopen ("/proc/self/maps", "r");
    char line [512];
    unsigned long inodes [64];
    int count = 0;
    while (maps && fgets (line, sizeof line, maps)) {
        unsigned long inode;
        if (!strstr (line, "memfd:zactor-ring")
            || sscanf (line, "%*s %*s %*s %*s %lu", &inode) != 1)
            continue;
        int seen = 0;
        for (int k = 0; k < count; k++)
            seen |= inodes [k] == inode;
        if (!seen && count < 64)
            inodes [count++] = inode;
    }
    if (maps)
        fclose (maps);
    return count;
}

#define KILL_RANKS 3
//  1: the ranks talk over tcp (as hosts would), each link on a tcp
//  connection of its own, not shared memory.
static int s_kill_over_tcp;
#define KILL_FLOATS (1u << 20)

//  Rank `rank` of a ring of processes: a survivor all-reduces 4 MiB until
//  the ring must reform (telling `progress` of each round), a rank that
//  rejoins asks for that; then the new generation's broadcast and rounds
//  until every link is on shared memory again (the ranks agree through the
//  ring itself). Exits 0 when every mean was right and the process maps
//  just its two segments; otherwise a code that says where it failed.
static void
s_rank_process (int rank, char endpoints [][64], int rejoin, int progress)
{
    za_ring_config_t config = {
        .rank = rank, .size = KILL_RANKS, .bind = endpoints [rank],
        .right = endpoints [(rank + 1) % KILL_RANKS], .timeout_secs = 30,
        .tcp_only = s_kill_over_tcp,
    };
    za_ring_t *ring = za_ring_new (&config);
    float *data = malloc (KILL_FLOATS * sizeof (float));
    if (!ring || !data)
        _exit (20);
    int rc;
    if (rejoin && za_ring_ask_resync (ring))
        _exit (21);
    if (!rejoin) {
        if (za_ring_resync (ring))
            _exit (22);
        for (int64_t round = 1;; round++) {
            for (size_t i = 0; i < KILL_FLOATS; i++)
                data [i] = (float) (rank + 1);
            if ((rc = za_ring_allreduce_mean (ring, data, KILL_FLOATS, round)))
                break;
            if (progress >= 0 && write (progress, "r", 1) != 1)
                _exit (23);
        }
        if (rc != ZA_RING_RESYNC)
            _exit (24);
    }
    if (za_ring_resync (ring) || za_ring_broadcast (ring, data, KILL_FLOATS, 0, 0))
        _exit (25);
    float waiting = 1;
    for (int64_t round = 1; waiting > 0 && round < 2000; round++) {
        for (size_t i = 0; i < KILL_FLOATS; i++)
            data [i] = (float) (rank + 1 + round);
        if (za_ring_allreduce_mean (ring, data, KILL_FLOATS, round))
            _exit (26);
        for (size_t i = 0; i < KILL_FLOATS; i++)
            if (data [i] != (float) (2 + round))
                _exit (27);
        waiting = za_ring_direct_links (ring) == 2? 0: 1;
        if (za_ring_allreduce_mean (ring, &waiting, 1, round + 100000))
            _exit (28);
    }
    if (waiting > 0)
        _exit (29);
    if (s_segments_mapped () != (s_kill_over_tcp? 0: 2))
        _exit (30);
    za_ring_destroy (&ring);
    free (data);
    _exit (0);
}

static pid_t
s_fork_rank (int rank, char endpoints [][64], int rejoin, int progress)
{
    pid_t pid = fork ();
    cr_assert_geq (pid, 0);
    if (pid == 0) {
        prctl (PR_SET_PDEATHSIG, SIGKILL);      //  ends with the test, whatever happens
        s_rank_process (rank, endpoints, rejoin, progress);
    }
    return pid;
}

//  Three processes over shared memory; rank 2 is killed in the middle of
//  its rounds and started again: the ring reforms, every link goes back to
//  shared memory, and nobody maps a dead rank's segment any more (each
//  process maps just its two; a segment has no name anywhere, memfd, so
//  nothing outlives the processes that map it).
static void
s_kill_and_rejoin (void)
{
    char endpoints [KILL_RANKS][64];
    for (int r = 0; r < KILL_RANKS; r++)
        snprintf (endpoints [r], sizeof endpoints [r], "tcp://127.0.0.1:%d",
                  za_test_free_port ());
    int progress [2];
    cr_assert_eq (pipe (progress), 0);
    pid_t pids [KILL_RANKS];
    for (int r = 0; r < KILL_RANKS; r++)
        pids [r] = s_fork_rank (r, endpoints, 0, r == 0? progress [1]: -1);
    close (progress [1]);
    //  Rank 0 has all-reduced three rounds: the ring is busy, the links on.
    char seen;
    for (int rounds = 0; rounds < 3; rounds++)
        cr_assert_eq (read (progress [0], &seen, 1), 1);
    cr_assert_eq (kill (pids [2], SIGKILL), 0);
    cr_assert_eq (waitpid (pids [2], NULL, 0), pids [2]);
    pids [2] = s_fork_rank (2, endpoints, 1, -1);
    for (int r = 0; r < KILL_RANKS; r++) {
        int status = za_test_wait (pids [r], 90);
        cr_expect (WIFEXITED (status) && WEXITSTATUS (status) == 0, "rank %d exited %d", r,
                   WIFEXITED (status)? WEXITSTATUS (status): -WTERMSIG (status));
    }
    close (progress [0]);
}

Test (ring, a_rank_killed_mid_transfer_rejoins_and_leaves_no_segment, .timeout = 120)
{
    s_kill_and_rejoin ();
}

//  The same over tcp: the killed rank's connections break, its neighbours
//  go back to ZeroMQ, and the new generation's links get connections anew.
Test (ring, a_rank_killed_mid_transfer_over_tcp_rejoins_on_new_connections, .timeout = 120)
{
    s_kill_over_tcp = 1;
    s_kill_and_rejoin ();
}

//  Two "hosts" of two ranks each (the odd ranks reach their right
//  neighbour over tcp): links 0->1 and 2->3 through shared memory, 1->2 and
//  3->0 over tcp connections of their own, so two ranks read a segment and
//  write a connection and two the other way round; means and bits as ever,
//  at 365 KiB and at 16 MiB.
Test (ring, two_hosts_of_two_ranks_mix_shared_memory_and_tcp)
{
    const size_t sizes [2] = {91350, 4u << 20};
    s_ring_case_t c;
    s_make (&c, 4, 3, 0, 20);
    for (int r = 0; r < 4; r++)
        c.ranks [r].data = calloc (sizes [1], sizeof (float));
    cr_assert_eq (s_until_shared (&c), 8);
    for (int k = 0; k < 2; k++) {
        size_t n = sizes [k];
        for (int r = 0; r < 4; r++) {
            c.ranks [r].n = n;
            for (size_t i = 0; i < n; i++)
                c.ranks [r].data [i] = (float) (i % 1000) * (float) (r + 1);
        }
        s_run_all (&c);
        for (int r = 0; r < 4; r++) {
            cr_assert_eq (c.ranks [r].rc, 0, "%s", c.ranks [r].error);
            //  The mean of x, 2x, 3x and 4x: 2.5x (exact in float for these x).
            for (size_t i = 0; i < n; i++)
                cr_assert_eq (c.ranks [r].data [i], 2.5f * (float) (i % 1000), "n %zu [%zu]",
                              n, i);
        }
    }
    for (int r = 0; r < 4; r++)
        cr_expect_eq (za_ring_dropped (c.ranks [r].ring), 0);
    s_destroy (&c);
}

//  A rank's turn after a reshape: a new generation, then one all-reduce.
static void *
s_reformed_run (void *arg)
{
    s_rank_t *rank = (s_rank_t *) arg;
    //  rounds 0: this rank has adopted its generation already.
    rank->rc = rank->rounds? za_ring_resync (rank->ring): 0;
    if (rank->rc == 0)
        rank->rc = za_ring_allreduce_mean (rank->ring, rank->data, rank->n, 1);
    if (rank->rc)
        snprintf (rank->error, sizeof rank->error, "%s", za_last_error ());
    return NULL;
}

//  Ranks [0, size) of c (reshaped to `size`, each sending to the next of
//  `order`) re-form and all-reduce: every one ends with the same bits, the
//  mean of the values each put in.
//  s_root_first: the others start once the first waits (s_note_waits), its
//  first chunk sent before they have read anything of the new generation.
static int s_root_first;

static void
s_reformed_mean (s_ring_case_t *c, const int *order, int size)
{
    pthread_t threads [MAX_RANKS];
    atomic_store (&s_waited, 0);
    for (int r = 0; r < size; r++) {
        s_rank_t *rank = &c->ranks [order [r]];
        for (size_t i = 0; i < rank->n; i++)
            rank->data [i] = s_value (order [r], i);
        pthread_create (&threads [r], NULL, s_reformed_run, rank);
        double deadline = za_clock_mono () + 30;
        while (s_root_first && r == 0 && !atomic_load (&s_waited)
               && za_clock_mono () < deadline)
            zclock_sleep (1);
    }
    for (int r = 0; r < size; r++)
        pthread_join (threads [r], NULL);
    for (size_t i = 0; i < c->ranks [order [0]].n; i++) {
        double mean = 0;
        for (int r = 0; r < size; r++)
            mean += s_value (order [r], i);
        mean /= size;
        for (int r = 0; r < size; r++) {
            s_rank_t *rank = &c->ranks [order [r]];
            cr_assert_eq (rank->rc, 0, "rank %d of %d: %s", r, size, rank->error);
            cr_assert (memcmp (&rank->data [i], &c->ranks [order [0]].data [i],
                               sizeof (float)) == 0, "size %d: [%zu] differs", size, i);
            cr_assert_leq (fabs (rank->data [i] - mean), 1e-5, "size %d: [%zu] %g != %g",
                           size, i, (double) rank->data [i], mean);
        }
    }
}

//  An elastic job's ring: three ranks, one leaves for good (the others
//  re-form as two, keeping their sockets), a new one comes at its endpoint
//  (three again); each shape's mean is right and the same bits everywhere.
Test (ring, a_ring_reshaped_to_fewer_then_more_ranks_agrees)
{
    s_ring_case_t c;
    s_make (&c, 3, 1, 64, 10);
    for (int r = 0; r < 3; r++) {
        c.ranks [r].n = 300;
        c.ranks [r].data = malloc (300 * sizeof (float));
    }
    int three [] = {0, 1, 2}, two [] = {0, 1};
    s_reformed_mean (&c, three, 3);
    //  Rank 2 is gone: 0 and 1 are a ring of two.
    za_ring_destroy (&c.ranks [2].ring);
    cr_assert_eq (za_ring_reshape (c.ranks [0].ring, 0, 2, c.endpoints [1], 2), 0, "%s",
                  za_last_error ());
    cr_assert_eq (za_ring_reshape (c.ranks [1].ring, 1, 2, c.endpoints [0], 2), 0, "%s",
                  za_last_error ());
    s_reformed_mean (&c, two, 2);
    //  A new member at the third endpoint: three again. The root re-forms
    //  first, and its notice (of members' change 3) reaches rank 1 while
    //  it is still a ring of change 2: not taken, kept; re-formed for 3,
    //  rank 1 takes it and passes it on.
    za_ring_config_t config = {
        .rank = 2, .size = 3, .bind = c.endpoints [2], .right = c.endpoints [0],
        .chunk_floats = 64, .timeout_secs = 10,
    };
    c.ranks [2].ring = za_ring_new (&config);
    cr_assert_not_null (c.ranks [2].ring, "%s", za_last_error ());
    cr_assert_eq (za_ring_reshape (c.ranks [2].ring, 2, 3, c.endpoints [0], 3), 0);
    cr_assert_eq (za_ring_reshape (c.ranks [0].ring, 0, 3, c.endpoints [1], 3), 0, "%s",
                  za_last_error ());
    cr_assert_eq (za_ring_resync (c.ranks [0].ring), 0, "%s", za_last_error ());
    cr_assert_eq (za_ring_resync (c.ranks [1].ring), ZA_RING_CANCELLED);
    cr_assert_eq (za_ring_pending_tag (c.ranks [1].ring), 3);
    cr_assert_eq (za_ring_reshape (c.ranks [1].ring, 1, 3, c.endpoints [2], 3), 0, "%s",
                  za_last_error ());
    c.ranks [0].rounds = 0;             //  the root has its generation
    s_reformed_mean (&c, three, 3);
    cr_expect_eq (za_ring_generation (c.ranks [1].ring), za_ring_generation (c.ranks [0].ring));
    //  Out of range: refused, the ring as it was.
    cr_expect_eq (za_ring_reshape (c.ranks [0].ring, 3, 3, c.endpoints [1], 3), -1);
    cr_expect_eq (za_ring_reshape (c.ranks [0].ring, 0, 0, c.endpoints [1], 3), -1);
    s_destroy (&c);
}

//  The cancel of a ring: asked while a call waits; the third ask says stop.
static int s_cancel_asked;

static int
s_cancel_on_third (void *arg)
{
    (void) arg;
    return ++s_cancel_asked >= 3;
}

//  A wait for a neighbour that never sends ends with ZA_RING_CANCELLED once
//  the cancel says so (an elastic job whose members changed), long before
//  the timeout; a resync's wait too.
Test (ring, a_wait_ends_when_the_cancel_says_so)
{
    char endpoints [2][64];
    for (int r = 0; r < 2; r++)
        snprintf (endpoints [r], sizeof endpoints [r], "tcp://127.0.0.1:%d",
                  za_test_free_port ());
    za_ring_config_t config = {
        .rank = 1, .size = 2, .bind = endpoints [1], .right = endpoints [0],
        .timeout_secs = 60, .cancelled = s_cancel_on_third,
    };
    za_ring_t *ring = za_ring_new (&config);
    cr_assert_not_null (ring, "%s", za_last_error ());
    float data [8] = {1, 2, 3, 4, 5, 6, 7, 8};
    double start = za_clock_mono ();
    s_cancel_asked = 0;
    cr_expect_eq (za_ring_allreduce_mean (ring, data, 8, 1), ZA_RING_CANCELLED);
    cr_expect_geq (s_cancel_asked, 3);
    s_cancel_asked = 0;
    cr_expect_eq (za_ring_resync (ring), ZA_RING_CANCELLED);
    cr_expect_lt (za_clock_mono () - start, 30, "the cancel came after the timeout");
    za_ring_destroy (&ring);
}

//  A root's notice of an older ring's (its tag older than this ring's
//  members' change) that comes late, by another connection than the new
//  ring's, is old news in a call too: the call goes on (it ended the call,
//  and the rank then waited for a notice that never came).
Test (ring, an_old_rings_notice_does_not_end_a_call)
{
    s_ring_case_t c;
    s_make (&c, 2, 1, 100, 3);
    for (int r = 0; r < 2; r++)
        cr_assert_eq (za_ring_reshape (c.ranks [r].ring, r, 2, c.endpoints [1 - r], 2), 0,
                      "%s", za_last_error ());
    cr_assert_eq (za_ring_resync (c.ranks [0].ring), 0, "%s", za_last_error ());
    cr_assert_eq (za_ring_resync (c.ranks [1].ring), 0, "%s", za_last_error ());
    int64_t gen = za_ring_generation (c.ranks [0].ring);
    za_wire_msg_t *msg = malloc (sizeof *msg);
    za_wire_msg_init (msg, ZA_OP_RESYNC);
    msg->task = 0;
    msg->step = gen + 1;
    msg->seq = 1;                       //  the members' change before ours
    s_send_raw (c.endpoints [1], msg, NULL);
    free (msg);
    //  The ROUTER takes turns between connections: two rounds read it.
    for (int r = 0; r < 2; r++)
        c.ranks [r].rounds = 2;
    s_run_zeros_and_twos (&c);
    cr_expect_eq (za_ring_pending_tag (c.ranks [1].ring), 0);
    cr_expect_eq (za_ring_generation (c.ranks [1].ring), gen);
    s_destroy (&c);
}

//  A ring re-formed so that a rank's left neighbour, once on this host
//  (shared memory), is now on another (tcp): the rank reads the new tcp
//  connection, not the old segment (it kept reading the segment, and heard
//  nothing from its new left until the timeout).
Test (ring, a_new_left_neighbour_on_another_host_is_read_over_tcp)
{
    s_ring_case_t c;
    s_make (&c, 3, 3, 0, 5);        //  0 -shm-> 1 -tcp-> 2 -shm-> 0
    for (int r = 0; r < 3; r++)
        c.ranks [r].data = calloc (1000, sizeof (float));
    cr_assert_eq (s_until_shared (&c), 6);
    //  Rank 2 is gone: 1 sends to 0 now, over tcp (as from another host).
    za_ring_destroy (&c.ranks [2].ring);
    free (c.ranks [2].data);
    c.ranks [2].data = NULL;
    c.size = 2;
    for (int r = 0; r < 2; r++)
        cr_assert_eq (za_ring_reshape (c.ranks [r].ring, r, 2, c.endpoints [1 - r], 2), 0,
                      "%s", za_last_error ());
    cr_assert_eq (za_ring_resync (c.ranks [0].ring), 0, "%s", za_last_error ());
    cr_assert_eq (za_ring_resync (c.ranks [1].ring), 0, "%s", za_last_error ());
    cr_expect_eq (s_until_shared (&c), 4);
    int two [] = {0, 1};
    c.ranks [0].rounds = c.ranks [1].rounds = 0;
    s_reformed_mean (&c, two, 2);
    s_destroy (&c);
}

//  The other way: a rank whose left neighbour was on another host (tcp)
//  and is now on this one (shared memory), the old left still there, and
//  the new left's first chunk on ZeroMQ before its segment is on: the rank
//  reads the segment (that chunk made it drop the segment, for the old
//  left's tcp connection, and it heard nothing more until the timeout).
Test (ring, a_new_left_neighbour_on_this_host_is_read_through_shared_memory)
{
    s_ring_case_t c;
    s_note_waits = 1;
    s_make (&c, 3, 3, 0, 5);        //  0 -shm-> 1 -tcp-> 2 -shm-> 0
    s_note_waits = 0;
    for (int r = 0; r < 3; r++)
        c.ranks [r].data = calloc (1000, sizeof (float));
    cr_assert_eq (s_until_shared (&c), 6);
    //  Rank 1 leaves the ring (its process goes on): 0 sends to 2 now, which
    //  as rank 1 of two sends to 0.
    s_ring_case_t two = {.size = 2};
    snprintf (two.endpoints [0], sizeof two.endpoints [0], "%s", c.endpoints [0]);
    snprintf (two.endpoints [1], sizeof two.endpoints [1], "%s", c.endpoints [2]);
    two.ranks [0] = c.ranks [0];
    two.ranks [1] = c.ranks [2];
    cr_assert_eq (za_ring_reshape (two.ranks [0].ring, 0, 2, two.endpoints [1], 2), 0, "%s",
                  za_last_error ());
    cr_assert_eq (za_ring_reshape (two.ranks [1].ring, 1, 2, two.endpoints [0], 2), 0, "%s",
                  za_last_error ());
    int order [] = {0, 1};
    s_root_first = 1;
    s_reformed_mean (&two, order, 2);
    s_root_first = 0;
    cr_expect_eq (s_until_shared (&two), 4);
    c.ranks [0] = two.ranks [0];
    c.ranks [2] = two.ranks [1];
    s_destroy (&c);
}
