"""Whole runs in this process (single process, no torchrun): S3 checkpoints and outputs through moto."""

import json
import logging
import math
import os
import signal
import threading
import time

import pytest
import torch
from trainer_runs import FlakyS3, assert_same_weights, trainer_args

from trainer import faults, tasks
from trainer.config import from_args
from trainer.loop import run


def _cfg(tmp_path, **overrides):
    args = trainer_args(
        tmp_path,
        **{
            "train.max_steps": 30,
            "checkpoint.every_steps": 10,
            "checkpoint.retry_backoff_s": 0,
            "checkpoint.upload_retries": 2,
            "output.dir": "s3://mlops/runs/zimdb",
            "checkpoint.dir": "s3://mlops/ckpt/zimdb",
            **overrides,
        },
    )
    return from_args(args)


def test_s3_outage_during_a_checkpoint_does_not_stop_the_run(tmp_path, s3, caplog, keep_sigterm_handler):
    flaky = FlakyS3(s3, failures=2, prefix="ckpt/")  # both attempts of the step-10 payload upload fail
    with caplog.at_level(logging.WARNING, logger="trainer"):
        assert run(_cfg(tmp_path), s3_client=flaky) == 0
    latest = s3.get_object(Bucket="mlops", Key="ckpt/zimdb/latest")["Body"].read().decode()
    run_dir = f"ckpt/zimdb/{latest.split('/')[0]}"  # checkpoints live under the run's own prefix
    assert latest == f"{latest.split('/')[0]}/step-000000030"
    assert f"checkpoint s3://mlops/{run_dir}/step-000000010 NOT written" in caplog.text
    keys = {o["Key"] for o in s3.list_objects_v2(Bucket="mlops")["Contents"]}
    assert f"{run_dir}/step-000000010/manifest.json" not in keys
    assert {f"{run_dir}/step-000000020/manifest.json", f"{run_dir}/step-000000030/manifest.json"} <= keys
    summary = json.loads(s3.get_object(Bucket="mlops", Key="runs/zimdb/summary.json")["Body"].read())
    assert summary["steps"] == 30 and summary["model"] == "s3://mlops/runs/zimdb/model.pt"
    assert {"runs/zimdb/model.pt", "runs/zimdb/metrics.jsonl", "runs/zimdb/config.json"} <= keys


class _FinalCheckpointDown(FlakyS3):
    """S3 fails every upload of the step-30 checkpoint (the last one of a 30-step run)."""

    def _maybe_fail(self, key):
        if "/step-000000030/" in key:
            super()._maybe_fail("")


def test_failed_final_checkpoint_is_a_retryable_exit_not_success(tmp_path, s3, keep_sigterm_handler):
    down = _FinalCheckpointDown(s3, failures=10**6)
    final = r"final checkpoint s3://mlops/ckpt/zimdb/run-.*/step-000000030 failed and was NOT written"
    with pytest.raises(faults.Retryable, match=final) as err:
        run(_cfg(tmp_path), s3_client=down)
    assert faults.verdict(err.value)[0] == faults.STORAGE_UNAVAILABLE
    keys = {o["Key"] for o in s3.list_objects_v2(Bucket="mlops")["Contents"]}
    assert "runs/zimdb/summary.json" not in keys  # no result published that points at step 20


def test_run_that_finds_its_final_checkpoint_only_rewrites_outputs(
    tmp_path, s3, keep_sigterm_handler, capsys
):
    assert run(_cfg(tmp_path), s3_client=s3) == 0
    assert not (tmp_path / "model.pt").exists()  # outputs went to S3 only
    assert run(_cfg(tmp_path), s3_client=s3) == 0
    out = capsys.readouterr().out
    latest = s3.get_object(Bucket="mlops", Key="ckpt/zimdb/latest")["Body"].read().decode()
    assert f"resuming from s3://mlops/ckpt/zimdb/{latest} (step 30)" in out
    assert "train step" not in out.split("resuming from")[1]
    history = s3.get_object(Bucket="mlops", Key="runs/zimdb/metrics.jsonl")["Body"].read().decode()
    evals = [r["step"] for r in map(json.loads, history.splitlines()) if r["event"] == "eval"]
    assert evals == [30, 30]  # the first run's history was kept and the second run appended to it


