#!/usr/bin/env python3
"""check_examples.py: every file under examples/ (but the C programs, which
the build compiles and other suites run) parses and, where it can run here,
runs:
  - jobs/*.json: each job trains under `zactor-run --local --job FILE` for a
    few steps (flags shorten it) and prints a test accuracy;
  - docker/Dockerfile: known instructions, FROM debian:12, and only packages
    that CI installs too (the README's first command) (docker itself does not run here);
  - kubeflow/tfjob.yaml: a TFJob whose every replica runs zactor-run in the
    operator's container; the replicas' own commands run as processes here
    with the TF_CONFIG the operator would give them (its host names made
    localhost ports), a few steps long, and all exit 0;
  - slurm/zactor.sbatch: one copy per task with Slurm's variables set by
    hand, as srun would start them; all exit 0 and the job ends at its step.
Prints what failed and exits 1, or a summary and exits 0.
Usage: tests/check_examples.py SOURCE_DIR BUILD_DIR
"""
import glob
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import checks  # noqa: E402
from checks import free_port  # noqa: E402

SOURCE, BUILD = sys.argv[1], sys.argv[2]
RUN = os.path.join(BUILD, "zactor-run")
EXAMPLES = os.path.join(SOURCE, "examples")
STEPS = "30"
CERTS = None                                #  the cluster certificate main () makes
failures = []


def trained(model_dir):
    """1 when model_dir holds a checkpoint of step STEPS or later (ps-async
    workers may push past max_steps while the chief ends)."""
    steps = [int(m.group(1)) for p in glob.glob(os.path.join(model_dir, "model.ckpt-*.safetensors"))
             for m in [re.search(r"model\.ckpt-(\d+)\.safetensors$", p)] if m]
    return bool(steps) and max(steps) >= int(STEPS)


def fail(what):
    failures.append(what)
    print("check_examples: " + what, file=sys.stderr)


def wait_all(example, processes, model_dir):
    """Waits for each (name, log, process); every one must exit 0, and the
    job must have trained to STEPS in model_dir."""
    for name, log, process in processes:
        try:
            rc = process.wait(timeout=300)
        except subprocess.TimeoutExpired:
            process.kill()
            rc = "timeout"
        log.seek(0)
        if rc != 0:
            fail(f"{example}: {name} exit {rc}: {log.read()[-2000:]}")
    if not trained(model_dir):
        fail(f"{example}: no checkpoint of step {STEPS} in {model_dir}")



def check_jobs(tmp):
    for path in sorted(glob.glob(os.path.join(EXAMPLES, "jobs", "*.json"))):
        name = os.path.basename(path)
        with open(path) as f:
            job = json.load(f)
        if "roles" not in job or "strategy" not in job:
            fail(f"{name}: no roles or no strategy")
            continue
        model_dir = os.path.join(tmp, "job-" + name)
        done = subprocess.run(
            [RUN, "--local", "--job", path, "--max-steps", STEPS, "--model-dir", model_dir,
             "--start-delay-secs", "0", "--throttle-secs", "1"],
            capture_output=True, text=True, timeout=300)
        if done.returncode != 0 or "test accuracy" not in done.stdout:
            fail(f"{name}: exit {done.returncode}: {done.stdout[-2000:]} {done.stderr[-2000:]}")
        elif not trained(model_dir):
            fail(f"{name}: no checkpoint of step {STEPS} in {model_dir}")


def check_dockerfile():
    path = os.path.join(EXAMPLES, "docker", "Dockerfile")
    with open(path) as f:
        text = f.read()
    #  Continuation lines joined; comments and blank lines dropped.
    lines = [l for l in re.sub(r"\\\n", " ", text).splitlines()
             if l.strip() and not l.lstrip().startswith("#")]
    known = {"FROM", "RUN", "WORKDIR", "COPY", "ENTRYPOINT", "CMD", "ENV", "ARG", "LABEL",
             "EXPOSE", "USER", "VOLUME"}
    for line in lines:
        if line.split()[0] not in known:
            fail(f"Dockerfile: unknown instruction: {line}")
    if not lines or lines[0].split()[:2] != ["FROM", "debian:12"]:
        fail("Dockerfile: does not start FROM debian:12")
    #  CI installs the package list of the README's first command (.ci/run reads it there).
    with open(os.path.join(SOURCE, "README.md")) as f:
        readme = f.read()
    ci_packages = set(re.search(r"apt-get install ([^&]*)&&", readme).group(1).split())
    for line in lines:
        match = re.search(r"apt-get install ([^&]*)", line)
        if match:
            packages = {p for p in match.group(1).split() if not p.startswith("-")}
            if packages - ci_packages:
                fail(f"Dockerfile: packages CI does not install: {packages - ci_packages}")
            if "libczmq-dev" not in packages or "dataset-fashion-mnist" not in packages:
                fail("Dockerfile: misses libczmq-dev or dataset-fashion-mnist")
    if "cmake --install" not in text:
        fail("Dockerfile: does not install zactor")


