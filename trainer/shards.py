"""Model and optimizer state as torch.distributed.checkpoint (DCP) shards: every rank writes its own part.

With FSDP each rank holds 1/N of the parameters and optimizer state and writes exactly that (no gather on
rank 0); with DDP DCP de-duplicates the replicas and spreads the writes over the ranks. The files are
`__<rank>_0.distcp` per rank plus `.metadata` (written by the coordinator), which records global shapes,
so a checkpoint written by N ranks loads into M ranks (DCP reshards on load). This is the pattern of
torchtitan's `torchtitan/components/checkpoint.py` (get_model_state_dict / dcp.save / dcp.load /
set_model_state_dict), with the files written to a local stage directory first so that they can be
hashed and published (rename on a shared volume, upload to S3) by the rank that wrote them.
"""

from __future__ import annotations

import errno
import inspect
import random
import warnings
from pathlib import Path
from typing import Any

import torch
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint import FileSystemReader, FileSystemWriter
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict, set_state_dict
from torch.optim import Optimizer

from trainer.dist import DistEnv

METADATA = ".metadata"
# A single process has no process group: DCP then says "assuming the intent is to save in a single
# process" on every save and load, also from its background thread.
warnings.filterwarnings("ignore", message="torch.distributed is disabled", category=UserWarning)

# What torch and the OS say when a write runs out of space: errno ENOSPC from plain writes (DCP's
# FileSystemWriter), and torch.save's zip writer, which reports a short write without the errno, as
# "unexpected pos" (caffe2/serialize/inline_container.cc) or, when the last block fails, as the C++
# stream's "basic_ios::clear: iostream error" (both seen writing to /dev/full).
_DISK_FULL_WORDS = (
    "No space left on device",
    "Disk quota exceeded",
    "unexpected pos",
    "basic_ios::clear: iostream error",
)


def _options(model: nn.Module) -> StateDictOptions:
    """Frozen parameters (a LoRA fine-tune's base model) are left out: they never change, the run loads
    them from the model's source, and they would make every checkpoint as big as the model. Loading then
    fills only the trainable ones (strict=False); DCP's planner still refuses a checkpoint that lacks one."""
    frozen = any(not p.requires_grad for p in model.parameters())
    return StateDictOptions(ignore_frozen_params=frozen, strict=not frozen)


def _state_dicts(model: nn.Module, optimizer: Optimizer) -> dict[str, Any]:
    """Sharded (DTensor) entries under FSDP, plain tensors otherwise; optimizer state keyed by parameter
    name, so it survives a change of wrapping or world size."""
    model_state, optim_state = get_state_dict(model, optimizer, options=_options(model))
    return {"model": model_state, "optim": optim_state}


def write(env: DistEnv, model: nn.Module, optimizer: Optimizer, stage: Path) -> None:
    """Every rank writes its shard into its own `stage` directory (collective; raises on every rank if
    any rank failed, so no rank waits forever for a peer that gave up)."""
    stage.mkdir(parents=True, exist_ok=True)
    dcp.save(
        _state_dicts(model, optimizer),
        storage_writer=FileSystemWriter(stage, sync_files=True, overwrite=True),
        no_dist=not env.distributed,
    )


def write_async(env: DistEnv, model: nn.Module, optimizer: Optimizer, stage: Path, group: Any) -> Any:
    """Copy this rank's shard to CPU memory now, then write it in DCP's background thread; `group` is a
    gloo group of its own (None in a single process), so its collectives never interleave with training's.
    Returns the Future of the write."""
    stage.mkdir(parents=True, exist_ok=True)
    return dcp.async_save(
        _state_dicts(model, optimizer),
        storage_writer=FileSystemWriter(stage, sync_files=True, overwrite=True),
        process_group=group,
        no_dist=not env.distributed,
    )


def files_needed(env: DistEnv, model: nn.Module, optimizer: Optimizer, metadata_file: Path) -> set[str]:
    """The shard files this rank reads for its part of the state (a subset when the world size is the
    same, several files when DCP reshards), so a rank downloads only those."""
    metadata = FileSystemReader(metadata_file.parent).read_metadata()
    planner = DefaultLoadPlanner()
    planner.set_up_planner(_state_dicts(model, _as_saved(optimizer, metadata)), metadata, env.is_main)
    plan = planner.create_local_plan()
    return {metadata.storage_data[item.storage_index].relative_path for item in plan.items}


def read(env: DistEnv, model: nn.Module, optimizer: Optimizer, directory: Path) -> None:
    """Load the shards in `directory` into the (already wrapped) model and optimizer (collective)."""
    reader = FileSystemReader(directory)
    loading = _as_saved(optimizer, reader.read_metadata())
    state = _state_dicts(model, loading)
    dcp.load(state, storage_reader=reader, no_dist=not env.distributed)
    set_state_dict(
        model,
        loading,
        model_state_dict=state["model"],
        optim_state_dict=state["optim"],
        options=_options(model),
    )
    if loading is not optimizer:  # the moments and step counts move over; the groups' settings stay ours
        optimizer.state.update(loading.state)


def _as_saved(optimizer: Optimizer, metadata: Any) -> Optimizer:
    """`optimizer`, or for a checkpoint written with a single parameter group (before biases and norm
    weights left weight decay: trainer/schedule.py param_groups) an optimizer of the same kind over the
    same parameters in one group, which that checkpoint loads into."""
    groups = {k.split(".")[2] for k in metadata.state_dict_metadata if k.startswith("optim.param_groups.")}
    if len(groups) != 1 or len(optimizer.param_groups) == 1:
        return optimizer
    params = [p for group in optimizer.param_groups for p in group["params"]]
    accepted = inspect.signature(type(optimizer)).parameters
    return type(optimizer)(params, **{k: v for k, v in optimizer.defaults.items() if k in accepted})


def rng_state() -> dict[str, Any]:
    state = {"torch": torch.get_rng_state(), "python": random.getstate()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["cuda"])


def causes(err: BaseException) -> list[BaseException]:
    """`err`, what it was raised from, and for DCP's CheckpointException every rank's own failure."""
    out: list[BaseException] = []
    todo = [err]
    while todo:
        e = todo.pop()
        if e in out:
            continue
        out.append(e)
        todo += [c for c in (e.__cause__, e.__context__) if c is not None]
        if isinstance(e, CheckpointException):
            todo += [pair[0] for pair in e.failures.values()]
    return out


def is_disk_full(err: BaseException) -> bool:
    return any(
        getattr(e, "errno", None) in (errno.ENOSPC, errno.EDQUOT)
        or any(w in str(e) for w in _DISK_FULL_WORDS)
        for e in causes(err)
    )
