"""A PyTorchJob's restart budget as the launcher keeps it (trainer/attempts.py), on a local checkpoint
directory and on S3 (moto), and the launcher's use of it (trainer/launch.py)."""

from __future__ import annotations

import json

import boto3
import pytest
from moto import mock_aws

from trainer import attempts, faults, launch
from trainer.storage import LocalStorage, S3Storage


def _ledger(tmp_path, pod="job-worker-0", budget=2, creation="a") -> attempts.Ledger:
    return attempts.Ledger(LocalStorage(tmp_path / "attempts"), pod, budget, creation)


def _run(ledger: attempts.Ledger, *codes: int) -> list[int | None]:
    """Attempts ending with `codes` (None: killed before it could record its end); what each begin said."""
    said = []
    for code in codes:
        said.append(ledger.begin())
        if said[-1] is not None:
            break
        if code is not None:
            ledger.end(code)
    return said


def test_the_budget_allows_that_many_restarts_then_fails_for_good(tmp_path):
    ledger = _ledger(tmp_path, budget=2)
    assert _run(ledger, 137, 134, 137) == [None, None, None]  # the first attempt and 2 restarts
    assert ledger.begin() == faults.BUDGET_SPENT == 4
    assert faults.describe(faults.BUDGET_SPENT) == "permanent"  # ExitCode: the operator fails the job


@pytest.mark.parametrize("code", [faults.STOPPED, faults.PEER_LOST])
def test_a_sigterm_checkpoint_or_a_lost_peer_never_counts(tmp_path, code):
    """A node disruption costs the gang nothing: the disrupted pod checkpoints (143) and its peers, whose
    collective broke, exit 202; only the cause of a failure counts, at its own pod."""
    ledger = _ledger(tmp_path, budget=0)
    assert _run(ledger, *[code] * 10) == [None] * 10
    assert ledger.begin() is None


def test_an_attempt_killed_before_its_end_counts_at_the_next_start(tmp_path):
    ledger = _ledger(tmp_path, budget=1)
    assert _run(ledger, None, None) == [None, None]
    assert ledger.begin() == faults.BUDGET_SPENT


def test_a_new_creation_of_the_job_or_a_resubmission_counts_from_zero(tmp_path):
    worker = _ledger(tmp_path, budget=1)
    assert _run(worker, 137, 137) == [None, None]
    assert _ledger(tmp_path, budget=1, creation="b").begin() is None  # a new creation of the job: a new id
    worker = _ledger(tmp_path, pod="job-worker-1", budget=1)
    _run(worker, 137, 137)
    master = _ledger(tmp_path, pod="job-master-0", budget=1)
    assert master.begin() is None
    master.end(faults.INVALID)  # the job failed for good: what starts next is a resubmission
    assert json.loads((tmp_path / "attempts" / attempts.ENDED).read_text())["code"] == faults.INVALID
    assert worker.begin() is None


@mock_aws
def test_the_count_lives_in_s3_beside_the_checkpoints():
    client = boto3.client("s3", region_name="us-east-1")
    client.create_bucket(Bucket="platform")
    env = {attempts.DIR_ENV: "s3://platform/jobs/j/checkpoints/attempts", attempts.BUDGET_ENV: "0",
           attempts.CREATION_ENV: "x", "HOSTNAME": "j-master-0"}  # fmt: skip
    ledger = attempts.Ledger.from_env(env)
    assert ledger is not None and isinstance(ledger.store, S3Storage)
    assert ledger.begin() is None
    ledger.end(137)
    body = client.get_object(Bucket="platform", Key="jobs/j/checkpoints/attempts/j-master-0.json")["Body"]
    assert json.loads(body.read())["failures"] == 1
    assert attempts.Ledger.from_env(env).begin() == faults.BUDGET_SPENT


def test_without_the_environment_the_launcher_keeps_no_count():
    assert attempts.Ledger.from_env({}) is None


@pytest.fixture
def pod_env(tmp_path, monkeypatch):
    monkeypatch.setenv(attempts.DIR_ENV, str(tmp_path / "attempts"))
    monkeypatch.setenv(attempts.BUDGET_ENV, "1")
    monkeypatch.setenv(attempts.CREATION_ENV, "x")
    monkeypatch.setenv("HOSTNAME", "job-master-0")
    return tmp_path


def test_the_launcher_records_each_attempt_and_stops_starting_torchrun_past_the_budget(pod_env, monkeypatch):
    started = []

    def torchrun(args):
        started.append(args)
        return 137  # killed (e.g. out of memory), every time

    monkeypatch.setattr(launch, "_launch", torchrun)
    argv = ["--nproc_per_node=1", "-m", "trainer"]
    assert [launch.main(argv) for _ in range(3)] == [137, 137, faults.BUDGET_SPENT]
    assert len(started) == 2


@mock_aws
def test_a_ledger_that_cannot_record_the_end_leaves_the_exit_code_alone(monkeypatch, capsys):
    """The trainer exits 200 (S3 unreachable: retryable), and the ledger's own write of that end fails too:
    the pod still exits 200, so the operator (restartPolicy ExitCode) recreates it instead of failing the
    job for good on the exit 1 an escaped exception would give."""
    boto3.client("s3", region_name="us-east-1").create_bucket(Bucket="platform")
    monkeypatch.setenv(attempts.DIR_ENV, "s3://platform/jobs/j/checkpoints/attempts")
    monkeypatch.setenv(attempts.BUDGET_ENV, "3")
    monkeypatch.setenv(attempts.CREATION_ENV, "x")
    monkeypatch.setenv("HOSTNAME", "j-master-0")

    def trainer_lost_s3(args):
        # What the trainer met, the ledger meets next: every S3 write now fails.
        def unreachable(self, key, data):
            raise OSError("Could not connect to the endpoint URL")

        monkeypatch.setattr(S3Storage, "put_bytes", unreachable)
        return faults.STORAGE_UNAVAILABLE

    monkeypatch.setattr(launch, "_launch", trainer_lost_s3)
    assert launch.main(["--nproc_per_node=1", "-m", "trainer"]) == faults.STORAGE_UNAVAILABLE == 200
    assert "could not record the end of this attempt (OSError" in capsys.readouterr().err
