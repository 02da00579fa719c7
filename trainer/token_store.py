"""Tokenize once per node, share through memory-mapped files.

Local rank 0 of each node streams the data source, trains the tokenizer on the training split (unless a
checkpoint brought one) and writes the token ids as flat int32 files in a directory every process of this
launch on this node agrees on (`node_scratch_dir`); the other local ranks wait for it without holding a
collective (so no process-group timeout runs while a large file is tokenized) and memory-map the same
files: one copy in the page cache per node, not one Python object per token per rank. Tokenizer training
is deterministic (tested), so nodes agree without exchanging it; `Prepared.fingerprint` lets the caller
check that they do.
"""

from __future__ import annotations

import atexit
import hashlib
import itertools
import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from trainer import faults
from trainer.config import ConfigError, DataConfig
from trainer.data import Columns, DataError, Splits, TextEncoder, TokenDataset, check_labels, load_columns
from trainer.data import train_tokenizer as _train_tokenizer


class PeerTimeout(faults.Retryable):
    """Local rank 0 is alive (torchrun would have stopped us otherwise) but never finished: a hung peer."""

    exit_code = faults.PEER_LOST


class StoppedWaiting(faults.Retryable):
    """SIGTERM while waiting for local rank 0. The launcher sends it when it stops the workers (a peer
    failed, the pod is going away); there is no step to checkpoint yet, and waiting on would end in the
    launcher's SIGKILL, which leaves this process's scratch behind."""

    exit_code = faults.STOPPED


READY = "meta.json"
# Rows per encode_batch call: the tokenizer's Encoding objects (offsets, strings) cost far more than the
# ids kept, so they are made a few at a time.
ENCODE_ROWS = 1024
FAILED = "failed.txt"


def node_scratch_dir(purpose: str, launch_id: str) -> Path:
    """A directory that every process of this launch on this node names alike, and no other launch does.

    `launch_id` is one value for every rank of this launch and new for the next one (rank 0's random
    token, broadcast: `trainer.dist.launch_id`), so two trainers on one node (Ray Train workers, whose
    parent is the node's raylet; two jobs on one pod) never share a directory, nor does a restarted pod
    whose /tmp emptyDir survived. torchrun's node rank (GROUP_RANK) tells apart the nodes of one launch
    that share a /tmp (nodes simulated on one machine); under mpirun nothing does, and those nodes' local
    ranks 0 build the same data: the first to publish it wins (`prepare`)."""
    ident = f"{launch_id}|{os.environ.get('GROUP_RANK', '0')}"
    digest = hashlib.sha256(ident.encode()).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / f"trainer-{purpose}-{digest}"


def claim_scratch(shared: Path) -> Path:
    """Mark `shared` as this process's (<name>.pid beside it, removed at exit; returned) and remove the
    scratch directories of the same purpose whose owner is gone: a container restarted after a SIGKILL
    keeps its /tmp (an emptyDir), and with it the previous attempt's files."""
    purpose = shared.name.rsplit("-", 1)[0]
    for pid_file in shared.parent.glob(f"{purpose}-*.pid"):
        try:
            os.kill(int(pid_file.read_text()), 0)
            continue  # alive (or a reused pid: then the directory is kept, a leak, never a loss)
        except ProcessLookupError:
            pass
        except (OSError, ValueError):
            continue  # not ours to judge (another user's process) or being written
        stale = pid_file.with_suffix("")
        for path in [stale, *stale.parent.glob(f"{stale.name}.*")]:
            shutil.rmtree(path, ignore_errors=True) if path.is_dir() else path.unlink(missing_ok=True)
    pid_file = shared.parent / f"{shared.name}.pid"
    pid_file.write_text(str(os.getpid()))
    atexit.register(lambda: pid_file.unlink(missing_ok=True))
    return pid_file


@dataclass
class Prepared:
    spec: str
    encoder: TextEncoder
    train: TokenDataset
    val: TokenDataset
    seconds: float  # spent building (local rank 0) or waiting (others)
    fingerprint: str  # of the tokenizer and every token id: what every node must agree on


