/*  za_settings.c: the built-in option table (every setting of the runtime,
    declared once) and the one place each group of settings becomes what a
    layer below takes: a RunConfig, an optimizer, heartbeat timings.        */
#include "za_settings.h"
#include "za/za_broker.h"
#include "za/za_curve.h"
#include "za/za_evaluator.h"
#include "za/za_idx.h"
#include "za/za_images.h"
#include "za/za_preempt.h"

#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <string.h>

//  A number's text, for a default the table shares with a lower layer.
#define ZA_TEXT_OF(x) #x
#define ZA_TEXT(x) ZA_TEXT_OF (x)
#define INT_MAX_D 9.2e18            //  as large as an int64 parses to exactly enough
#define NO_MAX HUGE_VAL

//  Shorthands for the table below.
#define R_ALL ZA_READ_ALL
#define R_TRAIN (ZA_READ_TRAINERS)
#define R_SUMMARY (ZA_READ_SINGLE | ZA_READ_CHIEF)
//  The optimizer's: all-reduce workers apply it themselves (and compare it
//  with the chief's), a ps-strategy worker clips.
#define R_OPTIM (ZA_READ_TRAINERS)
#define R_EVAL (ZA_READ_SINGLE | ZA_READ_CHIEF | ZA_READ_EVALUATOR | ZA_READ_LAUNCHER)
#define R_CLUSTER (ZA_READ_TASKS)
#define R_BEAT (ZA_READ_TASKS | ZA_READ_BROKER | ZA_READ_LAUNCHER)
#define R_LOCAL (ZA_READ_BROKER | ZA_READ_LAUNCHER)
#define JOB ZA_SCOPE_JOB
#define PROC ZA_SCOPE_PROCESS
#define T_FLAG ZA_OPTION_FLAG
#define T_INT ZA_OPTION_INT
#define T_NUM ZA_OPTION_NUMBER
#define T_STR ZA_OPTION_STRING
#define T_CHOICE ZA_OPTION_CHOICE
#define T_LIST ZA_OPTION_LIST
#define T_REAL ZA_OPTION_REAL
#define T_ENUM ZA_OPTION_ENUM
#define T_RANGE ZA_OPTION_RANGE

