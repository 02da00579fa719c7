"""Tokenize once per node and share: local rank 0 writes memory-mapped token files, the others map them."""

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from trainer_runs import REPO, run_env

from trainer import data, faults, token_store
from trainer.config import DataConfig


def _prepare(cfg, shared, local_rank, tmp_path, **kw):
    return token_store.prepare(
        cfg,
        num_labels=2,
        model_name="transformer",
        tokenizer_spec=kw.pop("spec", None),
        workdir=tmp_path,
        shared=shared,
        local_rank=local_rank,
        **kw,
    )


def test_a_second_local_rank_0_of_the_launch_keeps_what_the_first_published(tmp_path):
    """Two nodes of one launch on one machine (mpirun gives no node rank to tell them apart) both build the
    launch's directory: the second keeps the first's files, which the first node's ranks are reading."""
    cfg = DataConfig(synthetic_train_size=60, synthetic_val_size=20)
    shared = tmp_path / "shared"
    first = _prepare(cfg, shared, 0, tmp_path)
    published = (shared / token_store.READY).stat().st_ino
    second = _prepare(cfg, shared, 0, tmp_path)
    assert (shared / token_store.READY).stat().st_ino == published
    assert second.fingerprint == first.fingerprint
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("shared.")) == ["shared.pid"]


def test_other_local_ranks_wait_for_rank_0_and_map_the_same_tokens(tmp_path):
    cfg = DataConfig(synthetic_train_size=300, synthetic_val_size=40)
    shared, got = tmp_path / "shared", {}
    waiter = threading.Thread(target=lambda: got.update(r1=_prepare(cfg, shared, 1, tmp_path)))
    waiter.start()
    time.sleep(0.3)
    assert waiter.is_alive() and not shared.exists()  # rank 1 builds nothing: it waits
    r0 = _prepare(cfg, shared, 0, tmp_path)
    waiter.join(10)
    r1 = got["r1"]
    assert r1.spec == r0.spec and r1.fingerprint == r0.fingerprint
    assert [r1.train[i] for i in range(len(r1.train))] == [r0.train[i] for i in range(len(r0.train))]
    assert len(r1.train) == 300 and len(r1.val) == 40


def test_shared_tokens_are_what_encoding_the_examples_gives(tmp_path):
    rows = [(f"review {i} " + "great film " * (i % 7), i % 2) for i in range(50)]
    src = tmp_path / "reviews.jsonl"
    src.write_text("".join(json.dumps({"text": t, "label": y}) + "\n" for t, y in rows))
    cfg = DataConfig(source=str(src), val_fraction=0.2, max_len=6)
    prepared = _prepare(cfg, tmp_path / "shared", 0, tmp_path)
    train, val = data.load_splits(cfg, tmp_path)
    for ds, examples in ((prepared.train, train), (prepared.val, val)):
        plain = data.encode(examples, prepared.encoder, cfg.max_len)
        assert [ds[i] for i in range(len(ds))] == [plain[i] for i in range(len(plain))]


def test_a_tokenizer_from_a_checkpoint_is_used_as_is(tmp_path):
    spec = data.train_tokenizer("wordlevel", ["only these words"], vocab_size=64).spec
    cfg = DataConfig(synthetic_train_size=20, synthetic_val_size=4)
    prepared = _prepare(cfg, tmp_path / "shared", 0, tmp_path, spec=spec)
    assert prepared.spec == spec and all(set(ids) == {data.UNK_ID} for ids, _ in prepared.train)


def test_data_error_on_rank_0_reaches_the_waiting_ranks(tmp_path):
    src = tmp_path / "bad.jsonl"
    src.write_text('{"text": "ok", "label": 7}\n' * 20)
    cfg = DataConfig(source=str(src))
    with pytest.raises(data.DataError, match="label 7 is outside 0..1"):
        _prepare(cfg, tmp_path / "shared", 0, tmp_path)
    with pytest.raises(data.DataError, match="local rank 0 could not prepare the data: .*label 7"):
        _prepare(cfg, tmp_path / "shared", 1, tmp_path, wait_s=5)


def test_a_waiting_rank_never_reads_half_a_failure_marker(tmp_path, monkeypatch):
    """A peer polls while rank 0 writes why it failed: at any moment it finds no marker or all of it (a
    marker read while empty made the peer exit 1 instead of rank 0's 2)."""
    src = tmp_path / "bad.jsonl"
    src.write_text('{"text": "ok", "label": 7}\n' * 20)
    shared, polls = tmp_path / "shared", []
    real_write_text = Path.write_text

    def write_text(path, text, *args, **kwargs):
        path.write_bytes(b"")  # open(path, "w") done, nothing written yet: a peer polls now
        try:
            token_store._wait(shared, 0, lambda: False)
        except Exception as err:  # noqa: BLE001 (what the peer would raise is the point)
            polls.append(type(err).__name__)
        return real_write_text(path, text, *args, **kwargs)

    monkeypatch.setattr(Path, "write_text", write_text)
    with pytest.raises(data.DataError):
        _prepare(DataConfig(source=str(src)), shared, 0, tmp_path)
    monkeypatch.undo()
    assert polls and set(polls) <= {"PeerTimeout", "DataError"}, polls
    with pytest.raises(data.DataError, match="local rank 0 could not prepare the data: .*label 7"):
        _prepare(DataConfig(source=str(src)), shared, 1, tmp_path, wait_s=5)


