"""checks.py: what the Python checks share. What a check starts ends with it;
free_port() gives a free TCP port on loopback.

mark() puts ZA_TEST_MARK=py<pid>/<name> in the environment, so every process the
check starts, and everything those start in turn (a launcher's broker, a Slurm
script's tasks), carries it. end() waits a little for them to end by themselves,
then kills what is left and says how many there were: the check fails when a
passing run left any (the C suites do the same, in tests/za_test.c)."""
import os
import signal
import socket
import time

GRACE_SECS = 15.0
_prefix = None


def mark(name):
    global _prefix
    value = f"py{os.getpid()}/{name}"
    os.environ["ZA_TEST_MARK"] = value
    _prefix = ("ZA_TEST_MARK=" + value).encode()


def _marked():
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                if _prefix in f.read().split(b"\0"):
                    pids.append(int(entry))
        except OSError:
            pass                    # gone, or not ours to read
    return pids


def end():
    """Kills what carries our mark after a grace; returns how many were left."""
    if _prefix is None:
        return 0
    deadline = time.monotonic() + GRACE_SECS
    while _marked() and time.monotonic() < deadline:
        time.sleep(0.1)
    left = _marked()
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    return len(left)


def free_port():
    """A TCP port free on 127.0.0.1 now (the kernel picks it)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
