"""Broken checkpoints and S3 outages, against the trainer's real checkpoint code (local directory and
S3 through moto). A damaged newest checkpoint is refused with a message naming it and what is wrong, and
the previous good one is used; an S3 outage while checkpointing is retried, then skipped, and never
damages the last good checkpoint. Two whole runs show the same at the level of `python -m trainer`."""

from __future__ import annotations

import builtins
import json
import logging
import re
import signal
import threading
from pathlib import Path

import boto3
import pytest
import torch
from botocore.exceptions import ClientError, EndpointConnectionError
from moto import mock_aws

from trainer import faults, shards
from trainer.__main__ import main
from trainer.checkpoint import (
    MANIFEST,
    POINTER,
    TRAIN_STATE,
    CheckpointManager,
    CheckpointUnavailable,
    checkpoint_name,
)
from trainer.config import from_args
from trainer.dist import DistEnv
from trainer.loop import run
from trainer.storage import LocalStorage, S3Storage

OLD, NEW = checkpoint_name(10), checkpoint_name(20)
BUCKET, PREFIX = "ckpt", "jobs/zimdb/checkpoints"
PAYLOAD = "__0_0.distcp"  # rank 0's model and optimizer shard
ONE = DistEnv(rank=0, world_size=1, local_rank=0, device=torch.device("cpu"))


def trainee(step: int) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    """A model whose weights are arange(...) * step, so the loaded weights tell which step was used."""
    model = torch.nn.Linear(64, 64)
    with torch.no_grad():
        model.weight.copy_(torch.arange(4096, dtype=torch.float32).reshape(64, 64) * step)
    return model, torch.optim.SGD(model.parameters(), lr=0.1)


def save(ckpt: CheckpointManager, step: int) -> bool:
    return ckpt.save(ONE, step, *trainee(step), {"step": step})


def load(ckpt: CheckpointManager) -> tuple[str, torch.Tensor] | None:
    """(checkpoint used, its weights) as a restarted process resumes, or None for a fresh start."""
    model, optimizer = trainee(-1)
    state = ckpt.begin(ONE, resume=True)
    state = state and ckpt.restore(ONE, state, model, optimizer)
    return (state["checkpoint"], model.weight.detach()) if state else None


class Raw:
    """Direct access to the stored bytes, bypassing the trainer (to damage them); keys under `storage`."""

    def __init__(self, storage):
        self.storage = storage

    def get(self, key: str) -> bytes:
        return self.storage.get_bytes(key)

    def put(self, key: str, data: bytes) -> None:
        if isinstance(self.storage, LocalStorage):
            (self.storage.root / key).write_bytes(data)
        else:
            self.storage.client.put_object(Bucket=BUCKET, Key=f"{self.storage.prefix}/{key}", Body=data)

    def delete(self, key: str) -> None:
        if isinstance(self.storage, LocalStorage):
            (self.storage.root / key).unlink()
        else:
            self.storage.client.delete_object(Bucket=BUCKET, Key=f"{self.storage.prefix}/{key}")


def _manifest(raw: Raw, **changes) -> None:
    manifest = json.loads(raw.get(f"{NEW}/{MANIFEST}"))
    manifest.update(changes)
    raw.put(f"{NEW}/{MANIFEST}", json.dumps(manifest).encode())


def _flip(data: bytes) -> bytes:
    middle = len(data) // 2
    return data[:middle] + bytes([data[middle] ^ 0xFF]) + data[middle + 1 :]


def _wrong_sha(raw: Raw) -> None:
    files = json.loads(raw.get(f"{NEW}/{MANIFEST}"))["files"]
    _manifest(raw, files={**files, PAYLOAD: {**files[PAYLOAD], "sha256": "0" * 64}})


