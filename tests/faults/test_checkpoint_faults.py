"""Broken checkpoints and S3 outages, against the trainer's real checkpoint code (local directory and
S3 through moto). A damaged newest checkpoint is refused with a message naming it and what is wrong, and
the previous good one is used; an S3 outage while checkpointing is retried, then skipped, and never
damages the last good checkpoint. Two whole runs show the same at the level of `python -m trainer`."""

from __future__ import annotations

import json
import logging
import re
import signal

import boto3
import pytest
import torch
from botocore.exceptions import ClientError, EndpointConnectionError
from moto import mock_aws

from trainer.checkpoint import MANIFEST, PAYLOAD, POINTER, CheckpointManager, checkpoint_name
from trainer.config import from_args
from trainer.loop import run
from trainer.storage import LocalStorage, S3Storage

OLD, NEW = checkpoint_name(10), checkpoint_name(20)
BUCKET, PREFIX = "ckpt", "jobs/zimdb/checkpoints"


def state(step: int) -> dict:
    return {"step": step, "weights": torch.arange(4096, dtype=torch.float32) * step}


class Raw:
    """Direct access to the stored bytes, bypassing the trainer (to damage them)."""

    def __init__(self, storage):
        self.storage = storage

    def get(self, key: str) -> bytes:
        return self.storage.get_bytes(key)

    def put(self, key: str, data: bytes) -> None:
        if isinstance(self.storage, LocalStorage):
            (self.storage.root / key).write_bytes(data)
        else:
            self.storage.client.put_object(Bucket=BUCKET, Key=f"{PREFIX}/{key}", Body=data)

    def delete(self, key: str) -> None:
        if isinstance(self.storage, LocalStorage):
            (self.storage.root / key).unlink()
        else:
            self.storage.client.delete_object(Bucket=BUCKET, Key=f"{PREFIX}/{key}")


def _manifest(raw: Raw, **changes) -> None:
    manifest = json.loads(raw.get(f"{NEW}/{MANIFEST}"))
    manifest.update(changes)
    raw.put(f"{NEW}/{MANIFEST}", json.dumps(manifest).encode())


def _flip(data: bytes) -> bytes:
    middle = len(data) // 2
    return data[:middle] + bytes([data[middle] ^ 0xFF]) + data[middle + 1 :]


# (case, damage, checkpoint the trainer must fall back to, words its message must contain)
DAMAGES = [
    (
        "payload-truncated-half",
        lambda r: r.put(f"{NEW}/{PAYLOAD}", r.get(f"{NEW}/{PAYLOAD}")[:1000]),
        OLD,
        "truncated",
    ),
    ("payload-truncated-empty", lambda r: r.put(f"{NEW}/{PAYLOAD}", b""), OLD, "truncated"),
    (
        "payload-bit-flip",
        lambda r: r.put(f"{NEW}/{PAYLOAD}", _flip(r.get(f"{NEW}/{PAYLOAD}"))),
        OLD,
        "corrupt",
    ),
    ("payload-missing", lambda r: r.delete(f"{NEW}/{PAYLOAD}"), OLD, PAYLOAD),
    ("manifest-missing", lambda r: r.delete(f"{NEW}/{MANIFEST}"), OLD, "incomplete"),
    ("manifest-not-json", lambda r: r.put(f"{NEW}/{MANIFEST}", b'{"format": 1, "ste'), OLD, "unreadable"),
    ("manifest-not-complete", lambda r: _manifest(r, complete=False), OLD, "complete"),
    (
        "manifest-wrong-sha256",
        lambda r: _manifest(
            r,
            files={PAYLOAD: {**json.loads(r.get(f"{NEW}/{MANIFEST}"))["files"][PAYLOAD], "sha256": "0" * 64}},
        ),
        OLD,
        "does not match",
    ),
    ("pointer-dangling", lambda r: r.put(POINTER, checkpoint_name(99).encode()), NEW, checkpoint_name(99)),
    ("pointer-binary-garbage", lambda r: r.put(POINTER, b"\xff\xfe\x00garbage"), NEW, POINTER),
]


@pytest.fixture(params=["local", "s3"])
def storage(request, tmp_path):
    if request.param == "local":
        yield LocalStorage(tmp_path / "ckpt")
        return
    with mock_aws():
        client = boto3.client("s3", region_name="us-east-1")
        client.create_bucket(Bucket=BUCKET)
        yield S3Storage(f"s3://{BUCKET}/{PREFIX}", client=client, retries=3, backoff_s=0)


