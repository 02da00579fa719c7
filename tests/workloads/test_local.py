"""`run-local`: the stack's trainer really trains, torchrun on CPU with 2 processes over gloo."""

from __future__ import annotations

import json

from tests.workloads.local_runs import FEW_STEPS
from workloads.__main__ import main
from workloads.local import local_processes


def test_run_local_trains_the_stack_job_for_a_few_steps(tmp_path, capsys):
    code = main(["run-local", "--stack", "dev-zimdb", "--nproc", "2", "--out", str(tmp_path), *FEW_STEPS])
    assert code == 0
    assert "run-local dev-zimdb: 2 processes on CPU, gloo" in capsys.readouterr().out
    run_dir = tmp_path / "dev-zimdb"
    summary = json.loads((run_dir / "output" / "summary.json").read_text())
    assert summary["steps"] == 4 and summary["world_size"] == 2
    assert (run_dir / "checkpoints" / "latest").exists()
    # The stack's own trainer config reached the trainer (the flags only shortened the run).
    assert "max_steps: 300" in (run_dir / "config.yaml").read_text()


def test_processes_are_capped_at_the_cpu_cores_and_say_why(monkeypatch):
    monkeypatch.setattr("os.cpu_count", lambda: 2)
    assert local_processes(4, None) == (2, "the job runs 4; this machine has 2 CPU cores")
    assert local_processes(4, 3) == (3, "--nproc 3")