# (case, damage(run's files, checkpoint.dir's files), checkpoint to fall back to, words the message needs)
DAMAGES = [
    (
        "payload-truncated-half",
        lambda r, _: r.put(f"{NEW}/{PAYLOAD}", r.get(f"{NEW}/{PAYLOAD}")[:1000]),
        OLD,
        "truncated",
    ),
    ("payload-truncated-empty", lambda r, _: r.put(f"{NEW}/{PAYLOAD}", b""), OLD, "truncated"),
    (
        "payload-bit-flip",
        lambda r, _: r.put(f"{NEW}/{PAYLOAD}", _flip(r.get(f"{NEW}/{PAYLOAD}"))),
        OLD,
        "corrupt",
    ),
    ("payload-missing", lambda r, _: r.delete(f"{NEW}/{PAYLOAD}"), OLD, PAYLOAD),
    ("dcp-metadata-missing", lambda r, _: r.delete(f"{NEW}/{shards.METADATA}"), OLD, "missing"),
    (
        "train-state-bit-flip",
        lambda r, _: r.put(f"{NEW}/{TRAIN_STATE}", _flip(r.get(f"{NEW}/{TRAIN_STATE}"))),
        OLD,
        "corrupt",
    ),
    ("manifest-missing", lambda r, _: r.delete(f"{NEW}/{MANIFEST}"), OLD, "incomplete"),
    ("manifest-not-json", lambda r, _: r.put(f"{NEW}/{MANIFEST}", b'{"format": 2, "ste'), OLD, "unreadable"),
    ("manifest-not-complete", lambda r, _: _manifest(r, complete=False), OLD, "complete"),
    ("manifest-wrong-sha256", lambda r, _: _wrong_sha(r), OLD, "does not match"),
    ("manifest-old-format", lambda r, _: _manifest(r, format=1), OLD, "format"),
    (
        "pointer-dangling",
        lambda r, root: root.put(POINTER, root.get(POINTER).replace(NEW.encode(), b"step-000000099")),
        NEW,
        checkpoint_name(99),
    ),
    ("pointer-binary-garbage", lambda r, root: root.put(POINTER, b"\xff\xfe\x00garbage"), NEW, POINTER),
]


@pytest.fixture(scope="module")
def moto_s3():
    """One moto mock and boto3 client for the module's forty S3 tests: entering mock_aws drops boto3's
    default session, so a mock and a client per test made a session and a client each time (40 ms)."""
    with mock_aws() as mock:
        yield mock, boto3.client("s3", region_name="us-east-1")


@pytest.fixture
def s3(moto_s3):
    """The module's moto client, with every backend reset and an empty bucket BUCKET, as a fresh mock has."""
    mock, client = moto_s3
    mock.reset()
    client.create_bucket(Bucket=BUCKET)
    return client


@pytest.fixture(params=["local", "s3"])
def storage(request, tmp_path):
    if request.param == "local":
        return LocalStorage(tmp_path / "ckpt")
    client = request.getfixturevalue("s3")
    return S3Storage(f"s3://{BUCKET}/{PREFIX}", client=client, retries=3, backoff_s=0)


def manager(storage, tmp_path) -> CheckpointManager:
    return CheckpointManager(storage, keep=3, workdir=tmp_path)


def started(storage, tmp_path) -> CheckpointManager:
    ckpt = manager(storage, tmp_path)
    ckpt.begin(ONE, resume=True)
    return ckpt


@pytest.mark.parametrize(("case", "damage", "fallback", "words"), DAMAGES, ids=[d[0] for d in DAMAGES])
def test_damaged_checkpoint_is_refused_and_a_good_one_used(
    storage, tmp_path, caplog, ledger, case, damage, fallback, words
):
    ckpt = started(storage, tmp_path)
    assert save(ckpt, 10) and save(ckpt, 20)
    damage(Raw(ckpt.run_storage), Raw(storage))
    with caplog.at_level(logging.WARNING, logger="trainer"):
        try:
            found = load(manager(storage, tmp_path))
        except Exception as err:  # a crash instead of a refusal is a finding, recorded as such
            found, caplog_text = None, f"crashed: {type(err).__name__}: {err}"
        else:
            caplog_text = caplog.text
    kind = "checkpoint (S3)" if isinstance(storage, S3Storage) else "checkpoint (local)"
    used = found[0] if found else None
    entry = ledger(kind, case, error=caplog_text if used == fallback else None, names=words)
    assert used == fallback, f"{case}: loaded {used}, expected {fallback}; {caplog_text}"
    assert torch.equal(found[1], trainee(int(fallback[-9:]))[0].weight)
    assert entry.clear, f"{case}: the refusal does not say what is wrong ({words!r}): {caplog_text}"


