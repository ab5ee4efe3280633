/*  za_ps_init.c: how a parameter server gets its state: the chief's init
    (checked whole before anything changes), a worker's offer of its values
    while it has none (PROTOCOL.md 7.5), or the final checkpoint.  */
#include "za_ps_private.h"

//  An i64 scalar tensor named `name`: 0 with its value, or -1.
static int
s_scalar (const za_wire_tensor_t *t, const char *name, int64_t *value)
{
    if (strcmp (t->name, name) || t->dtype != ZA_DTYPE_I64 || t->ndim != 0
        || t->bytes != sizeof *value)
        return -1;
    memcpy (value, t->data, sizeof *value);
    return 0;
}

//  Checks an init whole: its optimizer (into *optim, with our own
//  schedule function where the chief's is its program's), our parts, their
//  slots, its step, ps 0's global_step, slots_from (into slots_from, 0s
//  without) and a last prefer_offer (into *prefer_offer). 0, or -1 with why.
static int
s_check_init (za_ps_t *self, const za_wire_msg_t *msg, za_optim_config_t *optim,
              int *prefer_offer, int64_t *slots_from, char *why, size_t size)
{
    snprintf (why, size, "init without an optimizer");
    if (!msg->has_optim || za_optim_config_check (&msg->optim, why, size))
        return -1;
    *optim = msg->optim;
    //  The chief's schedule is its program's function: ours (the same
    //  program), or the init is refused.
    const za_schedule_t *own = &self->config->optim.schedule;
    if (optim->schedule.kind == ZA_SCHEDULE_FUNCTION
        && (own->kind != ZA_SCHEDULE_FUNCTION || !own->fn)) {
        snprintf (why, size, "init: the chief's learning rate is its program's function, and "
                  "this ps runs a program without one");
        return -1;
    }
    if (optim->schedule.kind == ZA_SCHEDULE_FUNCTION) {
        optim->schedule.fn = own->fn;
        optim->schedule.fn_arg = own->fn_arg;
    }
    if (za_ps_check_parts (self, msg, 0, why, size))
        return -1;
    int slot_count = za_optim_slot_count (optim->kind);
    int is_ps0 = self->config->ps_index == 0;
    int expected = self->part_count * (1 + slot_count) + is_ps0;
    //  Then, each optional and in this order: "slots_from", where each
    //  variable's slots started (i64 [variables]: Adam's bias correction
    //  counts a variable's updates from there), and "prefer_offer" (an i64
    //  scalar 1): a worker's offer of a later step than the init's wins over
    //  the init's values (PROTOCOL.md 7.5).
    int at = expected;
    memset (slots_from, 0, ZA_MAX_VARS * sizeof *slots_from);
    if (at < msg->tensor_count && !strcmp (msg->tensors [at].name, "slots_from")) {
        const za_wire_tensor_t *t = &msg->tensors [at++];
        if (t->dtype != ZA_DTYPE_I64 || t->ndim != 1 || t->shape [0] != self->vars.count
            || t->bytes != (size_t) self->vars.count * sizeof *slots_from) {
            snprintf (why, size, "init: slots_from must be i64 [%d] (one step a variable)",
                      self->vars.count);
            return -1;
        }
        memcpy (slots_from, t->data, t->bytes);
        for (int v = 0; v < self->vars.count; v++)
            if (slots_from [v] < 0 || slots_from [v] > msg->step) {
                snprintf (why, size, "init: slots_from of '%s' is %" PRId64 ", outside 0 to "
                          "the step %" PRId64, self->vars.vars [v].name, slots_from [v],
                          msg->step);
                return -1;
            }
    }
    int64_t flag = 0;
    *prefer_offer = at < msg->tensor_count && !strcmp (msg->tensors [at].name, "prefer_offer");
    if (*prefer_offer && (s_scalar (&msg->tensors [at++], "prefer_offer", &flag) || flag != 1)) {
        snprintf (why, size, "init: an extra tensor must be the i64 scalar prefer_offer = 1");
        return -1;
    }
    if (at != msg->tensor_count) {
        snprintf (why, size, "init carries %d tensors, ps %d expects %d (and optionally "
                  "slots_from, prefer_offer)", msg->tensor_count, self->config->ps_index,
                  expected);
        return -1;
    }
    for (int s = 0; s < slot_count; s++)
        for (int i = 0; i < self->part_count; i++) {
            const za_wire_tensor_t *t = &msg->tensors [self->part_count * (1 + s) + i];
            char name [ZA_WIRE_NAME_MAX];
            snprintf (name, sizeof name, "%s/%s", za_ps_part_name (self, i),
                      za_optim_slot_name (optim->kind, s));
            if (strcmp (t->name, name)
                || !za_ps_is_part (self, t, &self->placement.parts [self->parts [i]],
                                   ZA_DTYPE_F32)) {
                snprintf (why, size, "init: slot tensor '%s' where '%s' belongs", t->name, name);
                return -1;
            }
        }
    if (msg->step < 0) {
        snprintf (why, size, "init without a step");
        return -1;
    }
    //  ps 0 also gets global_step, which must agree with step.
    int64_t step = -1;
    if (is_ps0 && (s_scalar (&msg->tensors [expected - 1], "global_step", &step)
                   || step != msg->step)) {
        snprintf (why, size, "init: ps 0 needs an i64 scalar global_step equal to step");
        return -1;
    }
    return 0;
}

