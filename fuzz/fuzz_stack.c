/*  fuzz_stack.c: libFuzzer harness for the layer-stack parser (za_stack_parse:
    "conv2d(32,3,relu) maxpool(2) ... dense(10)"), which takes text from the
    command line, job files and checkpoints. Any bytes: refused with one
    error, or a spec of 1..ZA_MAX_LAYERS layers whose canonical
    text parses again to the same canonical text. Build with -DZA_FUZZ=ON (clang); run
    fuzz/run.sh fuzz_stack. fuzz/replay.c runs the corpus in ctest.       */
#include "za/za_model.h"
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
    char *text = fuzz_text (data, size);
    if (!text)
        return 0;
    za_stack_spec_t spec;
    if (za_stack_parse (text, &spec) == 0) {
        if (spec.count < 1 || spec.count > ZA_MAX_LAYERS)
            abort ();
        za_stack_spec_t again;
        if (za_stack_parse (spec.text, &again) != 0 || strcmp (again.text, spec.text) != 0)
            abort ();
    }
    free (text);
    return 0;
}