def test_no_verifiable_checkpoint_means_a_fresh_start_with_every_refusal_logged(
    storage, tmp_path, caplog, ledger
):
    ckpt = started(storage, tmp_path)
    assert save(ckpt, 10) and save(ckpt, 20)
    raw = Raw(ckpt.run_storage)
    raw.put(f"{NEW}/{PAYLOAD}", b"")
    raw.put(f"{OLD}/{PAYLOAD}", _flip(raw.get(f"{OLD}/{PAYLOAD}")))
    with caplog.at_level(logging.WARNING, logger="trainer"):
        found = load(manager(storage, tmp_path))
    refused = [line for line in caplog.text.splitlines() if "refusing" in line]
    entry = ledger("checkpoint (both damaged)", type(storage).__name__, error=caplog.text, names="refusing")
    assert found is None and len(refused) == 2 and entry.clear, caplog.text


def test_latest_never_names_a_checkpoint_before_its_manifest_exists(storage, tmp_path, monkeypatch):
    """A crash between the two writes must leave `latest` on the previous checkpoint: written before the
    manifest, it would name a checkpoint that a resume refuses as incomplete."""
    ckpt = started(storage, tmp_path)
    assert save(ckpt, 10)
    real_put, written = type(storage).put_bytes, []

    def crash_at_the_manifest(self, key, data):
        if key.endswith(MANIFEST):
            raise RuntimeError("the process died here")
        written.append(key)
        return real_put(self, key, data)

    monkeypatch.setattr(type(storage), "put_bytes", crash_at_the_manifest)
    assert save(ckpt, 20) is False
    monkeypatch.setattr(type(storage), "put_bytes", real_put)
    assert POINTER not in written
    assert Raw(storage).get(POINTER).decode().endswith(f"/{OLD}")


@pytest.mark.parametrize("blocking", [True, False], ids=["sync", "async"])
def test_non_finite_weights_are_never_committed_nor_pruned_toward(tmp_path, blocking):
    ckpt = CheckpointManager(LocalStorage(tmp_path / "ckpt"), keep=2, workdir=tmp_path)
    ckpt.begin(ONE, resume=True)
    assert save(ckpt, 10) and save(ckpt, 20)
    model, optimizer = trainee(30)
    with torch.no_grad():
        model.weight[3, 5] = float("nan")
    refused = r"step-000000030 NOT written: .*not finite \(rank 0: model weight"
    with pytest.raises(faults.Diverged, match=refused):
        ckpt.save(ONE, 30, model, optimizer, {"step": 30}, blocking=blocking)
    ckpt.wait()
    assert faults.verdict(faults.Diverged("x"))[0] == faults.DIVERGED
    assert ckpt.run_storage.list_dirs() == [OLD, NEW]  # nothing written, nothing pruned
    assert load(manager(LocalStorage(tmp_path / "ckpt"), tmp_path))[0] == NEW


