/*  fuzz_wire.c: libFuzzer harness for the wire decoder (za_wire_decode), the
    first thing every socket does with what it receives. The input is cut
    into up to 8 frames (a length byte pair before each); the decoder must
    refuse or accept without reading past a frame, and what it accepts must
    hold together: every tensor's bytes inside its frame, within the limits
    of docs/PROTOCOL.md section 4. Build with -DZA_FUZZ=ON (clang); run
    fuzz/run.sh fuzz_wire. fuzz/replay.c runs the corpus in ctest.      */
#include "za/za_wire.h"

#include "za/za_util.h"

#include <czmq.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MAX_FRAMES 8

int LLVMFuzzerTestOneInput (const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
    za_error_set_quiet (1);         //  a refusal is the expected outcome
    static za_wire_msg_t *msg;
    if (!msg && !(msg = (za_wire_msg_t *) malloc (sizeof *msg)))
        return 0;
    zmsg_t *frames = zmsg_new ();
    size_t at = 0;
    for (int f = 0; f < MAX_FRAMES && at < size; f++) {
        size_t want = size - at;
        if (f < MAX_FRAMES - 1 && size - at >= 2) {
            want = (size_t) data [at] << 8 | data [at + 1];
            at += 2;
            if (want > size - at)
                want = size - at;
        }
        zmsg_addmem (frames, data + at, want);
        at += want;
    }
    if (za_wire_decode (frames, msg) == 0) {
        //  What it accepted lies inside the frames (ASan sees any byte past
        //  them), and holds what its header says.
        volatile uint8_t sum = 0;
        for (size_t b = 0; b < msg->body_len; b++)
            sum ^= (uint8_t) msg->body [b];
        for (int t = 0; t < msg->tensor_count; t++) {
            const za_wire_tensor_t *tensor = &msg->tensors [t];
            size_t elements = 1;
            for (int d = 0; d < tensor->ndim; d++)
                elements *= (size_t) tensor->shape [d];
            if (tensor->bytes != elements * za_dtype_size (tensor->dtype))
                abort ();
            for (size_t b = 0; b < tensor->bytes; b++)
                sum ^= ((const uint8_t *) tensor->data) [b];
        }
        (void) sum;
    }
    zmsg_destroy (&frames);
    return 0;
}
