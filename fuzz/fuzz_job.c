/*  fuzz_job.c: libFuzzer harness for job files (za_options_apply_job_file's
    parser: JSON text, sections, "roles", every option's type and range).
    Any bytes: refused with one error naming the key, or applied; then the
    settings print as JSON (what --print-settings shows) without fault.
    Build with -DZA_FUZZ=ON (clang); run fuzz/run.sh fuzz_job.
    fuzz/replay.c runs the corpus in ctest.                               */
#include "za/za_options.h"
#include "za/za_util.h"

#include <jansson.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput (const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
    za_error_set_quiet (1);         //  a refusal is the expected outcome
    static za_settings_t settings;
    za_options_t *options = za_options_new ("zactor-run", NULL, &settings, 0);
    if (!options)
        abort ();                   //  the table itself is wrong: a bug
    json_error_t error;
    json_t *job = json_loadb ((const char *) data, size, 0, &error);
    if (job && za_options_apply_job (options, job, "fuzz.json", ZA_FROM_JOB) == 0) {
        char *text = za_options_settings_text (options);
        if (!text)
            abort ();
        free (text);
    }
    json_decref (job);
    za_options_destroy (&options);
    return 0;
}