class Outage:
    """A moto S3 client whose calls on keys matching `pattern` fail `times` times (None: always): writes,
    or with reads=True the reads (get_object, download_file, listings)."""

    def __init__(self, client, pattern: str, error: Exception, times: int | None = None, reads=False):
        self._client, self.pattern, self.error, self.times, self.failed = (
            client,
            re.compile(pattern),
            error,
            times,
            0,
        )
        self.reads = reads

    def _maybe_fail(self, key: str, read: bool = False) -> None:
        due = self.times is None or self.failed < self.times
        if read == self.reads and self.pattern.search(key) and due:
            self.failed += 1
            raise self.error

    def upload_file(self, filename, bucket, key, *args, **kwargs):
        self._maybe_fail(key)
        return self._client.upload_file(filename, bucket, key, *args, **kwargs)

    def put_object(self, **kwargs):
        self._maybe_fail(kwargs["Key"])
        return self._client.put_object(**kwargs)

    def get_object(self, **kwargs):
        self._maybe_fail(kwargs["Key"], read=True)
        return self._client.get_object(**kwargs)

    def download_file(self, bucket, key, filename, *args, **kwargs):
        self._maybe_fail(key, read=True)
        return self._client.download_file(bucket, key, filename, *args, **kwargs)

    def get_paginator(self, name):
        paginator, outage = self._client.get_paginator(name), self

        class Failing:
            def paginate(self, **kwargs):
                outage._maybe_fail(kwargs["Prefix"], read=True)
                return paginator.paginate(**kwargs)

        return Failing()

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
    ("dcp-metadata-outage", re.escape(shards.METADATA), DOWN, None, False),
    ("manifest-outage", MANIFEST, DOWN, None, False),
    ("pointer-outage", f"/{POINTER}$", DOWN, None, False),
    ("whole-bucket-outage", ".", DOWN, None, False),
    ("access-denied", ".", DENIED, None, False),
]


def s3_storage(client) -> S3Storage:
    return S3Storage(f"s3://{BUCKET}/{PREFIX}", client=client, retries=3, backoff_s=0)


@pytest.mark.parametrize(("case", "pattern", "error", "times", "lands"), OUTAGES, ids=[o[0] for o in OUTAGES])
def test_s3_outage_while_checkpointing_keeps_the_last_good_checkpoint(
    s3, tmp_path, caplog, ledger, case, pattern, error, times, lands
):
    assert save(started(s3_storage(s3), tmp_path), 10)
    flaky = started(s3_storage(Outage(s3, pattern, error, times)), tmp_path)  # the same run, resumed
    with caplog.at_level(logging.WARNING, logger="trainer"):
        saved = save(flaky, 20)  # returns instead of raising: training goes on
    name, weights = load(manager(s3_storage(s3), tmp_path))
    expected = NEW if lands else OLD
    intact = name == expected and torch.equal(weights, trainee(int(expected[-9:]))[0].weight)
    said = "retrying" if lands else "NOT written"
    entry = ledger(
        "S3 outage at checkpoint", case, error=caplog.text if intact else None, names=said, created=not intact
    )
    assert saved is lands, f"{case}: save returned {saved}"
    assert intact, f"{case}: latest good checkpoint is {name}, expected {expected} intact"
    assert entry.clear, f"{case}: no '{said}' warning: {caplog.text}"


# (case, keys whose reads fail for good): every read a resume makes.
READ_OUTAGES = [
    ("pointer", f"/{POINTER}$"),
    ("listing", "/$"),  # listing prefixes end with "/", object keys never do
    ("manifest", f"{NEW}/{MANIFEST}"),
    ("train-state", f"{NEW}/{TRAIN_STATE}"),
    ("dcp-metadata", f"{NEW}/{re.escape(shards.METADATA)}"),
    ("payload", f"{NEW}/{PAYLOAD}"),
]


@pytest.mark.parametrize(("case", "pattern"), READ_OUTAGES, ids=[o[0] for o in READ_OUTAGES])
@pytest.mark.parametrize("error", [DOWN, SLOW_DOWN], ids=["unreachable", "throttled"])
def test_download_error_on_resume_is_retryable_and_never_falls_back(
    s3, tmp_path, ledger, case, pattern, error
):
    ckpt = started(s3_storage(s3), tmp_path)
    assert save(ckpt, 10) and save(ckpt, 20)
    flaky = manager(s3_storage(Outage(s3, pattern, error, reads=True)), tmp_path)
    try:
        found, message = load(flaky), None
    except CheckpointUnavailable as err:
        found, message = None, str(err)
    what = f"{case}-{type(error).__name__}"
    entry = ledger("download error on resume", what, error=message, names="cannot")
    assert message is not None, f"{case}: resumed from {found and found[0]} instead of exiting retryably"
    assert faults.verdict(CheckpointUnavailable(message))[0] >= 128
    assert "not falling back" in message and entry.clear, message


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
    "output.metrics_port": 0,  # off: in-process runs would contend for the default port
}


