"""An MPIJob worker's main process (trainer.mpi_worker): on SIGTERM the ranks, not their Open MPI daemon, get
it, and the container ends only after their checkpoint."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from trainer_runs import REPO

from trainer.mpi_worker import STOPPED, ranks, stop_ranks

# A "daemon" (its process is named prted, as Open MPI 5's is) that starts one "rank": the rank writes a
# checkpoint marker a moment after SIGTERM and exits 143, as the trainer does. The daemon itself exits on
# SIGTERM at once, which is why it must not get one.
RANK = """
import signal, sys, time
def stop(signum, frame):
    time.sleep(1.0)
    open(sys.argv[1], "w").write("checkpointed")
    sys.exit(143)
signal.signal(signal.SIGTERM, stop)
print("up", flush=True)
time.sleep(120)
"""
DAEMON = """
import subprocess, sys
rank = subprocess.Popen([sys.executable, "-c", sys.argv[1], sys.argv[2]], stdout=subprocess.PIPE, text=True)
rank.stdout.readline()
print(rank.pid, flush=True)
rank.wait()
"""


def _start_daemon(tmp_path: Path) -> tuple[subprocess.Popen, int]:
    prted = tmp_path / "prted"
    prted.symlink_to(sys.executable)  # the kernel names the process after the file it ran
    daemon = subprocess.Popen(
        [str(prted), "-c", DAEMON, RANK, str(tmp_path / "marker")], stdout=subprocess.PIPE, text=True
    )
    assert daemon.stdout is not None
    return daemon, int(daemon.stdout.readline())


def _catches_sigterm(pid: int) -> bool:
    """Whether the process has a SIGTERM handler installed (the kernel's SigCgt mask)."""
    status = Path(f"/proc/{pid}/status").read_text()
    caught = int(re.search(r"^SigCgt:\s*([0-9a-f]+)$", status, re.M)[1], 16)
    return bool(caught & 1 << (signal.SIGTERM - 1))


def test_the_ranks_are_the_daemons_children(tmp_path):
    daemon, rank = _start_daemon(tmp_path)
    try:
        found = ranks()
        assert rank in found and daemon.pid not in found and os.getpid() not in found
    finally:
        daemon.kill()
        os.kill(rank, signal.SIGKILL)


def test_stop_sigterms_the_ranks_and_waits_for_their_checkpoint(tmp_path):
    daemon, rank = _start_daemon(tmp_path)
    left = stop_ranks(wait_s=30)
    assert left == []
    assert (tmp_path / "marker").read_text() == "checkpointed"
    assert daemon.wait(timeout=10) == 0  # the daemon saw its rank exit; it got no SIGTERM itself


def test_the_worker_passes_its_sigterm_on_and_exits_143(tmp_path):
    daemon, _ = _start_daemon(tmp_path)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    worker = subprocess.Popen([sys.executable, "-m", "trainer.mpi_worker", "--wait-s", "30"], env=env)
    deadline = time.monotonic() + 60
    while not _catches_sigterm(worker.pid) and time.monotonic() < deadline:
        time.sleep(0.05)  # until its SIGTERM handler is installed, however long start-up takes
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(timeout=60) == STOPPED
    assert (tmp_path / "marker").read_text() == "checkpointed"
    daemon.wait(timeout=10)


def test_ranks_that_outlast_the_wait_are_reported(tmp_path):
    stubborn = tmp_path / "prted"
    stubborn.symlink_to(sys.executable)
    code = (
        "import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', sys.argv[1]]); time.sleep(60)"
    )
    ignore = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)"
    daemon = subprocess.Popen([str(stubborn), "-c", code, ignore])
    try:
        deadline = time.monotonic() + 10
        while not ranks() and time.monotonic() < deadline:
            time.sleep(0.1)
        left = stop_ranks(wait_s=1)
        assert len(left) == 1
    finally:
        for pid in ranks():
            os.kill(pid, signal.SIGKILL)
        daemon.kill()
