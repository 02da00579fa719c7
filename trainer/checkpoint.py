"""Checkpoints that belong to a run and survive crashes, Spot reclaims, full disks and flaky S3.

Layout under checkpoint.dir (local directory or s3://bucket/prefix):

    latest                                      "run-20261123T010000Z-1a2b/step-000000200"
    run-20261123T010000Z-1a2b/step-000000200/
        __0_0.distcp, __1_0.distcp, .metadata   model + optimizer, one shard per rank (torch DCP: shards.py)
        train_state.pt                          step, data position, scheduler, scaler, RNGs, tokenizer,
                                                config (rank 0)
        manifest.json                           {"format", "run", "step", "world_size", "complete": true,
                                                 "files": {name: {"bytes", "sha256"}}}

Every rank checks its state is finite, then publishes its files; only then does rank 0 write the manifest,
then `latest`. A checkpoint without a manifest is never loaded; one that fails verification falls back to
the run's previous one; a storage error while reading is CheckpointUnavailable (retryable, never a silent
restart from step 0). docs/trainer.md "Checkpoints" has the rest.
"""

from __future__ import annotations

import copy
import datetime
import hashlib
import json
import logging
import os
import secrets
import shutil
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.checkpoint.api import CheckpointException
from torch.optim import Optimizer

from trainer import shards
from trainer.config import ConfigError
from trainer.dist import DistEnv, all_reduce_max, broadcast_object, gather_objects
from trainer.faults import STORAGE_UNAVAILABLE, Diverged, Retryable
from trainer.storage import LocalStorage, Storage

log = logging.getLogger("trainer")
FORMAT = 2
TRAIN_STATE = "train_state.pt"
MANIFEST = "manifest.json"
POINTER = "latest"
# What DCP's load planner raises when the model does not match a checkpoint (torch 2.13,
# torch/distributed/checkpoint/default_planner.py create_default_local_load_plan and
# planner_helpers.py _create_read_items): a parameter missing, a shape differing, a tensor stored as bytes.
_MODEL_MISMATCH = (
    "Missing key in checkpoint state_dict",
    "Size mismatch between saved",
    "Invalid checkpoint metadata",
)


def checkpoint_name(step: int) -> str:
    return f"step-{step:09d}"


def new_run_id() -> str:
    """Sortable by start time (the newest run is found by name when `latest` is damaged), unique."""
    return time.strftime("run-%Y%m%dT%H%M%SZ", time.gmtime()) + "-" + secrets.token_hex(3)


def _step_of(name: str) -> int | None:
    prefix, _, digits = name.partition("-")
    return int(digits) if prefix == "step" and digits.isdigit() else None


def _step_key(name: str) -> int:
    """Sort key for names already known to be checkpoints (`step-N`)."""
    return _step_of(name) or 0


def _is_run(name: str) -> bool:
    return name.startswith("run-") and "/" not in name


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _not_found(err: BaseException) -> bool:
    if isinstance(err, FileNotFoundError):
        return True
    code = getattr(err, "response", {}).get("Error", {}).get("Code", "")
    return code in {"404", "NoSuchKey", "NotFound"}


class CheckpointRefused(RuntimeError):
    """A checkpoint exists but is incomplete or corrupt: the previous one of the run may be used."""


class CheckpointUnavailable(Retryable):
    """Storage failed while reading checkpoints: retry the job, never fall back to older state."""

    exit_code = STORAGE_UNAVAILABLE