def args(max_steps: int, checkpoints: str, output: str, **more) -> list[str]:
    """Trainer flags: TINY with `more` over it; a key `more` sets to None is left out."""
    values = {**TINY, "train.max_steps": max_steps, "checkpoint.dir": checkpoints, "output.dir": output}
    values.update(more)
    return [a for k, v in values.items() if v is not None for a in (f"--{k}", str(v))]


def job(max_steps: int, checkpoints: str, output: str, **more):
    return from_args(args(max_steps, checkpoints, output, **more))


def _latest(tmp_path) -> str:
    return (tmp_path / "ckpt" / POINTER).read_text().strip()


def _events(out, event: str) -> list[dict]:
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return [r for r in rows if r["event"] == event]


def test_run_resumes_from_the_previous_checkpoint_when_the_latest_is_corrupt(
    tmp_path, capsys, caplog, ledger, keep_sigterm_handler
):
    assert run(job(20, str(tmp_path / "ckpt"), str(tmp_path / "out"))) == 0
    run_dir = _latest(tmp_path).split("/")[0]
    raw = Raw(LocalStorage(tmp_path / "ckpt" / run_dir))
    raw.put(f"{NEW}/{PAYLOAD}", _flip(raw.get(f"{NEW}/{PAYLOAD}")))
    with caplog.at_level(logging.WARNING, logger="trainer"):
        assert run(job(30, str(tmp_path / "ckpt"), str(tmp_path / "out"))) == 0
    out = capsys.readouterr().out
    resumed = f"resuming from {tmp_path / 'ckpt' / run_dir}/{OLD} (step 10)" in out and "steps 10..30" in out
    entry = ledger(
        "whole run", "corrupt-latest-checkpoint", error=caplog.text if resumed else None, names=NEW
    )
    assert resumed, out
    assert entry.clear and "corrupt" in caplog.text, caplog.text
    assert _latest(tmp_path) == f"{run_dir}/{checkpoint_name(30)}"


def test_s3_outage_at_the_final_checkpoint_exits_retryably_keeping_the_last_good_one(
    s3, tmp_path, caplog, ledger, keep_sigterm_handler
):
    # An interval checkpoint that fails is skipped; the final one is the run's result, so the run must not
    # report success (and a summary pointing at an older checkpoint): the restart redoes the last steps.
    down = Outage(s3, checkpoint_name(30), DOWN)
    ckpt, out = f"s3://{BUCKET}/{PREFIX}", f"s3://{BUCKET}/jobs/zimdb/output"
    with caplog.at_level(logging.WARNING, logger="trainer"), pytest.raises(faults.Retryable) as raised:
        run(job(30, ckpt, out), s3_client=down)
    code, reason = faults.verdict(raised.value)
    pointer = s3.get_object(Bucket=BUCKET, Key=f"{PREFIX}/{POINTER}")["Body"].read().decode()
    entry = ledger("whole run", "s3-outage-final-checkpoint", error=reason, names="NOT written")
    assert code == faults.STORAGE_UNAVAILABLE and entry.clear, reason
    assert "NOT written" in caplog.text and pointer.endswith(f"/{NEW}"), (pointer, caplog.text)
    resumed = CheckpointManager(S3Storage(ckpt, client=s3), workdir=tmp_path).begin(ONE, resume=True)
    assert resumed["checkpoint"] == NEW
    keys = {o["Key"] for o in s3.list_objects_v2(Bucket=BUCKET)["Contents"]}
    assert "jobs/zimdb/output/summary.json" not in keys


