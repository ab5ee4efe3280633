/*  za_stack_parse.c: the layer-stack text, read and written. The parser
    reads names, arguments and the options every layer shares; each type's
    own arguments are read by its source (za_layer_NAME.c).                 */
#include "za_layer.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define ARG_CHARS 32

void
za_stack_init (za_stack_spec_t *spec)
{
    memset (spec, 0, sizeof *spec);
}

int
za_stack_finish (za_stack_spec_t *spec)
{
    if (spec->count == 0)
        return za_error ("model spec: no layers");
    if (spec->layers [spec->count - 1].type != ZA_LAYER_DENSE)
        return za_error ("model spec: the last layer must be dense(N_CLASSES) "
                         "(it gives the logits)");
    if (spec->layers [spec->count - 1].units < 2)
        return za_error ("model spec: the last dense layer needs at least 2 units "
                         "(classes), got %d", spec->layers [spec->count - 1].units);
    size_t used = 0;
    spec->text [0] = 0;
    for (int i = 0; i < spec->count; i++) {
        char token [128];
        const za_layer_spec_t *layer = &spec->layers [i];
        za_layer_ops (layer->type)->format (layer, token, sizeof token);
        int wrote = snprintf (spec->text + used, sizeof spec->text - used, "%s%s",
                              i? " ": "", token);
        if (wrote < 0 || used + (size_t) wrote >= sizeof spec->text)
            return za_error ("model spec: longer than %d characters", ZA_SPEC_TEXT_MAX);
        used += (size_t) wrote;
    }
    return 0;
}

//  Refuses a shared option the type does not take, at where it was given
//  (padding_at, act_at: NULL when not given). 0 or -1.
static int
s_options_taken (const za_layer_args_t *args, const za_layer_ops_t *type,
                 const char *padding_at, const char *act_at)
{
    if (args->stride_at && !(type->takes & ZA_TAKES_STRIDE))
        return za_layer_args_error (args, args->stride_at, "%s takes no stride", args->name);
    if (padding_at && !(type->takes & ZA_TAKES_PADDING))
        return za_layer_args_error (args, padding_at, "%s takes no padding (conv2d does)",
                                    args->name);
    if (act_at && !(type->takes & ZA_TAKES_ACTIVATION))
        return za_layer_args_error (args, act_at,
                                    "%s takes no activation (add a relu layer)", args->name);
    return 0;
}

//  Reads the options every layer shares out of args' values (keeping the
//  positional ones) and refuses those the type does not take. 0 or -1.
static int
s_read_options (za_layer_args_t *args, char (*text) [ARG_CHARS], const za_layer_ops_t *type)
{
    const char *padding_at = NULL, *act_at = NULL;
    int kept = 0;
    for (int i = 0; i < args->count; i++) {
        char *arg = text [i];
        const char *at = args->at [i];
        char *eq = strchr (arg, '=');
        const char *key = NULL, *value = arg;
        if (eq) {
            *eq = 0;
            key = arg;
            value = eq + 1;
        }
        if (key && strcmp (key, "stride") == 0) {
            if (za_layer_parse_int (value, &args->stride))
                return za_layer_args_error (args, at, "bad stride '%s'", value);
            args->stride_at = at;
        }
        else
        if ((key && strcmp (key, "padding") == 0)
            || (!key && (!strcmp (value, "same") || !strcmp (value, "valid")))) {
            padding_at = at;
            if (strcmp (value, "same") == 0)
                args->padding = ZA_PADDING_SAME;
            else
            if (strcmp (value, "valid") == 0)
                args->padding = ZA_PADDING_VALID;
            else
                return za_layer_args_error (args, at, "bad padding '%s' (same or valid)",
                                            value);
        }
        else
        if ((key && strcmp (key, "activation") == 0)
            || (!key && (!strcmp (value, "relu") || !strcmp (value, "none")
                         || !strcmp (value, "linear")))) {
            act_at = at;
            if (strcmp (value, "relu") == 0)
                args->act = ZA_ACT_RELU;
            else
            if (strcmp (value, "none") == 0 || strcmp (value, "linear") == 0)
                args->act = ZA_ACT_NONE;
            else
                return za_layer_args_error (args, at,
                                            "unknown activation '%s' (relu or none)", value);
        }
        else
        if (key && strcmp (key, "l2") == 0) {
            char *end;
            double l2 = strtod (value, &end);
            if (end == value || *end || !(l2 >= 0) || l2 > 1)
                return za_layer_args_error (args, at, "bad l2 '%s' (a number 0 .. 1)", value);
            args->l2 = (float) l2;
            args->l2_at = at;
        }
        else
        if (key && strcmp (key, "trainable") == 0) {
            int no = !strcasecmp (value, "false") || !strcmp (value, "0");
            if (!no && strcasecmp (value, "true") && strcmp (value, "1"))
                return za_layer_args_error (args, at, "bad trainable '%s' (true or false)",
                                            value);
            args->frozen = no;
            args->frozen_at = at;
        }
        else
        if (key)
            return za_layer_args_error (args, at, "unknown option '%s'", key);
        else {
            args->value [kept] = value;
            args->at [kept++] = at;
        }
    }
    args->count = kept;
    return s_options_taken (args, type, padding_at, act_at);
}