def manager(storage, tmp_path) -> CheckpointManager:
    return CheckpointManager(storage, keep=3, workdir=tmp_path)


@pytest.mark.parametrize(("case", "damage", "fallback", "words"), DAMAGES, ids=[d[0] for d in DAMAGES])
def test_damaged_checkpoint_is_refused_and_a_good_one_used(
    storage, tmp_path, caplog, ledger, case, damage, fallback, words
):
    ckpt = manager(storage, tmp_path)
    assert ckpt.save(10, state(10)) and ckpt.save(20, state(20))
    damage(Raw(storage))
    with caplog.at_level(logging.WARNING, logger="trainer"):
        try:
            found = ckpt.load_latest()
        except Exception as err:  # a crash instead of a refusal is a finding, recorded as such
            found, caplog_text = None, f"crashed: {type(err).__name__}: {err}"
        else:
            caplog_text = caplog.text
    kind = "checkpoint (S3)" if isinstance(storage, S3Storage) else "checkpoint (local)"
    used = found[0] if found else None
    entry = ledger(kind, case, error=caplog_text if used == fallback else None, names=words)
    assert used == fallback, f"{case}: loaded {used}, expected {fallback}; {caplog_text}"
    assert torch.equal(found[1]["weights"], state(int(fallback[-9:]))["weights"])
    assert entry.clear, f"{case}: the refusal does not say what is wrong ({words!r}): {caplog_text}"


def test_no_verifiable_checkpoint_means_a_fresh_start_with_every_refusal_logged(
    storage, tmp_path, caplog, ledger
):
    ckpt = manager(storage, tmp_path)
    assert ckpt.save(10, state(10)) and ckpt.save(20, state(20))
    raw = Raw(storage)
    raw.put(f"{NEW}/{PAYLOAD}", b"")
    raw.put(f"{OLD}/{PAYLOAD}", _flip(raw.get(f"{OLD}/{PAYLOAD}")))
    with caplog.at_level(logging.WARNING, logger="trainer"):
        found = ckpt.load_latest()
    refused = [line for line in caplog.text.splitlines() if "refusing" in line]
    entry = ledger("checkpoint (both damaged)", type(storage).__name__, error=caplog.text, names="refusing")
    assert found is None and len(refused) == 2 and entry.clear, caplog.text


class Outage:
    """A moto S3 client whose writes of keys matching `pattern` fail `times` times (None: always)."""

    def __init__(self, client, pattern: str, error: Exception, times: int | None = None):
        self._client, self.pattern, self.error, self.times, self.failed = (
            client,
            re.compile(pattern),
            error,
            times,
            0,
        )

    def _maybe_fail(self, key: str) -> None:
        if self.pattern.search(key) and (self.times is None or self.failed < self.times):
            self.failed += 1
            raise self.error

    def upload_file(self, filename, bucket, key, *args, **kwargs):
        self._maybe_fail(key)
        return self._client.upload_file(filename, bucket, key, *args, **kwargs)

    def put_object(self, **kwargs):
        self._maybe_fail(kwargs["Key"])
        return self._client.put_object(**kwargs)

    def __getattr__(self, name):
        return getattr(self._client, name)


DOWN = EndpointConnectionError(endpoint_url="https://s3.us-east-1.amazonaws.com")
SLOW_DOWN = ClientError(
    {"Error": {"Code": "SlowDown", "Message": "Please reduce your request rate."}}, "PutObject"
)
DENIED = ClientError({"Error": {"Code": "AccessDenied", "Message": "Access Denied"}}, "PutObject")
# (case, keys that fail, error, failures (None: for good), whether the new checkpoint should land)
OUTAGES = [
    ("payload-2-transient-failures", PAYLOAD, DOWN, 2, True),
    ("manifest-throttled-twice", MANIFEST, SLOW_DOWN, 2, True),
    ("payload-outage", PAYLOAD, DOWN, None, False),
    ("manifest-outage", MANIFEST, DOWN, None, False),
    ("pointer-outage", f"/{POINTER}$", DOWN, None, False),
    ("whole-bucket-outage", ".", DOWN, None, False),
    ("access-denied", ".", DENIED, None, False),
]


@pytest.fixture
def s3():
    with mock_aws():
        client = boto3.client("s3", region_name="us-east-1")
        client.create_bucket(Bucket=BUCKET)
        yield client


