/*  fuzz_onnx.c: libFuzzer harness for the ONNX reader
    (za_onnx_load_initializers: the protobuf walk of ModelProto, GraphProto
    and every TensorProto, dims, data types, raw, typed and external data).
    The input is written as model.onnx (the reader takes a path, as a warm
    start does) and loaded; refused with one error, or tensors whose every
    value lies in what was read. Build with -DZA_FUZZ=ON (clang); run
    fuzz/run.sh fuzz_onnx. fuzz/replay.c runs the corpus in ctest.          */
#include "za/za_onnx.h"
#include "za/za_util.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_file.h"

int LLVMFuzzerTestOneInput (const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
    za_error_set_quiet (1);         //  a refusal is the expected outcome
    const char *path = fuzz_file_write ("model.onnx", data, size);
    if (!path)
        return 0;
    za_safetensors_t *file = za_onnx_load_initializers (path);
    for (int t = 0; file && t < za_safetensors_count (file); t++) {
        int64_t shape [ZA_SAFETENSORS_MAX_DIMS];
        int ndim = za_safetensors_shape (file, t, shape);
        size_t elements = 1;
        for (int d = 0; d < ndim; d++)
            elements *= (size_t) shape [d];
        //  Typed fields hold up to 8 bytes a value for a 1-byte one: a
        //  tensor's values cannot outnumber the input's bytes.
        if (elements > size)
            abort ();
        float *values = malloc (elements * sizeof (float) + 1);
        if (values && za_safetensors_floats (file, t, values) == 0) {
            volatile float sum = 0;
            for (size_t k = 0; k < elements; k++)
                sum += values [k];
            (void) sum;
        }
        free (values);
        if (strlen (za_safetensors_name (file, t)) > size)
            abort ();
    }
    za_safetensors_destroy (&file);
    return 0;
}
