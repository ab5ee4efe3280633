/*  bench_wire_bytes.c: prints the header bytes zactor's codec writes for every
    op, bare and with every header field, and what decoding them gives back,
    so that two builds' codecs can be compared byte for byte
    (bench/wire_bytes.sh OLD_BUILD NEW_BUILD).                               */
#include "za/za_wire.h"
#include "za/za_optim_config.h"
#include "za/za_util.h"

#include <czmq.h>
#include <stdio.h>
#include <string.h>

static void
s_hex (const char *label, const char *bytes, int size)
{
    printf ("%s %d ", label, size);
    for (int i = 0; i < size; i++)
        printf ("%02x", (unsigned char) bytes [i]);
    printf ("\n");
}

//  Packs msg, prints its bytes, decodes them and prints the fields read back.
static void
s_show (const char *label, za_wire_msg_t *msg)
{
    //  za_wire_pack writes the header of a message whose payloads travel
    //  elsewhere; here they follow as frames for the decoder.
    msg->payload_elsewhere = 1;
    char bytes [ZA_WIRE_MAX_HEADER_BYTES];
    int size = za_wire_pack (msg, bytes, sizeof bytes);
    if (size < 0) {
        printf ("%s refused\n", label);
        return;
    }
    s_hex (label, bytes, size);
    zmsg_t *zmsg = zmsg_new ();
    zmsg_addmem (zmsg, bytes, (size_t) size);
    for (int i = 0; i < msg->tensor_count; i++)
        zmsg_addmem (zmsg, msg->tensors [i].data, msg->tensors [i].bytes);
    za_wire_msg_t back;
    if (za_wire_decode (zmsg, &back))
        printf ("%s decode refused: %s\n", label, za_last_error ());
    else {
        printf ("%s decoded op=%s seq=%llu step=%lld task=%d ps=%d code=%s error=%s body=%.*s "
                "shm=%.*s tensors=%d", label, za_op_name (back.op),
                (unsigned long long) back.seq, (long long) back.step, back.task, back.ps,
                back.code, back.error, (int) back.body_len, back.body ? back.body : "",
                (int) back.shm_len, back.shm ? back.shm : "", back.tensor_count);
        if (back.has_optim)
            printf (" opt=%d,%.9g,%.9g,%.9g,%.9g,%.9g,%.9g,%d,%.9g,%d", (int) back.optim.kind,
                    back.optim.learning_rate, back.optim.momentum, back.optim.beta1,
                    back.optim.beta2, back.optim.epsilon, back.optim.initial_accumulator,
                    back.optim.nesterov, back.optim.weight_decay, (int) back.optim.schedule.kind);
        for (int i = 0; i < back.tensor_count; i++)
            printf (" %s:%d:%d:%zu", back.tensors [i].name, (int) back.tensors [i].dtype,
                    back.tensors [i].ndim, back.tensors [i].bytes);
        printf ("\n");
    }
    zmsg_destroy (&zmsg);
}

int
main (void)
{
    static float weights [12] = { 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12 };
    static int64_t labels [3] = { 7, -1, 1LL << 40 };
    static uint16_t halves [4] = { 0x3f80, 0xbf80, 0x7f80, 0 };
    const char *body = "{\"cluster\":{\"ps\":[\"a:1\"]},\"task\":{\"type\":\"ps\",\"index\":0}}";
    const char *shm = "{\"pid\":123,\"fd\":4,\"bytes\":65536,\"nonce\":99,\"at\":8}";
    for (int op = ZA_OP_INIT; za_op_name ((za_op_t) op); op++) {
        char label [64];
        za_wire_msg_t msg;
        za_wire_msg_init (&msg, (za_op_t) op);
        snprintf (label, sizeof label, "%s/bare", za_op_name ((za_op_t) op));
        s_show (label, &msg);

        za_wire_msg_init (&msg, (za_op_t) op);
        msg.seq = 0xfedcba9876543210ULL;
        msg.step = 1234567890123LL;
        msg.task = 3;
        msg.ps = 70000;
        snprintf (msg.code, sizeof msg.code, "not_ready");
        snprintf (msg.error, sizeof msg.error, "ps 1 has no state yet");
        msg.body = body;
        msg.body_len = strlen (body);
        msg.shm = shm;
        msg.shm_len = strlen (shm);
        int64_t matrix [2] = { 3, 4 }, vector [1] = { 3 }, pair [1] = { 4 };
        za_wire_msg_add (&msg, "dense/kernel", ZA_DTYPE_F32, 2, matrix, weights);
        za_wire_msg_add (&msg, "labels", ZA_DTYPE_I64, 1, vector, labels);
        za_wire_msg_add (&msg, "conv/bias:bf16", ZA_DTYPE_BF16, 1, pair, halves);
        za_wire_msg_add (&msg, "global_step", ZA_DTYPE_I64, 0, NULL, labels);
        snprintf (label, sizeof label, "%s/full", za_op_name ((za_op_t) op));
        s_show (label, &msg);

        if (op == ZA_OP_INIT) {
            for (int kind = ZA_OPT_SGD; za_optim_known ((za_optimizer_t) kind); kind++) {
                za_wire_msg_init (&msg, (za_op_t) op);
                msg.optim = za_optim_config_default ((za_optimizer_t) kind);
                msg.optim.learning_rate = 0.01f;
                msg.has_optim = 1;
                snprintf (label, sizeof label, "init/opt%d", kind);
                s_show (label, &msg);
                msg.optim.weight_decay = 0.004f;
                msg.optim.nesterov = 1;
                za_schedule_parse ("cosine_decay(decay_steps=1000, alpha=0.1)", &msg.optim.schedule);
                snprintf (label, sizeof label, "init/opt%d-scheduled", kind);
                s_show (label, &msg);
            }
        }
    }
    return 0;
}
