/*  za_replica_ckpt.c: a replica's checkpoints, saved (through a full disk)
    and restored, and a warm start where there is none.                   */
#include "za_replica_private.h"
#include "za/za_hooks.h"

#include <czmq.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CKPT_META_MODEL "model"
#define CKPT_LOSS_SCALE "current_loss_scale"    //  Keras's LossScaleOptimizer's names
#define CKPT_GOOD_STEPS "good_steps"
#define CKPT_META_MODEL_FN "model_fn"
#define SLOT_NAME_MAX (ZA_VAR_NAME_MAX + 16)
#define CKPT_SLOTS_FROM "slots_from"    //  "var=step,..": slots started after step 0

static void
s_tensor_of_var (za_ckpt_tensor_t *t, const za_var_t *var, const char *name,
                 const float *block)
{
    memset (t, 0, sizeof *t);
    t->name = name;
    t->dtype = ZA_DTYPE_F32;
    t->ndim = var->ndim;
    for (int d = 0; d < var->ndim; d++)
        t->shape [d] = var->shape [d];
    t->data = block + var->offset;
}

//  "name=step,..." of the variables that train whose slots started after
//  step 0 (malloc'd), or NULL when there are none.
static char *
s_slots_from_text (const za_replica_t *self)
{
    size_t size = 1;
    for (int v = 0; v < self->vars.count; v++)
        if (self->slots_step [v] > 0 && !self->vars.vars [v].frozen)
            size += strlen (self->vars.vars [v].name) + 24;
    char *text = size > 1? (char *) malloc (size): NULL;
    char *at = text;
    for (int v = 0; text && v < self->vars.count; v++)
        if (self->slots_step [v] > 0 && !self->vars.vars [v].frozen)
            at += sprintf (at, "%s%s=%" PRId64, at > text? ",": "", self->vars.vars [v].name,
                           self->slots_step [v]);
    return text;
}

//  The step the checkpoint's slots_from says var's slots started from (0:
//  it says none).
static int64_t
s_slots_from (const char *text, const char *name)
{
    size_t length = strlen (name);
    for (const char *at = text; at && *at; at = strchr (at, ',')? strchr (at, ',') + 1: NULL)
        if (!strncmp (at, name, length) && at [length] == '=')
            return strtoll (at + length + 1, NULL, 10);
    return 0;
}

int
za_replica_save (za_replica_t *self, const char *model_dir, int64_t step, int keep_max)
{
    if (!model_dir)
        return za_error ("save: no model_dir");
    //  Nothing of a step whose work failed on the device is saved.
    if (za_replica_settle (self))
        return -1;
    int slot_count = za_replica_slot_count (self);
    za_replica_to_host (self, &self->values_at, &self->values, self->device_values, 1, 0);
    za_replica_to_host (self, &self->slots_at, self->slots, self->dev_slots, slot_count, 0);
    //  A diverged model is not written (za_loss_check, za_hooks.h): retention
    //  would delete the checkpoints before it for it. Nor are slots that
    //  overflowed (an Adam accumulator at infinity stops every update).
    self->diverged = 0;
    for (int block = -1; block < slot_count && !self->diverged; block++) {
        const float *floats = block < 0? self->values: self->slots [block];
        for (size_t i = 0; i < self->vars.total && !self->diverged; i++)
            self->diverged = !isfinite (floats [i]);
    }
    if (self->diverged)
        return za_error ("the values or optimizer slots of step %" PRId64 " hold NaN or "
                         "infinity: the model diverged, and its checkpoint is not written "
                         "(lower --learning-rate, or clip the gradients: --clip-norm)", step);
    za_ckpt_tensor_t tensors [ZA_MAX_VARS * (1 + ZA_OPTIM_MAX_SLOTS) + 3];
    char names [ZA_MAX_VARS * ZA_OPTIM_MAX_SLOTS][SLOT_NAME_MAX];
    int t = 0;
    for (int v = 0; v < self->vars.count; v++)
        s_tensor_of_var (&tensors [t++], &self->vars.vars [v], self->vars.vars [v].name,
                         self->values);
    for (int s = 0; s < slot_count; s++)
        for (int v = 0; v < self->vars.count; v++) {
            if (self->vars.vars [v].frozen)
                continue;                   //  a frozen variable has no slots
            char *name = names [s * self->vars.count + v];
            snprintf (name, SLOT_NAME_MAX, "%s/%s", self->vars.vars [v].name,
                      za_optim_slot_name (self->optim.kind, s));
            s_tensor_of_var (&tensors [t++], &self->vars.vars [v], name, self->slots [s]);
        }
    tensors [t++] = (za_ckpt_tensor_t) {.name = "global_step", .dtype = ZA_DTYPE_I64,
                                        .ndim = 0, .data = &step};
    //  mixed_float16: the loss scale goes on from where it was.
    float scale = self->loss_scale;
    int64_t good_steps = self->good_steps;
    if (self->be->precision == ZA_PRECISION_FP16 && self->train) {
        tensors [t++] = (za_ckpt_tensor_t) {.name = CKPT_LOSS_SCALE, .dtype = ZA_DTYPE_F32,
                                            .ndim = 0, .data = &scale};
        tensors [t++] = (za_ckpt_tensor_t) {.name = CKPT_GOOD_STEPS, .dtype = ZA_DTYPE_I64,
                                            .ndim = 0, .data = &good_steps};
    }
    char lr [32], examples [32];
    snprintf (lr, sizeof lr, "%g", (double) self->optim.learning_rate);
    snprintf (examples, sizeof examples, "%" PRId64, self->examples_done);
    char *slots_from = s_slots_from_text (self);
    za_ckpt_meta_t meta [6] = {
        {CKPT_META_MODEL, za_replica_model_text (self)},
        {CKPT_META_MODEL_FN, self->model_fn->name},
        {"optimizer", self->has_optim? za_optim_name (self->optim.kind): "none"},
    };
    int meta_count = 3;
    if (self->has_optim)
        meta [meta_count++] = (za_ckpt_meta_t) {"learning_rate", lr};
    if (self->examples_done > 0)
        meta [meta_count++] = (za_ckpt_meta_t) {ZA_CKPT_META_EXAMPLES, examples};
    if (slots_from)
        meta [meta_count++] = (za_ckpt_meta_t) {CKPT_SLOTS_FROM, slots_from};
    int rc = za_mkdirs (model_dir)? -1
           : za_checkpoint_write_atomic (model_dir, step, tensors, t, meta, meta_count,
                                         keep_max);
    free (slots_from);
    return rc;
}

