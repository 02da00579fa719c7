"""A run leaves nothing in $TMPDIR, whichever way it ends: pods keep /tmp (an emptyDir) across restarts."""

import json
import signal
import subprocess
import sys

import pytest
from ports import reserved_port
from trainer_runs import launch, metrics, start_and_wait_for_step

from trainer import faults


@pytest.fixture
def tmpdir_of_runs(tmp_path, monkeypatch):
    """The $TMPDIR the launched runs see (trainer_runs passes this process's environment on)."""
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setenv("TMPDIR", str(scratch))
    # torch's compile cache is kept between runs on purpose (one per user, not per run): not a leftover.
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "torch-cache"))
    return scratch


def test_a_completed_run_leaves_nothing_in_tmpdir(tmp_path, tmpdir_of_runs):
    # What an attempt killed by SIGKILL leaves (no cleanup runs): the next attempt removes it.
    pid_of = [sys.executable, "-c", "import os; print(os.getpid())"]
    dead = subprocess.run(pid_of, capture_output=True, text=True, check=True).stdout.strip()
    (tmpdir_of_runs / "trainer-run-killed" / "stage-step-000000010").mkdir(parents=True)
    (tmpdir_of_runs / "trainer-run-killed.pid").write_text(dead)
    port = reserved_port()  # metrics on: the Prometheus exporter's node scratch is made too
    steps = {"train.max_steps": 20, "checkpoint.every_steps": 10, "output.metrics_port": port}
    proc = launch(tmp_path / "out", **steps)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert [r["step"] for r in metrics(tmp_path / "out", "checkpoint")] == [10, 20]
    assert sorted(p.name for p in tmpdir_of_runs.iterdir()) == []


def test_a_run_that_fails_on_its_data_leaves_nothing_in_tmpdir(tmp_path, tmpdir_of_runs):
    """Exit 2 while rank 0 tokenizes (scratch, staging and failure marker all exist by then)."""
    source = tmp_path / "data.jsonl"
    source.write_text("".join(json.dumps({"text": f"row {i}", "label": 7}) + "\n" for i in range(64)))
    proc = launch(tmp_path / "out", **{"data.source": source})
    assert proc.returncode == faults.INVALID, proc.stdout + proc.stderr
    assert "label" in proc.stderr
    assert sorted(p.name for p in tmpdir_of_runs.iterdir()) == []


def test_a_run_stopped_by_sigterm_leaves_nothing_in_tmpdir_but_keeps_its_resume_point(
    tmp_path, tmpdir_of_runs
):
    out = tmp_path / "out"
    proc = start_and_wait_for_step(out, 10)
    proc.send_signal(signal.SIGTERM)
    log = proc.communicate(timeout=120)[0]
    assert proc.returncode == faults.STOPPED, log
    assert sorted(p.name for p in tmpdir_of_runs.iterdir()) == []
    (saved,) = [r["step"] for r in metrics(out, "checkpoint")]
    latest = (out / "ckpt" / "latest").read_text()
    assert latest.endswith(f"/step-{saved:09d}") and (out / "ckpt" / latest / "manifest.json").is_file()
