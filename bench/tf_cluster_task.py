#!/usr/bin/env python3
"""tf_cluster_task.py: one task of a TensorFlow cluster training the seed CNN.

The task reads TF_CONFIG, as every TensorFlow task does.

  --strategy mwms   MultiWorkerMirroredStrategy: every worker runs
                    TensorFlow's custom training loop (Keras 3's model.fit
                    takes no MultiWorkerMirroredStrategy) on its part of
                    each global batch, BATCH examples each.
  --strategy ps     ParameterServerStrategy: the chief runs a custom
                    training loop through a ClusterCoordinator. Each step
                    is one worker's batch of BATCH examples, and the workers
                    apply their gradients to the ps asynchronously. ps and
                    workers are tf.distribute.Server processes.

Every half epoch's worth of examples, the chief (worker 0 under mwms)
evaluates on the 10,000 test images. It prints one JSON line per evaluation:
the seconds of training so far, the accuracy, the clock (before that
evaluation) and the seconds spent on the evaluations before it. It stops at --target accuracy, or after --epochs.

Run by bench/cluster_vs_tensorflow.py in bench/venv.sh's environment.
"""
import argparse
import json
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import numpy as np  # noqa: E402

from fashion_mnist import seed_cnn, split  # noqa: E402


def report(seconds, accuracy, step, evaluating):
    """seconds: of training; evaluating: of the evaluations so far."""
    print(json.dumps({"seconds": round(seconds, 3), "accuracy": round(float(accuracy), 4),
                      "step": int(step), "wall": time.time(),
                      "evaluating": round(evaluating, 3)}), flush=True)


def train_in_halves(args, model, half, run_half):
    """run_half() trains half an epoch (`half` steps); after each, the
    10,000 test images are evaluated and reported, until --target or
    --epochs."""
    xt, yt = split("t10k")
    trained, steps, evaluating = 0.0, 0, 0.0
    for _ in range(args.epochs * 2):
        began = time.perf_counter()
        run_half()
        trained += time.perf_counter() - began
        steps += half
        began = time.perf_counter()
        logits = np.concatenate([model(xt[i:i + 1000], training=False).numpy()
                                 for i in range(0, len(xt), 1000)])
        accuracy = float(np.mean(np.argmax(logits, 1) == yt))
        report(trained, accuracy, steps, evaluating)
        evaluating += time.perf_counter() - began
        if accuracy >= args.target:
            break


def mwms(args, tf, keras):
    """TensorFlow's custom training loop for MultiWorkerMirroredStrategy (the
    multi_worker_with_ctl tutorial's): Keras 3's model.fit takes no
    MultiWorkerMirroredStrategy."""
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    workers = strategy.num_replicas_in_sync
    x, y = split("train")
    global_batch = args.batch * workers
    ds = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(60000, seed=args.seed).repeat() \
        .batch(global_batch).prefetch(2)
    iterator = iter(strategy.experimental_distribute_dataset(ds))
    with strategy.scope():
        model = seed_cnn(keras)
        optimizer = keras.optimizers.Adam(1e-3)
        optimizer.build(model.trainable_variables)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=None)

    @tf.function
    def step(iterator):
        def replica(images, labels):
            with tf.GradientTape() as tape:
                loss = tf.nn.compute_average_loss(loss_fn(labels, model(images, training=True)),
                                                  global_batch_size=global_batch)
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
            return loss
        images, labels = next(iterator)
        return strategy.reduce(tf.distribute.ReduceOp.SUM,
                               strategy.run(replica, args=(images, labels)), axis=None)

    half = 60000 // global_batch // 2

    def run_half():
        for _ in range(half):
            step(iterator)

    train_in_halves(args, model, half, run_half)


def parameter_servers(args, tf, keras):
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    if resolver.task_type in ("worker", "ps"):
        server = tf.distribute.Server(resolver.cluster_spec(), job_name=resolver.task_type,
                                      task_index=resolver.task_id, protocol="grpc", start=True)
        server.join()
        return
    strategy = tf.distribute.ParameterServerStrategy(resolver)
    coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
    x, y = split("train")
    with strategy.scope():
        model = seed_cnn(keras)
        optimizer = keras.optimizers.Adam(1e-3)
        optimizer.build(model.trainable_variables)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(
        from_logits=True, reduction="sum_over_batch_size")

    def dataset_fn():
        return tf.data.Dataset.from_tensor_slices((x, y)).shuffle(60000).repeat() \
            .batch(args.batch).prefetch(2)

    iterator = iter(coordinator.create_per_worker_dataset(dataset_fn))

    @tf.function
    def step(iterator):
        def replica(images, labels):
            with tf.GradientTape() as tape:
                loss = loss_fn(labels, model(images, training=True))
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
            return loss
        images, labels = next(iterator)
        return strategy.run(replica, args=(images, labels))

    half = 60000 // args.batch // 2

    def run_half():
        for _ in range(half):
            coordinator.schedule(step, args=(iterator,))
        coordinator.join()

    train_in_halves(args, model, half, run_half)
    os._exit(0)                         # the servers of the other tasks are stopped by the driver


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--strategy", choices=["mwms", "ps"], required=True)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--target", type=float, default=0.90)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    import tensorflow as tf
    tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    tf.config.threading.set_inter_op_parallelism_threads(args.threads)
    import keras
    keras.utils.set_random_seed(args.seed)
    (mwms if args.strategy == "mwms" else parameter_servers)(args, tf, keras)


if __name__ == "__main__":
    sys.exit(main())
