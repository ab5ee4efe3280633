/*  za_optim_config.c: an optimizer's settings: Keras's defaults per kind,
    the names, and the check a peer's settings pass before they are applied. */
#include "za/za_optim_config.h"
#include "za/za_util.h"

#include <math.h>
#include <stdio.h>
#include <strings.h>

static const char *s_names [] = {"sgd", "momentum", "adam", "adagrad"};

za_optim_config_t
za_optim_config_default (za_optimizer_t kind)
{
    za_optim_config_t config = {
        .kind = kind,
        .learning_rate = kind == ZA_OPT_ADAM? 1e-3f: 0.01f,
        .momentum = 0.9f,
        .nesterov = 0,
        .beta1 = 0.9f,
        .beta2 = 0.999f,
        .epsilon = 1e-7f,
        .initial_accumulator = 0.1f,
    };
    return config;
}

void
za_optim_config_resolve (za_optim_config_t *config)
{
    za_optim_config_t resolved = za_optim_config_default (config->kind);
    if (config->learning_rate > 0)
        resolved.learning_rate = config->learning_rate;
    *config = resolved;
}

int
za_optim_config_check (const za_optim_config_t *config, char *why, size_t size)
{
    if (!za_optim_known (config->kind)) {
        snprintf (why, size, "opt.kind names no optimizer (known: sgd, momentum, adam, "
                  "adagrad)");
        return -1;
    }
    const float values [] = {config->learning_rate, config->momentum, config->beta1,
                             config->beta2, config->epsilon, config->initial_accumulator};
    static const char *const names [] = {"lr", "momentum", "beta1", "beta2", "epsilon",
                                         "acc0"};
    for (size_t v = 0; v < sizeof values / sizeof values [0]; v++)
        if (!isfinite (values [v])) {
            snprintf (why, size, "opt.%s does not fit a float32", names [v]);
            return -1;
        }
    if (!(config->learning_rate > 0)) {
        snprintf (why, size, "opt.lr %g is not > 0", (double) config->learning_rate);
        return -1;
    }
    return 0;
}

int
za_optim_known (za_optimizer_t kind)
{
    return (unsigned) kind < sizeof s_names / sizeof s_names [0];
}

za_optimizer_t
za_optim_kind_of (const char *name)
{
    for (int i = 0; za_optim_known ((za_optimizer_t) i); i++)
        if (strcasecmp (name, s_names [i]) == 0)
            return (za_optimizer_t) i;
    return ZA_OPT_UNKNOWN;
}

int
za_optim_parse (const char *name, za_optimizer_t *kind)
{
    *kind = za_optim_kind_of (name);
    if (!za_optim_known (*kind))
        return za_error ("unknown optimizer '%s' (known: sgd, momentum, adam, adagrad)", name);
    return 0;
}

const char *
za_optim_name (za_optimizer_t kind)
{
    return za_optim_known (kind)? s_names [kind]: "?";
}
