/*  fuzz_checkpoint.c: libFuzzer harness for the checkpoint reader
    (za_checkpoint_load: the safetensors header's length, its JSON, every
    tensor's dtype, shape and offsets, the metadata, the CRC). The input is
    written as a file (the reader takes a path, as the evaluator and
    zactor-ckpt do) and loaded; refused with one error, or a checkpoint
    whose every tensor lies inside the file. Build with -DZA_FUZZ=ON
    (clang); run fuzz/run.sh fuzz_checkpoint. fuzz/replay.c runs the
    corpus in ctest.                                                       */
#include "za/za_checkpoint.h"
#include "za/za_util.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fuzz_file.h"

int LLVMFuzzerTestOneInput (const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
    za_error_set_quiet (1);         //  a refusal is the expected outcome
    const char *path = fuzz_file_write ("model.ckpt-1.safetensors", data, size);
    if (!path)
        return 0;
    za_checkpoint_t *ckpt = za_checkpoint_load (path);
    if (ckpt) {
        volatile uint8_t sum = 0;
        for (int t = 0; t < za_checkpoint_tensor_count (ckpt); t++) {
            const za_ckpt_tensor_t *tensor = za_checkpoint_tensor (ckpt, t);
            size_t elements = 1;
            for (int d = 0; d < tensor->ndim; d++)
                elements *= (size_t) tensor->shape [d];
            size_t bytes = elements * za_dtype_size (tensor->dtype);
            if (bytes > size)
                abort ();           //  a tensor larger than the file
            for (size_t b = 0; b < bytes; b++)
                sum ^= ((const uint8_t *) tensor->data) [b];
        }
        (void) sum;
        //  The metadata the evaluator and zactor-ckpt print.
        const char *model = za_checkpoint_meta (ckpt, "model");
        if (model && strlen (model) > size)
            abort ();
        za_checkpoint_destroy (&ckpt);
    }
    return 0;
}