def test_run_whose_checkpoint_download_fails_exits_retryably_without_training(
    s3, tmp_path, capsys, ledger, keep_sigterm_handler
):
    ckpt, out = f"s3://{BUCKET}/{PREFIX}", f"s3://{BUCKET}/jobs/zimdb/output"
    assert run(job(20, ckpt, out), s3_client=s3) == 0
    capsys.readouterr()
    with pytest.raises(CheckpointUnavailable) as raised:
        run(job(30, ckpt, out), s3_client=Outage(s3, f"{NEW}/{PAYLOAD}", DOWN, reads=True))
    code, reason = faults.verdict(raised.value)
    entry = ledger("whole run", "download-error-on-resume", error=reason, names=PAYLOAD)
    assert code == faults.STORAGE_UNAVAILABLE and entry.clear, reason
    assert "train step" not in capsys.readouterr().out  # neither step 0 nor the older checkpoint


def test_fresh_run_beside_an_older_run_resumes_itself_after_a_restart(tmp_path, capsys, keep_sigterm_handler):
    """The data loss: `--checkpoint.resume false` in a directory holding an older run's checkpoints
    (steps 20, 30) used to prune its own step-10 while `latest` named it; the restart then resumed the
    older run at step 30 and overwrote model.pt with that run's weights."""
    ckpt = str(tmp_path / "ckpt")
    assert run(job(30, ckpt, str(tmp_path / "older"))) == 0
    older = _latest(tmp_path).split("/")[0]
    assert run(job(10, ckpt, str(tmp_path / "out"), **{"checkpoint.resume": "false"})) == 0
    fresh = _latest(tmp_path).split("/")[0]
    first = torch.load(tmp_path / "out" / "model.pt", weights_only=True)["model"]
    capsys.readouterr()
    assert run(job(10, ckpt, str(tmp_path / "out"))) == 0  # the pod restarts (resume is the default)
    said = capsys.readouterr().out
    assert fresh != older and f"resuming from {ckpt}/{fresh}/{checkpoint_name(10)} (step 10)" in said, said
    again = torch.load(tmp_path / "out" / "model.pt", weights_only=True)["model"]
    assert all(torch.equal(first[k], again[k]) for k in first)
    kept = sorted(p.name for p in (tmp_path / "ckpt" / older).iterdir())
    assert kept == [checkpoint_name(20), checkpoint_name(30)]  # the older run's checkpoints are untouched


@pytest.mark.parametrize("background", ["false", "true"], ids=["sync", "async"])
def test_sigterm_during_a_checkpoint_exits_without_a_second_save(
    tmp_path, monkeypatch, keep_sigterm_handler, background
):
    real_save = CheckpointManager.save

    def save_then_sigterm(self, *args, **kwargs):
        saved = real_save(self, *args, **kwargs)
        signal.raise_signal(signal.SIGTERM)  # the Spot notice arrives while the checkpoint is written
        return saved

    monkeypatch.setattr(CheckpointManager, "save", save_then_sigterm)
    code = run(
        job(30, str(tmp_path / "ckpt"), str(tmp_path / "out"), **{"checkpoint.async_save": background})
    )
    assert code == faults.STOPPED
    assert [r["step"] for r in _events(tmp_path / "out", "checkpoint")] == [10]
    assert _latest(tmp_path).endswith(f"/{OLD}")


