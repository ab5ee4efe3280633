#!/usr/bin/env python3
"""check_metrics.py: the broker's Prometheus endpoint, scraped with a real
HTTP client while a real job runs.

Starts `zactor-run --local --metrics-bind 127.0.0.1:PORT` (a chief, 2
workers, a ps and an evaluator as processes), scrapes /metrics with urllib:
the content type of the text format, one series per task, a format
`promtool check metrics` (Debian's prometheus package) accepts; SIGKILLs
worker 0 and keeps scraping: every scrape is answered while the broker
restarts it, and the worker comes back with restarts 1, a "failed" and a
"restarted" event counted. Other paths and methods get 404 and 405.
Exits 0, 1 with what failed, or 77 (skipped) without promtool.
Usage: tests/check_metrics.py BUILD_DIR
"""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import checks  # noqa: E402
from checks import free_port  # noqa: E402

BUILD = sys.argv[1]
RUN = os.path.join(BUILD, "zactor-run")
TOP = os.path.join(BUILD, "zactor-top")
failures = []


def fail(what):
    failures.append(what)
    print("check_metrics: " + what, file=sys.stderr)



def scrape(url):
    with urllib.request.urlopen(url, timeout=5) as response:
        return response.headers.get("Content-Type", ""), response.read().decode()


def samples(text, name):
    """{labels text: value} of metric `name`."""
    found = {}
    for line in text.splitlines():
        match = re.match(name + r"\{([^}]*)\} (\S+)$", line)
        if match:
            found[match.group(1)] = float(match.group(2))
    return found


def wait_for(url, what, test, timeout, every_scrape_answered=False):
    deadline = time.time() + timeout
    text = ""
    while time.time() < deadline:
        try:
            _, text = scrape(url)
        except (urllib.error.URLError, OSError) as error:
            text = str(error)
            if every_scrape_answered:
                fail(f"a scrape went unanswered while waiting for {what}: {error}")
        if test(text):
            return text
        time.sleep(0.2)
    fail(f"no scrape showed {what} within {timeout} s; the last: {text[-3000:]}")
    return None


def main():
    promtool = shutil.which("promtool")
    if not promtool:
        print("check_metrics: skipped: no promtool (apt-get install prometheus)")
        sys.exit(77)
    port = free_port()
    url = f"http://127.0.0.1:{port}/metrics"
    checks.mark("check_metrics")
    with tempfile.TemporaryDirectory() as tmp:
        out = open(os.path.join(tmp, "local.out"), "w+")
        launcher = subprocess.Popen(
            [RUN, "--local", "--model", "cnn", "--max-steps", "1000000", "--model-dir",
             os.path.join(tmp, "run"), "--metrics-bind", f"127.0.0.1:{port}"],
            stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            check(url, promtool, out)
        finally:
            launcher.send_signal(signal.SIGINT)
            try:
                launcher.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(launcher.pid, signal.SIGKILL)
                fail("the launcher did not stop on SIGINT")
            left = checks.end()
            if left and not failures:
                fail(f"{left} process(es) outlived the check that started them (killed)")
    if failures:
        sys.exit(1)
    print("check_metrics: scraped while training and across a restart; promtool accepts it")


def check(url, promtool, out):
    text = wait_for(url, "every worker past step 30",
                    lambda t: len([v for k, v in samples(t, "zactor_task_global_step").items()
                                   if 'role="worker"' in k and v > 30]) == 2, 120)
    if text is None:
        return
    content_type, text = scrape(url)
    if not content_type.startswith("text/plain; version=0.0.4"):
        fail(f"content type {content_type}")
    checked = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True,
                             text=True)
    if checked.returncode != 0:
        fail(f"promtool check metrics: {checked.stdout} {checked.stderr}")
    #  One series per task: a chief, 2 workers, a ps, an evaluator.
    for name in ("zactor_task_global_step", "zactor_task_restarts_total", "zactor_task_state"):
        series = samples(text, name)
        if len(series) != 5:
            fail(f"{name}: {len(series)} series, not one per task: {series}")
    for code, request in ((404, urllib.request.Request(url.replace("/metrics", "/nothing"))),
                          (405, urllib.request.Request(url, method="POST", data=b"x"))):
        try:
            urllib.request.urlopen(request, timeout=5)
            fail(f"{request.method} {request.full_url} was answered 200")
        except urllib.error.HTTPError as error:
            if error.code != code:
                fail(f"{request.method} {request.full_url}: {error.code}, not {code}")
    #  Worker 0 killed: the broker restarts it, and the endpoint answers throughout.
    out.seek(0)
    broker = re.search(r"--broker (\S+)", out.read())
    state = json.loads(subprocess.run([TOP, "--broker", broker.group(1), "--once", "--json"],
                                      capture_output=True, text=True, timeout=30).stdout)
    pid = [r["pid"] for r in state["roles"] if r["role"] == "worker" and r["index"] == 0][0]
    os.kill(pid, signal.SIGKILL)
    worker = 'role="worker",index="0"'
    back = wait_for(url, "worker 0 restarted and training again",
                    lambda t: any(worker in k and v == 1
                                  for k, v in samples(t, "zactor_task_restarts_total").items())
                    and any(worker in k and 'state="running"' in k
                            for k in samples(t, "zactor_task_state")), 120,
                    every_scrape_answered=True)
    if back is not None:
        events = samples(back, "zactor_events_total")
        for event in ("failed", "restarted"):
            if events.get(f'event="{event}"', 0) < 1:
                fail(f"no {event} event counted: {events}")


main()
