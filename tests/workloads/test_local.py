"""`run-local`: the stack's trainer really trains, torchrun on CPU with 2 processes over gloo, in an
environment like `make demo`'s, which installs only the `train` extra: every Python process of the run (the
CLI, the launcher, the trainer ranks) gets a sitecustomize that makes the Pulumi SDKs and the Kubernetes
client fail to import, as in a `.venv` that never installed them. One run serves both claims."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.workloads.local_runs import FEW_STEPS
from workloads.local import local_processes

REPO = Path(__file__).resolve().parents[2]
BLOCKER = """
import sys

class _NotInstalled:
    BLOCKED = ("pulumi", "pulumi_aws", "pulumi_eks", "pulumi_kubernetes", "pulumi_random", "kubernetes")

    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in self.BLOCKED:
            raise ModuleNotFoundError(f"No module named {name!r} (not in the train extra)", name=name)
        return None

sys.meta_path.insert(0, _NotInstalled())
"""


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess, subprocess.CompletedProcess]:
    """(the --out directory, `import pulumi` in a child interpreter, `workloads run-local` of dev-zimdb)."""
    root = tmp_path_factory.mktemp("run-local")
    (root / "site").mkdir()
    (root / "site" / "sitecustomize.py").write_text(BLOCKER)
    env = os.environ | {"PYTHONPATH": os.pathsep.join([str(root / "site"), str(REPO)])}
    probe = subprocess.run(
        [sys.executable, "-c", "import pulumi"], env=env, capture_output=True, text=True, check=False
    )
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "workloads",
            "run-local",
            "--stack",
            "dev-zimdb",
            "--nproc",
            "2",
            "--out",
            str(root / "runs"),
            *FEW_STEPS,
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        cwd=root,
        check=False,
    )
    return root / "runs", probe, run


def test_run_local_trains_the_stack_job_for_a_few_steps(demo_run):
    runs, _, run = demo_run
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-3000:]
    assert "run-local dev-zimdb: 2 processes on CPU, gloo" in run.stdout
    run_dir = runs / "dev-zimdb"
    summary = json.loads((run_dir / "output" / "summary.json").read_text())
    assert summary["steps"] == 4 and summary["world_size"] == 2
    assert (run_dir / "checkpoints" / "latest").exists()
    # The stack's own trainer config reached the trainer (the flags only shortened the run).
    assert "max_steps: 300" in (run_dir / "config.yaml").read_text()


def test_run_local_needs_neither_pulumi_nor_the_kubernetes_client(demo_run):
    runs, probe, run = demo_run
    assert "not in the train extra" in probe.stderr  # the blocker is active in child interpreters
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-3000:]
    assert (runs / "dev-zimdb" / "output" / "summary.json").is_file()


def test_an_invalid_job_config_is_said_once_and_ends_with_its_exit_code(tmp_path):
    """Both ranks find the bad flag; one says it, the launcher's bookkeeping adds no traceback, and the
    last line names the exit code and what it means. The launcher's shared directory is gone after."""
    (tmp_path / "tmp").mkdir()
    env = os.environ | {"PYTHONPATH": str(REPO), "TMPDIR": str(tmp_path / "tmp")}
    argv = ["run-local", "--stack", "dev-zimdb", "--nproc", "2", "--out", str(tmp_path / "runs")]
    run = subprocess.run(
        [sys.executable, "-m", "workloads", *argv, "--", "--train.lr", "-1"],
        env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path, check=False,
    )  # fmt: skip
    shown = run.stdout + run.stderr
    assert run.returncode == 2, shown[-3000:]
    assert shown.count("train.lr=-1.0 is invalid: allowed > 0") == 1, shown[-3000:]
    assert "ChildFailedError" not in shown and "Traceback" not in shown, shown[-3000:]
    assert "rank 0 failed first with exit code 2" in shown or "rank 1 failed first with exit code 2" in shown
    last = run.stderr.splitlines()[-1]
    assert last == "run-local dev-zimdb: exit 2 (permanent): invalid configuration or data: permanent, the " \
        "same pod would fail the same way", last  # fmt: skip
    assert list((tmp_path / "tmp").iterdir()) == []


def test_processes_are_capped_at_the_cpu_cores_and_say_why(monkeypatch):
    monkeypatch.setattr("os.cpu_count", lambda: 2)
    assert local_processes(4, None) == (2, "the job runs 4; this machine has 2 CPU cores")
    assert local_processes(4, 3) == (3, "--nproc 3")