int
za_replica_save_through (za_replica_t *self, const char *model_dir, int64_t step, int keep_max,
                         int final)
{
    int waiting = 0;
    za_checkpoint_disk_errno_clear ();
    while (za_replica_save (self, model_dir, step, keep_max)) {
        int err = za_checkpoint_disk_errno ();
        za_checkpoint_disk_errno_clear ();
        if (!err || self->diverged)
            return -1;
        if (!self->disk_failing)
            za_info ("cannot write the checkpoint of step %" PRId64 " in %s (%s): the "
                     "checkpoints before it and the index stay intact; training goes on and "
                     "the next save tries again", step, model_dir, strerror (err));
        self->disk_failing = 1;
        if (!final)
            return ZA_SAVE_SKIPPED;
        //  Room may come back; a disk that fails (EIO) or went read-only
        //  does not by waiting: the run fails, and its supervisor may
        //  restart it on another.
        if (err != ENOSPC && err != EDQUOT)
            return za_error ("the final checkpoint (step %" PRId64 ") cannot be written in "
                             "%s: %s", step, model_dir, strerror (err));
        if (!waiting++)
            za_info ("waiting for room in %s to write the final checkpoint (step %" PRId64
                     "): tried again every %d s; Ctrl-C gives up", model_dir, step,
                     ZA_SAVE_RETRY_SECS);
        if (zsys_interrupted)
            return -1;
        zclock_sleep (ZA_SAVE_RETRY_SECS * 1000);
        if (zsys_interrupted)
            return za_error ("interrupted while waiting to write the final checkpoint");
    }
    if (self->disk_failing)
        za_info ("checkpoints are written again (step %" PRId64 ")", step);
    self->disk_failing = 0;
    return 0;
}

int
za_replica_diverged (const za_replica_t *self)
{
    return self->diverged;
}

const int64_t *
za_replica_slots_steps (const za_replica_t *self)
{
    return self->slots_step;
}

void
za_replica_set_slots_steps (za_replica_t *self, const int64_t *steps)
{
    memcpy (self->slots_step, steps, sizeof self->slots_step);
    za_replica_plan_runs (self);
}

void
za_replica_set_examples_done (za_replica_t *self, int64_t examples)
{
    self->examples_done = examples > 0? examples: 0;
}

int64_t
za_replica_examples_restored (const za_replica_t *self)
{
    return self->examples_restored;
}

//  Finds `name` in the checkpoint and checks it has var's shape; copies it
//  into block (when block is not NULL). Returns 0, 1 when the checkpoint
//  lacks it, or -1 with an error on another shape or type.
static int
s_copy_tensor (const za_checkpoint_t *ckpt, const char *name, const za_var_t *var,
               float *block)
{
    const za_ckpt_tensor_t *t = za_checkpoint_find (ckpt, name);
    if (!t)
        return 1;
    int same = t->dtype == ZA_DTYPE_F32 && t->ndim == var->ndim;
    for (int d = 0; same && d < var->ndim; d++)
        same = t->shape [d] == var->shape [d];
    if (!same)
        return za_error ("'%s': tensor '%s' has another shape or type than the model's",
                         za_checkpoint_filename (ckpt), name);
    if (block)
        memcpy (block + var->offset, t->data, var->size * sizeof (float));
    return 0;
}

