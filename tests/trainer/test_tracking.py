"""MLflow as the run's tracking sink (trainer/tracking.py), against MLflow's own client and its file store:
params and metrics at their steps, one MLflow run across a SIGTERM and its restart, a closed port that
never stops training, outages and refusals said once, and a run without MLflow that imports none of it."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import sys

import pytest
import torch
from ports import reserved_port
from trainer_runs import REPO, launch, metrics, trainer_args

from trainer import loop, tracking
from trainer.config import MlflowConfig, from_args
from trainer.loop import run

needs_mlflow = pytest.mark.skipif(
    importlib.util.find_spec("mlflow") is None,
    reason="the mlflow extra (mlflow-skinny) is not installed: make dev",
)
MLFLOW_ENV = [*tracking.CLIENT_ENV, *tracking.FILE_STORE_ENV]


@pytest.fixture(autouse=True)
def one_thread():
    """The runs here are in this process: one intra-op thread, as torchrun's workers get (run_env)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def store(tmp_path, monkeypatch) -> str:
    """A file store under tmp_path; the MLflow variables the trainer sets are unset again afterwards.
    mlflow is imported here, once per process: in a run the sink imports it in its thread, for seconds
    on a busy machine, which the tests' short runs would spend waiting."""
    pytest.importorskip("mlflow.tracking")
    for name in MLFLOW_ENV:
        monkeypatch.delenv(name, raising=False)
    return f"file:{tmp_path / 'mlruns'}"


def _client(uri: str):
    from mlflow.tracking import MlflowClient

    os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")  # the store fixture removes it afterwards
    return MlflowClient(tracking_uri=uri)


def _runs(uri: str, experiment: str) -> list:
    client = _client(uri)
    return client.search_runs([client.get_experiment_by_name(experiment).experiment_id])


def _steps(uri: str, run_id: str, key: str) -> list[int]:
    return [m.step for m in sorted(_client(uri).get_metric_history(run_id, key), key=lambda m: m.timestamp)]


@needs_mlflow
def test_one_mlflow_run_holds_params_and_metrics_at_their_steps_across_a_sigterm_and_its_restart(
    tmp_path, store, keep_sigterm_handler, monkeypatch, capsys
):
    out = tmp_path / "out"
    args = {"train.max_steps": 30, "train.eval_every": 10, "checkpoint.every_steps": 10,
            "mlflow.tracking_uri": store, "mlflow.experiment": "zimdb"}  # fmt: skip
    evaluate = loop.Trainer.evaluate

    def reclaimed_after_the_first_evaluation(trainer):  # a Spot notice at step 10, in the main thread
        evaluate(trainer)
        if trainer.step == 10:
            os.kill(os.getpid(), signal.SIGTERM)

    monkeypatch.setattr(loop.Trainer, "evaluate", reclaimed_after_the_first_evaluation)
    assert run(from_args(trainer_args(out, **args))) == 143
    (first,) = _runs(store, "zimdb")
    assert first.info.status == "KILLED"
    assert "MLflow: started run" in capsys.readouterr().out

    monkeypatch.setattr(loop.Trainer, "evaluate", evaluate)
    assert run(from_args(trainer_args(out, **{**args, "train.max_steps": 40}))) == 0  # extended on restart
    said = capsys.readouterr().out
    (tracked,) = _runs(store, "zimdb")
    run_id = tracked.info.run_id
    assert run_id == first.info.run_id and tracked.info.status == "FINISHED"
    assert f"MLflow: resuming run {run_id}" in said
    # Every progress line and evaluation at its step, once: steps 5-10 from the first attempt, 15-40 after.
    assert _steps(store, run_id, "train/loss") == list(range(5, 41, 5))
    for key in ("train/lr", "train/grad_norm", "train/tokens_per_s"):
        assert _steps(store, run_id, key) == _steps(store, run_id, "train/loss"), key
    assert _steps(store, run_id, "eval/val_accuracy") == [10, 20, 30, 40]
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    losses = {r["step"]: r["loss"] for r in rows if r["event"] == "train"}
    history = _client(store).get_metric_history(run_id, "train/loss")
    assert {m.step: m.value for m in history} == pytest.approx(losses)
    # Params: the config flattened, as the first attempt had it; the restart's change is a tag.
    params, tags = tracked.data.params, tracked.data.tags
    assert params["train.max_steps"] == "30" and tags["mlops-eks.resumed_with.train.max_steps"] == "40"
    assert params["train.batch_size"] == "8" and params["mlflow.experiment"] == "zimdb"
    assert params["world_size"] == "1" and params["resolved.precision"] == "fp32"
    summary = json.loads((out / "summary.json").read_text())
    assert tracked.data.metrics["summary/steps"] == 40
    assert tracked.data.metrics["summary/val_accuracy"] == summary["val_accuracy"]
    assert tags["mlops-eks.run"] == summary["checkpoint"].split("/")[-2] == tracked.info.run_name
    assert summary["mlflow"] | {"values_sent": 0} == {
        "tracking_uri": store, "experiment": "zimdb", "experiment_id": tracked.info.experiment_id,
        "run_id": run_id, "resumed": True, "status": "FINISHED", "complete": True, "values_sent": 0,
        "values_unsent": 0, "values_dropped": 0, "values_refused": 0, "failed_attempts": 0, "error": None,
    }  # fmt: skip


