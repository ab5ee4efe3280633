/*  za_warm_start.c: variables loaded from another model's weights.        */
#include "za/za_warm_start.h"
#include "za/za_checkpoint.h"
#include "za/za_onnx.h"
#include "za/za_safetensors.h"
#include "za/za_util.h"

#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define PATH_CHARS 4096
#define SHAPE_CHARS 96

int
za_layout_parse (const char *name)
{
    return !strcmp (name, "zactor")? ZA_LAYOUT_ZACTOR: !strcmp (name, "keras")? ZA_LAYOUT_KERAS
         : !strcmp (name, "torch")? ZA_LAYOUT_TORCH: -1;
}

//  The weights to read, and the file they are in (path): ws->from's (a
//  safetensors file, or an ONNX model's initializers), or a model dir's
//  newest checkpoint that loads whole (as training restores: a corrupt
//  newer one is said and passed over; each file read once). NULL with an
//  error.
static za_safetensors_t *
s_open (const char *from, char *path, size_t size)
{
    struct stat st;
    if (stat (from, &st)) {
        za_error ("--warm-start-from %s: no such file or folder", from);
        return NULL;
    }
    snprintf (path, size, "%s", from);
    if (!S_ISDIR (st.st_mode))
        return za_onnx_named (path)? za_onnx_load_initializers (path): za_safetensors_load (path);
    int64_t *steps = NULL;
    int count = za_checkpoint_list (from, &steps);
    za_safetensors_t *file = NULL;
    for (int c = count - 1; c >= 0 && !file; c--) {
        char *newest = za_checkpoint_path (from, steps [c]);
        snprintf (path, size, "%s", newest? newest: "");
        file = newest? za_safetensors_load (newest): NULL;
        free (newest);
    }
    free (steps);
    if (!file)
        za_error ("--warm-start-from %s: the folder holds no %scheckpoint", from,
                  count > 0? "intact ": "");
    return file;
}

static int
s_distance (const char *a, const char *b)
{
    size_t n = strlen (b);
    int *row = malloc ((n + 1) * sizeof *row);
    if (!row)
        return 1 << 30;
    for (size_t j = 0; j <= n; j++)
        row [j] = (int) j;
    for (size_t i = 1; a [i - 1]; i++) {
        int diagonal = row [0];
        row [0] = (int) i;
        for (size_t j = 1; j <= n; j++) {
            int above = row [j];
            int best = diagonal + (a [i - 1] != b [j - 1]);
            if (above + 1 < best)
                best = above + 1;
            if (row [j - 1] + 1 < best)
                best = row [j - 1] + 1;
            row [j] = best;
            diagonal = above;
        }
    }
    int distance = row [n];
    free (row);
    return distance;
}

static const char *
s_closest (const za_safetensors_t *file, const char *name)
{
    const char *best = NULL;
    int best_distance = 1 << 30;
    for (int i = 0; i < za_safetensors_count (file); i++) {
        int d = s_distance (name, za_safetensors_name (file, i));
        if (d < best_distance)
            best_distance = d, best = za_safetensors_name (file, i);
    }
    return best? best: "(the file has no tensor)";
}

static void
s_shape_text (const int64_t *shape, int ndim, char *text, size_t size)
{
    size_t at = (size_t) snprintf (text, size, "[");
    for (int d = 0; d < ndim && at < size; d++)
        at += (size_t) snprintf (text + at, size - at, "%s%lld", d? ", ": "",
                                 (long long) shape [d]);
    if (at < size)
        snprintf (text + at, size - at, "]");
}

//  The file's shape that the model's `var` takes in this layout.
static void
s_file_shape (const za_var_t *var, za_layout_t layout, int64_t *shape)
{
    memcpy (shape, var->shape, sizeof var->shape);
    if (layout == ZA_LAYOUT_TORCH && var->ndim == 4) {          //  HWIO from OIHW
        shape [0] = var->shape [3], shape [1] = var->shape [2];
        shape [2] = var->shape [0], shape [3] = var->shape [1];
    }
    else
    if (layout == ZA_LAYOUT_TORCH && var->ndim == 2)            //  [in, out] from [out, in]
        shape [0] = var->shape [1], shape [1] = var->shape [0];
}

//  The file's floats (in its layout) into the model's variable.
static void
s_store (const za_var_t *var, za_layout_t layout, const float *in, float *out)
{
    const int64_t *s = var->shape;
    if (layout == ZA_LAYOUT_TORCH && var->ndim == 4) {
        for (int64_t o = 0; o < s [3]; o++)
            for (int64_t i = 0; i < s [2]; i++)
                for (int64_t h = 0; h < s [0]; h++)
                    for (int64_t w = 0; w < s [1]; w++)
                        out [((h * s [1] + w) * s [2] + i) * s [3] + o]
                            = in [((o * s [2] + i) * s [0] + h) * s [1] + w];
    }
    else
    if (layout == ZA_LAYOUT_TORCH && var->ndim == 2) {
        for (int64_t o = 0; o < s [1]; o++)
            for (int64_t i = 0; i < s [0]; i++)
                out [i * s [1] + o] = in [o * s [0] + i];
    }
    else
        memcpy (out, in, var->size * sizeof (float));
}

