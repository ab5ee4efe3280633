/*  test_shm.c: the same-host pipe of records (za_shm.h): records arrive in
    order and whole across the ring's end, a full segment says so, another
    process attaches and reads while it is written, and what is not the
    segment offered, or a segment scribbled on, is refused with an error.  */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "za/za_shm.h"
#include "za/za_util.h"

//  Record k: k's bytes, a size that is no multiple of 64 and varies.
static size_t
s_size (int k)
{
    return (size_t) (k * 37) % 3001;
}

static void
s_fill (unsigned char *bytes, int k, size_t n)
{
    for (size_t i = 0; i < n; i++)
        bytes [i] = (unsigned char) (k * 31 + i * 7);
}

static int
s_check (const za_shm_record_t *record, int k)
{
    if (record->seq != (uint64_t) k || record->step != -k || record->op != 26
        || record->dtype != 1 || record->task != 3 || record->bytes != s_size (k))
        return 0;
    unsigned char want [3001];
    s_fill (want, k, record->bytes);
    return memcmp (record->data, want, record->bytes) == 0;
}

static int
s_write (za_shm_t *out, int k)
{
    unsigned char bytes [3001];
    s_fill (bytes, k, s_size (k));
    za_shm_record_t record = {.op = 26, .dtype = 1, .task = 3, .seq = (uint64_t) k,
                              .step = -k, .data = bytes, .bytes = s_size (k)};
    return za_shm_write (out, &record);
}

static za_shm_t *
s_attach (za_shm_t *out)
{
    char offer [ZA_SHM_OFFER_MAX];
    size_t len = za_shm_offer (out, offer);
    cr_assert_gt (len, 0);
    za_shm_t *in = za_shm_attach (offer, len);
    cr_assert_not_null (in, "%s", za_last_error ());
    return in;
}

Test (shm, records_arrive_in_order_and_whole_across_the_end)
{
    //  A small segment: the records go round it many times.
    za_shm_t *out = za_shm_create (16384);
    cr_assert_not_null (out, "%s", za_last_error ());
    za_shm_t *in = s_attach (out);
    za_shm_record_t record;
    cr_assert_eq (za_shm_read (in, &record), 0, "nothing written yet");
    int written = 0, read = 0;
    while (read < 2000) {
        //  Write until full, then read some: the writer is told, not blocked.
        int rc;
        while (written < 2000 && (rc = s_write (out, written)) == 0)
            written++;
        if (written < 2000)
            cr_assert_eq (rc, 1);
        for (int i = 0; i < 3 && read < written; i++, read++) {
            cr_assert_eq (za_shm_read (in, &record), 1, "record %d", read);
            cr_assert (s_check (&record, read), "record %d came changed", read);
        }
    }
    cr_expect_eq (za_shm_read (in, &record), 0);
    cr_expect (za_shm_empty (out));
    za_shm_destroy (&in);
    za_shm_destroy (&out);
}

Test (shm, a_record_larger_than_the_segment_is_an_error)
{
    za_shm_t *out = za_shm_create (4096);
    cr_assert_not_null (out);
    static unsigned char big [8192];
    za_shm_record_t record = {.data = big, .bytes = sizeof big};
    cr_expect_eq (za_shm_write (out, &record), -1);
    cr_expect (strstr (za_last_error (), "a record of 8192 bytes"), "%s", za_last_error ());
    record.bytes = 4096 - 64;
    cr_expect_eq (za_shm_write (out, &record), 0, "the largest that fits");
    za_shm_destroy (&out);
}

//  Another process attaches and reads while this one writes; it sleeps
//  when there is nothing and a write wakes it.
Test (shm, another_process_reads_while_it_is_written)
{
    za_shm_t *out = za_shm_create (65536);
    cr_assert_not_null (out);
    char offer [ZA_SHM_OFFER_MAX];
    size_t len = za_shm_offer (out, offer);
    pid_t child = fork ();
    if (child == 0) {
        za_shm_t *in = za_shm_attach (offer, len);
        if (!in)
            _exit (10);
        for (int k = 0; k < 5000; k++) {
            za_shm_record_t record;
            int got;
            while ((got = za_shm_read (in, &record)) == 0)
                za_shm_wait (in, k % 2? 0: 20, 5000000);
            if (got != 1 || !s_check (&record, k))
                _exit (11);
            za_shm_release (in);
        }
        za_shm_destroy (&in);
        _exit (0);
    }
    for (int k = 0; k < 5000; k++)
        while (s_write (out, k) == 1)
            usleep (k % 100 == 0? 1000: 0);     //  now and then the reader sleeps
    int status;
    cr_assert_eq (waitpid (child, &status, 0), child);
    cr_expect (WIFEXITED (status) && WEXITSTATUS (status) == 0, "the reader: %d",
               WEXITSTATUS (status));
    za_shm_destroy (&out);
}