def test_sigterm_steps_after_a_background_checkpoint_began_waits_for_it_instead_of_saving_again(
    tmp_path, monkeypatch, capsys, keep_sigterm_handler
):
    real_save, real_write = CheckpointManager.save, CheckpointManager._write
    sigterm_sent = threading.Event()

    def slow_write(self, *args):  # still in flight at the SIGTERM, however slow the steps are
        sigterm_sent.wait(timeout=120)
        return real_write(self, *args)

    steps_after_save: list[int] = []
    real_zero_grad = torch.optim.Optimizer.zero_grad

    def save_and_count(self, *args, **kwargs):
        saved = real_save(self, *args, **kwargs)
        steps_after_save.append(0)
        return saved

    def zero_grad_then_sigterm(self, *args, **kwargs):
        # Counted in training steps, not seconds: a fast machine would reach the next interval save first.
        if steps_after_save:
            steps_after_save[0] += 1
            if steps_after_save[0] == 3:
                signal.raise_signal(signal.SIGTERM)
                sigterm_sent.set()
        return real_zero_grad(self, *args, **kwargs)

    monkeypatch.setattr(CheckpointManager, "_write", slow_write)
    monkeypatch.setattr(CheckpointManager, "save", save_and_count)
    monkeypatch.setattr(torch.optim.Optimizer, "zero_grad", zero_grad_then_sigterm)
    code = run(job(1000, str(tmp_path / "ckpt"), str(tmp_path / "out")))
    out = capsys.readouterr().out
    stopped = re.search(r"SIGTERM at step (\d+) during a background checkpoint", out)
    assert code == faults.STOPPED and stopped, out
    assert int(stopped[1]) > 10  # training went on while the checkpoint was written
    assert [r["step"] for r in _events(tmp_path / "out", "checkpoint")] == [10]
    assert _latest(tmp_path).endswith(f"/{OLD}")


@pytest.mark.parametrize("background", ["false", "true"], ids=["sync", "async"])
def test_disk_full_at_a_checkpoint_says_so_and_training_goes_on(
    tmp_path, monkeypatch, caplog, ledger, keep_sigterm_handler, background
):
    def onto_a_full_disk(real):
        def write(env, model, optimizer, stage, *group):
            if stage.name.startswith(f".stage-{OLD}"):
                stage.mkdir(parents=True, exist_ok=True)
                (stage / PAYLOAD).symlink_to("/dev/full")  # writes fail with ENOSPC, as on a full volume
            return real(env, model, optimizer, stage, *group)

        return write

    monkeypatch.setattr(shards, "write", onto_a_full_disk(shards.write))
    monkeypatch.setattr(shards, "write_async", onto_a_full_disk(shards.write_async))
    with caplog.at_level(logging.WARNING, logger="trainer"):
        code = run(
            job(20, str(tmp_path / "ckpt"), str(tmp_path / "out"), **{"checkpoint.async_save": background})
        )
    entry = ledger("whole run", f"disk-full-at-checkpoint-{background}", error=caplog.text, names="disk full")
    assert code == 0 and entry.clear, caplog.text
    assert [r["step"] for r in _events(tmp_path / "out", "checkpoint")] == [20]


def _main(argv: list[str]) -> int:
    handler = signal.getsignal(signal.SIGTERM)
    try:
        return main(argv)
    finally:
        signal.signal(signal.SIGTERM, handler)


def test_a_full_volume_under_the_metrics_never_stops_the_run(tmp_path, capsys, ledger):
    out = tmp_path / "volume"  # outputs and checkpoints on one volume, as a pod's PVC holds both
    out.mkdir()
    (out / "metrics.jsonl").symlink_to("/dev/full")  # its appends fail with ENOSPC, as on a full volume
    code = _main(args(20, str(out / "ckpt"), str(out)))
    said = capsys.readouterr().out
    entry = ledger("whole run", "disk-full-metrics", error=said if code == 0 else None, names="disk full")
    assert code == 0 and entry.clear, said
    assert "warning: disk full, writing metrics.jsonl failed" in said and (out / "model.pt").is_file()