@pytest.mark.parametrize(("case", "pattern", "error", "times", "lands"), OUTAGES, ids=[o[0] for o in OUTAGES])
def test_s3_outage_while_checkpointing_keeps_the_last_good_checkpoint(
    s3, tmp_path, caplog, ledger, case, pattern, error, times, lands
):
    good = S3Storage(f"s3://{BUCKET}/{PREFIX}", client=s3, retries=3, backoff_s=0)
    assert manager(good, tmp_path).save(10, state(10))
    flaky = S3Storage(
        f"s3://{BUCKET}/{PREFIX}", client=Outage(s3, pattern, error, times), retries=3, backoff_s=0
    )
    with caplog.at_level(logging.WARNING, logger="trainer"):
        saved = manager(flaky, tmp_path).save(20, state(20))  # returns instead of raising: training goes on
    name, loaded = manager(good, tmp_path).load_latest()
    expected = NEW if lands else OLD
    intact = name == expected and torch.equal(loaded["weights"], state(int(expected[-9:]))["weights"])
    said = "retrying" if lands else "NOT written"
    entry = ledger(
        "S3 outage at checkpoint", case, error=caplog.text if intact else None, names=said, created=not intact
    )
    assert saved is lands, f"{case}: save returned {saved}"
    assert intact, f"{case}: latest good checkpoint is {name}, expected {expected} intact"
    assert entry.clear, f"{case}: no '{said}' warning: {caplog.text}"


TINY = {
    "data.synthetic_train_size": 256,
    "data.synthetic_val_size": 32,
    "data.max_len": 16,
    "model.dim": 16,
    "model.layers": 1,
    "model.heads": 2,
    "model.ffn_dim": 32,
    "train.batch_size": 8,
    "train.warmup_steps": 2,
    "train.log_every": 10,
    "train.eval_every": 1000,
    "checkpoint.every_steps": 10,
    "checkpoint.retry_backoff_s": 0,
    "checkpoint.upload_retries": 2,
}


def job(max_steps: int, checkpoints: str, output: str):
    values = {**TINY, "train.max_steps": max_steps, "checkpoint.dir": checkpoints, "output.dir": output}
    return from_args([a for k, v in values.items() for a in (f"--{k}", str(v))])


@pytest.fixture
def keep_sigterm_handler():
    handler = signal.getsignal(signal.SIGTERM)
    yield
    signal.signal(signal.SIGTERM, handler)


def test_run_resumes_from_the_previous_checkpoint_when_the_latest_is_corrupt(
    tmp_path, capsys, caplog, ledger, keep_sigterm_handler
):
    assert run(job(20, str(tmp_path / "ckpt"), str(tmp_path / "out"))) == 0
    raw = Raw(LocalStorage(tmp_path / "ckpt"))
    raw.put(f"{NEW}/{PAYLOAD}", _flip(raw.get(f"{NEW}/{PAYLOAD}")))
    with caplog.at_level(logging.WARNING, logger="trainer"):
        assert run(job(30, str(tmp_path / "ckpt"), str(tmp_path / "out"))) == 0
    out = capsys.readouterr().out
    resumed = f"resuming from {tmp_path / 'ckpt'}/{OLD} (step 10)" in out
    entry = ledger(
        "whole run", "corrupt-latest-checkpoint", error=caplog.text if resumed else None, names=NEW
    )
    assert resumed, out
    assert entry.clear and "corrupt" in caplog.text, caplog.text
    assert (tmp_path / "ckpt" / POINTER).read_text().strip() == checkpoint_name(30)


def test_run_survives_an_s3_outage_at_its_final_checkpoint(
    s3, tmp_path, caplog, ledger, keep_sigterm_handler
):
    down = Outage(s3, checkpoint_name(30), DOWN)
    ckpt, out = f"s3://{BUCKET}/{PREFIX}", f"s3://{BUCKET}/jobs/zimdb/output"
    with caplog.at_level(logging.WARNING, logger="trainer"):
        code = run(job(30, ckpt, out), s3_client=down)
    pointer = s3.get_object(Bucket=BUCKET, Key=f"{PREFIX}/{POINTER}")["Body"].read().decode()
    entry = ledger(
        "whole run",
        "s3-outage-final-checkpoint",
        error=caplog.text if code == 0 else None,
        names="NOT written",
    )
    assert code == 0, caplog.text
    assert pointer == NEW and entry.clear, (pointer, caplog.text)
    name, _ = CheckpointManager(S3Storage(ckpt, client=s3), workdir=tmp_path).load_latest()
    assert name == NEW
    summary = json.loads(s3.get_object(Bucket=BUCKET, Key="jobs/zimdb/output/summary.json")["Body"].read())
    assert summary["steps"] == 30