static const za_option_t s_options [] = {
    //  flag, type, field, value name, default, min, max, choices, readers, scope, flags,
    //  section, help
    ZA_OPTION ("model", T_STR, model, "SPEC", "cnn", 0, 0, NULL, R_ALL, JOB, ZA_OPTION_STACK,
               "Model and data",
               "cnn (the seed CNN), dnn, linear, vgg16 (its base, a global\n"
               "average pool, a dense layer), or a layer stack such as\n"
               "\"conv2d(32,3,relu) maxpool(2) flatten dense(64,relu) dense(10)\""),
    ZA_OPTION ("hidden-units", T_LIST, hidden_units, "LIST", "128", 1, 1 << 20, NULL, R_ALL,
               JOB, ZA_OPTION_STACK, NULL, "hidden layers of --model dnn, e.g. 256,128"),
    ZA_OPTION ("dataset-dir", T_STR, dataset_dir, "DIR", ZA_FASHION_MNIST_DIR, 0, 0, NULL,
               R_ALL, JOB, 0, NULL, "holds {train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz]"),
    ZA_OPTION ("train-data", T_STR, train_data, "SPEC", NULL, 0, 0, NULL, R_ALL, JOB,
               ZA_OPTION_IDX_INPUT, NULL,
               "train on your own images: a DIR of one folder per class of\n"
               ".jpg/.jpeg/.png files (Keras's image_dataset_from_directory),\n"
               "a pattern of images labelled by their folder ('DIR/**/*.jpeg'),\n"
               "or TFRecord files of tf.train.Example ('DIR/train-*', a file,\n"
               "or tfrecord:PATTERN; plain or GZIP)"),
    ZA_OPTION ("image-size", T_LIST, image_size, "H,W", ZA_TEXT (ZA_IMAGE_SIZE), 1,
               ZA_IMAGE_SIDE_MAX, NULL, R_ALL, JOB, ZA_OPTION_IDX_INPUT, NULL,
               "--train-data: every image is resized to H x W (one number: square)"),
    ZA_OPTION ("channels", T_INT, channels, "N", ZA_TEXT (ZA_IMAGE_CHANNELS), 1, 3, NULL,
               R_ALL, JOB, ZA_OPTION_IDX_INPUT, NULL, "--train-data: 1 (gray) or 3 (RGB)"),
    ZA_OPTION ("resize", T_CHOICE, resize, "HOW", "area", 0, 0, "area|bilinear", R_ALL, JOB,
               ZA_OPTION_IDX_INPUT, NULL,
               "--train-data: area (each pixel the mean of what it covers) or\n"
               "bilinear (Keras's default; aliases when it shrinks much)"),
    ZA_OPTION ("crop-to-aspect-ratio", T_FLAG, crop_to_aspect_ratio, NULL, NULL, 0, 0, NULL,
               R_ALL, JOB, ZA_OPTION_IDX_INPUT, NULL,
               "--train-data: resize the largest centred crop of H:W's shape"),
    ZA_OPTION ("class-names", T_STR, class_names, "A,B,..", NULL, 0, 0, NULL, R_ALL, JOB,
               ZA_OPTION_IDX_INPUT, NULL,
               "--train-data: these class folders, labels in this order\n"
               "(default: every folder, sorted)"),
    ZA_OPTION ("validation-split", T_NUM, validation_split, "F", "0", 0, 0.99, NULL, R_ALL,
               JOB, ZA_OPTION_IDX_INPUT, NULL,
               "--train-data: hold out the last F of the seeded shuffle of the\n"
               "files and evaluate on them (Keras's validation_split)"),
    ZA_OPTION ("image-key", T_STR, image_key, "KEY", ZA_IMAGES_IMAGE_KEY, 0, 0, NULL, R_ALL,
               JOB, ZA_OPTION_IDX_INPUT, NULL, "TFRecord: the feature of the encoded image"),
    ZA_OPTION ("label-key", T_STR, label_key, "KEY", ZA_IMAGES_LABEL_KEY, 0, 0, NULL, R_ALL,
               JOB, ZA_OPTION_IDX_INPUT, NULL, "TFRecord: the int64 feature of the label"),
    ZA_OPTION ("label-base", T_INT, label_base, "N", "0", 0, 1, NULL, R_ALL, JOB,
               ZA_OPTION_IDX_INPUT, NULL,
               "TFRecord: the label of the first class: 0, or 1 for files\n"
               "written by TensorFlow's build_image_data.py (0 = background)"),
    ZA_OPTION ("cache", T_CHOICE, cache, "WHERE", "none", 0, 0, "none|memory|disk", R_ALL,
               JOB, ZA_OPTION_IDX_INPUT, NULL,
               "keep decoded images (as bytes at --image-size) after the first\n"
               "epoch: in memory, or on disk in MODEL_DIR/cache/, reused by the\n"
               "next run for every file that has not changed (tf.data's cache)"),
    ZA_OPTION ("warm-start-from", T_STR, run.warm_start.from, "PATH", NULL, 0, 0, NULL, R_ALL,
               JOB, 0, "Transfer learning (WarmStartSettings)",
               "a fresh --model-dir starts from these weights: a checkpoint, a\n"
               "model dir (its newest), a safetensors file of another framework\n"
               "or an ONNX model (*.onnx: its initializers); a checkpoint in\n"
               "--model-dir wins, as in TensorFlow"),
    ZA_OPTION ("warm-start-vars", T_STR, run.warm_start.vars, "REGEX", NULL, 0, 0, NULL, R_ALL,
               JOB, 0, NULL,
               "the variables loaded: a regex matched from the start of each\n"
               "name (default: all); the others keep their initial values"),
    ZA_OPTION ("warm-start-rename", T_STR, run.warm_start.rename, "NEW=OLD,..", NULL, 0, 0, NULL,
               R_ALL, JOB, 0, NULL,
               "the model's NEW is loaded from the file's OLD"),
    ZA_OPTION ("warm-start-layout", T_ENUM, run.warm_start.layout, "L", "zactor", 0, 0,
               "zactor|keras|torch", R_ALL, JOB, 0, NULL,
               "the file's weights: zactor or keras (conv HWIO, dense [in,out])\n"
               "or torch (conv OIHW, dense [out,in]), turned into zactor's"),
    ZA_OPTION ("freeze", T_STR, freeze, "REGEX", NULL, 0, 0, NULL, R_ALL, JOB,
               ZA_OPTION_STACK, NULL,
               "these variables do not train (Keras's trainable=False; a regex\n"
               "matched from the start of each name, 'conv2d' freezes every\n"
               "conv2d layer): no update, no optimizer slots, and backward\n"
               "stops below the lowest layer that trains"),
    ZA_OPTION ("trainable", T_STR, trainable, "REGEX", NULL, 0, 0, NULL, R_ALL, JOB,
               ZA_OPTION_STACK, NULL, "only these variables train (the others are frozen)"),
    ZA_OPTION ("cache-frozen", T_FLAG, cache_frozen, NULL, NULL, 0, 0, NULL, R_ALL, JOB,
               ZA_OPTION_STACK, NULL,
               "keep what the frozen layers below the lowest that trains make of\n"
               "each example (bf16, in memory, at most a quarter of it): the\n"
               "next epochs run the layers that train alone (CPU)"),
    ZA_OPTION ("augment", T_STR, augment, "STEPS", NULL, 0, 0, NULL, R_TRAIN, JOB, 0, NULL,
               "random augmentation of each training example (never evaluation's),\n"
               "steps separated by spaces: pad_crop(P) (shift by up to P pixels,\n"
               "black border), flip (left-right, half the time), brightness(D),\n"
               "contrast(D); drawn from --seed, so a run repeats. Not with\n"
               "--cache-frozen (the cache would keep one epoch's)"),
    ZA_OPTION ("preprocess", T_CHOICE, preprocess, "MODE", "none", 0, 0, "none|tf|torch|caffe",
               R_ALL, JOB, ZA_OPTION_IDX_INPUT, NULL,
               "pixels into the model's input (Keras's preprocess_input): none\n"
               "0..1, tf -1..1, torch ImageNet mean/std (torchvision's weights),\n"
               "caffe BGR minus ImageNet's mean (Keras's VGG16 weights)"),
    ZA_OPTION ("input-threads", T_INT, input_threads, "N", "1", 1, 64, NULL,
               R_TRAIN | ZA_READ_EVALUATOR | R_LOCAL, JOB, ZA_OPTION_IDX_INPUT, NULL,
               "threads decoding a worker's (an evaluation's, predict's) images"),
    ZA_OPTION ("max-bad-images", T_STR, max_bad_images, "N|F%", "1%", 0, 0, NULL, R_ALL, JOB,
               ZA_OPTION_IDX_INPUT, NULL,
               "images that do not decode are skipped, each named once; when\n"
               "more than N (or F% of the images a task reads: its shard, the\n"
               "evaluation set) fail, the run ends with an error instead of\n"
               "training on what is left ('100%': skip any number)"),
    ZA_OPTION ("batch-size", T_INT, batch_size, "N",
               ZA_TEXT (ZA_ROLE_BATCH_SIZE), 1, 65536, NULL, R_TRAIN | R_LOCAL, JOB, 0, NULL,
               "training batch size, per worker"),
    ZA_OPTION ("shuffle-buffer", T_INT, shuffle_buffer, "N", "-1", -1, INT32_MAX, NULL,
               R_TRAIN, JOB, ZA_OPTION_IDX_INPUT, NULL, "examples in the shuffle buffer; -1: the whole set, 0: none"),
    //  The choices in za_optimizer_t's order: the option writes the kind.
    ZA_OPTION ("optimizer", T_ENUM, optim.kind, "NAME", "adam", 0, 0,
               "sgd|momentum|adam|adagrad", R_OPTIM, JOB, 0, "Training",
               "sgd, momentum, adam or adagrad"),
    ZA_OPTION ("learning-rate", T_REAL, optim.learning_rate, "LR", NULL, 0, NO_MAX, NULL,
               R_OPTIM, JOB, ZA_OPTION_ABOVE_MIN, NULL,
               "the step size (by default the optimizer's own, as Keras's:\n"
               "0.001 for adam, 0.01 for the others)"),
    ZA_OPTION ("weight-decay", T_REAL, optim.weight_decay, "WD", "0", 0, 0.999, NULL,
               R_OPTIM, JOB, 0, NULL,
               "decoupled weight decay, as Keras's weight_decay: each update\n"
               "first takes lr x WD x w off every weight (adam: AdamW, sgd: SGDW)"),
    ZA_OPTION ("clip-norm", T_REAL, optim.global_clipnorm, "N", "0", 0, NO_MAX, NULL,
               R_OPTIM, JOB, 0, NULL,
               "clip the whole gradient to a global norm of at most N before each\n"
               "update (Keras's global_clipnorm; 0: none): where it is whole, a\n"
               "worker before its pushes, each all-reduce worker after the ring"),
    ZA_OPTION ("lr-schedule", T_STR, lr_schedule, "SCHEDULE", NULL, 0, 0, NULL, R_OPTIM, JOB,
               0, NULL,
               "the learning rate by global step, as TensorFlow's schedules:\n"
               "exponential_decay(decay_steps=N, decay_rate=R, staircase=false),\n"
               "piecewise_constant(boundaries=[..], values=[..]),\n"
               "cosine_decay(decay_steps=N, alpha=0), cosine_decay_restarts(\n"
               "first_decay_steps=N, t_mul=2, m_mul=1, alpha=0),\n"
               "polynomial_decay(decay_steps=N, end_learning_rate=0.0001,\n"
               "power=1, cycle=false); from --learning-rate"),
    ZA_OPTION ("lr-warmup-steps", T_INT, lr_warmup_steps, "N", "0", 0, INT_MAX_D, NULL,
               R_OPTIM, JOB, 0, NULL,
               "the rate rises linearly over the first N steps to the schedule's"),
    ZA_OPTION ("max-steps", T_INT, max_steps, "N", NULL, 1, INT_MAX_D, NULL, R_ALL, JOB, 0,
               NULL, "train until global_step N (default: --epochs worth)"),
    ZA_OPTION ("epochs", T_INT, epochs, "N", "5", 1, 100000, NULL, R_ALL, JOB, 0, NULL,
               "epochs of the training set when --max-steps is not given"),
    ZA_OPTION ("no-eval", T_FLAG, no_eval, NULL, NULL, 0, 0, NULL, R_SUMMARY, JOB, 0, NULL,
               "skip the evaluation on the test set at the end"),
    ZA_OPTION ("strategy", T_ENUM, strategy, "NAME", "ps-async", 0, 0,
               ZA_STRATEGY_CHOICES "|multi_worker_mirrored=allreduce", R_ALL, JOB, 0,
               NULL,
               "ps-async: parameter servers apply each push at once;\n"
               "allreduce (multi_worker_mirrored): no ps, the workers average\n"
               "their gradients each step over a ring and stay identical (a\n"
               "global step is then workers x batch examples); ps-sync: the ps\n"
               "apply the mean of --replicas-to-aggregate pushes once per step"),
    ZA_OPTION ("replicas-to-aggregate", T_INT, replicas_to_aggregate, "N", "0", 0,
               ZA_BROKER_MAX_TASKS, NULL, R_ALL, JOB, 0, NULL,
               "ps-sync: gradients the ps average into each step (0: one from\n"
               "every worker); with fewer than the workers, the rest are backups\n"
               "whose late gradients are dropped"),
    ZA_OPTION ("partition-kib", T_INT, partition_kib, "N", ZA_TEXT (ZA_ROLE_PARTITION_KIB), 0,
               1 << 30, NULL, R_TRAIN | ZA_READ_PS, JOB, 0, NULL,
               "ps: a variable of more than N KiB is split into parts of at most\n"
               "N KiB spread over the ps, as TensorFlow's MaxSizePartitioner\n"
               "(0: never split). Every task of a job must agree"),
    ZA_OPTION ("wire-dtype", T_CHOICE, wire_dtype, "T", "fp32", 0, 0, "fp32|bf16",
               R_TRAIN | ZA_READ_PS, JOB, 0, NULL,
               "what gradients and values travel as: fp32, or bf16 (half the\n"
               "bytes, as Horovod's compression): pushes to the ps and the values\n"
               "it returns, and the all-reduce ring's chunks; sums and the\n"
               "optimizer stay fp32. Every task of a job must agree. It pays\n"
               "across links; tasks on one host share memory, where fp32 is\n"
               "as fast"),
    ZA_OPTION ("bucket-kib", T_INT, bucket_kib, "N", "0", 0, 1 << 20, NULL, R_TRAIN, JOB, 0,
               NULL,
               "allreduce: the gradients go round the ring in buckets of whole\n"
               "variables of at least N KiB, the last layer's first, each as soon\n"
               "as backward has made it, beside it (0: one bucket, after backward:\n"
               "faster where no core is spare; bench/ring_overlap.sh measures)"),
    ZA_OPTION ("model-dir", T_STR, run.model_dir, "DIR", "runs/fmnist", 0, 0, NULL, R_ALL, JOB, 0,
               "RunConfig (TensorFlow's names)",
               "checkpoints and metrics; training continues from the newest\n"
               "checkpoint there"),
    ZA_OPTION ("save-checkpoints-steps", T_INT, run.save_checkpoints_steps, "N", "0", 0,
               INT_MAX_D, NULL, R_SUMMARY, JOB, 0, NULL,
               "a checkpoint each time global_step reaches a multiple of N\n"
               "(0: by --save-checkpoints-secs)"),
    ZA_OPTION ("save-checkpoints-secs", T_NUM, run.save_checkpoints_secs, "S",
               ZA_TEXT (ZA_RUN_SAVE_CHECKPOINTS_SECS), 0, NO_MAX, NULL, R_SUMMARY, JOB, 0, NULL,
               "a checkpoint every S seconds (0: only the last)"),
    ZA_OPTION ("keep-checkpoint-max", T_INT, run.keep_checkpoint_max, "N",
               ZA_TEXT (ZA_RUN_KEEP_CHECKPOINT_MAX), 0, 1000000, NULL, R_SUMMARY, JOB, 0, NULL,
               "checkpoints kept (0 keeps all)"),
    ZA_OPTION ("log-step-count-steps", T_INT, run.log_step_count_steps, "N",
               ZA_TEXT (ZA_RUN_LOG_STEP_COUNT_STEPS), 0, INT_MAX_D, NULL, R_TRAIN, JOB, 0, NULL,
               "a log line each time global_step reaches a multiple of N (0: none)"),
    ZA_OPTION ("save-summary-steps", T_INT, run.save_summary_steps, "N",
               ZA_TEXT (ZA_RUN_SAVE_SUMMARY_STEPS), 0, INT_MAX_D, NULL, R_SUMMARY, JOB, 0, NULL,
               "a metrics.jsonl line and TensorBoard scalars each time global_step\n"
               "reaches a multiple of N (0: none)"),
    ZA_OPTION ("seed", T_INT, run.seed, "N", ZA_TEXT (ZA_RUN_SEED), 0, INT_MAX_D, NULL, R_TRAIN,
               JOB, 0, NULL,
               "random seed for initialisation, shuffling, dropout; a resumed\n"
               "run reads on in the same order from where its checkpoint was"),
    ZA_OPTION ("threads", T_INT, run.threads, "N", "0", 0, 64, NULL,
               R_TRAIN | ZA_READ_EVALUATOR, JOB, 0, NULL,
               "compute threads; 0: the cores, shared by the tasks of a cluster\n"
               "on this machine (--train-and-evaluate's evaluator takes them too\n"
               "while it evaluates)"),
    ZA_OPTION ("device", T_STR, device, "DEV", "cpu", 0, 0, NULL, R_TRAIN | ZA_READ_EVALUATOR,
               JOB, 0, NULL,
               "where the model computes: cpu, cuda (= cuda:0), cuda:N, or\n"
               "cuda:all (a replica per GPU, the batch split across them, as\n"
               "TensorFlow's MirroredStrategy); needs a build with the CUDA back\n"
               "end (-DZA_CUDA) and a GPU. Checkpoints are the same on any device"),
    ZA_OPTION ("precision", T_ENUM, run.precision, "P", "fp32", 0, 0, ZA_POLICY_CHOICES,
               R_TRAIN | ZA_READ_EVALUATOR, JOB, 0, NULL,
               "the matrix products' inputs, as Keras's mixed-precision policies:\n"
               "fp32 (float32), mixed_bfloat16 (bf16 inputs, fp32 sums: CPUs with\n"
               "AVX512-BF16 or AMX, GPUs from Ampere), mixed_float16 (GPUs; with\n"
               "dynamic loss scaling), or auto (bf16 where the machine computes it,\n"
               "else fp32). Weights, optimizer and checkpoints stay fp32. On a GPU\n"
               "from Ampere, fp32 convolutions multiply in TF32 as PyTorch's and\n"
               "TensorFlow's do; NVIDIA_TF32_OVERRIDE=0 in the environment keeps\n"
               "them in strict fp32"),
    ZA_OPTION ("replicas-per-device", T_INT, run.replicas_per_device, "N", "1", 1, 64, NULL,
               R_TRAIN, JOB, 0, NULL,
               "--device cuda: model replicas on each GPU, each a slice of the\n"
               "batch, their gradients summed before one update"),
    ZA_OPTION ("train-and-evaluate", T_FLAG, train_and_evaluate, NULL, NULL, 0, 0, NULL,
               ZA_READ_SINGLE, PROC, 0, "Evaluation (EvalSpec)",
               "train and run the evaluator together in this process"),
    ZA_OPTION ("eval-data", T_STR, eval_data, "SPEC", NULL, 0, 0, NULL, R_EVAL, JOB, 0, NULL,
               "evaluate on SPEC/t10k-* (default: --dataset-dir's); with\n"
               "--train-data, on SPEC's images (a folder, a pattern, TFRecords)"),
    ZA_OPTION ("eval-name", T_STR, eval.name, "NAME", NULL, 0, 0, NULL, R_EVAL, JOB, 0, NULL,
               "results in MODEL_DIR/eval_NAME (default: MODEL_DIR/eval)"),
    ZA_OPTION ("eval-metrics", T_STR, eval.eval_metrics, "LIST", NULL, 0, 0, NULL, R_EVAL, JOB,
               0, NULL,
               "also report these (separated by spaces or commas), exactly over\n"
               "the whole set: precision, recall, f1 (per class and macro),\n"
               "auc, pr_auc (one class against the rest), top_k(K),\n"
               "confusion_matrix (also an image in TensorBoard), or all;\n"
               "accuracy and loss are always reported (accuracy is taken)"),
    ZA_OPTION ("best-metric", T_STR, eval.best_metric, "M[,max|min]", "accuracy", 0, 0, NULL,
               R_EVAL, JOB, 0, NULL,
               "keep the checkpoint best by M in MODEL_DIR/export/best: loss,\n"
               "accuracy or one of --eval-metrics; names ending in loss are\n"
               "better lower, others higher, unless ,max or ,min says"),
    ZA_OPTION ("export-onnx", T_FLAG, eval.export_onnx, NULL, NULL, 0, 0, NULL, R_EVAL, JOB, 0,
               NULL, "write the best checkpoint as MODEL_DIR/export/best/model.onnx\n"
               "too (zactor-ckpt export's), beside it and input.json"),
    ZA_OPTION ("stop-if-no-improvement", T_STR, eval.stop_if_no_improvement,
               "M,STEPS[,max|min]", NULL, 0, 0, NULL, R_ALL, JOB, 0, NULL,
               "early stopping: when the evaluations' M has not improved for\n"
               "STEPS global steps, the evaluator asks the chief to stop; the\n"
               "whole cluster ends cleanly with a final checkpoint, exit 0\n"
               "(needs an evaluator: --train-and-evaluate, --evaluators N)"),
    ZA_OPTION ("eval-steps", T_INT, eval.steps, "N", NULL, 1, INT_MAX_D, NULL, R_EVAL, JOB, 0,
               NULL, "batches per evaluation, of " ZA_TEXT (ZA_EVAL_BATCH) " examples each\n"
               "(default: the whole set)"),
    ZA_OPTION ("start-delay-secs", T_NUM, eval.start_delay_secs, "S",
               ZA_TEXT (ZA_EVAL_START_DELAY_SECS), 0, NO_MAX, NULL,
               ZA_READ_SINGLE | ZA_READ_EVALUATOR | ZA_READ_LAUNCHER, JOB, 0, NULL,
               "the evaluator starts after S seconds"),
    ZA_OPTION ("throttle-secs", T_NUM, eval.throttle_secs, "S",
               ZA_TEXT (ZA_EVAL_THROTTLE_SECS), 0, NO_MAX, NULL,
               ZA_READ_SINGLE | ZA_READ_EVALUATOR | ZA_READ_LAUNCHER, JOB, 0, NULL,
               "at most one evaluation per S seconds"),
    ZA_OPTION ("data", T_STR, data, "SPEC", NULL, 0, 0, NULL, ZA_READ_SINGLE, PROC, 0,
               "Prediction (zactor-run predict --model-dir DIR --data SPEC)",
               "predict these images: a folder (every image below it), a pattern,\n"
               "one file, or TFRecord files (default: --dataset-dir's t10k IDX)"),
    ZA_OPTION ("checkpoint", T_STR, checkpoint, "FILE", NULL, 0, 0, NULL, ZA_READ_SINGLE, PROC,
               0, NULL, "predict with this checkpoint (default: the newest in --model-dir)"),
    ZA_OPTION ("output", T_STR, output, "FILE", "-", 0, 0, NULL, ZA_READ_SINGLE, PROC, 0, NULL,
               "write the predictions to FILE (default: standard output)"),
    ZA_OPTION ("format", T_CHOICE, format, "FMT", "jsonl", 0, 0, "jsonl|csv", ZA_READ_SINGLE,
               PROC, 0, NULL,
               "one line per image: jsonl ({\"file\", \"class\", \"probabilities\"})\n"
               "or csv (file,class,p_CLASS...)"),
    ZA_OPTION ("logits", T_FLAG, logits, NULL, NULL, 0, 0, NULL, ZA_READ_SINGLE, PROC, 0, NULL,
               "write each image's logits too (the output before the softmax, as\n"
               "the Estimator's predictions hold them; every number to 9 digits)"),
    ZA_OPTION ("port", T_INT, port, "N", "8501", 0, 65535, NULL, ZA_READ_SINGLE, PROC, 0,
               "Serving (zactor-run serve --model-dir DIR: TensorFlow Serving's REST API)",
               "the REST API's port (TF Serving's --rest_api_port; 0: any free one)"),
    ZA_OPTION ("listen", T_STR, listen, "ADDR", "127.0.0.1", 0, 0, NULL, ZA_READ_SINGLE, PROC,
               0, NULL, "the address it listens on: 127.0.0.1 serves this machine only;\n"
               "0.0.0.0 every network (no CURVE here: put it behind your proxy)"),
    ZA_OPTION ("model-name", T_STR, model_name, "NAME", NULL, 0, 0, NULL, ZA_READ_SINGLE, PROC,
               0, NULL, "the NAME of /v1/models/NAME:predict (default: --model-dir's last\n"
               "part)"),
    ZA_OPTION ("max-batch-size", T_INT, max_batch_size, "N", "32", 1, 1 << 20, NULL,
               ZA_READ_SINGLE, PROC, 0, NULL,
               "concurrent requests' instances run as one batch, up to N (TF\n"
               "Serving's batching parameters); a larger request runs alone"),
    ZA_OPTION ("batch-timeout-micros", T_INT, batch_timeout_micros, "US", "0", 0,
               60000000, NULL, ZA_READ_SINGLE, PROC, 0, NULL,
               "how long a batch waits for more requests before it runs (0: it\n"
               "takes the requests already queued and runs at once)"),
    ZA_OPTION ("num-batch-threads", T_INT, num_batch_threads, "N", "0", 0, 1024, NULL,
               ZA_READ_SINGLE, PROC, 0, NULL, "batches that run at once (0: one per core)"),
    ZA_OPTION ("poll-secs", T_NUM, poll_secs, "S", "1", 0.01, 86400, NULL, ZA_READ_SINGLE,
               PROC, 0, NULL,
               "look for a newer checkpoint every S seconds and serve it once it\n"
               "loads (TF Serving's --file_system_poll_wait_seconds)"),
    ZA_OPTION ("max-body-bytes", T_INT, max_body_bytes, "N", "67108864", 1024, INT_MAX_D,
               NULL, ZA_READ_SINGLE, PROC, 0, NULL,
               "a request body larger than N bytes is refused (413)"),
    ZA_OPTION ("replay", T_FLAG, eval.replay, NULL, NULL, 0, 0, NULL, ZA_READ_EVALUATOR, PROC,
               0, NULL, "with --role evaluator: evaluate every checkpoint in --model-dir\n"
               "in step order, then exit"),
    ZA_OPTION ("role", T_CHOICE, role, "ROLE", NULL, 0, 0, "chief|worker|ps|evaluator|broker",
               R_CLUSTER | ZA_READ_BROKER, PROC, 0,
               "Distributed (asynchronous parameter-server training, like TF_CONFIG)",
               "chief, worker, ps, evaluator or broker (default: the task in\nTF_CONFIG)"),
    ZA_OPTION ("index", T_INT, index, "N", "-1", -1, 1 << 20, NULL, R_CLUSTER, PROC, 0, NULL,
               "this task's index in its job (-1: 0, or any free one with --broker)"),
    ZA_OPTION ("cluster", T_STR, cluster, "FILE", NULL, 0, 0, NULL, R_CLUSTER, PROC, 0, NULL,
               "the cluster as TF_CONFIG JSON (default: $TF_CONFIG); every task\n"
               "gets the same model and training settings"),
    ZA_OPTION ("timeout-secs", T_NUM, timeout_secs, "S",
               ZA_TEXT (ZA_ROLE_TIMEOUT_SECS), 0, NO_MAX, NULL, R_CLUSTER, JOB,
               ZA_OPTION_ABOVE_MIN, NULL,
               "a peer never heard from this long is unreachable: exit 1; a\n"
               "stopped ps is waited for this long, and a host of the cluster\n"
               "(or the broker's) that does not resolve"),
    ZA_OPTION ("heartbeat-ivl-ms", T_INT, heartbeat_ivl_ms, "N",
               ZA_TEXT (ZA_HEARTBEAT_IVL_MS), 10, 3600000, NULL, R_BEAT, JOB, 0, NULL,
               "heartbeat interval: a worker waiting on a ps pings it, every task\n"
               "reports to the broker, this often"),
    ZA_OPTION ("heartbeat-liveness", T_INT, heartbeat_liveness, "N",
               ZA_TEXT (ZA_HEARTBEAT_LIVENESS), 1, 1000, NULL, R_BEAT, JOB, 0, NULL,
               "a peer silent N intervals is stopped, hung or gone: a worker logs\n"
               "its ps so (and waits on, up to --timeout-secs), a ps lets a hold\n"
               "lapse, a supervising broker kills and restarts the task"),
    ZA_OPTION ("broker", T_STR, broker, "ADDR", NULL, 0, 0, NULL, R_CLUSTER, PROC, 0, NULL,
               "with --role ROLE [--index N]: join the cluster of the broker at\n"
               "ADDR; the job comes from the broker, so nothing else is needed"),
    ZA_OPTION ("host", T_STR, host, "NAME", NULL, 0, 0, NULL, R_CLUSTER, PROC, 0, NULL,
               "how other machines reach this one (default: the host name;\n"
               "127.0.0.1 with a broker on loopback); a ps or an all-reduce\n"
               "worker given a name listens on every interface"),
    ZA_OPTION ("local", T_FLAG, local, NULL, NULL, 0, 0, NULL, ZA_READ_LAUNCHER, PROC, 0,
               "The whole cluster on this machine, and the broker",
               "a broker supervising a chief, --workers workers, --ps ps and\n"
               "an evaluator on this machine, one progress bar, the final test\n"
               "accuracy at the end. Its defaults: 10 epochs, a checkpoint\n"
               "every 1000 steps, evaluations every 10 s. Watch it with\n"
               "zactor-top; logs in MODEL_DIR/logs, events in events.jsonl"),
    ZA_OPTION ("workers", T_RANGE, workers, "N|MIN:MAX", "2", 0, ZA_BROKER_MAX_TASKS - 1, NULL,
               R_LOCAL, JOB, 0, NULL,
               "workers besides the chief (a job says \"roles\": {\"worker\": N}).\n"
               "MIN:MAX makes the job elastic (torchrun's --nnodes MIN:MAX): MIN\n"
               "are started, more may join with --role worker --broker ADDR\n"
               "while it runs, and one lost for --elastic-timeout is dropped\n"
               "(docs/fault-tolerance.md)"),
    ZA_OPTION ("elastic-timeout", T_NUM, elastic_timeout, "SECS",
               ZA_TEXT (ZA_BROKER_ELASTIC_TIMEOUT_SECS), 0, 86400, NULL, R_LOCAL, JOB,
               ZA_OPTION_ABOVE_MIN, NULL,
               "elastic jobs: a worker above MIN that is silent (or failed) this\n"
               "long is dropped, and the others go on without it"),
    ZA_OPTION ("elastic-batch", T_ENUM, elastic_batch, "RULE", "global", 0, 0,
               ZA_ELASTIC_BATCH_CHOICES "|torchelastic=per-worker|horovod=scale-lr",
               R_ALL, JOB, 0, NULL,
               "elastic jobs, when the workers change: global keeps the global\n"
               "batch (--batch-size x the trainers it starts with) and the\n"
               "learning rate, the trainers sharing each batch; per-worker\n"
               "(torchelastic) keeps each worker's --batch-size; scale-lr\n"
               "(horovod) keeps it too and scales the learning rate by the\n"
               "trainers now over those at the start"),
    ZA_OPTION ("ps", T_INT, ps, "N", "1", 0, ZA_ROLE_MAX_PS, NULL, R_LOCAL, JOB, 0, NULL,
               "parameter servers"),
    ZA_OPTION ("evaluators", T_INT, evaluators, "N", "1", 0, 1, NULL, R_LOCAL, JOB, 0, NULL,
               "evaluator tasks, 0 or 1"),
    ZA_OPTION ("job", T_STR, job, "FILE", NULL, 0, 0, NULL, R_ALL, ZA_SCOPE_COMMAND, 0, NULL,
               "the job as JSON. Keys are these flags' names with '_' for '-'\n"
               "(max_steps, model_dir, ...), at the top or in sections\n"
               "(run_config, train_spec, eval_spec, ...), plus \"roles\":\n"
               "{\"chief\": 1, \"worker\": 2, \"ps\": 1, \"evaluator\": 1}. Flags win"),
    ZA_OPTION ("bind", T_STR, bind, "EP", NULL, 0, 0, NULL, ZA_READ_BROKER | ZA_READ_PS, PROC,
               0, NULL,
               "with --role broker: bind EP (e.g. tcp://*:5555); the broker keeps\n"
               "the registry, task indexes, the cluster view, heartbeats and\n"
               "events, and ends when every task of the job has finished. With\n"
               "--role ps: bind EP instead of the address the cluster names"),
    ZA_OPTION ("supervise", T_FLAG, supervise, NULL, NULL, 0, 0, NULL, ZA_READ_BROKER, PROC, 0,
               NULL, "with --role broker: start every task of the job (this program)\n"
               "and restart any that exits with an error, is killed or misses\n"
               "heartbeats, with backoff from " ZA_TEXT (ZA_BROKER_BACKOFF_SECS) " s to "
               ZA_TEXT (ZA_BROKER_BACKOFF_MAX_SECS) " s"),
    ZA_OPTION ("max-restarts", T_INT, max_restarts, "N",
               ZA_TEXT (ZA_BROKER_MAX_RESTARTS), 0, 1000000, NULL, R_LOCAL, JOB,
               0, NULL, "restarts per task before the job fails"),
    ZA_OPTION ("requeue-exit-code", T_INT, requeue_exit_code, "N", ZA_TEXT (ZA_EXIT_REQUEUE),
               3, 125, NULL, R_ALL, JOB, 0, NULL,
               "exit status of a preempted job: SIGTERM (Slurm's --signal,\n"
               "Kubernetes' termination, or to --local) makes every trainer\n"
               "stop at one agreed step, write a checkpoint there and exit with\n"
               "N; the same command run again resumes from it (for sbatch\n"
               "--requeue, or a pod failure policy on this code)"),
    ZA_OPTION ("metrics-bind", T_STR, metrics_bind, "HOST:PORT", NULL, 0, 0, NULL, R_LOCAL,
               PROC, 0, NULL,
               "with --role broker or --local: serve the job's state to\n"
               "Prometheus at http://HOST:PORT/metrics (per task step, steps/s,\n"
               "examples/s, loss, last evaluation, restarts, heartbeat age, state;\n"
               "events by kind); *:PORT listens on every interface"),
    ZA_OPTION ("straggler-factor", T_NUM, straggler_factor, "X",
               ZA_TEXT (ZA_BROKER_STRAGGLER_FACTOR), 0, 1000, NULL, R_LOCAL, JOB, 0, NULL,
               "name a trainer a straggler (zactor-top, events.jsonl, Prometheus)\n"
               "while its own time a step (not counting waits for the others)\n"
               "stays above X times the other trainers' median, with the phase\n"
               "it is slowest in; 0: never"),
    ZA_OPTION ("trace", T_STR, trace, "FILE", NULL, 0, 0, NULL, R_ALL, JOB, 0, NULL,
               "record where every task's steps go (input, compute, push/pull or\n"
               "the ring, apply, checkpoints, evaluations) and write it as one\n"
               "Chrome trace-event file at the end (Perfetto, chrome://tracing;\n"
               "each task's own in MODEL_DIR/trace/ as it runs), every task's\n"
               "times on the broker's clock"),
    ZA_OPTION ("trace-max-mb", T_NUM, trace_max_mb, "MB", "100", 0, 1 << 20, NULL, R_ALL, JOB,
               0, NULL, "--trace: each task keeps at most this much of its trace, the\n"
               "newest (its file turns over at half of it); 0: no limit"),
    ZA_OPTION ("certs", T_STR, certs, "DIR", NULL, 0, 0, NULL, R_ALL, PROC, 0, "Security",
               "CURVE on every socket of the job (broker, ps, workers, the\n"
               "ring, zactor-top) with the cluster's certificate in DIR (make\n"
               "it with: zactor-run keygen DIR, and copy DIR to every host).\n"
               "A peer without it gets nothing and changes nothing. The\n"
               "broker hands it to the tasks it starts; it never travels on\n"
               "the wire"),
    ZA_OPTION ("insecure", T_FLAG, insecure, NULL, NULL, 0, 0, NULL, R_ALL, PROC, 0, NULL,
               "listen beyond loopback without --certs: anyone who reaches the\n"
               "port can join the job or write into the model (logged loudly)"),
    {NULL, 0, 0, NULL, NULL, 0, 0, NULL, 0, 0, 0, NULL, NULL},
};