//  init: our parts, then each part's slots "<part>/<slot>", then (ps 0)
//  "global_step". Everything is checked before anything changes.
int
za_ps_init (za_ps_t *self, zframe_t *routing_id, const za_wire_msg_t *msg)
{
    char why [256];
    za_optim_config_t optim;
    int prefer_offer;
    int64_t slots_from [ZA_MAX_VARS];
    if (s_check_init (self, msg, &optim, &prefer_offer, slots_from, why, sizeof why)) {
        za_ps_reply_error (self, routing_id, msg->seq, "bad_request", why);
        return -1;
    }
    int slot_count = za_optim_slot_count (optim.kind);
    //  Checked: load it.
    za_wire_lease_wait (&self->lease [0]);
    za_wire_lease_wait (&self->lease [1]);
    za_wire_lease_wait (&self->slot_lease);
    self->optim = optim;
    self->base_learning_rate = optim.learning_rate;
    for (int s = 0; s < ZA_OPTIM_MAX_SLOTS; s++)
        if (s < slot_count && !self->slots [s])
            self->slots [s] = (float *) za_alloc ((self->floats? self->floats: 1)
                                                  * sizeof (float));
    for (int i = 0; i < self->part_count; i++) {
        memcpy (self->values [0] + self->part_at [i], msg->tensors [i].data,
                msg->tensors [i].bytes);
        for (int s = 0; s < slot_count; s++) {
            const za_wire_tensor_t *t = &msg->tensors [self->part_count * (1 + s) + i];
            memcpy (self->slots [s] + self->part_at [i], t->data, t->bytes);
        }
    }
    memcpy (self->slots_from, slots_from, sizeof self->slots_from);
    self->updates = msg->step;
    int offered = prefer_offer && self->offer && self->offer_step > msg->step;
    if (offered) {
        memcpy (self->values [0], self->offer, self->floats * sizeof (float));
        self->updates = self->offer_step;
    }
    za_ps_loaded (self);
    za_free (self->offer);
    self->offer = NULL;
    self->offer_step = -1;
    //  A step being summed is gone with the old state: its pushers go on
    //  from the new values.
    za_ps_sync_reset (self);
    za_info ("ps %d: initialised at step %" PRId64 "%s (%d parts, %zu floats, %s)",
             self->config->ps_index, self->updates,
             offered? " with the values a worker offered": "", self->part_count,
             self->floats, za_optim_name (optim.kind));
    za_wire_msg_init (self->out, ZA_OP_INIT_OK);
    self->out->seq = msg->seq;
    self->out->step = za_ps_global_step (self);
    za_ps_reply (self, routing_id, NULL);
    za_ps_answer_waiting (self, 0);
    return 0;
}

//  A worker's values of our shard while we have no state: the freshest
//  (by step) is kept for the chief's init. Never answered.
int
za_ps_offer (za_ps_t *self, za_ps_request_t *request)
{
    const za_wire_msg_t *msg = request->msg;
    char why [256];
    if (za_ps_check_parts (self, msg, 1, why, sizeof why) || msg->step < 0) {
        self->dropped++;
        za_info ("ps %d: an offer dropped: %s", self->config->ps_index,
                 msg->step < 0? "no step": why);
        return -1;
    }
    if (msg->step <= self->offer_step)
        return 0;
    if (!self->offer)
        self->offer = (float *) za_alloc ((self->floats? self->floats: 1) * sizeof (float));
    if (!self->offer)
        return -1;
    for (int i = 0; i < self->part_count; i++)
        memcpy (self->offer + self->part_at [i], msg->tensors [i].data, msg->tensors [i].bytes);
    self->offer_step = msg->step;
    za_info ("ps %d: worker %d offers its values of step %" PRId64, self->config->ps_index,
             msg->task, msg->step);
    return 0;
}

//  The final checkpoint found: our parts' values from it, at its step.
int
za_ps_load_final (za_ps_t *self, za_ps_request_t *request)
{
    (void) request;
    const za_role_config_t *config = self->config;
    char *path = za_checkpoint_path (config->run.model_dir, self->final_step);
    za_checkpoint_t *ckpt = path? za_checkpoint_load (path): NULL;
    free (path);
    if (!ckpt || za_ps_load_values (self, ckpt)) {
        za_info ("ps %d: cannot use the final checkpoint (step %" PRId64 "): %s; waiting "
                 "for the chief's init", config->ps_index, self->final_step, za_last_error ());
        self->final_tried = self->final_step;
        za_checkpoint_destroy (&ckpt);
        return -1;
    }
    za_ps_loaded (self);
    self->updates = za_checkpoint_step (ckpt);
    za_info ("ps %d: '%s' holds the final checkpoint (step %" PRId64 " >= max_steps %" PRId64
             "): training is over; answering done", config->ps_index, config->run.model_dir,
             self->updates, config->max_steps);
    za_checkpoint_destroy (&ckpt);
    return 0;
}