int
za_replica_restore (za_replica_t *self, const za_checkpoint_t *ckpt, int64_t *step)
{
    const char *model = za_checkpoint_meta (ckpt, CKPT_META_MODEL);
    const char *text = za_replica_model_text (self);
    if (model && strcmp (model, text) != 0)
        return za_error ("'%s' holds another model:\n  checkpoint: %s\n  this run:   %s\n"
                         "Use another --model-dir, or the same model.",
                         za_checkpoint_filename (ckpt), model, text);
    int slot_count = za_replica_slot_count (self);
    //  Variables whose slots the checkpoint lacks (frozen when it was
    //  written, or another optimizer's): theirs alone start fresh.
    int missing [ZA_MAX_VARS] = {0}, missing_count = 0;
    const char *first_missing = NULL;
    for (int pass = 0; pass < 2; pass++) {
        int copy = pass == 1;
        for (int v = 0; v < self->vars.count; v++) {
            const za_var_t *var = &self->vars.vars [v];
            if (copy)
                self->frozen_epoch = 0;
            int rc = s_copy_tensor (ckpt, var->name, var, copy? self->values: NULL);
            if (rc > 0)
                return za_error ("'%s' has no variable '%s': written by another model?",
                                 za_checkpoint_filename (ckpt), var->name);
            if (rc < 0)
                return -1;
            for (int s = 0; s < slot_count && !var->frozen; s++) {
                char name [SLOT_NAME_MAX];
                snprintf (name, sizeof name, "%s/%s", var->name,
                          za_optim_slot_name (self->optim.kind, s));
                rc = s_copy_tensor (ckpt, name, var, copy && !missing [v]? self->slots [s]: NULL);
                if (rc < 0)
                    return -1;
                if (!copy && rc > 0 && !missing [v]) {
                    missing [v] = 1;
                    missing_count++;
                    first_missing = first_missing? first_missing: var->name;
                }
            }
            if (copy && missing [v] && self->has_optim) {
                float *views [ZA_OPTIM_MAX_SLOTS];
                for (int s = 0; s < slot_count; s++)
                    views [s] = self->slots [s] + var->offset;
                za_optim_init_slots (&self->optim, views, var->size);
            }
        }
    }
    if (missing_count)
        za_info ("'%s' has no %s slots for %d of the variables that train (%s%s): theirs start "
                 "fresh", za_checkpoint_filename (ckpt), za_optim_name (self->optim.kind),
                 missing_count, first_missing, missing_count > 1? ", ...": "");
    //  Where each variable's slots started: fresh ones from this step (Adam's
    //  bias correction counts their updates, not the job's).
    const char *slots_from = za_checkpoint_meta (ckpt, CKPT_SLOTS_FROM);
    for (int v = 0; v < self->vars.count; v++) {
        int64_t from = missing [v]? za_checkpoint_step (ckpt)
                     : s_slots_from (slots_from, self->vars.vars [v].name);
        self->slots_step [v] = from > 0 && from <= za_checkpoint_step (ckpt)? from: 0;
    }
    za_replica_plan_runs (self);
    //  mixed_float16: the scale it had (a checkpoint of another precision
    //  has none: the initial one stays).
    const za_ckpt_tensor_t *scale = za_checkpoint_find (ckpt, CKPT_LOSS_SCALE);
    const za_ckpt_tensor_t *good = za_checkpoint_find (ckpt, CKPT_GOOD_STEPS);
    if (scale && good && scale->dtype == ZA_DTYPE_F32 && scale->ndim == 0
        && good->dtype == ZA_DTYPE_I64 && good->ndim == 0) {
        float value;
        int64_t count;
        memcpy (&value, scale->data, sizeof value);
        memcpy (&count, good->data, sizeof count);
        za_replica_set_loss_scale (self, value, count);
    }
    //  Only a caller that counts the examples saves a place from now.
    self->examples_restored = za_checkpoint_examples_done (ckpt);
    self->examples_done = 0;
    //  Every value and slot was written on the host.
    self->values_at = self->slots_at = REPLICA_AT_HOST;
    *step = za_checkpoint_step (ckpt);
    return 0;
}

//  A model dir with no checkpoint: the variables a warm start selects come
//  from its file, the others keep their initial values; slots and the step
//  start fresh.
static int
s_warm_start (za_replica_t *self)
{
    if (!self->warm_start || !self->warm_start->from)
        return 0;
    float *values = za_replica_values (self);
    int loaded = za_warm_start_load (self->warm_start, &self->vars, values);
    if (loaded < 0)
        return -1;
    self->values_at = REPLICA_AT_HOST;
    za_info ("warm start: %d variables from %s", loaded, self->warm_start->from);
    return 0;
}

int
za_replica_restore_newest (za_replica_t *self, const char *model_dir, int warm,
                           int *restored, int64_t *step)
{
    int found_any = 0;
    *restored = 0;
    za_checkpoint_t *ckpt = za_checkpoint_load_newest (model_dir, &found_any);
    if (!ckpt) {
        if (found_any)
            return za_error ("no intact checkpoint in '%s' (all are corrupt; see above)",
                             model_dir);
        return warm? s_warm_start (self): 0;
    }
    int rc = za_replica_restore (self, ckpt, step);
    za_checkpoint_destroy (&ckpt);
    *restored = rc == 0;
    return rc;
}
