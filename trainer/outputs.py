"""The run's final outputs in output.dir: the model (model.pt, or the LLM export a library writes),
config.json and summary.json, written whole or not at all.

Every file and directory is written under a temporary name beside its place and renamed into it, and a
full disk anywhere in that (ours or a library's write, the temporary directory, the rename) is the
retryable exit 200, never a crash (exit 1) and never a partial output: the final checkpoint is committed
before, so the restart only writes the outputs again.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import secrets
import shutil
from collections.abc import Callable, Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any, BinaryIO

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from trainer import faults
from trainer.config import JobConfig
from trainer.dist import DistEnv, barrier, gather_objects
from trainer.llm import task as llm_task
from trainer.metrics import Metrics, strict_json
from trainer.shards import is_disk_full
from trainer.storage import LocalStorage, Storage


@contextlib.contextmanager
def disk_full_is_retryable(path: Path, checkpoint: str | None) -> Iterator[None]:
    """A full disk while writing `path` becomes faults.Retryable (exit 200); other errors pass."""
    try:
        yield
    except Exception as err:
        if not is_disk_full(err):
            raise
        free = shutil.disk_usage(next(p for p in (path, *path.parents) if p.exists())).free / 2**20
        raise faults.Retryable(
            f"disk full: writing {path} failed ({free:.0f} MiB free on its file system); the final "
            f"checkpoint {checkpoint} is committed, so the restart only writes the outputs again"
        ) from err


def write_file(path: Path, write: Callable[[BinaryIO], Any], checkpoint: str | None) -> None:
    """Write `path` whole or not at all (temporary file, rename)."""
    tmp = path.with_name(f".{path.name}.tmp")
    with disk_full_is_retryable(path, checkpoint):
        try:
            with open(tmp, "wb") as f:
                write(f)
            os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)


def _writes(data: bytes) -> Callable[[BinaryIO], Any]:
    return lambda f: f.write(data)


def write_directory(
    parent: Path, write: Callable[[Path], str], *, writer: bool, checkpoint: str | None
) -> str:
    """Every rank: run `write(into)`, which writes a directory `into/<name>` on the `writer` rank (a
    library's save_pretrained; it may gather from every rank first) and returns <name>; then move it to
    `parent/<name>` whole. The other ranks get a directory that is never written to."""
    if not writer:
        return write(parent / ".not-written")
    with disk_full_is_retryable(parent, checkpoint):
        parent.mkdir(parents=True, exist_ok=True)
        into = parent / f".writing-{secrets.token_hex(4)}"
        try:
            into.mkdir()
            name = write(into)
            _move_into_place(into / name, parent / name)
        finally:
            shutil.rmtree(into, ignore_errors=True)
    return name


def _move_into_place(new: Path, target: Path) -> None:
    """A directory cannot replace another in one rename: the old one is moved aside first, and removed
    once the new one is in place (a crash in between leaves the old one beside, never a partial one)."""
    old = target.with_name(f".{target.name}.old")
    shutil.rmtree(old, ignore_errors=True)
    if target.exists():
        target.rename(old)
    new.rename(target)
    shutil.rmtree(old, ignore_errors=True)


def write_summary(
    output: Storage, local_out: Path, metrics: Metrics, summary: dict[str, Any], status: str
) -> None:
    """Rank 0: end the MLflow run as `status` with the summary, write summary.json (strict JSON: a
    diverged loss is null) and upload it with metrics.jsonl and the TensorBoard events."""
    if (tracked := metrics.end_tracking(status, summary)) is not None:
        summary["mlflow"] = tracked  # what reached MLflow: a run missing there is said here
    local_out.mkdir(parents=True, exist_ok=True)
    content = strict_json(summary, indent=1).encode()
    write_file(local_out / "summary.json", _writes(content), summary.get("checkpoint"))
    metrics.close()
    if not isinstance(output, LocalStorage):
        output.put_file("summary.json", local_out / "summary.json")
    metrics.upload(output)  # metrics.jsonl and the TensorBoard events


def digest(module: nn.Module) -> str:
    """A hash of the parameters' bytes, in any dtype (bf16 has no numpy type: the bytes are read as
    uint8)."""
    h = hashlib.sha256()
    for p in module.parameters():
        h.update(p.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def write_outputs(
    cfg: JobConfig,
    env: DistEnv,
    model: nn.Module,
    output: Storage,
    local_out: Path,
    spec: str,
    metrics: Metrics,
    summary: dict[str, Any],
    llm_tokenizer: Any = None,
) -> None:
    """Every rank (the full weights are gathered): rank 0 writes the outputs and uploads them."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    checkpoint = summary["checkpoint"]
    exported: list[str] = []
    if cfg.llm.model:  # the adapter (or the whole model) in Hugging Face's format, for peft/transformers
        name = write_directory(
            local_out,
            lambda into: llm_task.export(cfg.llm, model, llm_tokenizer, env, into),
            writer=env.is_main,
            checkpoint=checkpoint,
        )
        summary["model"] = f"{output.uri}/{name}"
        if env.is_main:
            files = sorted(p for p in (local_out / name).rglob("*") if p.is_file())
            exported = [p.relative_to(local_out).as_posix() for p in files]
    else:
        weights = get_model_state_dict(
            model, options=StateDictOptions(full_state_dict=True, cpu_offload=True)
        )
    if isinstance(model, DistributedDataParallel):  # replicas must agree; a desync would be a silent bug
        summary["ranks_identical"] = len(set(gather_objects(env, digest(model.module)))) == 1
    if env.is_main:
        with disk_full_is_retryable(local_out, checkpoint):
            local_out.mkdir(parents=True, exist_ok=True)
        if not cfg.llm.model:
            summary["model"] = f"{output.uri}/model.pt"
            model_file = {
                "model": weights,
                "model_config": asdict(cfg.model),
                "tokenizer": spec,
                "max_len": cfg.data.max_len,
            }
            write_file(local_out / "model.pt", lambda f: torch.save(model_file, f), checkpoint)
            exported = ["model.pt"]
        config = strict_json(cfg.to_dict(), indent=1).encode()
        write_file(local_out / "config.json", _writes(config), checkpoint)
        if not isinstance(output, LocalStorage):
            for name in (*exported, "config.json"):
                output.put_file(name, local_out / name)
        write_summary(output, local_out, metrics, summary, "FINISHED")  # last: it says the run is done
        shown = {k: v for k, v in summary.items() if not isinstance(v, dict)}  # MLflow said its own line
        metrics.say(
            "done: "
            + ", ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in shown.items())
        )
    barrier(env)
