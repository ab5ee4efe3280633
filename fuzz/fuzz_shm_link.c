/*  fuzz_shm_link.c: libFuzzer harness for a same-host link's whole
    messages (za_shm_link_take, za_shm_link.h): the record a peer process
    wrote into its segment (a table of sizes, the message's header, its
    tensors at multiples of 64 bytes) is as untrusted as any frame. The
    input is that record's payload. Each input: a fresh segment, a link
    that maps it from the peer's word, the record written as a whole
    message, then taken and decoded as the ps takes it. A record that is
    not a message is refused (-1, the segment given up); one that is, is
    taken once (1) and its message decodes or is refused. Nothing may be
    read outside the record (ASan). Build with -DZA_FUZZ=ON (clang); run
    fuzz/run.sh fuzz_shm_link. fuzz/replay.c runs the corpus in ctest.    */
#include "za/za_shm.h"
#include "za/za_shm_link.h"
#include "za/za_util.h"
#include "za/za_wire.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RING (256 * 1024)
//  za_shm_link.c's whole message: the record's dtype.
#define LINK_WHOLE 0x776c

int LLVMFuzzerTestOneInput (const uint8_t *data, size_t size);

//  The peer's word offering `writer`, as the header of a message with no
//  tensors: a link that receives it maps the segment. NULL on error.
static zmsg_t *
s_offer (za_shm_t *writer)
{
    static char header [ZA_WIRE_MAX_HEADER_BYTES];
    char word [ZA_SHM_OFFER_MAX];
    za_wire_msg_t msg;
    za_wire_msg_init (&msg, ZA_OP_PULL);
    msg.shm = word;
    msg.shm_len = za_shm_offer (writer, word);
    msg.payload_elsewhere = 1;
    int bytes = za_wire_pack (&msg, header, sizeof header);
    zmsg_t *out = bytes > 0? zmsg_new (): NULL;
    if (out && zmsg_addmem (out, header, (size_t) bytes))
        zmsg_destroy (&out);
    return out;
}

int
LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
    za_error_set_quiet (1);             //  a refusal is the expected outcome
    za_shm_t *writer = za_shm_create (RING);
    za_shm_link_t *link = za_shm_link_new (0, 0);
    zmsg_t *offer = writer? s_offer (writer): NULL;
    if (!writer || !link || !offer || za_shm_link_receive (link, offer))
        abort ();
    zmsg_destroy (&offer);
    za_shm_record_t record = {.op = ZA_OP_PUSH, .dtype = LINK_WHOLE, .seq = 1, .step = 1,
                              .data = data, .bytes = size};
    if (za_shm_fits (writer, size) && za_shm_write (writer, &record) == 0) {
        zmsg_t *msg = NULL;
        int rc = za_shm_link_take_copy (link, &msg);
        if (rc < -1 || rc > 1 || (rc == 1) != (msg != NULL))
            abort ();
        if (msg) {
            za_wire_msg_t decoded;
            if (za_wire_decode (msg, &decoded) == 0) {
                volatile unsigned char sum = 0;
                for (int i = 0; i < decoded.tensor_count; i++)
                    for (size_t b = 0; b < decoded.tensors [i].bytes; b++)
                        sum ^= ((const unsigned char *) decoded.tensors [i].data) [b];
                (void) sum;
            }
            zmsg_destroy (&msg);
        }
        //  Taken once: nothing more is there.
        if (rc == 1 && (za_shm_link_take_copy (link, &msg) != 0 || msg))
            abort ();
    }
    za_shm_link_destroy (&link);
    za_shm_destroy (&writer);
    return 0;
}