class CheckpointManager:
    def __init__(
        self, storage: Storage, *, keep: int = 2, workdir: Path | None = None, timeout_s: float = 1800
    ):
        self.storage = storage
        self.keep = keep
        self.workdir = Path(workdir or tempfile.gettempdir())
        self.timeout_s = timeout_s  # of the background save's collectives (train.dist_timeout_s)
        self._pending: _Background | None = None
        self._group: Any = None
        self._completed: list[int] = []
        self.run: str | None = None  # set by begin(); "" is the flat layout of older trainers
        self._fallbacks: list[str] = []  # the run's older checkpoints, best first, for restore()
        self._saved_step: int | None = None  # the step of the run's newest complete checkpoint

    # -- where things are -------------------------------------------------------------------------------

    def _run_storage(self, run: str) -> Storage:
        return self.storage.child(run) if run else self.storage

    @property
    def run_storage(self) -> Storage:
        return self._run_storage(self.run or "")

    def location(self, step: int) -> str:
        return f"{self.run_storage.uri}/{checkpoint_name(step)}"

    def _pointer_text(self, name: str) -> str:
        return f"{self.run}/{name}" if self.run else name

    # -- start-up -----------------------------------------------------------------------------------------

    def check_writable(self) -> None:
        """Fail before training (exit 2) when a local checkpoint directory cannot be written, instead of
        a traceback at the first checkpoint interval. A full disk is not a reason to stop (the saves are
        skipped, with the reason, until space frees up): only said."""
        if not isinstance(self.storage, LocalStorage):
            return
        root = self.storage.root
        try:
            root.mkdir(parents=True, exist_ok=True)
            # Random, not the pid: the pods of a job that share the volume are all pid 1, and one pod's
            # unlink of the shared name made another's fail (exit 2 at random).
            probe = root / f".write-probe-{secrets.token_hex(8)}"
            probe.write_bytes(b"probe")
            probe.unlink()
        except OSError as err:
            if shards.is_disk_full(err):
                log.error("checkpoint.dir=%s is full: checkpoints are skipped until space is freed", root)
                return
            raise ConfigError(
                f"checkpoint.dir={str(root)!r} is not writable: {err.strerror or err} "
                f"({err.filename or root}); allowed: a directory this process (uid {os.getuid()}) can create "
                "files in, e.g. fix the volume's permissions (pod securityContext.fsGroup) or pass another "
                "--checkpoint.dir"
            ) from None

    def begin(self, env: DistEnv, *, resume: bool, resume_from: str = "") -> dict[str, Any] | None:
        """Every rank: pick this run and, when resuming, the checkpoint to continue from. Returns its
        train state (tokenizer, step, data position, ...; the model follows in restore()) or None.
        `resume_from` (run-<id>/step-<N>): continue from that checkpoint in a new run, unless the run
        `latest` names is the one that began there (a restart), which is resumed instead."""
        decision: Any = None
        if env.is_main:
            try:
                decision = self._choose(resume, resume_from)
            except (CheckpointUnavailable, ConfigError) as err:
                decision = err
        decision = broadcast_object(env, decision)
        if isinstance(decision, CheckpointUnavailable | ConfigError):
            raise decision
        self.run, self._fallbacks, state = decision
        self._saved_step = state["step"] if state and state["source_run"] == self.run else None
        return state

    def _choose(self, resume: bool, resume_from: str = "") -> tuple[str, list[str], dict[str, Any] | None]:
        runs = [n for n in self._list(self.storage) if _is_run(n)]
        if resume_from:
            chosen = self._resumed_from(resume_from, runs)
            if chosen is not None:
                return chosen
            resume = False
        elif resume:
            run, candidates = self._candidates(runs)
            for i, name in enumerate(candidates):
                try:
                    return run, candidates[i + 1 :], self._train_state(run, name)
                except CheckpointRefused as err:
                    log.error("refusing %s; trying the previous checkpoint of the run", err)
            if candidates:
                log.error(
                    "no checkpoint of %s verifies (every refusal above): starting a new run from step 0",
                    self._run_storage(run).uri,
                )
        run = new_run_id()
        if resume_from:
            state = self._chosen(resume_from)
            log.warning(
                "starting run %s from %s/%s (checkpoint.resume_from)", run, self.storage.uri, resume_from
            )
            return run, [], {**state, "resumed_from": resume_from}
        if runs:
            log.warning(
                "starting run %s in %s%s; the checkpoints of %d other run(s) there (%s) are left untouched",
                run,
                self.storage.uri,
                "" if resume else " (checkpoint.resume false)",
                len(runs),
                ", ".join(runs[-3:]),
            )
        return run, [], None

    def _resumed_from(
        self, resume_from: str, runs: list[str]
    ) -> tuple[str, list[str], dict[str, Any]] | None:
        """The run `latest` names and its state when it began at `resume_from` (this is its restart)."""
        run, candidates = self._candidates(runs) if self._get(self.storage, POINTER) else ("", [])
        for i, name in enumerate(candidates):
            try:
                state = self._train_state(run, name)
            except CheckpointRefused as err:
                log.error("refusing %s; trying the previous checkpoint of the run", err)
                continue
            return (run, candidates[i + 1 :], state) if state.get("resumed_from") == resume_from else None
        return None

    def _chosen(self, resume_from: str) -> dict[str, Any]:
        """The train state of checkpoint.resume_from; a missing or damaged one is a config error (exit 2):
        no restart brings it back, and no other checkpoint is what was asked for."""
        run, _, name = resume_from.rpartition("/")
        names = sorted(n for n in self._list(self._run_storage(run)) if _step_of(n) is not None)
        if name not in names:
            where = self._run_storage(run).uri
            found = f"its checkpoints: {', '.join(names[-5:])}" if names else "it holds no checkpoints"
            raise ConfigError(
                f"checkpoint.resume_from={resume_from!r}: no such checkpoint in {self.storage.uri} "
                f"({where}: {found}); allowed: a checkpoint as {self.storage.uri}/{POINTER} names one, "
                "run-<id>/step-<N>"
            )
        try:
            return self._train_state(run, name)
        except CheckpointRefused as err:
            raise ConfigError(f"checkpoint.resume_from={resume_from!r}: refusing {err}") from None

    def _candidates(self, runs: list[str]) -> tuple[str, list[str]]:
        """(run, its checkpoints to try, best first): the one `latest` names, then the others newest first."""
        raw = self._get(self.storage, POINTER)
        run, _, name = (raw or b"").decode("utf-8", errors="replace").strip().rpartition("/")
        if raw and (_step_of(name) is None or (run and not _is_run(run))):
            log.error(
                "ignoring %s/%s: unreadable pointer %r, expected a name like run-…/%s; "
                "using the newest complete checkpoint of the newest run instead",
                self.storage.uri,
                POINTER,
                raw[:60],
                checkpoint_name(100),
            )
            run, name = "", ""
        if not name:
            run = max(runs, default="")  # run ids sort by start time; "" is the flat layout
        names = sorted(
            (n for n in self._list(self._run_storage(run)) if _step_of(n) is not None),
            key=_step_key,
            reverse=True,
        )
        if name and name not in names:
            log.error(
                "%s/%s names %s/%s, which is missing; using the run's newest complete checkpoint instead",
                self.storage.uri,
                POINTER,
                run,
                name,
            )
        return run, ([name] if name in names else []) + [n for n in names if n != name]

    # -- reading ------------------------------------------------------------------------------------------

    def _get(self, store: Storage, key: str) -> bytes | None:
        try:
            return store.get_bytes(key)
        except Exception as err:
            raise self._unavailable(f"cannot read {store.uri}/{key}", err) from err

    def _list(self, store: Storage) -> list[str]:
        try:
            return store.list_dirs()
        except Exception as err:
            raise self._unavailable(f"cannot list {store.uri}", err) from err

    @staticmethod
    def _unavailable(what: str, err: BaseException) -> CheckpointUnavailable:
        return CheckpointUnavailable(
            f"{what} ({type(err).__name__}: {str(err).splitlines()[0][:300] if str(err) else ''}); not "
            f"falling back to an older checkpoint or step 0: exiting {STORAGE_UNAVAILABLE} to be retried"
        )

    def _manifest(self, store: Storage, name: str) -> dict[str, Any]:
        where = f"{store.uri}/{name}"
        raw = self._get(store, f"{name}/{MANIFEST}")
        if raw is None:
            raise CheckpointRefused(f"checkpoint {where} is incomplete: no {MANIFEST} (interrupted write)")
        try:
            manifest = json.loads(raw)
            files = manifest["files"]
            complete, version = manifest.get("complete"), manifest.get("format")
        except (ValueError, KeyError, TypeError) as err:
            raise CheckpointRefused(f"checkpoint {where}: unreadable {MANIFEST} ({err})") from None
        if not isinstance(files, dict):
            raise CheckpointRefused(
                f"checkpoint {where}: unreadable {MANIFEST} (files is a {type(files).__name__}, not a map)"
            )
        if not complete:
            raise CheckpointRefused(f"checkpoint {where}: manifest does not mark it complete")
        if version != FORMAT:
            raise CheckpointRefused(
                f"checkpoint {where}: format {version!r}, expected {FORMAT} (written by another trainer "
                "version; resume it with that version or start a new run)"
            )
        return manifest

    def _fetch(self, store: Storage, name: str, file: str, manifest: dict, into: Path) -> Path:
        """A verified local copy of one file of a checkpoint (in place for a local directory)."""
        where = f"{store.uri}/{name}"
        expected = manifest["files"].get(file)
        if not isinstance(expected, dict):
            raise CheckpointRefused(f"checkpoint {where}: {MANIFEST} does not list {file} (corrupt)")
        if isinstance(store, LocalStorage):
            path = store.local_path(f"{name}/{file}")
            if not path.is_file():
                raise CheckpointRefused(f"checkpoint {where}: {file} is missing")
        else:
            path = into / file
            into.mkdir(parents=True, exist_ok=True)
            try:
                store.get_file(f"{name}/{file}", path)
            except Exception as err:
                if _not_found(err):
                    raise CheckpointRefused(f"checkpoint {where}: {file} is missing") from None
                raise self._unavailable(f"cannot download {where}/{file}", err) from err
        try:
            size, digest = path.stat().st_size, _sha256(path)
        except OSError as err:
            raise self._unavailable(f"cannot read {path}", err) from err
        if size != expected.get("bytes"):
            raise CheckpointRefused(
                f"checkpoint {where}: {file} is {size} bytes, "
                f"manifest says {expected.get('bytes')} (truncated?)"
            )
        if digest != expected.get("sha256"):
            raise CheckpointRefused(
                f"checkpoint {where}: {file} sha256 {digest[:12]}… does not match the manifest's "
                f"{str(expected.get('sha256'))[:12]}… (corrupt)"
            )
        return path

    def _train_state(self, run: str, name: str) -> dict[str, Any]:
        store = self._run_storage(run)
        into = self.workdir / f"load-{run}-{name}"
        try:
            path = self._fetch(store, name, TRAIN_STATE, self._manifest(store, name), into)
            try:
                state = torch.load(path, map_location="cpu", weights_only=True)
            except Exception as err:
                where = f"{store.uri}/{name}"
                raise CheckpointRefused(f"checkpoint {where}: {TRAIN_STATE} does not load ({err})") from None
        finally:
            shutil.rmtree(into, ignore_errors=True)
        return {**state, "checkpoint": name, "source_run": run}

    def source(self, state: dict[str, Any]) -> str:
        """Where the checkpoint a train state came from lives."""
        return f"{self._run_storage(state['source_run']).uri}/{state['checkpoint']}"

    def restore(
        self, env: DistEnv, state: dict[str, Any] | None, model: nn.Module, optimizer: Optimizer
    ) -> dict[str, Any] | None:
        """Every rank: load the model and optimizer shards of `state`'s checkpoint, each rank fetching and
        verifying the files it reads. A corrupt shard makes every rank move to the run's previous
        checkpoint (returned: its step and data position then apply); None if none verifies."""
        while state is not None:
            name, store = state["checkpoint"], self._run_storage(state["source_run"])
            into = self.workdir / f"load-{name}"
            try:
                status: tuple[Path | None, str | None, str | None] = (
                    self._fetch_shards(env, store, name, model, optimizer, into),
                    None,
                    None,
                )
            except CheckpointRefused as err:
                status = (None, str(err), None)
            except CheckpointUnavailable as err:
                status = (None, None, str(err))
            statuses = gather_objects(env, status[1:])
            try:
                unavailable = [u for _, u in statuses if u]
                if unavailable:
                    raise CheckpointUnavailable(unavailable[0])
                refused = [r for r, _ in statuses if r]
                if not refused and status[0] is not None:
                    shards.read(env, model, optimizer, status[0])
                    if state["world_size"] == env.world_size:
                        shards.set_rng_state(state["rng"][env.rank])
                    else:
                        log.warning(
                            "checkpoint was written by %d ranks, this run has %d: resharded; RNG streams "
                            "start fresh",
                            state["world_size"],
                            env.world_size,
                        )
                    self._saved_step = state["step"] if state["source_run"] == self.run else None
                    return state
            finally:
                if not isinstance(store, LocalStorage):
                    shutil.rmtree(into, ignore_errors=True)
            if state["source_run"] != self.run:  # checkpoint.resume_from: no other checkpoint will do
                raise ConfigError(f"checkpoint.resume_from={state['resumed_from']!r}: refusing {refused[0]}")
            if env.is_main:
                for reason in dict.fromkeys(refused):
                    log.error("refusing %s; trying the previous checkpoint of the run", reason)
            state = self._next_fallback(env)
        return None

    def _fetch_shards(
        self, env: DistEnv, store: Storage, name: str, model: nn.Module, optimizer: Optimizer, into: Path
    ) -> Path:
        manifest = self._manifest(store, name)
        metadata = self._fetch(store, name, shards.METADATA, manifest, into)
        try:
            needed = shards.files_needed(env, model, optimizer, metadata)
        except (RuntimeError, ValueError) as err:
            if not any(m in str(err) for m in _MODEL_MISMATCH):
                raise  # a bug or an I/O fault, not a verdict on the checkpoint
            # Intact, but written for other model settings: no retry cures that.
            raise ConfigError(
                f"checkpoint {store.uri}/{name} was written for a different model: this model does not "
                f"match it ({err}); resume it with the model settings it was written with, or pass "
                "--checkpoint.resume false for a new run"
            ) from None
        for file in sorted(needed):
            self._fetch(store, name, file, manifest, into)
        return metadata.parent

    def _next_fallback(self, env: DistEnv) -> dict[str, Any] | None:
        decision: Any = None
        if env.is_main:
            try:
                while self._fallbacks and decision is None:
                    name = self._fallbacks.pop(0)
                    try:
                        decision = self._train_state(self.run or "", name)
                    except CheckpointRefused as err:
                        log.error("refusing %s; trying the previous checkpoint of the run", err)
                if decision is None:
                    where = self.run_storage.uri
                    log.error("no checkpoint of %s verifies: starting a new run from step 0", where)
                    decision = new_run_id()
            except CheckpointUnavailable as err:
                decision = err
        decision = broadcast_object(env, decision)
        if isinstance(decision, CheckpointUnavailable):
            raise decision
        if isinstance(decision, str):
            self.run, self._fallbacks, self._saved_step = decision, [], None
            return None
        return decision

    # -- writing ------------------------------------------------------------------------------------------

    def save(
        self,
        env: DistEnv,
        step: int,
        model: nn.Module,
        optimizer: Optimizer,
        extra: dict[str, Any],
        *,
        blocking: bool = True,
    ) -> bool | None:
        """Every rank: write a complete checkpoint for `step`; True once committed, False (and a warning)
        if it failed. With blocking=False (interval checkpoints) the shards are copied to CPU memory now
        and written, published and committed by a background thread on a gloo group of its own, as
        torchtitan does with dcp.async_save; None is returned and `completed()` reports the step later."""
        self.wait()  # one checkpoint at a time: the previous one is committed (or failed) first
        if step == self._saved_step:
            return True  # already complete (e.g. a SIGTERM right after resuming at this step)
        self._refuse_non_finite(env, step, model, optimizer)
        name, store = checkpoint_name(step), self.run_storage
        rng = gather_objects(env, shards.rng_state())  # dropout and shuffling continue exactly on every rank
        if isinstance(store, LocalStorage):  # beside the final place: publishing is a rename
            stage = store.root / f".stage-{name}-rank{env.rank}"
        else:
            stage = self.workdir / f"stage-{name}"
        train_state = {"format": FORMAT, "run": self.run, "rng": rng, "world_size": env.world_size, **extra}
        if blocking:
            files, error = self._write(
                env, name, stage, train_state, lambda: shards.write(env, model, optimizer, stage)
            )
            return self._commit(env, step, files, error, stage, None)
        group = self._side_group(env)
        written = shards.write_async(env, model, optimizer, stage, group)
        train_state = copy.deepcopy(train_state)  # training mutates the scheduler and scaler meanwhile

        def finish() -> bool:
            files, error = self._write(env, name, stage, train_state, written.result)
            return self._commit(env, step, files, error, stage, group)

        self._pending = _Background(finish)
        return None

    def _refuse_non_finite(self, env: DistEnv, step: int, model: nn.Module, optimizer: Optimizer) -> None:
        """Every rank: raise Diverged (exit 3) if any rank's model or optimizer state holds a NaN or an
        infinity. Such a checkpoint is never committed, so `latest` and pruning (which only follows a
        commit) never move from the last finite checkpoint to it."""
        found = _first_non_finite(model, optimizer)
        if not all_reduce_max(env, int(found is not None)):
            return
        where = [f"rank {r}: {f}" for r, f in enumerate(gather_objects(env, found)) if f]
        raise Diverged(
            f"checkpoint {self.location(step)} NOT written: the model or optimizer state is not finite "
            f"({'; '.join(where)}); latest still points to {self.latest_name() or 'nothing'}"
        )

    def wait(self) -> bool | None:
        """Block until the background checkpoint, if any, is committed: what save() would have returned."""
        pending, self._pending = self._pending, None
        return None if pending is None else pending.result()

    def in_flight(self, env: DistEnv) -> bool:
        """Every rank: whether any rank is still writing a background checkpoint (a SIGTERM that arrives
        meanwhile takes that one as the resume point instead of writing a second one)."""
        return bool(all_reduce_max(env, int(self._pending is not None and not self._pending.done())))

    def completed(self) -> list[int]:
        """Steps committed since the last call, for the caller's records."""
        done, self._completed = self._completed, []
        return done

    def _side_group(self, env: DistEnv) -> Any:
        if env.distributed and self._group is None:  # every rank reaches its first async save together
            self._group = dist.new_group(backend="gloo", timeout=datetime.timedelta(seconds=self.timeout_s))
        return self._group

    def _write(
        self, env: DistEnv, name: str, stage: Path, train_state: dict, write
    ) -> tuple[dict, str | None]:
        """This rank's files of the checkpoint, hashed and published: ({file: {bytes, sha256}}, error)."""
        files: dict[str, dict[str, Any]] = {}
        try:
            write()
            if env.is_main:
                torch.save(train_state, stage / TRAIN_STATE)
            for path in sorted(p for p in stage.iterdir() if p.is_file()):
                files[path.name] = {"bytes": path.stat().st_size, "sha256": _sha256(path)}
                self._publish(self.run_storage, f"{name}/{path.name}", path)
        except (Exception, CheckpointException) as err:  # CheckpointException is a BaseException
            return files, self._describe(err, stage)
        finally:
            shutil.rmtree(stage, ignore_errors=True)
        return files, None

    def _commit(
        self, env: DistEnv, step: int, files: dict, error: str | None, stage: Path, group: Any
    ) -> bool:
        """Rank 0 writes the manifest, then `latest`, once every rank published its files."""
        name, store = checkpoint_name(step), self.run_storage
        results = _gather(env, (files, error), group)
        saved = False
        if env.is_main:
            errors = [f"rank {r}: {e}" for r, (_, e) in enumerate(results) if e]
            if not errors:
                manifest = {
                    "format": FORMAT,
                    "run": self.run,
                    "step": step,
                    "world_size": env.world_size,
                    "complete": True,
                    "files": {k: v for f, _ in results for k, v in f.items()},
                }
                try:
                    store.put_bytes(f"{name}/{MANIFEST}", json.dumps(manifest, indent=1).encode())
                    self.storage.put_bytes(POINTER, self._pointer_text(name).encode())
                    saved = True
                except Exception as err:
                    errors = [self._describe(err, stage)]
            if saved:
                self._prune(step)
            else:
                latest = self.latest_name() or "nothing"
                log.log(
                    logging.ERROR if any("disk full" in e for e in errors) else logging.WARNING,
                    "checkpoint %s/%s NOT written (%s); latest still points to %s",
                    store.uri,
                    name,
                    "; ".join(dict.fromkeys(errors)),
                    latest,
                )
        saved = _broadcast(env, saved, group)
        if saved:
            self._saved_step = step
            self._completed.append(step)
        return saved

    @staticmethod
    def _publish(store: Storage, key: str, path: Path) -> None:
        if isinstance(store, LocalStorage):
            target = store.local_path(key)
            target.parent.mkdir(parents=True, exist_ok=True)
            os.replace(path, target)
        else:
            store.put_file(key, path)

    @staticmethod
    def _describe(err: BaseException, stage: Path) -> str:
        if shards.is_disk_full(err):
            where = next((p for p in stage.parents if p.exists()), stage.parent)
            free = shutil.disk_usage(where).free / 2**30
            return (
                f"disk full: writing failed, no space left on the file system of {where} ({free:.2f} GiB "
                "free); free space or give it a bigger volume"
            )
        cause = err.failures[min(err.failures)][0] if isinstance(err, CheckpointException) else err
        return f"{type(cause).__name__}: {str(cause).splitlines()[0][:300] if str(cause) else ''}"

    def latest_name(self) -> str | None:
        """What `latest` says (run/step-…), for messages; None when missing or unreadable."""
        try:
            raw = self.storage.get_bytes(POINTER)
        except Exception as err:
            log.warning("cannot read %s/%s: %s", self.storage.uri, POINTER, err)
            return None
        return raw.decode("utf-8", errors="replace").strip() if raw else None

    def _prune(self, newest: int) -> None:
        """Keep the run's newest `keep` complete checkpoints up to `newest` (always `newest` itself); drop
        the run's older ones and stale stage directories. Other runs and later steps are never touched."""
        store = self.run_storage
        try:
            names = store.list_dirs()
            upto = [n for n in names if (_step_of(n) or newest + 1) <= newest]
            complete = [n for n in upto if store.get_bytes(f"{n}/{MANIFEST}") is not None]
            kept = set(sorted(complete, key=_step_key)[-self.keep :]) | {checkpoint_name(newest)}
            staged = {n: _step_of(n.removeprefix(".stage-").split("-rank")[0]) for n in names}
            stale = [n for n, s in staged.items() if n.startswith(".stage-") and (s or 0) < newest]
            for n in [n for n in upto if n not in kept] + stale:
                store.delete_dir(n)
        except Exception as err:  # pruning is housekeeping: never fail a run for it
            log.warning("could not prune old checkpoints in %s: %s", store.uri, err)