//  Reads "(ARG, ARG, ...)" at *p into args and text. 0 or -1.
static int
s_read_arguments (const char **p_at, za_layer_args_t *args, char (*text) [ARG_CHARS])
{
    const char *p = *p_at;
    const char *name = args->name;
    p++;
    while (1) {
        while (isspace ((unsigned char) *p))
            p++;
        if (*p == ')' && args->count == 0) {
            p++;
            break;
        }
        if (args->count >= ZA_LAYER_ARGS_MAX)
            return za_layer_args_error (args, p, "too many arguments to %s", name);
        args->at [args->count] = p;
        size_t n = 0;
        while (*p && *p != ',' && *p != ')' && !isspace ((unsigned char) *p)) {
            if (n + 1 >= ARG_CHARS)
                return za_layer_args_error (args, args->at [args->count],
                                            "argument too long in %s", name);
            text [args->count][n++] = *p++;
        }
        text [args->count][n] = 0;
        args->value [args->count] = text [args->count];
        while (isspace ((unsigned char) *p))
            p++;
        if (n == 0)
            return za_layer_args_error (args, p, "missing argument in %s", name);
        args->count++;
        if (*p == ',') {
            p++;
            continue;
        }
        if (*p == ')') {
            p++;
            break;
        }
        return za_layer_args_error (args, p, "expected ',' or ')' in %s", name);
    }
    *p_at = p;
    return 0;
}

int
za_stack_parse (const char *text, za_stack_spec_t *spec)
{
    za_stack_init (spec);
    return za_stack_add (spec, text) || za_stack_finish (spec)? -1: 0;
}

//  `vgg16` or `vgg16(trainable=false)` at *p_at: VGG16's base. 0 or -1.
static int
s_add_vgg16 (za_stack_spec_t *spec, za_layer_args_t *args, const char **p_at)
{
    char values [ZA_LAYER_ARGS_MAX][ARG_CHARS];
    const char *p = *p_at;
    while (*p == ' ' || *p == '\t')
        p++;
    static const za_layer_ops_t takes_nothing = {.name = "vgg16"};
    if (*p == '(' && (s_read_arguments (&p, args, values)
                      || s_read_options (args, values, &takes_nothing)))
        return -1;
    if (args->count)
        return za_layer_args_error (args, args->at [0], "%s takes no arguments (only "
                                    "trainable=false)", "vgg16");
    *p_at = p;
    int first = spec->count;
    if (za_stack_add (spec, ZA_VGG16_BASE))
        return -1;
    for (int i = first; i < spec->count && args->frozen; i++)
        spec->layers [i].frozen = spec->layers [i].type == ZA_LAYER_CONV2D;
    return 0;
}

int
za_stack_add (za_stack_spec_t *spec, const char *text)
{
    if (strlen (text) >= ZA_SPEC_TEXT_MAX)
        return za_error ("model spec: longer than %d characters", ZA_SPEC_TEXT_MAX - 1);
    const char *p = text;
    while (1) {
        while (isspace ((unsigned char) *p))
            p++;
        if (!*p)
            break;
        const char *name_at = p;
        char name [32];
        size_t len = 0;
        while (isalnum ((unsigned char) *p) || *p == '_') {
            if (len + 1 < sizeof name)
                name [len++] = (char) tolower ((unsigned char) *p);
            p++;
        }
        name [len] = 0;
        za_layer_args_t args = {.text = text, .name = name, .end_at = name_at};
        if (len == 0) {
            char bad [2] = {*p, 0};
            return za_layer_args_error (&args, p, "unexpected '%s'", bad);
        }
        if (!strcmp (name, "vgg16")) {
            if (s_add_vgg16 (spec, &args, &p))
                return -1;
            continue;
        }
        const za_layer_ops_t *type = za_layer_ops_find (name);
        if (!type) {
            char message [320];
            snprintf (message, sizeof message, "unknown layer '%%s' (known: %s)",
                      za_layer_names ());
            return za_layer_args_error (&args, name_at, message, name);
        }
        char values [ZA_LAYER_ARGS_MAX][ARG_CHARS];
        while (*p == ' ' || *p == '\t')
            p++;
        if (*p == '(' && s_read_arguments (&p, &args, values))
            return -1;
        if (args.count)
            args.end_at = args.at [args.count - 1];
        if (s_read_options (&args, values, type) || type->parse (&args, spec))
            return -1;
        za_layer_spec_t *layer = &spec->layers [spec->count - 1];
        int weighted = layer->type == ZA_LAYER_CONV2D || layer->type == ZA_LAYER_DENSE;
        if (args.frozen_at && !weighted)
            return za_layer_args_error (&args, args.frozen_at, "%s has no variables to freeze",
                                        args.name);
        if (args.l2_at && !weighted)
            return za_layer_args_error (&args, args.l2_at, "%s has no kernel to regularise",
                                        args.name);
        layer->frozen = args.frozen;
        layer->l2 = args.l2;
    }
    return 0;
}
