/*  za_optim_config.h: an optimizer's settings, as one struct from the option
    table (--optimizer, --learning-rate) through the wire's init to the ps's
    update and every replica's (kernels/za_optim.c applies it). A plain value
    every layer may hold: no arithmetic here.                               */
#ifndef ZA_OPTIM_CONFIG_H_INCLUDED
#define ZA_OPTIM_CONFIG_H_INCLUDED

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    ZA_OPT_UNKNOWN = -1,        //  a name no optimizer has (as a peer sent it)
    ZA_OPT_SGD = 0,
    ZA_OPT_MOMENTUM = 1,
    ZA_OPT_ADAM = 2,
    ZA_OPT_ADAGRAD = 3
} za_optimizer_t;

typedef struct {
    za_optimizer_t kind;
    float learning_rate;
    float momentum;             //  Momentum: 0.9
    int nesterov;               //  Momentum: 0
    float beta1, beta2;         //  Adam: 0.9, 0.999
    float epsilon;              //  Adam: 1e-7 (Keras), Adagrad: 1e-7
    float initial_accumulator;  //  Adagrad: 0.1 (TensorFlow)
} za_optim_config_t;

//  The defaults above for `kind`, with learning rate 1e-3 for Adam and 0.01
//  for the others (Keras's defaults).
za_optim_config_t za_optim_config_default (za_optimizer_t kind);

//  The config as the settings leave it (a kind, a learning rate or 0) made
//  whole: the kind's defaults, and its own learning rate unless one is set.
void za_optim_config_resolve (za_optim_config_t *config);

//  0 when the config can be applied: a known kind, every number finite, a
//  learning rate > 0; else -1 with why ("opt.lr ...") in why [size].
int za_optim_config_check (const za_optim_config_t *config, char *why, size_t size);

//  "sgd", "momentum", "adam", "adagrad" (case-insensitive). Returns 0, or -1
//  with an error listing the known names.
int za_optim_parse (const char *name, za_optimizer_t *kind);
//  The same, quietly: ZA_OPT_UNKNOWN for a name no optimizer has (a peer's).
za_optimizer_t za_optim_kind_of (const char *name);
//  1 for SGD, Momentum, Adam and Adagrad; 0 for ZA_OPT_UNKNOWN or anything else.
int za_optim_known (za_optimizer_t kind);
const char *za_optim_name (za_optimizer_t kind);

#ifdef __cplusplus
}
#endif
#endif