//  Every NEW=OLD pair of the rename names a variable of the model that the
//  regex selects (TensorFlow's warm_start: "variables in
//  var_name_to_prev_var_name that were not used"); the OLD of each is kept
//  by its variable's index in `old` (NULL: the variable loads its own name),
//  `old_length` long. 0, or -1 with an error.
static int
s_parse_rename (const char *rename, const za_vars_t *vars, const regex_t *regex,
                const char **old, int *old_length)
{
    for (const char *p = rename; p && *p; ) {
        const char *end = strchr (p, ',');
        int pair = (int) (end? (size_t) (end - p): strlen (p));
        const char *equals = memchr (p, '=', (size_t) pair);
        int length = equals? (int) (equals - p): pair, found = -1;
        for (int v = 0; v < vars->count && found < 0 && equals; v++)
            if ((int) strlen (vars->vars [v].name) == length
                && !strncmp (vars->vars [v].name, p, (size_t) length))
                found = v;
        if (!equals)
            return za_error ("--warm-start-rename '%.*s': give NEW=OLD (the model's name, "
                             "then the file's)", pair, p);
        if (found < 0)
            return za_error ("--warm-start-rename '%.*s': the model has no variable '%.*s' "
                             "(misspelled?)", pair, p, length, p);
        if (regexec (regex, vars->vars [found].name, 0, NULL, 0))
            return za_error ("--warm-start-rename '%.*s': '%.*s' is not among the variables "
                             "--warm-start-vars selects", pair, p, length, p);
        old [found] = equals + 1;
        old_length [found] = pair - length - 1;
        p = end? end + 1: NULL;
    }
    return 0;
}

int
za_warm_start_load (const za_warm_start_t *ws, const za_vars_t *vars, float *values)
{
    regex_t regex;
    char *anchored = malloc (strlen (ws->vars? ws->vars: ".*") + 8);
    if (!anchored)
        return za_error ("out of memory");
    sprintf (anchored, "^(%s)", ws->vars? ws->vars: ".*");
    int bad_regex = regcomp (&regex, anchored, REG_EXTENDED | REG_NOSUB);
    free (anchored);
    if (bad_regex)
        return za_error ("--warm-start-vars '%s' is not an extended regular expression",
                         ws->vars);
    const char *old [ZA_MAX_VARS] = {NULL};
    int old_length [ZA_MAX_VARS] = {0};
    if (s_parse_rename (ws->rename, vars, &regex, old, old_length)) {
        regfree (&regex);
        return -1;
    }
    //  An ONNX model's initializers are its weights (torch.onnx.export's,
    //  tf2onnx's, zactor-ckpt export's).
    char path [PATH_CHARS];
    za_safetensors_t *file = s_open (ws->from, path, sizeof path);
    int loaded = file? 0: -1;
    float *buffer = NULL;
    for (int v = 0; v < vars->count && loaded >= 0; v++) {
        const za_var_t *var = &vars->vars [v];
        if (regexec (&regex, var->name, 0, NULL, 0))
            continue;
        char source [ZA_VAR_NAME_MAX * 2];
        if (old [v])
            snprintf (source, sizeof source, "%.*s", old_length [v], old [v]);
        else
            snprintf (source, sizeof source, "%s", var->name);
        int index = za_safetensors_find (file, source);
        int64_t want [ZA_SAFETENSORS_MAX_DIMS] = {0}, have [ZA_SAFETENSORS_MAX_DIMS];
        s_file_shape (var, ws->layout, want);
        int ndim = index < 0? 0: za_safetensors_shape (file, index, have);
        char from [ZA_VAR_NAME_MAX * 2 + 16] = "";
        if (strcmp (source, var->name))
            snprintf (from, sizeof from, " (as '%s')", source);
        if (index < 0) {
            loaded = za_error ("--warm-start-from %s has no '%s'%s for the model's '%s'; its "
                               "closest name is '%s' (--warm-start-rename %s=NAME maps "
                               "one)", path, source, "", var->name,
                               s_closest (file, source), var->name);
            break;
        }
        if (ndim != var->ndim || memcmp (have, want, (size_t) ndim * sizeof *have)) {
            char model [SHAPE_CHARS], theirs [SHAPE_CHARS];
            s_shape_text (want, var->ndim, model, sizeof model);
            s_shape_text (have, ndim, theirs, sizeof theirs);
            loaded = za_error ("--warm-start-from %s: '%s'%s is %s there, the model's '%s' "
                               "needs %s (in the %s layout)", path, source, from, theirs,
                               var->name, model, ws->layout == ZA_LAYOUT_TORCH? "torch"
                               : ws->layout == ZA_LAYOUT_KERAS? "keras": "zactor");
            break;
        }
        if (values) {
            float *grown = realloc (buffer, var->size * sizeof *buffer + 1);
            if (!grown || za_safetensors_floats (file, index, grown)) {
                free (grown);
                buffer = NULL;
                loaded = grown? -1: za_error ("out of memory");
                break;
            }
            buffer = grown;
            s_store (var, ws->layout, buffer, values + var->offset);
        }
        loaded++;
    }
    if (loaded == 0) {
        char names [512] = "";
        for (int v = 0, at = 0; v < vars->count && at < (int) sizeof names - 64; v++)
            at += snprintf (names + at, sizeof names - (size_t) at, "%s%s", v? ", ": "",
                            vars->vars [v].name);
        loaded = za_error ("--warm-start-vars '%s' selects none of the model's variables "
                           "(%s)", ws->vars? ws->vars: ".*", names);
    }
    free (buffer);
    regfree (&regex);
    za_safetensors_destroy (&file);
    return loaded;
}
