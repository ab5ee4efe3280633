/*  fuzz_tfconfig.c: libFuzzer harness for the TF_CONFIG / cluster file parser
    (za_cluster_parse). Any bytes: refused with one error, or a cluster whose
    task counts and index stay inside the limits, whose endpoints can all be
    asked for. Build with -DZA_FUZZ=ON (clang); run fuzz/run.sh
    fuzz_tfconfig. fuzz/replay.c runs the corpus in ctest.                */
#include "za/za_cluster.h"
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
    za_cluster_t *cluster = za_cluster_parse (text, "fuzz");
    if (cluster) {
        if (cluster->num_workers < 0 || cluster->num_workers > 2 * ZA_CLUSTER_MAX_TASKS
            || cluster->ps_count < 0 || cluster->ps_count > ZA_CLUSTER_MAX_TASKS
            || strnlen (cluster->bind_endpoint, ZA_CLUSTER_ENDPOINT_MAX) == ZA_CLUSTER_ENDPOINT_MAX)
            abort ();
        for (int p = 0; p < cluster->ps_count; p++)
            free (za_cluster_ps_endpoint (cluster, p));
        for (int w = 0; w < cluster->num_workers; w++)
            free (za_cluster_worker_endpoint (cluster, w));
        za_cluster_destroy (&cluster);
    }
    free (text);
    return 0;
}
