"""Metrics people look at: progress lines with N/total and ETA, one Prometheus endpoint per pod fed by every
rank (scraped over loopback from a real 2-process torchrun in tests/trainer/test_distributed.py), MFU, and
metrics that reach S3 mid-run."""

import json
import socket

import pytest
import torch
from ports import reserved_port
from trainer_runs import scrape, trainer_args

from trainer import metrics as m
from trainer.config import ModelConfig, from_args
from trainer.data import DataError
from trainer.dist import DistEnv
from trainer.loop import _enable_mfu, run
from trainer.model import build_model
from trainer.precision import Precision
from trainer.storage import S3Storage


def test_progress_line_shows_step_of_total_and_an_eta(tmp_path, capsys, monkeypatch):
    clock = iter([100.0, 110.0])
    monkeypatch.setattr(m.time, "time", lambda: next(clock))
    metrics = m.Metrics(tmp_path / "metrics.jsonl", enabled=True, total_steps=300)
    metrics.record("first_step", 1)
    metrics.record("train", 101, loss=0.5)
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "[trainer] first_step step 1/300 "
    # 100 steps in 10 s, 199 to go: 19.9 s
    assert out[1] == "[trainer] train step 101/300 loss 0.5 eta 20s"
    assert m.format_duration(3725) == "1h02m" and m.format_duration(75) == "1m15s"


def test_one_endpoint_serves_every_local_rank(tmp_path):
    port = reserved_port()
    lead = m.Exporter(tmp_path, local_rank=0, rank=4, port=port)
    other = m.Exporter(tmp_path, local_rank=1, rank=5, port=port)  # would fail to bind if it tried
    try:
        assert lead.server is not None and other.server is None and not other.error
        lead.publish({"step": 7, "loss": 0.25, "grad_norm": 1.5, "gpu_mem_gb": 1.0, "path": "not a number"})
        other.publish({"step": 7, "loss": 0.25, "gpu_mem_gb": 2.0})
        samples = scrape(port)
    finally:
        lead.close()
    assert samples["trainer_step"] == 7 and samples["trainer_loss"] == 0.25
    assert samples["trainer_grad_norm"] == 1.5
    assert samples["trainer_local_ranks"] == 2
    assert samples['trainer_gpu_memory_bytes{rank="4"}'] == 2**30
    assert samples['trainer_gpu_memory_bytes{rank="5"}'] == 2 * 2**30


def test_a_port_in_use_is_a_warning_not_a_failure(tmp_path, capsys):
    with socket.socket() as busy:
        busy.bind(("0.0.0.0", 0))
        busy.listen()
        exporter = m.Exporter(tmp_path, local_rank=0, rank=0, port=busy.getsockname()[1])
        m.Metrics(tmp_path / "metrics.jsonl", enabled=True, exporter=exporter)
    assert exporter.server is None
    assert "warning: Prometheus metrics not served on port" in capsys.readouterr().out


def test_mfu_counts_model_flops_per_token_of_the_model_shape_over_the_known_peak(tmp_path, monkeypatch):
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA L40S")
    cuda = torch.device("cuda", 0)
    env = DistEnv(rank=0, world_size=4, local_rank=0, device=cuda)
    model = build_model(ModelConfig(), vocab_size=8000, max_positions=64)
    metrics = m.Metrics(tmp_path / "metrics.jsonl", enabled=True)
    _enable_mfu(metrics, model, env, Precision(torch.bfloat16, "L40S", "test"), seq_len=64)
    metrics.record("train", 20, tokens_per_s=1e6)
    row = json.loads((tmp_path / "metrics.jsonl").read_text().splitlines()[-1])
    embedding = 8000 * 64
    per_token = 6 * (sum(p.numel() for p in model.parameters()) - embedding) + 12 * 2 * 4 * 16 * 64
    assert row["mfu"] == pytest.approx(1e6 * per_token / (4 * 362e12))