Test (shm, what_is_not_the_segment_offered_is_refused)
{
    za_shm_t *out = za_shm_create (0);
    cr_assert_not_null (out);
    char offer [ZA_SHM_OFFER_MAX], nonce [33];
    za_shm_offer (out, offer);
    za_shm_nonce (out, nonce);
    int fd;
    cr_assert_eq (sscanf (strstr (offer, "\"fd\":"), "\"fd\":%d", &fd), 1);
    //  Another nonce, another size, a fd that is no segment, a process that is
    //  gone, and what is no offer at all.
    char other [33];
    snprintf (other, sizeof other, "%s", nonce);
    other [0] = other [0] == '0'? '1': '0';
    pid_t gone = fork ();
    if (gone == 0)
        _exit (0);
    waitpid (gone, NULL, 0);
    char cases [6][2 * ZA_SHM_OFFER_MAX];
    snprintf (cases [0], sizeof cases [0], "{\"pid\":%d,\"fd\":%d,\"bytes\":%u,\"nonce\":\"%s\"}",
              (int) getpid (), fd, ZA_SHM_DEFAULT_BYTES, other);
    snprintf (cases [1], sizeof cases [1], "{\"pid\":%d,\"fd\":%d,\"bytes\":%u,\"nonce\":\"%s\"}",
              (int) getpid (), fd, ZA_SHM_DEFAULT_BYTES / 2, nonce);
    snprintf (cases [2], sizeof cases [2], "{\"pid\":%d,\"fd\":%d,\"bytes\":%u,\"nonce\":\"%s\"}",
              (int) getpid (), 0, ZA_SHM_DEFAULT_BYTES, nonce);
    snprintf (cases [3], sizeof cases [3], "{\"pid\":%d,\"fd\":%d,\"bytes\":%u,\"nonce\":\"%s\"}",
              (int) gone, fd, ZA_SHM_DEFAULT_BYTES, nonce);
    snprintf (cases [4], sizeof cases [4], "{\"pid\":%d,\"fd\":%d,\"bytes\":70,\"nonce\":\"%s\"}",
              (int) getpid (), fd, nonce);
    snprintf (cases [5], sizeof cases [5], "not json");
    for (int k = 0; k < 6; k++) {
        za_error_clear ();
        za_shm_t *in = za_shm_attach (cases [k], strlen (cases [k]));
        cr_expect_null (in, "case %d attached: %s", k, cases [k]);
        cr_expect (strstr (za_last_error (), "shm: "), "case %d: '%s'", k, za_last_error ());
        za_shm_destroy (&in);
    }
    za_shm_destroy (&out);
}

//  A segment scribbled on (a record's length that runs past what was
//  published): the reader says so, reads nothing of it, and stays shut.
Test (shm, a_scribbled_record_is_an_error_and_the_pipe_stays_shut)
{
    za_shm_t *out = za_shm_create (8192);
    cr_assert_not_null (out);
    za_shm_t *in = s_attach (out);
    cr_assert_eq (s_write (out, 5), 0);
    char offer [ZA_SHM_OFFER_MAX];
    za_shm_offer (out, offer);
    int fd;
    cr_assert_eq (sscanf (strstr (offer, "\"fd\":"), "\"fd\":%d", &fd), 1);
    //  The first record's length, just past the header's three lines.
    unsigned char *map = mmap (NULL, 3 * 64 + 8192, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    cr_assert_neq (map, MAP_FAILED);
    uint64_t length = 1u << 20;
    memcpy (map + 3 * 64, &length, sizeof length);
    za_shm_record_t record;
    cr_expect_eq (za_shm_read (in, &record), -1);
    cr_expect (strstr (za_last_error (), "unreadable"), "%s", za_last_error ());
    length = 128;
    memcpy (map + 3 * 64, &length, sizeof length);
    cr_expect_eq (za_shm_read (in, &record), -1, "a broken pipe stays broken");
    munmap (map, 3 * 64 + 8192);
    za_shm_destroy (&in);
    za_shm_destroy (&out);
}