@needs_mlflow
def test_two_ranks_make_one_mlflow_run_with_the_losses_over_both(tmp_path, store):
    """A real 2-process torchrun: only rank 0 sends, the job-wide values metrics.jsonl has."""
    env = {"PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)}
    args = {"train.max_steps": 10, "mlflow.tracking_uri": store, "mlflow.experiment": "ddp"}
    proc = launch(tmp_path / "out", env=env, **args)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (tracked,) = _runs(store, "ddp")
    losses = {r["step"]: r["loss"] for r in metrics(tmp_path / "out", "train")}
    history = _client(store).get_metric_history(tracked.info.run_id, "train/loss")
    assert [m.step for m in history] == [5, 10]
    assert {m.step: m.value for m in history} == pytest.approx(losses)
    assert tracked.data.params["world_size"] == "2" and tracked.info.status == "FINISHED"
    assert tracked.data.tags["mlops-eks.summary.ranks_identical"] == "True"
    assert proc.stdout.count("MLflow: started run") == 1


@needs_mlflow
def test_a_closed_port_warns_once_retries_with_backoff_and_training_finishes(
    tmp_path, store, keep_sigterm_handler, capsys
):
    uri = f"http://127.0.0.1:{reserved_port()}"  # nothing listens: every attempt is refused at once
    args = {"train.max_steps": 10, "mlflow.tracking_uri": uri, "mlflow.retry_backoff_s": 0.05,
            "mlflow.flush_timeout_s": 0.5}  # fmt: skip
    assert run(from_args(trainer_args(tmp_path / "out", **args))) == 0
    said = capsys.readouterr().out
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    report = summary["mlflow"]
    assert summary["steps"] == 10 and (tmp_path / "out" / "model.pt").is_file()
    assert report["run_id"] is None and report["complete"] is False and report["status"] is None
    assert report["values_unsent"] > 0 and report["failed_attempts"] >= 2, report
    assert "Connection refused" in report["error"] or "NewConnectionError" in report["error"], report
    assert said.count(f"warning: MLflow at {uri} failed") == 1, said  # once per outage, not per attempt
    assert f"warning: MLflow run (never created) at {uri} is incomplete" in said
    assert os.environ["MLFLOW_HTTP_REQUEST_MAX_RETRIES"] == "0"  # one request per attempt: ours retry


@needs_mlflow
def test_values_queued_during_an_outage_are_sent_once_when_the_server_answers_again(store, monkeypatch):
    from mlflow.exceptions import MlflowException
    from mlflow.tracking import MlflowClient

    tracking.set_client_env(MlflowConfig(tracking_uri=store))
    real, calls = MlflowClient.log_batch, []

    def down_twice(self, run_id, metrics=(), **kwargs):
        calls.append(len(metrics))
        if metrics and len(calls) <= 3:  # as the REST client reports a refused connection
            raise MlflowException("API request to http://mlflow:5000 failed with exception ConnectionError")
        return real(self, run_id, metrics=metrics, **kwargs)

    monkeypatch.setattr(MlflowClient, "log_batch", down_twice)
    said: list[str] = []
    sink = tracking.MlflowSink(MlflowConfig(tracking_uri=store, retry_backoff_s=0.01), said.append)
    sink.open("run-a", {"train.lr": 0.1}, {})
    for step in (1, 2, 3):
        sink.log(step, {"train/loss": 1.0 / step}, step, {})
    report = sink.close("FINISHED")
    assert report["complete"] and report["failed_attempts"] == 2 and report["values_sent"] == 3, report
    assert _steps(store, sink.run_id, "train/loss") == [1, 2, 3]
    assert sum("failed" in line for line in said) == 1 and sum("answers again" in line for line in said) == 1


@needs_mlflow
def test_a_deleted_experiment_stops_the_sink_saying_why_and_training_is_not_its_business(store):
    tracking.set_client_env(MlflowConfig(tracking_uri=store))
    client = _client(store)
    client.delete_experiment(client.create_experiment("gone"))
    said: list[str] = []
    sink = tracking.MlflowSink(MlflowConfig(tracking_uri=store, experiment="gone"), said.append)
    sink.open("run-a", {}, {})
    sink._thread.join(30)
    sink.log(1, {"train/loss": 0.5}, 1, {})
    report = sink.close("FINISHED")
    assert "experiment 'gone' is deleted" in report["error"] and report["values_dropped"] == 1, report
    assert any("disabled for the rest of this run" in line for line in said), said


def test_a_full_queue_drops_the_oldest_values_and_says_so_once(monkeypatch):
    monkeypatch.setattr(tracking, "MAX_QUEUED", 3)
    said: list[str] = []
    sink = tracking.MlflowSink(MlflowConfig(tracking_uri="http://mlflow:5000"), said.append)
    for step in range(1, 6):
        sink.log(step, {"train/loss": float(step)}, step, {})
    assert [v.step for v in sink._queue] == [3, 4, 5] and sink.dropped == 2
    assert len(said) == 1 and "dropping the oldest" in said[0]


def test_the_client_gets_one_request_per_attempt_and_no_telemetry_unless_set(monkeypatch):
    for name in MLFLOW_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "5")
    tracking.set_client_env(MlflowConfig(tracking_uri="https://mlflow.example.com"))
    assert os.environ["MLFLOW_HTTP_REQUEST_MAX_RETRIES"] == "0"
    assert os.environ["MLFLOW_DISABLE_TELEMETRY"] == "true"
    assert os.environ["MLFLOW_HTTP_REQUEST_TIMEOUT"] == "5"  # the user's own setting wins
    assert "MLFLOW_ALLOW_FILE_STORE" not in os.environ  # only a file: URI asks for the file store