def test_no_mfu_for_a_gpu_without_a_known_peak_and_the_log_says_so(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "Tesla T4")
    env = DistEnv(rank=0, world_size=1, local_rank=0, device=torch.device("cuda", 0))
    model = build_model(ModelConfig(), vocab_size=100, max_positions=64)
    metrics = m.Metrics(tmp_path / "metrics.jsonl", enabled=True)
    _enable_mfu(metrics, model, env, Precision(torch.bfloat16, "T4", "requested"), seq_len=64)  # emulated
    metrics.record("train", 20, tokens_per_s=1e6)
    assert "mfu" not in json.loads((tmp_path / "metrics.jsonl").read_text())
    assert "MFU not reported: no dense bf16 peak known for 'Tesla T4'" in capsys.readouterr().out


def test_a_full_disk_loses_metrics_lines_but_never_stops_the_run(tmp_path, capsys):
    (tmp_path / "metrics.jsonl").symlink_to("/dev/full")  # writes fail with ENOSPC, as on a full volume
    metrics = m.Metrics(tmp_path / "metrics.jsonl", enabled=True, total_steps=30)
    metrics.record("train", 10, loss=0.5)
    metrics.record("train", 20, loss=0.4)
    out = capsys.readouterr().out
    assert out.count("warning: disk full, writing metrics.jsonl failed") == 1  # said once, not every line
    assert "train step 20/30 loss 0.4" in out  # progress lines go on


def test_upload_copies_metrics_and_tensorboard_events(tmp_path, s3):
    local = tmp_path / "output"
    metrics = m.Metrics(local / "metrics.jsonl", enabled=True)
    metrics.tensorboard_dir = local / "tensorboard"  # as if written by SummaryWriter
    (local / "tensorboard").mkdir()
    (local / "tensorboard" / "events.out.tfevents.1.host").write_bytes(b"\x00events")
    metrics.record("train", 5, loss=1.0)
    metrics.upload(S3Storage("s3://mlops/runs/x", client=s3, retries=1, backoff_s=0))
    keys = {o["Key"] for o in s3.list_objects_v2(Bucket="mlops")["Contents"]}
    assert keys == {"runs/x/metrics.jsonl", "runs/x/tensorboard/events.out.tfevents.1.host"}


def test_interrupted_attempt_metrics_reach_s3(tmp_path, s3, monkeypatch):
    calls = {"n": 0}

    def sigterm_at_step_12(self, env):
        calls["n"] += 1
        return calls["n"] >= 12

    monkeypatch.setattr("trainer.loop.StopFlag.poll", sigterm_at_step_12)
    cfg = from_args(
        trainer_args(
            tmp_path,
            **{
                "train.max_steps": 30,
                "checkpoint.every_steps": 1000,
                "output.dir": "s3://mlops/runs/zimdb",
                "checkpoint.dir": "s3://mlops/ckpt/zimdb",
                "output.metrics_port": 0,
            },
        )
    )
    assert run(cfg, s3_client=s3) == 143
    history = s3.get_object(Bucket="mlops", Key="runs/zimdb/metrics.jsonl")["Body"].read().decode()
    rows = [json.loads(line) for line in history.splitlines()]
    assert [r["step"] for r in rows if r["event"] == "train"] == [5, 10]
    assert rows[-1]["event"] == "checkpoint" and rows[-1]["step"] == 12


def test_a_run_that_fails_frees_its_metrics_port_for_the_next_run(tmp_path, monkeypatch):
    def data_refused(*args):
        raise DataError("no rows")

    monkeypatch.setattr("trainer.tasks.prepare_classifier_data", data_refused)
    port = reserved_port()
    cfg = from_args(trainer_args(tmp_path, **{"output.metrics_port": port}))
    with pytest.raises(DataError):
        run(cfg)  # the exporter was serving `port` by then
    with socket.socket() as s:  # as the next run's server binds it: refused while anything listens there
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("", port))