def test_gradient_accumulation_equals_one_big_batch(tmp_path, keep_sigterm_handler):
    common = {"model.dropout": 0.0, "train.max_steps": 12, "train.grad_clip": 0.0}
    runs = {
        "big": {"train.batch_size": 8, "train.grad_accum_steps": 1},
        "accumulated": {"train.batch_size": 4, "train.grad_accum_steps": 2},
    }
    weights = {}
    for name, overrides in runs.items():
        out = tmp_path / name
        assert run(from_args(trainer_args(out, **common, **overrides))) == 0
        weights[name] = torch.load(out / "model.pt", weights_only=True)["model"]
    assert_same_weights(weights["big"], weights["accumulated"])


def test_checkpoints_resume_across_precisions_with_and_without_a_loss_scale(
    tmp_path, keep_sigterm_handler, capsys
):
    """fp32 (no GradScaler state) -> fp16 (starts a fresh loss scale) -> fp32 (ignores the saved one)."""
    out = tmp_path / "out"
    for precision, steps in (("fp32", 10), ("fp16", 20), ("fp32", 30)):
        args = {"train.precision": precision, "train.max_steps": steps, "checkpoint.every_steps": 10}
        assert run(from_args(trainer_args(out, **args))) == 0, precision
        log = capsys.readouterr().out
        if steps > 10:
            assert f"(step {steps - 10})" in log
        assert ("checkpoint has no fp16 loss scale: starting at 65536" in log) == (precision == "fp16")
    assert json.loads((out / "summary.json").read_text())["steps"] == 30


def test_sigterm_checkpoints_at_once_without_running_a_due_evaluation(tmp_path, keep_sigterm_handler):
    """A Spot notice leaves 120 s: the evaluation due at the stopping step is skipped, not run first."""
    out = tmp_path / "out"
    cfg = from_args(trainer_args(out, **{"train.eval_every": 1, "train.max_steps": 300}))

    def reclaim_after_some_steps():
        metrics = out / "metrics.jsonl"
        while not (metrics.exists() and metrics.read_text().count('"eval"') >= 3):
            time.sleep(0.01)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=reclaim_after_some_steps, daemon=True).start()
    assert run(cfg) == 143
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    (saved,) = [r["step"] for r in rows if r["event"] == "checkpoint"]
    evals = [r["step"] for r in rows if r["event"] == "eval"]
    assert evals == list(range(1, saved))  # every step evaluated, but not the one that stopped


def test_a_skipped_step_and_the_first_steps_warm_up_stay_out_of_the_progress_figures(
    tmp_path, keep_sigterm_handler, monkeypatch
):
    """Step 3's loss is NaN (a bad batch: skipped, no weight update) and the first step takes 1000 s
    (compilation, warm-up; on a clock this test moves on): the window of steps 1-5 still reports a finite
    loss over the other four steps, and the throughput counts steps 2-10 only. Every progress line has
    the gradient norm."""
    real_loss, real_clock = tasks.classifier_loss, time.perf_counter
    calls, warm_up = [], [0.0]

    def loss(model, batch):
        calls.append(len(calls) + 1)
        total, count = real_loss(model, batch)
        if calls[-1] == 1:
            warm_up[0] = 1000.0
        return (total * float("nan") if calls[-1] == 3 else total), count

    monkeypatch.setattr(tasks, "classifier_loss", loss)
    monkeypatch.setattr(time, "perf_counter", lambda: real_clock() + warm_up[0])
    out = tmp_path / "out"
    assert run(from_args(trainer_args(out, **{"train.max_steps": 10, "train.log_every": 5}))) == 0
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in rows if r["event"] == "train"]
    assert [(r["step"], r.get("bad_steps")) for r in train] == [(5, 1), (10, 1)]
    assert all(math.isfinite(r["loss"]) and 0 < r["loss"] < 1.0 for r in train), train
    assert all(math.isfinite(r["grad_norm"]) and r["grad_norm"] > 0 for r in train), train
    # With the first step's 1000 s, 4 steps of 8 samples would be 0.032 samples/s.
    assert (
        train[0]["samples_per_s"] > 1 and json.loads((out / "summary.json").read_text())["samples_per_s"] > 1
    )