def test_without_the_mlflow_extra_a_job_that_asks_for_it_exits_2_naming_the_extra(
    tmp_path, monkeypatch, capsys
):
    from trainer.__main__ import main

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "mlflow" else real(name, *a)
    )
    monkeypatch.delenv("RANK", raising=False)
    argv = trainer_args(tmp_path / "out", **{"mlflow.tracking_uri": "http://mlflow:5000"})
    assert main(argv) == 2
    error = capsys.readouterr().err
    assert "needs the 'mlflow' extra (mlflow-skinny is not installed)" in error
    assert "pip install 'mlops-eks[mlflow]'" in error
    assert not (tmp_path / "out").exists()  # refused before anything was made


class _ImportsOfMlflow:
    """A meta path finder that records every import of mlflow (and finds nothing itself)."""

    def __init__(self) -> None:
        self.names: list[str] = []

    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "mlflow":
            self.names.append(name)
        return None


def test_a_run_without_a_tracking_uri_imports_nothing_of_mlflow(tmp_path, keep_sigterm_handler, monkeypatch):
    for name in [m for m in sys.modules if m.split(".")[0] == "mlflow"]:  # an earlier test's import
        monkeypatch.delitem(sys.modules, name)
    recorder = _ImportsOfMlflow()
    monkeypatch.setattr(sys, "meta_path", [recorder, *sys.meta_path])
    assert run(from_args(trainer_args(tmp_path / "out", **{"train.max_steps": 6}))) == 0
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert recorder.names == [] and "mlflow" not in summary
