/*  fuzz_idx.c: libFuzzer harness for the IDX reader (za_idx_load:
    magic, dims, counts, truncation, gzip detected by content). The first
    byte pair of the input says where the image file ends and the label
    file begins; both are written as files and loaded. Refused with one
    error, or a data set whose every example and label streams. Build
    with -DZA_FUZZ=ON (clang); run fuzz/run.sh fuzz_idx. fuzz/replay.c runs
    the corpus in ctest.                                                   */
#include "za/za_idx.h"
#include "za/za_input.h"
#include "za/za_util.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_file.h"

int LLVMFuzzerTestOneInput (const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
    za_error_set_quiet (1);         //  a refusal is the expected outcome
    if (size < 2)
        return 0;
    size_t split = (size_t) data [0] << 8 | data [1];
    data += 2;
    size -= 2;
    if (split > size)
        split = size;
    char images [256];
    const char *path = fuzz_file_write ("images-idx3-ubyte", data, split);
    if (!path)
        return 0;
    snprintf (images, sizeof images, "%s", path);
    const char *labels = fuzz_file_write ("labels-idx1-ubyte", data + split, size - split);
    if (!labels)
        return 0;
    za_dataset_t *set = za_idx_load (images, labels);
    if (set)
        fuzz_stream (set, 255);         //  as training would stream it
    return 0;
}
