"""Whole runs in this process (single process, no torchrun): S3 checkpoints and outputs through moto."""

import json
import logging
import signal

import pytest
import torch
from trainer_runs import FlakyS3, assert_same_weights, trainer_args

from trainer.config import from_args
from trainer.loop import run


@pytest.fixture
def keep_sigterm_handler():
    handler = signal.getsignal(signal.SIGTERM)
    yield
    signal.signal(signal.SIGTERM, handler)


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
    flaky = FlakyS3(s3, failures=2)  # both attempts of the step-10 payload upload fail
    with caplog.at_level(logging.WARNING, logger="trainer"):
        assert run(_cfg(tmp_path), s3_client=flaky) == 0
    assert "checkpoint s3://mlops/ckpt/zimdb/step-000000010 NOT written" in caplog.text
    keys = {o["Key"] for o in s3.list_objects_v2(Bucket="mlops")["Contents"]}
    assert "ckpt/zimdb/step-000000010/manifest.json" not in keys
    assert {"ckpt/zimdb/step-000000020/manifest.json", "ckpt/zimdb/step-000000030/manifest.json"} <= keys
    assert s3.get_object(Bucket="mlops", Key="ckpt/zimdb/latest")["Body"].read() == b"step-000000030"
    summary = json.loads(s3.get_object(Bucket="mlops", Key="runs/zimdb/summary.json")["Body"].read())
    assert summary["steps"] == 30 and summary["model"] == "s3://mlops/runs/zimdb/model.pt"
    assert {"runs/zimdb/model.pt", "runs/zimdb/metrics.jsonl", "runs/zimdb/config.json"} <= keys


def test_run_that_finds_its_final_checkpoint_only_rewrites_outputs(
    tmp_path, s3, keep_sigterm_handler, capsys
):
    assert run(_cfg(tmp_path), s3_client=s3) == 0
    assert not (tmp_path / "model.pt").exists()  # outputs went to S3 only
    assert run(_cfg(tmp_path), s3_client=s3) == 0
    out = capsys.readouterr().out
    assert "resuming from s3://mlops/ckpt/zimdb/step-000000030 (step 30)" in out
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
