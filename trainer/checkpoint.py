"""Checkpoints that survive crashes, Spot reclaims and flaky S3.

Layout under checkpoint.dir (local directory or s3://bucket/prefix):

    step-000000200/state.pt        torch.save of model, optimizer, scheduler, scaler, RNG, data position
    step-000000200/manifest.json   {"step", "complete": true, "files": {"state.pt": {"bytes", "sha256"}}}
    latest                         the name of the newest complete checkpoint, e.g. "step-000000200"

Order of writes: payload, then manifest, then the `latest` pointer, each atomic (local: temp + rename;
S3: one PUT). A checkpoint without a manifest is incomplete and never loaded; a payload whose size or
sha256 differs from its manifest is refused with a message, and the previous good checkpoint is used.
A write that still fails after the storage's retries is logged and skipped: training goes on, and
`latest` keeps pointing to the last good checkpoint.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import random
import tempfile
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict, set_state_dict
from torch.optim import Optimizer

from trainer.dist import DistEnv, gather_objects
from trainer.storage import LocalStorage, Storage

log = logging.getLogger("trainer")
FORMAT = 1
PAYLOAD = "state.pt"
MANIFEST = "manifest.json"
POINTER = "latest"


def checkpoint_name(step: int) -> str:
    return f"step-{step:09d}"


def _step_of(name: str) -> int | None:
    prefix, _, digits = name.partition("-")
    return int(digits) if prefix == "step" and digits.isdigit() else None


def _sort_key(name: str) -> int:
    return _step_of(name) or 0


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


class CheckpointRefused(RuntimeError):
    """A checkpoint exists but is incomplete or corrupt."""


class CheckpointManager:
    def __init__(self, storage: Storage, *, keep: int = 2, workdir: Path | None = None):
        self.storage = storage
        self.keep = keep
        self.workdir = Path(workdir or tempfile.gettempdir())

    def save(self, step: int, state: dict[str, Any]) -> bool:
        """Write a complete checkpoint for `step`; False (and a warning) if storage failed."""
        name = checkpoint_name(step)
        # Stage the payload beside its final place for local storage (rename is atomic only within a file
        # system); in the work dir for S3.
        stage_dir = self.storage.root / name if isinstance(self.storage, LocalStorage) else self.workdir
        stage_dir.mkdir(parents=True, exist_ok=True)
        tmp = stage_dir / f".tmp-{PAYLOAD}-{os.getpid()}"
        try:
            torch.save(state, tmp)
            manifest = {
                "format": FORMAT,
                "step": step,
                "complete": True,
                "files": {PAYLOAD: {"bytes": tmp.stat().st_size, "sha256": _sha256(tmp)}},
            }
            self.storage.put_file(f"{name}/{PAYLOAD}", tmp)
            self.storage.put_bytes(f"{name}/{MANIFEST}", json.dumps(manifest, indent=1).encode())
            self.storage.put_bytes(POINTER, name.encode())
        except Exception as err:  # storage down after retries, disk full: keep training, keep the old pointer
            log.warning(
                "checkpoint %s/%s NOT written (%s); latest still points to %s",
                self.storage.uri,
                name,
                err,
                self.latest_name() or "nothing",
            )
            return False
        finally:
            tmp.unlink(missing_ok=True)
        self._prune(step)
        return True

    def latest_name(self) -> str | None:
        try:
            raw = self.storage.get_bytes(POINTER)
        except Exception as err:
            log.warning("cannot read %s/%s: %s", self.storage.uri, POINTER, err)
            return None
        if not raw:
            return None
        name = raw.decode("utf-8", errors="replace").strip()
        if _step_of(name) is None:  # a damaged pointer must not hide the checkpoints themselves
            log.error(
                "ignoring %s/%s: unreadable pointer %r, expected a name like %s; "
                "using the newest complete checkpoint instead",
                self.storage.uri,
                POINTER,
                raw[:40],
                checkpoint_name(100),
            )
            return None
        return name

    def _prune(self, newest: int) -> None:
        """Keep the newest `keep` complete checkpoints; drop older ones and stale incomplete leftovers."""
        try:
            names = [n for n in self.storage.list_dirs() if _step_of(n) is not None]
            complete = [n for n in names if self.storage.get_bytes(f"{n}/{MANIFEST}") is not None]
            kept = set(sorted(complete, key=_sort_key)[-self.keep :])
            for n in names:
                if n not in kept and (_step_of(n) or 0) <= newest:
                    self.storage.delete_dir(n)
        except Exception as err:  # pruning is housekeeping: never fail a run for it
            log.warning("could not prune old checkpoints in %s: %s", self.storage.uri, err)

    def candidates(self) -> list[str]:
        """Checkpoint names to try, best first: the `latest` pointer, then every other one newest first."""
        names = sorted(
            (n for n in self.storage.list_dirs() if _step_of(n) is not None), key=_sort_key, reverse=True
        )
        pointer = self.latest_name()
        return ([pointer] if pointer else []) + [n for n in names if n != pointer]

    def load(self, name: str) -> dict[str, Any]:
        """Load and verify one checkpoint; CheckpointRefused says exactly what is wrong with it."""
        where = f"{self.storage.uri}/{name}"
        raw = self.storage.get_bytes(f"{name}/{MANIFEST}")
        if raw is None:
            raise CheckpointRefused(
                f"checkpoint {where} is incomplete: no {MANIFEST} (write was interrupted)"
            )
        try:
            manifest = json.loads(raw)
            expected = manifest["files"][PAYLOAD]
            if not manifest.get("complete"):
                raise CheckpointRefused(f"checkpoint {where}: manifest does not mark it complete")
        except (ValueError, KeyError, TypeError) as err:
            raise CheckpointRefused(f"checkpoint {where}: unreadable {MANIFEST} ({err})") from None
        local = self.workdir / f".load-{name}-{os.getpid()}.pt"
        try:
            if isinstance(self.storage, LocalStorage):
                local = self.storage.local_path(f"{name}/{PAYLOAD}")
                if not local.is_file():
                    raise CheckpointRefused(f"checkpoint {where}: {PAYLOAD} is missing")
            else:
                try:
                    self.storage.get_file(f"{name}/{PAYLOAD}", local)
                except Exception as err:
                    raise CheckpointRefused(
                        f"checkpoint {where}: cannot download {PAYLOAD} ({err})"
                    ) from None
            size = local.stat().st_size
            if size != expected["bytes"]:
                raise CheckpointRefused(
                    f"checkpoint {where}: {PAYLOAD} is {size} bytes, "
                    f"manifest says {expected['bytes']} (truncated?)"
                )
            digest = _sha256(local)
            if digest != expected["sha256"]:
                raise CheckpointRefused(
                    f"checkpoint {where}: {PAYLOAD} sha256 {digest[:12]}… does not match the manifest's "
                    f"{expected['sha256'][:12]}… (corrupt)"
                )
            try:
                return torch.load(local, map_location="cpu", weights_only=True)
            except Exception as err:
                raise CheckpointRefused(f"checkpoint {where}: {PAYLOAD} does not load ({err})") from None
        finally:
            if not isinstance(self.storage, LocalStorage):
                local.unlink(missing_ok=True)

    def load_latest(self) -> tuple[str, dict[str, Any]] | None:
        """(name, state) of the best checkpoint that verifies, logging every one refused on the way."""
        for name in self.candidates():
            try:
                return name, self.load(name)
            except CheckpointRefused as err:
                log.error("refusing %s; trying the previous checkpoint", err)
        return None


def _rng_state() -> dict[str, Any]:
    state = {"torch": torch.get_rng_state(), "python": random.getstate()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state()
    return state


def _set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["cuda"])


def capture(
    env: DistEnv, model: nn.Module, optimizer: Optimizer, extra: dict[str, Any]
) -> dict[str, Any] | None:
    """The full training state on rank 0 (None elsewhere). Every rank must call it: it gathers."""
    options = StateDictOptions(full_state_dict=True, cpu_offload=True)
    model_state, optim_state = get_state_dict(model, optimizer, options=options)
    rng = gather_objects(env, _rng_state())  # dropout and shuffling continue exactly on every rank
    if not env.is_main:
        return None
    return {
        "format": FORMAT,
        "model": model_state,
        "optimizer": optim_state,
        "rng": rng,
        "world_size": env.world_size,
        **extra,
    }


def restore(env: DistEnv, state: dict[str, Any], model: nn.Module, optimizer: Optimizer) -> None:
    set_state_dict(
        model,
        optimizer,
        model_state_dict=state["model"],
        optim_state_dict=state["optimizer"],
        options=StateDictOptions(full_state_dict=True),
    )
    if state["world_size"] == env.world_size:
        _set_rng_state(state["rng"][env.rank])
    else:
        log.warning(
            "checkpoint was written by %d ranks, this run has %d: RNG streams start fresh",
            state["world_size"],
            env.world_size,
        )