#  A replica's args with --model-dir, --max-steps and the checkpoint and
#  evaluation intervals made short and local.
def shortened(args, model_dir):
    out, i = [], 0
    replace = {"--model-dir": model_dir, "--max-steps": STEPS, "--certs": CERTS,
               "--save-checkpoints-steps": "10", "--start-delay-secs": "0",
               "--throttle-secs": "1"}
    while i < len(args):
        if args[i] in replace and i + 1 < len(args):
            out += [args[i], replace[args[i]]]
            i += 2
        else:
            out.append(args[i])
            i += 1
    return out


def check_tfjob(tmp):
    import yaml
    path = os.path.join(EXAMPLES, "kubeflow", "tfjob.yaml")
    with open(path) as f:
        tfjob = yaml.safe_load(f)
    if tfjob.get("kind") != "TFJob" or not tfjob.get("apiVersion", "").startswith("kubeflow.org/"):
        fail("tfjob.yaml: not a kubeflow.org TFJob")
        return
    specs = tfjob["spec"]["tfReplicaSpecs"]
    #  The operator's cluster: every replica type but the evaluator, by service
    #  name; here each becomes a localhost port.
    cluster = {}
    for kind, spec in specs.items():
        if kind.lower() != "evaluator":
            cluster[kind.lower()] = [f"localhost:{free_port()}" for _ in range(spec["replicas"])]
    model_dir = os.path.join(tmp, "tfjob")
    processes = []
    for kind, spec in specs.items():
        containers = spec["template"]["spec"]["containers"]
        main = [c for c in containers if c["name"] == "tensorflow"]
        if not main:
            fail(f"tfjob.yaml: {kind} has no container named tensorflow (the operator's)")
            continue
        command = main[0].get("command", []) + main[0].get("args", [])
        if not command or command[0] != "zactor-run":
            fail(f"tfjob.yaml: {kind} does not run zactor-run: {command}")
            continue
        for index in range(spec["replicas"]):
            env = dict(os.environ, TF_CONFIG=json.dumps(
                {"cluster": cluster, "task": {"type": kind.lower(), "index": index}}))
            log = open(os.path.join(tmp, f"tfjob-{kind}-{index}.log"), "w+")
            processes.append((f"{kind} {index}", log, subprocess.Popen(
                [RUN] + shortened(command[1:], model_dir), env=env, stdout=log,
                stderr=subprocess.STDOUT)))
    wait_all("tfjob.yaml", processes, model_dir)


def check_slurm(tmp):
    script = os.path.join(EXAMPLES, "slurm", "zactor.sbatch")
    model_dir = os.path.join(tmp, "slurm")
    tasks = 5
    env = dict(os.environ, SLURM_NTASKS=str(tasks), SLURM_JOB_NODELIST="localhost",
               ZACTOR_RUN=RUN, MODEL_DIR=model_dir, ZA_BROKER_PORT=str(free_port()),
               ZA_CERTS=CERTS,
               ZA_ARGS=f"--max-steps {STEPS} --model linear --save-checkpoints-steps 10 "
                       "--start-delay-secs 0 --throttle-secs 1")
    env["PATH"] = "/usr/bin:/bin"           #  no scontrol: the node list as it is
    processes = []
    for task in range(tasks):
        log = open(os.path.join(tmp, f"slurm-{task}.log"), "w+")
        processes.append((f"task {task}", log, subprocess.Popen(
            ["bash", script], env=dict(env, SLURM_PROCID=str(task)), stdout=log,
            stderr=subprocess.STDOUT)))
    wait_all("zactor.sbatch", processes, model_dir)
    if not os.path.exists(os.path.join(model_dir, "eval", "metrics.jsonl")):
        fail("zactor.sbatch: the evaluator task wrote no evaluation")


def main():
    checked = [os.path.relpath(p, EXAMPLES) for p in glob.glob(EXAMPLES + "/**/*", recursive=True)
               if os.path.isfile(p) and not p.endswith(".c")]
    global CERTS
    checks.mark("check_examples")
    with tempfile.TemporaryDirectory() as tmp:
        try:
            CERTS = os.path.join(tmp, "certs")
            subprocess.run([RUN, "keygen", CERTS], check=True, stdout=subprocess.DEVNULL)
            check_jobs(tmp)
            check_dockerfile()
            check_tfjob(tmp)
            check_slurm(tmp)
        finally:
            left = checks.end()
            if left and not failures:
                fail(f"{left} process(es) outlived the check that started them (killed)")
    known = {"docker/Dockerfile", "kubeflow/tfjob.yaml", "slurm/zactor.sbatch"}
    for path in checked:
        if path not in known and not path.startswith("jobs/"):
            fail(f"{path}: no check for it here")
    if failures:
        sys.exit(1)
    print(f"check_examples: {len(checked)} example files parse and run: {', '.join(sorted(checked))}")


main()
