"""`python -m trainer.launch` answers a SIGTERM that comes before torchrun has workers: a Spot reclaim or a
drain while the node's pod waits in the rendezvous for its peers. One real launcher process, first node of
two, whose peer never comes: torchrun waits inside its TCPStore (C code, where no Python signal handler
runs) until the signal."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from ports import reserved_port

from trainer import attempts, faults

REPO = Path(__file__).resolve().parents[2]


def _listening(port: int) -> bool:
    with socket.socket() as probe:
        probe.settimeout(0.2)
        return probe.connect_ex(("127.0.0.1", port)) == 0


def test_a_sigterm_in_the_rendezvous_ends_the_launcher_at_once_with_a_retryable_code(tmp_path):
    port = reserved_port()
    env = {
        **{k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")},
        "PYTHONPATH": str(REPO),
        attempts.DIR_ENV: str(tmp_path / "attempts"),
        attempts.BUDGET_ENV: "2",
        attempts.CREATION_ENV: "c1",
        "HOSTNAME": "job-master-0",
    }
    command = [
        sys.executable, "-m", "trainer.launch", "--nnodes=2", "--node_rank=0", "--master_addr=127.0.0.1",
        f"--master_port={port}", "--nproc_per_node=1", "-m", "trainer", "--config", "unused.yaml",
    ]  # fmt: skip
    launcher = subprocess.Popen(command, cwd=tmp_path, env=env, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120  # importing torch: seconds, longer on a loaded machine
        while not _listening(port):  # the first node's store serves: the rendezvous waits for node 2
            assert launcher.poll() is None and time.monotonic() < deadline, launcher.stderr.read()
            time.sleep(0.2)
        time.sleep(0.5)
        sent = time.monotonic()
        launcher.send_signal(signal.SIGTERM)
        code = launcher.wait(timeout=30)
        waited = time.monotonic() - sent
    finally:
        if launcher.poll() is None:
            launcher.kill()
    stderr = launcher.stderr.read()
    assert code == faults.STOPPED == 143, stderr
    assert waited < 10, waited
    assert "SIGTERM before the workers started; exit 143" in stderr
    # The attempt it began is recorded as ended by the signal: the next start does not count it as killed.
    record = json.loads((tmp_path / "attempts" / "job-master-0.json").read_text())
    assert record["last"]["code"] == 143 and record["failures"] == 0