def _write_tokens(cols: Columns, encoder: TextEncoder, max_len: int, out: Path, name: str) -> str:
    """Token ids of every row, in file order: <name>.tokens (int32), .offsets.npy, .labels.npy."""
    digest = hashlib.sha256()
    offsets = np.zeros(len(cols) + 1, dtype=np.int64)
    row = 0
    with open(out / f"{name}.tokens", "wb") as f:
        for chunk in cols.text_chunks():
            for start in range(0, len(chunk), ENCODE_ROWS):
                ids = encoder.encode(chunk[start : start + ENCODE_ROWS], max_len)
                row = _append(f, digest, offsets, row, ids)
    np.save(out / f"{name}.offsets.npy", offsets)
    np.save(out / f"{name}.labels.npy", cols.labels)
    return digest.hexdigest()


def _append(f: BinaryIO, digest: Any, offsets: np.ndarray, row: int, ids: list[list[int]]) -> int:
    """Write one batch of token ids; returns the next row number."""
    lengths = np.fromiter((len(x) for x in ids), dtype=np.int64, count=len(ids))
    flat = np.fromiter(itertools.chain.from_iterable(ids), dtype=np.int32, count=int(lengths.sum()))
    offsets[row + 1 : row + 1 + len(ids)] = offsets[row] + np.cumsum(lengths)
    f.write(flat.tobytes())
    digest.update(flat.tobytes())
    return row + len(ids)


def _open(out: Path, name: str, rows: np.ndarray) -> TokenDataset:
    offsets = np.load(out / f"{name}.offsets.npy", mmap_mode="r")
    tokens_path = out / f"{name}.tokens"
    tokens = (
        np.memmap(tokens_path, dtype=np.int32, mode="r")
        if tokens_path.stat().st_size
        else np.zeros(0, dtype=np.int32)
    )
    return TokenDataset(tokens, offsets, np.load(out / f"{name}.labels.npy", mmap_mode="r"), rows)


def build(
    cfg: DataConfig, *, num_labels: int, model_name: str, tokenizer_spec: str | None, workdir: Path, out: Path
) -> None:
    """Load, check, tokenize and write everything the ranks of a node need into `out`."""
    splits: Splits = load_columns(cfg, workdir)
    check_labels(splits.train.labels[splits.train_rows], num_labels, "training data")
    check_labels(splits.val.labels[splits.val_rows], num_labels, "validation data")
    if tokenizer_spec is None:
        keep = np.zeros(len(splits.train), dtype=bool)
        keep[splits.train_rows] = True  # the tokenizer learns from the training split only
        texts = (t for chunk in splits.train.text_chunks(keep) for t in chunk)
        tokenizer_spec = _train_tokenizer(cfg.tokenizer, texts, cfg.vocab_size, model_name).spec
    encoder = TextEncoder(tokenizer_spec)
    digest = hashlib.sha256(tokenizer_spec.encode())
    digest.update(_write_tokens(splits.train, encoder, cfg.max_len, out, "train").encode())
    val_name = "train" if splits.val is splits.train else "val"
    if val_name == "val":
        digest.update(_write_tokens(splits.val, encoder, cfg.max_len, out, "val").encode())
    np.save(out / "train.rows.npy", splits.train_rows)
    np.save(out / "val.rows.npy", splits.val_rows)
    (out / "tokenizer.json").write_text(tokenizer_spec)
    meta = {"val_file": val_name, "fingerprint": digest.hexdigest()}
    (out / READY).write_text(json.dumps(meta))


def _failure_code(err: Exception) -> int:
    """The exit code rank 0 leaves with (as trainer/__main__.py decides it): 2, retryable 128+, or 1."""
    if isinstance(err, ConfigError):
        return faults.INVALID
    found = faults.verdict(err)
    return found[0] if found is not None else 1