const za_option_t *
za_settings_options (void)
{
    return s_options;
}

za_run_config_t
za_settings_run_config (const za_settings_t *s)
{
    za_run_config_t config = s->run;    //  what the options table sets
    config.progress = za_run_config_default ().progress;
    //  Checked by za_task_prepare: a bad text was refused there.
    za_device_parse (s->device, &config.device);
    config.eval_metrics = s->eval.eval_metrics;
    config.early_stopping = s->eval.stop_if_no_improvement != NULL;
    return config;
}

za_heartbeat_t
za_settings_heartbeat (const za_settings_t *s)
{
    za_heartbeat_t beat = {(double) s->heartbeat_ivl_ms / 1000.0, (int) s->heartbeat_liveness};
    return beat;
}

int
za_settings_replicas (const za_settings_t *settings, int num_workers)
{
    za_strategy_t strategy = settings->strategy;
    if (strategy == ZA_STRATEGY_PS_SYNC && settings->replicas_to_aggregate > 0)
        return (int) settings->replicas_to_aggregate;
    return strategy == ZA_STRATEGY_PS_ASYNC? 1: num_workers;
}

void
za_settings_workers_text (const za_settings_t *s, char *text, size_t size)
{
    if (s->workers.min == s->workers.max)
        snprintf (text, size, "%" PRId64, s->workers.max);
    else
        snprintf (text, size, "%" PRId64 " to %" PRId64, s->workers.min, s->workers.max);
}

int
za_settings_elastic (const za_settings_t *s)
{
    return s->workers.min < s->workers.max;
}

int
za_settings_bind_allowed (const za_settings_t *s, const char *endpoint)
{
    if (za_curve_loopback (endpoint) || s->certs)
        return 0;
    if (!s->insecure) {
        za_error ("%s listens beyond this machine, where anyone who reaches the port could "
                  "join the job or write into the model. Give --certs DIR (make DIR with: "
                  "zactor-run keygen DIR, and copy it to every host), or --insecure on a "
                  "network you trust", endpoint);
        return ZA_EXIT_USAGE;
    }
    za_info ("WARNING: --insecure: %s accepts ANYONE who can reach it, without "
             "authentication or encryption; use --certs DIR on a shared network", endpoint);
    return 0;
}
