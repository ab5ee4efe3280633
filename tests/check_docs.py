#!/usr/bin/env python3
"""check_docs.py: the README and docs/ say what is true.

  - the README is a first page: at most 150 lines;
  - every link of README.md and docs/*.md stays in the repository (no http(s),
    no path outside it) and names a file that is there;
  - every ```sh block runs, in a scratch directory of its own, unless the line
    before it says why not (`<!-- not run: WHY -->`). The README's first block
    is the exception by rule: it is the two commands .ci/run runs.
    The block runs as written (bash -e), with three changes, all made here:
      * ./build/ is a folder of the build's programs where zactor-run and
        custom_model_fn are wrappers that train STEPS steps instead of the
        documented epochs or max_steps (every other flag is kept);
      * a comment before the block may replace text: `<!-- run: OLD => NEW;
        OLD2 => NEW2 -->`, each OLD must be in the block; NEW `{port}` is a free
        TCP port (so fixed ports of an example never meet another test's);
      * examples/, bench/ and tests/ are the source tree's.
    A block fails when it exits non-zero, runs past BLOCK_TIMEOUT_S, or leaves
    a process behind.
Prints what failed and exits 1, or a summary and exits 0.
Usage: tests/check_docs.py SOURCE_DIR BUILD_DIR
"""
import glob
import os
import re
import signal
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import checks  # noqa: E402
from checks import free_port  # noqa: E402

SOURCE, BUILD = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
STEPS = 30
README_MAX_LINES = 150
BLOCK_TIMEOUT_S = 300
WRAPPED = ("zactor-run", "custom_model_fn")
failures = []


def fail(what):
    failures.append(what)
    print("check_docs: " + what, file=sys.stderr)



def pages():
    return [os.path.join(SOURCE, "README.md")] + sorted(glob.glob(os.path.join(SOURCE, "docs", "*.md")))


def check_links(path, text):
    name = os.path.relpath(path, SOURCE)
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target):
            fail(f"{name}: link {target} leaves the repository")
            continue
        file = target.split("#")[0]
        if not file:
            continue
        where = os.path.normpath(os.path.join(os.path.dirname(path), file))
        if not where.startswith(SOURCE + os.sep):
            fail(f"{name}: link {target} points outside the repository")
        elif not os.path.exists(where):
            fail(f"{name}: link {target}: no such file")
    for outside in re.findall(r"\.\./shared/\S+", text):
        fail(f"{name}: names {outside}, which is not in the repository")


def blocks(text):
    """(line, marker or None, body) of each ```sh block, in order."""
    lines = text.split("\n")
    found = []
    i = 0
    while i < len(lines):
        if lines[i].strip() == "```sh":
            start = i
            j = i + 1
            while j < len(lines) and lines[j].strip() != "```":
                j += 1
            k = start - 1
            while k >= 0 and not lines[k].strip():
                k -= 1
            marker = lines[k].strip() if k >= 0 and lines[k].strip().startswith("<!--") else None
            found.append((start + 1, marker, "\n".join(lines[start + 1:j]) + "\n"))
            i = j
        i += 1
    return found


WRAPPER = r"""#!/bin/bash
#  check_docs.py: REAL with every flag as given, but trains STEPS steps.
args=(); skip=0; train=1
for a in "$@"; do
    if [ $skip = 1 ]; then skip=0; continue; fi
    case "$a" in
        --max-steps|--epochs) skip=1; continue ;;
        --max-steps=*|--epochs=*) continue ;;
        --help|keygen|--print-settings|--replay|--broker|--version) train=0 ;;
    esac
    args+=("$a")
done
[ $train = 1 ] && args+=(--max-steps STEPS)
exec REAL "${args[@]}"
"""


def scratch(tmp):
    """A directory to run a block in: build/ of wrappers and links, the
    source tree's examples/, bench/ and tests/."""
    work = tempfile.mkdtemp(dir=tmp)
    build = os.path.join(work, "build")
    os.mkdir(build)
    for entry in os.listdir(BUILD):
        if entry in WRAPPED:
            with open(os.path.join(build, entry), "w") as f:
                f.write(WRAPPER.replace("REAL", os.path.join(BUILD, entry))
                        .replace("STEPS", str(STEPS)))
            os.chmod(os.path.join(build, entry), 0o755)
        else:
            os.symlink(os.path.join(BUILD, entry), os.path.join(build, entry))
    for folder in ("examples", "bench", "tests"):
        os.symlink(os.path.join(SOURCE, folder), os.path.join(work, folder))
    return work


def run_block(name, line, marker, body, tmp):
    where = f"{name}:{line}"
    if marker:
        m = re.match(r"<!--\s*run:(.*)-->$", marker)
        if not m:
            fail(f"{where}: the comment before the block is neither 'not run: WHY' nor "
                 f"'run: OLD => NEW; ...': {marker}")
            return False
        for pair in filter(None, (p.strip() for p in m.group(1).split(";"))):
            old, arrow, new = pair.partition("=>")
            old, new = old.strip(), new.strip()
            if not arrow or not old or old not in body:
                fail(f"{where}: '{pair}' replaces nothing in the block")
                return False
            body = body.replace(old, str(free_port()) if new == "{port}" else new)
    work = scratch(tmp)
    log_path = os.path.join(work, "block.log")
    with open(log_path, "w+") as log:
        process = subprocess.Popen(["bash", "-e", "-o", "pipefail", "-c", body], cwd=work,
                                   stdout=log, stderr=subprocess.STDOUT,
                                   start_new_session=True)
        try:
            rc = process.wait(timeout=BLOCK_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            rc = f"timeout after {BLOCK_TIMEOUT_S} s"
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except OSError:
            pass
        process.wait()
        log.seek(0)
        output = log.read()
    if rc != 0:
        fail(f"{where}: the block exited {rc}:\n{body}--- its output (the end):\n{output[-3000:]}")
        return False
    return True


def main():
    checks.mark("check_docs")
    ran, not_run = [], []
    readme = open(pages()[0]).read()
    count = readme.count("\n")
    if count > README_MAX_LINES:
        fail(f"README.md has {count} lines, more than {README_MAX_LINES}")
    only = sys.argv[3] if len(sys.argv) > 3 else None
    with tempfile.TemporaryDirectory() as tmp:
        try:
            for path in pages():
                name = os.path.relpath(path, SOURCE)
                text = open(path).read()
                check_links(path, text)
                for n, (line, marker, body) in enumerate(blocks(text)):
                    if name == "README.md" and n == 0:
                        continue                    # .ci/run's two commands
                    if marker and re.match(r"<!--\s*not run:\s*\S.*-->$", marker):
                        not_run.append(f"{name}:{line} ({marker[4:-3].strip()})")
                        continue
                    if only and only not in f"{name}:{line}":
                        continue
                    if run_block(name, line, marker, body, tmp):
                        ran.append(f"{name}:{line}")
        finally:
            left = checks.end()
            if left and not failures:
                fail(f"{left} process(es) outlived the block that started them (killed)")
    if failures:
        sys.exit(1)
    print(f"check_docs: {len(ran)} blocks ran: {', '.join(ran)}")
    print(f"check_docs: {len(not_run)} not run here: {'; '.join(not_run)}")


main()