def _first_non_finite(model: nn.Module, optimizer: Optimizer) -> str | None:
    """The name of the first tensor of this rank's model or optimizer state (its shard, under FSDP) with a
    NaN or an infinity; one host sync for all of them."""
    named = [(f"model {k}", v) for k, v in model.state_dict().items()]
    named += [
        (f"optimizer {k} of parameter {i}", v)
        for i, per_param in enumerate(optimizer.state.values())
        for k, v in per_param.items()
    ]
    named = [(n, getattr(t, "_local_tensor", t)) for n, t in named if torch.is_tensor(t)]
    named = [(n, t) for n, t in named if t.is_floating_point() and t.numel()]
    if not named:
        return None
    finite = torch.stack([torch.isfinite(t).all() for _, t in named]).cpu()
    return next((n for (n, _), ok in zip(named, finite.tolist(), strict=True) if not ok), None)


def _gather(env: DistEnv, obj: Any, group: Any) -> list[Any]:
    if group is None:
        return gather_objects(env, obj)
    out: list[Any] = [None] * env.world_size
    dist.all_gather_object(out, obj, group=group)
    return out


def _broadcast(env: DistEnv, obj: Any, group: Any) -> Any:
    if group is None:
        return broadcast_object(env, obj)
    box = [obj]
    dist.broadcast_object_list(box, src=0, group=group)
    return box[0]


class _Background:
    """A save finishing in a daemon thread: a process that exits (SIGKILL, a crash) does not wait for
    it, and what it leaves has no manifest, so it is never loaded."""

    def __init__(self, work) -> None:
        self._result: Any = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(work,), name="checkpoint", daemon=True)
        self._thread.start()

    def _run(self, work) -> None:
        try:
            self._result = work()
        except BaseException as err:  # re-raised in the training thread by result()
            self._error = err

    def done(self) -> bool:
        return not self._thread.is_alive()

    def result(self) -> Any:
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._result
