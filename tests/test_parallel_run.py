"""The suite runs on several pytest workers (`make test`: pytest -n auto): what a worker records for the
run's summary, the fault figures, reaches the controller that prints it."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_the_fault_figures_count_every_workers_entries(tmp_path):
    # Two cheap ledger cases (the workload program, ~0.5 s each), one on each worker: xdist hands fewer tests
    # than two per worker out round robin.
    cases = "gpus-zero or nodes-negative"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-n",
            "2",
            "-p",
            "no:cacheprovider",
            "-v",
            f"--basetemp={tmp_path}",
            "tests/faults/test_job_spec_faults.py",
            "-k",
            cases,
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-3000:]
    ran = int(re.search(r"(\d+) passed", proc.stdout)[1])
    assert ran == 2, proc.stdout[-2000:]
    assert set(re.findall(r"^\[(gw\d)\] .*PASSED", proc.stdout, re.M)) == {"gw0", "gw1"}, proc.stdout[-2000:]
    total = re.search(r"^total\s+(\d+) hostile inputs", proc.stdout, re.M)
    assert total and int(total[1]) == ran, proc.stdout[-2000:]