def _peer_failure(code: int, message: str) -> Exception:
    """What a waiting rank raises for rank 0's failure: the same category, so the same exit code (an S3
    outage on rank 0 must not make its peers fail the job for good)."""
    err: Exception  # given `relayed` below
    if code == faults.INVALID:
        err = DataError(message)
    elif code >= 128:
        err = faults.Retryable(message)
        err.exit_code = code
    else:
        return RuntimeError(message)  # a bug on rank 0: its traceback is in rank 0's log
    # Local rank 0 reports its own failure (trainer/__main__.py): this rank only exits with its code. Rank
    # 0 outlives this one long enough to say it: its SIGTERM handler (dist.StopFlag) is installed already.
    setattr(err, "relayed", True)  # noqa: B010  (read by getattr in trainer/__main__.py)
    return err


def _wait(shared: Path, timeout_s: float, stop_requested: Callable[[], bool]) -> None:
    deadline = time.monotonic() + timeout_s
    while not (shared / READY).exists():
        if (shared.parent / f"{shared.name}.{FAILED}").exists():
            code, _, message = (shared.parent / f"{shared.name}.{FAILED}").read_text().partition("\n")
            raise _peer_failure(int(code), f"local rank 0 could not prepare the data: {message}")
        if stop_requested():  # e.g. local rank 0 failed and exited, removing its failure marker
            raise StoppedWaiting(f"stopped by SIGTERM while waiting for local rank 0's data in {shared}")
        if time.monotonic() > deadline:
            raise PeerTimeout(f"no tokenized data from local rank 0 in {shared} after {timeout_s:.0f} s")
        time.sleep(0.05)


def prepare(
    cfg: DataConfig,
    *,
    num_labels: int,
    model_name: str,
    tokenizer_spec: str | None,
    workdir: Path,
    shared: Path,
    local_rank: int,
    wait_s: float = 3600.0,
    on_built: Callable[[float], None] | None = None,
    stop_requested: Callable[[], bool] = lambda: False,
) -> Prepared:
    """Local rank 0 builds into `shared` (temp dir + rename, so a reader never sees half a build); the other
    local ranks wait for it, until `stop_requested()`. Every rank then memory-maps the files."""
    started = time.monotonic()
    if local_rank == 0:
        claim_scratch(shared)
        staging = Path(tempfile.mkdtemp(prefix=f"{shared.name}.", dir=shared.parent))
        atexit.register(shutil.rmtree, shared, ignore_errors=True)  # open memory maps stay valid
        atexit.register(shutil.rmtree, staging, ignore_errors=True)
        try:
            build(
                cfg,
                num_labels=num_labels,
                model_name=model_name,
                tokenizer_spec=tokenizer_spec,
                workdir=workdir,
                out=staging,
            )
        except Exception as err:
            failed = shared.parent / f"{shared.name}.{FAILED}"
            partial = staging / FAILED  # written whole, then renamed: a waiting rank never reads half of it
            partial.write_text(f"{_failure_code(err)}\n{err}")
            partial.replace(failed)
            atexit.register(lambda: failed.unlink(missing_ok=True))
            raise
        try:
            staging.rename(shared)
        except OSError:
            # Another local rank 0 of this launch published it first: a node sharing this /tmp (nodes
            # simulated on one machine, where mpirun, unlike torchrun, gives no node rank to tell them
            # apart). The name is this launch's own, so that is the same data; replacing it would pull it
            # from under that node's readers.
            if not (shared / READY).is_file():
                raise
            shutil.rmtree(staging, ignore_errors=True)
        if on_built is not None:
            on_built(time.monotonic() - started)
    else:
        _wait(shared, wait_s, stop_requested)
    meta = json.loads((shared / READY).read_text())
    spec = (shared / "tokenizer.json").read_text()
    return Prepared(
        spec=spec,
        encoder=TextEncoder(spec),
        train=_open(shared, "train", np.load(shared / "train.rows.npy")),
        val=_open(shared, meta["val_file"], np.load(shared / "val.rows.npy")),
        seconds=time.monotonic() - started,
        fingerprint=meta["fingerprint"],
    )
