import json
import logging
import os

import pytest
import torch
from botocore.exceptions import EndpointConnectionError
from trainer_runs import FlakyS3

from trainer.checkpoint import CheckpointManager, checkpoint_name
from trainer.storage import LocalStorage, S3Storage


def _state(step):
    return {"step": step, "weights": torch.full((4,), float(step))}


@pytest.fixture
def local(tmp_path):
    return CheckpointManager(LocalStorage(tmp_path / "ckpt"), keep=2, workdir=tmp_path)


def test_saved_checkpoint_loads_back_with_a_verified_manifest(local):
    assert local.save(10, _state(10))
    name, state = local.load_latest()
    assert name == checkpoint_name(10) and torch.equal(state["weights"], _state(10)["weights"])
    manifest = json.loads((local.storage.root / name / "manifest.json").read_text())
    assert manifest["complete"] and manifest["files"]["state.pt"]["bytes"] > 0


def test_only_the_last_k_complete_checkpoints_are_kept(local):
    for step in (10, 20, 30, 40):
        local.save(step, _state(step))
    assert local.storage.list_dirs() == [checkpoint_name(30), checkpoint_name(40)]
    assert local.latest_name() == checkpoint_name(40)


def test_crash_between_temp_write_and_rename_leaves_previous_checkpoint_intact(local, monkeypatch, caplog):
    local.save(10, _state(10))
    real_replace = os.replace

    def crash_on_payload(src, dst):
        if str(dst).endswith("state.pt"):
            raise OSError("simulated crash before rename")
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", crash_on_payload)
    with caplog.at_level(logging.WARNING, logger="trainer"):
        assert local.save(20, _state(20)) is False
    monkeypatch.setattr(os, "replace", real_replace)
    assert "NOT written" in caplog.text and "latest still points to step-000000010" in caplog.text
    assert local.latest_name() == checkpoint_name(10)
    assert local.load_latest()[0] == checkpoint_name(10)


def test_checkpoint_without_manifest_is_incomplete_and_skipped(local, caplog):
    local.save(10, _state(10))
    local.save(20, _state(20))
    (local.storage.root / checkpoint_name(20) / "manifest.json").unlink()
    with caplog.at_level(logging.ERROR, logger="trainer"):
        name, state = local.load_latest()
    assert name == checkpoint_name(10) and state["step"] == 10
    assert "step-000000020 is incomplete: no manifest.json" in caplog.text


def _flip_middle_byte(raw: bytes) -> bytes:
    i = len(raw) // 2
    return raw[:i] + bytes([raw[i] ^ 0xFF]) + raw[i + 1 :]


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda p: p.write_bytes(p.read_bytes()[:100]), "(truncated?)"),
        (lambda p: p.write_bytes(_flip_middle_byte(p.read_bytes())), "does not match the manifest's"),
    ],
    ids=["truncated", "corrupt"],
)
def test_damaged_latest_checkpoint_is_refused_and_previous_one_used(local, caplog, damage, message):
    local.save(10, _state(10))
    local.save(20, _state(20))
    damage(local.storage.root / checkpoint_name(20) / "state.pt")
    with caplog.at_level(logging.ERROR, logger="trainer"):
        name, state = local.load_latest()
    assert (name, state["step"]) == (checkpoint_name(10), 10)
    assert f"refusing checkpoint {local.storage.uri}/step-000000020" in caplog.text and message in caplog.text


def test_no_good_checkpoint_means_a_fresh_start(local):
    assert local.load_latest() is None
    local.save(10, _state(10))
    (local.storage.root / checkpoint_name(10) / "state.pt").write_bytes(b"garbage")
    assert local.load_latest() is None


def _s3_manager(client, tmp_path, retries=3):
    storage = S3Storage("s3://mlops/runs/zimdb", client=client, retries=retries, backoff_s=0)
    return CheckpointManager(storage, keep=2, workdir=tmp_path)


def test_s3_round_trip_with_latest_pointer_and_keep_last_k(s3, tmp_path):
    ckpt = _s3_manager(s3, tmp_path)
    for step in (1, 2, 3):
        assert ckpt.save(step, _state(step))
    keys = sorted(o["Key"] for o in s3.list_objects_v2(Bucket="mlops")["Contents"])
    assert keys == [
        "runs/zimdb/latest",
        "runs/zimdb/step-000000002/manifest.json",
        "runs/zimdb/step-000000002/state.pt",
        "runs/zimdb/step-000000003/manifest.json",
        "runs/zimdb/step-000000003/state.pt",
    ]
    name, state = ckpt.load_latest()
    assert name == checkpoint_name(3) and state["step"] == 3


def test_s3_transient_failure_is_retried_and_the_checkpoint_completes(s3, tmp_path, caplog):
    flaky = FlakyS3(s3, failures=2)
    with caplog.at_level(logging.WARNING, logger="trainer"):
        assert _s3_manager(flaky, tmp_path, retries=3).save(5, _state(5))
    assert caplog.text.count("retrying") == 2
    assert _s3_manager(s3, tmp_path).load_latest()[0] == checkpoint_name(5)


def test_s3_outage_skips_the_checkpoint_and_latest_keeps_the_last_good_one(s3, tmp_path, caplog):
    assert _s3_manager(s3, tmp_path).save(5, _state(5))
    down = FlakyS3(s3, failures=100)
    with caplog.at_level(logging.WARNING, logger="trainer"):
        assert _s3_manager(down, tmp_path, retries=3).save(6, _state(6)) is False
    assert down.calls == 3  # every attempt was made, then the run went on
    assert "NOT written" in caplog.text and "latest still points to step-000000005" in caplog.text
    name, state = _s3_manager(s3, tmp_path).load_latest()
    assert (name, state["step"]) == (checkpoint_name(5), 5)


def test_s3_manifest_failure_leaves_the_payload_incomplete(s3, tmp_path):
    _s3_manager(s3, tmp_path).save(5, _state(5))
    # The payload upload succeeds, then S3 goes away before the manifest and the pointer.
    half = FlakyS3(s3, failures=0)
    half.put_object = lambda **kw: (_ for _ in ()).throw(EndpointConnectionError(endpoint_url="s3"))
    assert _s3_manager(half, tmp_path, retries=1).save(6, _state(6)) is False
    assert s3.get_object(Bucket="mlops", Key="runs/zimdb/latest")["Body"].read() == b"step-000000005"
    assert _s3_manager(s3, tmp_path).load_latest()[0] == checkpoint_name(5)


def test_garbage_latest_pointer_is_ignored_and_the_newest_complete_checkpoint_used(local, caplog):
    local.save(10, _state(10))
    local.save(20, _state(20))
    (local.storage.root / "latest").write_bytes(b"\xff\xfe\x00garbage")
    with caplog.at_level(logging.ERROR, logger="trainer"):
        assert local.load_latest()[0] == checkpoint_name(20)
    assert "unreadable pointer" in caplog.text