def test_an_s3_outage_on_rank_0_is_retryable_on_the_waiting_ranks_too(tmp_path, monkeypatch):
    from botocore.exceptions import EndpointConnectionError

    def s3_down(cfg, workdir):
        raise EndpointConnectionError(endpoint_url="https://s3.us-east-1.amazonaws.com/data")

    monkeypatch.setattr(token_store, "load_columns", s3_down)
    cfg = DataConfig(source="s3://bucket/data.jsonl")
    with pytest.raises(EndpointConnectionError) as on_rank_0:
        _prepare(cfg, tmp_path / "shared", 0, tmp_path)
    with pytest.raises(faults.Retryable, match="local rank 0 could not prepare the data: .*s3") as waiting:
        _prepare(cfg, tmp_path / "shared", 1, tmp_path, wait_s=5)
    rank_0_code = faults.verdict(on_rank_0.value)[0]
    assert faults.verdict(waiting.value)[0] == rank_0_code == faults.STORAGE_UNAVAILABLE


def test_a_waiting_rank_stops_retryably_on_sigterm(tmp_path):
    """Local rank 0's failure marker goes when it exits, so a rank that missed it would wait on; the SIGTERM
    the launcher then sends ends the wait (else its SIGKILL would, leaving the rank's scratch behind)."""
    with pytest.raises(token_store.StoppedWaiting) as stopped:
        _prepare(DataConfig(), tmp_path / "shared", 1, tmp_path, wait_s=5, stop_requested=lambda: True)
    assert faults.verdict(stopped.value)[0] == faults.STOPPED


def test_node_scratch_dir_is_shared_by_one_launch_only(monkeypatch):
    monkeypatch.setenv("LOCAL_RANK", "1")
    first = token_store.node_scratch_dir("data", "launch-a")
    monkeypatch.setenv("LOCAL_RANK", "0")  # another rank of the same launch on this node
    assert token_store.node_scratch_dir("data", "launch-a") == first
    # Another trainer on the same node whose processes look the same (two Ray Train workers: same parent,
    # the raylet; same local rank), or the next attempt of this one: another launch id.
    assert token_store.node_scratch_dir("data", "launch-b") != first
    monkeypatch.setenv("GROUP_RANK", "1")  # another node of the same launch sharing this /tmp
    assert token_store.node_scratch_dir("data", "launch-a") != first


# The baseline is taken after pyarrow's first array: that imports pandas where it is installed (the `hf`
# extra brings it), a fixed cost of ~40 MiB that does not grow with the file.
PEAK_SCRIPT = """
import sys, tempfile
from pathlib import Path
import pyarrow as pa
from trainer import token_store
from trainer.bench_workers import peak_rss_mib
from trainer.config import DataConfig
src = Path(sys.argv[1])
pa.array(["warm-up"], type=pa.large_string())
base = peak_rss_mib()
token_store.build(DataConfig(source=str(src), max_len=256), num_labels=2, model_name="transformer",
                  tokenizer_spec=None, workdir=src.parent, out=Path(tempfile.mkdtemp(dir=src.parent)))
print(peak_rss_mib() - base)
"""


def test_tokenizing_a_file_takes_a_few_times_its_size_in_memory(tmp_path):
    # Reading every record into Python objects and keeping a Python int per token took about 16x the
    # file size over the fixed cost (a 100 MiB JSONL peaked at 2 GiB); streaming into Arrow chunks and
    # int32 token files takes about 2.5x, plus ~80 MiB of libraries and buffers.
    src = tmp_path / "reviews.jsonl"
    words = [f"w{i}" for i in range(3000)]
    with open(src, "w") as f:
        for i in range(9000):  # about 8 MiB
            text = " ".join(words[(i * 7 + k * 13) % 3000] for k in range(150))
            f.write(json.dumps({"text": text, "label": i % 2}) + "\n")
    size_mib = src.stat().st_size / 2**20
    out = subprocess.run(
        [sys.executable, "-c", PEAK_SCRIPT, str(src)],
        cwd=REPO,
        env=run_env(),
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    peak_mib = float(out.stdout.strip())
    assert peak_mib < 3 * size_mib + 100, f"{peak_mib:.0f} MiB for a {size_mib:.1f} MiB file"


def test_a_local_rank_0_that_never_finishes_is_a_retryable_hung_peer(tmp_path):
    with pytest.raises(token_store.PeerTimeout, match="no tokenized data from local rank 0") as err:
        _prepare(DataConfig(), tmp_path / "shared", 1, tmp_path, wait_s=0.2)
    assert faults.verdict(err.value)[0] == faults.PEER_LOST >= 128


def test_scratch_of_a_killed_attempt_is_removed_and_a_live_ones_kept(tmp_path):
    pid_of = [sys.executable, "-c", "import os; print(os.getpid())"]
    dead = subprocess.run(pid_of, capture_output=True, text=True, check=True)  # exited: its pid is free
    for name, pid in (("trainer-data-aaaa", dead.stdout.strip()), ("trainer-data-bbbb", str(os.getpid()))):
        (tmp_path / name).mkdir()
        (tmp_path / name / "train.tokens").write_bytes(b"\0" * 64)
        (tmp_path / f"{name}.pid").write_text(pid)
    (tmp_path / "trainer-data-aaaa.x1y2").mkdir()  # its half-written staging directory
    token_store.claim_scratch(tmp_path / "trainer-data-cccc")
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "trainer-data-bbbb",
        "trainer-data-bbbb.pid",
        "trainer-data-cccc.pid",
    ]
    assert (tmp_path / "trainer-data-cccc.pid").read_text() == str(os.getpid())
