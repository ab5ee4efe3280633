#!/usr/bin/env python3
"""cluster_vs_tensorflow.py: a whole cluster on this machine, zactor against
TensorFlow, training the seed CNN on Fashion-MNIST to a test accuracy.

  TensorFlow MultiWorkerMirroredStrategy: 2 workers (TF_CONFIG on loopback),
      Keras model.fit, 64 examples per worker per step;
  TensorFlow ParameterServerStrategy: chief + 2 workers + 1 ps, a custom
      loop through ClusterCoordinator, a worker's step 64 examples;
  zactor --local --strategy allreduce: chief + 1 worker (2 trainers), 64 each;
  zactor --local --strategy ps-async: chief + 1 worker + 1 ps (2 trainers, as
      TensorFlow's 2 workers), 64 each; both with an evaluator task that
      follows the checkpoints (every half epoch).

For each: the seconds from launch until the model that reaches --target
existed (TensorFlow: the chief's clock at that half epoch, its evaluations
left out; zactor: the checkpoint's time, its evaluator running beside it),
images per second of training, and the peak of the whole job's resident
memory (every process of the job, sampled every 0.1 s).

Usage (in bench/venv.sh's environment):
  $(bench/venv.sh) bench/cluster_vs_tensorflow.py ZACTOR_RUN [--target 0.90] [--epochs 10]
"""
import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def free_ports(n):
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def tree(pids):
    """Every live process below (and including) pids."""
    seen, frontier = set(), list(pids)
    while frontier:
        pid = frontier.pop()
        if pid in seen or not os.path.exists("/proc/%d" % pid):
            continue
        seen.add(pid)
        for task in os.listdir("/proc/%d/task" % pid) if os.path.exists("/proc/%d/task" % pid) else []:
            try:
                with open("/proc/%d/task/%s/children" % (pid, task)) as f:
                    frontier += [int(c) for c in f.read().split()]
            except OSError:
                pass
    return seen


def rss_kib(pid):
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def watch(procs, until):
    """Samples the whole job's memory until until() is true; the peak in MiB."""
    peak = 0
    while not until():
        peak = max(peak, sum(rss_kib(p) for p in tree([p.pid for p in procs])))
        time.sleep(0.1)
    return peak / 1024.0


def tensorflow(strategy, args, python):
    ports = free_ports(4)
    if strategy == "mwms":
        cluster = {"worker": ["127.0.0.1:%d" % p for p in ports[:2]]}
        tasks = [("worker", 0), ("worker", 1)]
        chief = 0
    else:
        cluster = {"chief": ["127.0.0.1:%d" % ports[0]],
                   "worker": ["127.0.0.1:%d" % p for p in ports[1:3]],
                   "ps": ["127.0.0.1:%d" % ports[3]]}
        tasks = [("chief", 0), ("worker", 0), ("worker", 1), ("ps", 0)]
        chief = 0
    launched = time.time()
    procs = []
    for kind, index in tasks:
        env = dict(os.environ, TF_CONFIG=json.dumps({"cluster": cluster,
                                                     "task": {"type": kind, "index": index}}),
                   TF_CPP_MIN_LOG_LEVEL="2")
        procs.append(subprocess.Popen(
            [python, os.path.join(HERE, "tf_cluster_task.py"), "--strategy", strategy,
             "--epochs", str(args.epochs), "--target", str(args.target)],
            env=env, stdout=subprocess.PIPE if len(procs) == chief else subprocess.DEVNULL,
            stderr=subprocess.DEVNULL, text=True))
    peak = watch(procs, lambda: procs[chief].poll() is not None)
    out = procs[chief].stdout.read()
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.wait()
    rows = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    return launched, rows, peak, 64 * (2 if strategy == "mwms" else 1)


def zactor(strategy, args, zactor_run):
    work = tempfile.mkdtemp(prefix="za_cluster_vs_tf.")
    per_step = 128 if strategy == "allreduce" else 64
    half = 60000 // per_step // 2
    command = [zactor_run, "--local", "--strategy", strategy, "--workers", "1",
               "--ps", "0" if strategy == "allreduce" else "1", "--evaluators", "1",
               "--start-delay-secs", "0", "--throttle-secs", "0",
               "--save-checkpoints-steps", str(half), "--keep-checkpoint-max", "0",
               "--epochs", str(args.epochs), "--batch-size", "64", "--seed", "1",
               "--model-dir", os.path.join(work, "model")]
    launched = time.time()
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    peak = watch([proc], lambda: proc.poll() is not None)
    rows = []
    path = os.path.join(work, "model", "eval", "metrics.jsonl")
    with open(path) as f:
        for line in f:
            r = json.loads(line)
            if "accuracy" in r:
                made = r["wall_time"] - r.get("checkpoint_age_secs", 0.0)
                rows.append({"seconds": made - launched, "accuracy": r["accuracy"],
                             "step": r["global_step"], "wall": made})
    shutil.rmtree(work, ignore_errors=True)
    return launched, rows, peak, per_step


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("zactor_run")
    ap.add_argument("--target", type=float, default=0.90)
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--only", default="tf-mwms,tf-ps,zactor-allreduce,zactor-ps-async")
    args = ap.parse_args()
    print("host: %d cores, %s" % (os.cpu_count(), subprocess.run(
        "grep -m1 'model name' /proc/cpuinfo | cut -d: -f2", shell=True, capture_output=True,
        text=True).stdout.strip()))
    print("%-18s %14s %10s %12s %12s" % ("job", "to %.2f (s)" % args.target, "reached",
                                         "images/s", "peak MiB"))
    for job in args.only.split(","):
        kind, strategy = job.split("-", 1)
        if kind == "tf":
            launched, rows, peak, per_step = tensorflow(strategy, args, sys.executable)
            for r in rows:                  # launch to the model, evaluations left out
                r["training"] = r["seconds"]
                r["seconds"] = r["wall"] - launched - r["evaluating"]
        else:
            launched, rows, peak, per_step = zactor(strategy, args, args.zactor_run)
        hit = next((r for r in rows if r["accuracy"] >= args.target), None)
        last = rows[-1] if rows else None
        rate = last["step"] * per_step / last.get("training", last["seconds"]) if rows else 0
        print("%-18s %14s %10s %12.0f %12.0f" % (
            job, "%.1f" % hit["seconds"] if hit else "never",
            "%.4f" % max(r["accuracy"] for r in rows) if rows else "-", rate, peak), flush=True)


if __name__ == "__main__":
    main()
