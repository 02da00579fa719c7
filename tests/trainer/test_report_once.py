"""An error every rank finds is said once per node under trainer.launch; one only a rank has is said by it;
a waiting rank's copy of local rank 0's data failure is left to local rank 0; a diverged run's summary.json
that cannot be written leaves the exit code 3 as it was."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from types import SimpleNamespace

import pytest

from trainer import __main__ as trainer_main
from trainer import faults, outputs, report_once, token_store
from trainer.loop import Trainer


def test_ranks_of_one_launch_say_the_same_error_once_and_their_own_each(capsys, monkeypatch):
    monkeypatch.delenv(report_once.REPORTED_DIR, raising=False)
    with report_once.once_per_node():
        where = Path(os.environ[report_once.REPORTED_DIR])
        for message in ("train.lr=-1 is invalid", "train.lr=-1 is invalid", "rank 1 sees no GPU"):
            report_once.report(message)  # as three ranks would, each in its process
    assert capsys.readouterr().err.splitlines() == ["train.lr=-1 is invalid", "rank 1 sees no GPU"]
    assert not where.exists() and report_once.REPORTED_DIR not in os.environ


def test_without_the_launcher_every_rank_says_it(capsys, monkeypatch):
    monkeypatch.delenv(report_once.REPORTED_DIR, raising=False)
    report_once.report("bad")
    report_once.report("bad")
    assert capsys.readouterr().err == "bad\nbad\n"


def test_a_waiting_rank_leaves_local_rank_0s_data_error_to_it_and_keeps_its_exit_code(capsys, monkeypatch):
    for code in (faults.INVALID, faults.STORAGE_UNAVAILABLE):
        relay = token_store._peer_failure(code, "train.jsonl line 151: not valid JSON")

        def refuse(argv, relay=relay):
            raise relay

        monkeypatch.setattr(trainer_main, "from_args", refuse)
        assert trainer_main.main([]) == code
    assert capsys.readouterr().err == ""


def test_a_diverged_run_whose_summary_cannot_be_written_says_so_and_still_exits_3(monkeypatch, capsys):
    def disk_full(*args):
        raise faults.Retryable("disk full: writing summary.json failed")

    monkeypatch.setattr(outputs, "write_summary", disk_full)
    said: list[str] = []
    rank_0 = SimpleNamespace(
        env=SimpleNamespace(is_main=True),
        sinks=SimpleNamespace(output=None, local_out=None),
        metrics=SimpleNamespace(say=said.append),
        _summary=lambda status: {"status": status},
        diverged=lambda err: Trainer.diverged(rank_0, err),
        _train=lambda: (_ for _ in ()).throw(faults.Diverged("training diverged: 6 steps")),
    )
    with pytest.raises(faults.Diverged) as raised:
        Trainer.train(rank_0)  # type: ignore[arg-type]
    assert faults.verdict(raised.value) == (faults.DIVERGED, "training diverged: 6 steps")
    assert said == [
        "warning: summary.json of the diverged run not written (Retryable: disk full: writing summary.json "
        "failed); exit 3 stands"
    ]


def test_ranks_of_one_mpirun_say_the_same_error_once_and_a_run_that_ends_well_leaves_nothing(
    capsys, monkeypatch, tmp_path
):
    """An MPIJob's ranks (no trainer.launch): Open MPI's PMIX_NAMESPACE, the same for every rank of one
    mpirun, names the node's shared directory; it is made only when there is something to say."""
    monkeypatch.delenv(report_once.REPORTED_DIR, raising=False)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setenv(report_once.MPI_JOB_ID, "prterun-job-worker-0-4242@1")
    assert list(tmp_path.iterdir()) == []
    for _ in range(2):  # two ranks of the run
        report_once.report("data.source: no such file")
    monkeypatch.setenv(report_once.MPI_JOB_ID, "prterun-job-worker-0-4243@1")  # the next run (a restart)
    report_once.report("data.source: no such file")
    assert capsys.readouterr().err.splitlines() == ["data.source: no such file"] * 2
    assert len(list(tmp_path.iterdir())) == 2


def test_ray_train_workers_of_one_run_share_where_they_note_what_was_said(monkeypatch):
    from trainer import ray_train

    monkeypatch.delenv(report_once.REPORTED_DIR, raising=False)
    seen = []
    monkeypatch.setattr(ray_train, "run_program", lambda program: seen.append(os.environ.copy()) or 0)
    name = report_once.shared_dir_name("run-1")
    for _ in range(2):  # two workers of one run (one process here, as Ray may place them)
        ray_train.train_worker({"program": ["-m", "trainer"], "reported": name})
    assert {env[report_once.REPORTED_DIR] for env in seen} == {os.path.join(tempfile.gettempdir(), name)}