def test_a_full_volume_at_the_final_outputs_is_a_retryable_exit_not_1_nor_0(
    tmp_path, monkeypatch, capsys, ledger
):
    out = tmp_path / "volume"
    real_open = builtins.open

    def full_for_outputs(file, mode="r", *rest, **kw):  # the volume fills up while model.pt is written
        if "w" in str(mode) and Path(file).parent == out and "model.pt" in Path(file).name:
            return real_open("/dev/full", mode, *rest, **kw)
        return real_open(file, mode, *rest, **kw)

    monkeypatch.setattr(builtins, "open", full_for_outputs)
    code = _main(args(20, str(out / "ckpt"), str(out)))
    err = capsys.readouterr().err
    entry = ledger("whole run", "disk-full-final-outputs", error=err, names="disk full")
    assert code == faults.STORAGE_UNAVAILABLE and entry.clear, err
    assert "the restart only writes the outputs again" in err
    assert not (out / "model.pt").exists() and not (out / "summary.json").exists()
    assert _latest(tmp_path / "volume").endswith(f"/{NEW}")  # the final checkpoint is committed


LLM_SAMPLE = Path(__file__).resolve().parents[2] / "workloads" / "examples" / "llm-chat.jsonl"


def test_a_full_volume_under_the_llm_export_is_retryable_and_leaves_no_partial_adapter(
    tmp_path, monkeypatch, capsys, ledger
):
    """peft writes the adapter (README.md, adapter_config.json, then the weights through safetensors);
    the volume fills up at the weights, which safetensors reports as on a real full tmpfs. The restart
    finds the final checkpoint and only writes the outputs again."""
    import peft.peft_model
    from safetensors import SafetensorError

    out = tmp_path / "volume"
    real_save = peft.peft_model.safe_save_file

    def volume_full(tensors, filename, *rest, **kw):
        Path(filename).write_bytes(b"\0" * 64)  # what made it to the disk before it was full
        raise SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)")

    monkeypatch.setattr(peft.peft_model, "safe_save_file", volume_full)
    # 40 of the sample's 240 conversations: each run tokenizes every record it reads, and one step needs few.
    sample = tmp_path / "llm-chat.jsonl"
    sample.write_text("".join(LLM_SAMPLE.read_text().splitlines(keepends=True)[:40]))
    llm = {"llm.model": "tiny", "llm.seq_len": 64, "data.source": sample, "data.val_fraction": 0.05}
    llm |= {"train.batch_size": 2, "train.warmup_steps": 0}  # one step: the export is what is tested
    llm |= {k: None for k in TINY if k.startswith("model.")}  # the classifier's: refused under llm.model
    code = _main(args(1, str(out / "ckpt"), str(out), **llm))
    err = capsys.readouterr().err
    entry = ledger("whole run", "disk-full-llm-export", error=err, names="disk full")
    assert code == faults.STORAGE_UNAVAILABLE and entry.clear, err
    assert "the restart only writes the outputs again" in err
    assert sorted(p.name for p in out.iterdir()) == ["ckpt", "metrics.jsonl"]  # no adapter/, nothing half
    monkeypatch.setattr(peft.peft_model, "safe_save_file", real_save)  # space was freed
    assert _main(args(1, str(out / "ckpt"), str(out), **llm)) == 0
    assert "(step 1)" in capsys.readouterr().out  # resumed at the final step: outputs only
    assert (out / "adapter" / "adapter_model.safetensors").is_file() and (out / "summary.json").is_file()


def test_unwritable_checkpoint_dir_exits_2_before_training(tmp_path, monkeypatch, capsys, ledger):
    ckpt = tmp_path / "volume" / "ckpt"
    real_write = Path.write_bytes

    def denied(self, data):  # a volume the pod's user may not write (root here would bypass chmod)
        if self.parent == ckpt:
            raise PermissionError(13, "Permission denied", str(self))
        return real_write(self, data)

    monkeypatch.setattr(Path, "write_bytes", denied)
    handler = signal.getsignal(signal.SIGTERM)
    try:
        code = main(args(20, str(ckpt), str(tmp_path / "out")))
    finally:
        signal.signal(signal.SIGTERM, handler)
    out, err = capsys.readouterr()
    entry = ledger("whole run", "checkpoint-dir-not-writable", error=err, names=str(ckpt))
    assert code == faults.INVALID and "Permission denied" in err and entry.clear, err
    assert "train step" not in out
