/*  fuzz_shm.c: libFuzzer harness for the reading end of a shared-memory
    pipe (za_shm_read, za_shm_read_at, za_shm.h): what the process at the
    other end wrote into the segment is as untrusted as any frame. The
    input is the segment as a writer left it: its head and tail counters
    (8 bytes each), a position to read at (8 bytes; its low bit says
    whether to), then the ring's bytes. A fresh reader maps it and reads
    until it is told nothing more is there or the segment is refused; every
    record it takes must lie inside the ring. Build with -DZA_FUZZ=ON
    (clang); run fuzz/run.sh fuzz_shm. fuzz/replay.c runs the corpus in
    ctest.                                                                */
#include "za/za_shm.h"
#include "za/za_util.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define RING 4096
//  za_shm.c's header: three cache lines; the writer's head counter opens
//  the second, the reader's tail the third.
#define HEADER 192
#define HEAD_AT 64
#define TAIL_AT 128

int LLVMFuzzerTestOneInput (const uint8_t *data, size_t size);

static za_shm_t *s_writer;
static char s_offer [ZA_SHM_OFFER_MAX];
static size_t s_offer_len;
static unsigned char *s_segment;        //  the writer's segment, mapped here too

//  The next 8 bytes of the input as a counter (0 when it is short): most
//  within a few rings, as a writer leaves them; one with the top bit set as
//  it is, less that bit.
static uint64_t
s_counter (const uint8_t **data, size_t *size)
{
    uint64_t value = 0;
    if (*size >= 8) {
        memcpy (&value, *data, 8);
        *data += 8, *size -= 8;
    }
    return value >> 63? value & ~(UINT64_C (1) << 63): value % (4 * RING + 1);
}

int
LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
    za_error_set_quiet (1);             //  a refusal is the expected outcome
    if (!s_writer) {
        int fd = -1;
        const char *at;
        if (!(s_writer = za_shm_create (RING))
            || !(s_offer_len = za_shm_offer (s_writer, s_offer))
            || !(at = strstr (s_offer, "\"fd\":")) || sscanf (at + 5, "%d", &fd) != 1)
            abort ();
        s_segment = (unsigned char *) mmap (NULL, HEADER + RING, PROT_READ | PROT_WRITE,
                                            MAP_SHARED, fd, 0);
        if (s_segment == MAP_FAILED)
            abort ();
    }
    uint64_t head = s_counter (&data, &size), tail = s_counter (&data, &size);
    uint64_t read_at = s_counter (&data, &size);
    memset (s_segment + HEADER, 0, RING);
    memcpy (s_segment + HEADER, data, size < RING? size: RING);
    memcpy (s_segment + HEAD_AT, &head, sizeof head);
    memcpy (s_segment + TAIL_AT, &tail, sizeof tail);

    za_shm_t *reader = za_shm_attach (s_offer, s_offer_len);
    if (!reader)
        abort ();
    size_t ring_bytes;
    const unsigned char *ring = (const unsigned char *) za_shm_ring (reader, &ring_bytes);
    //  A record is at least a line (and one is read twice): more rounds
    //  than that means a loop.
    for (int round = 0; round <= RING / 64 + 2; round++) {
        za_shm_record_t record;
        int got = round == 0 && (read_at & 1)? za_shm_read_at (reader, read_at >> 1, &record)
                                              : za_shm_read (reader, &record);
        if (got <= 0)
            break;
        if (round == RING / 64 + 2)
            abort ();
        const unsigned char *from = (const unsigned char *) record.data;
        //  After its header line, on a line, its payload inside the ring.
        if (from < ring + 64 || (size_t) (from - ring) % 64 || record.bytes > ring_bytes
            || (size_t) (from - ring) > ring_bytes - record.bytes)
            abort ();
        volatile unsigned char sum = 0;
        for (size_t b = 0; b < record.bytes; b++)
            sum ^= from [b];
        (void) sum;
        if (round == 1)
            za_shm_put_back (reader);    //  read again next round
        else
            za_shm_release (reader);
    }
    za_shm_destroy (&reader);
    return 0;
}
