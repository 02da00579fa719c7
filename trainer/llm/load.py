"""Sharded loading for FSDP: each rank holds only its own shard of the base weights, from the start.

Loaded whole, a model costs every rank all of its fp32 weights (the optimizer's master copy) before
fully_shard cuts them, in host RAM and on the GPU: Qwen2.5-7B is 30.5 GB on a 40 GB A100. Instead, as
torchtitan does (v0.2.2: torchtitan/train.py builds the model on the meta device, parallelizes it, then
`to_empty`s it; torchtitan/components/checkpoint.py reads Hugging Face safetensors through DCP's
HuggingFaceStorageReader into the sharded model), the model is built without weights, the loop shards it,
each rank allocates its shard and DCP reads from the safetensors files only the rows of each tensor that
shard holds (`safe_open(...).get_slice`), converting them to the training dtype on the way.

Built without weights means: every base parameter a zero-stride CPU tensor (no memory) while peft adds the
LoRA adapters, so that they are created and initialised on the CPU exactly as for a model loaded whole
(peft would put them where the base weights are: on the meta device, unset), then every parameter moved
to the meta device for fully_shard. The adapters' initial values and the buffers (computed at
construction, such as the rotary frequencies) are kept whole on every rank, a few MB, and copied into
their shards after `to_empty`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from trainer.config import ConfigError

_WRAPPERS = ("base_layer", "_orig_mod")  # peft's wrapped layer, torch.compile's wrapped module
_PEFT_PREFIX = "base_model.model."


@dataclass
class Deferred:
    """What a sharded model still needs once fully_shard has cut it: `kept` (adapters' initial values and
    every buffer, by name, whole, on the CPU) and the base weights from `directory`'s safetensors."""

    directory: Path
    source: str  # llm.model, for messages
    kept: dict[str, torch.Tensor]


def empty_model(directory: Path, *, dtype: torch.dtype, attention: str) -> nn.Module:
    """The causal LM of `directory`'s config.json, every parameter a zero-stride CPU tensor of `dtype`."""
    from accelerate import init_empty_weights
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(directory)
    with init_empty_weights(include_buffers=False):  # parameters on the meta device, buffers computed
        model = AutoModelForCausalLM.from_config(config, dtype=dtype, attn_implementation=attention)
    model.tie_weights()  # init_empty_weights re-creates each parameter, undoing the ties post_init made
    _replace_parameters(model, lambda p: torch.zeros((), dtype=p.dtype).expand(p.shape))
    return model


def defer(model: nn.Module, base: set[int], directory: Path, source: str) -> Deferred:
    """Keep what is not a base weight (`base`: their ids), then move every parameter to the meta device."""
    kept = {_name(n): p.detach().clone() for n, p in model.named_parameters() if id(p) not in base}
    kept |= {_name(n): b.detach().clone() for n, b in model.named_buffers()}
    _replace_parameters(model, lambda p: torch.empty_like(p, device="meta"))
    return Deferred(directory, source, kept)


def materialize(model: nn.Module, deferred: Deferred, device: torch.device) -> tuple[int, int]:
    """Every rank, after fully_shard: allocate this rank's shards, restore the kept tensors, read the base
    weights' rows of this rank from the safetensors files. Returns (bytes of parameters this rank holds,
    bytes of the whole model's)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint import HuggingFaceStorageReader

    model.to_empty(device=device)
    base = {}
    with torch.no_grad():
        for name, param in model.named_parameters():
            if _name(name) in deferred.kept:
                _copy_whole(param, deferred.kept[_name(name)])
            else:
                base[_checkpoint_key(name)] = param
        for name, buffer in model.named_buffers():
            buffer.copy_(deferred.kept[_name(name)])
    files = sorted(deferred.directory.glob("*.safetensors"))
    if not files:
        raise ConfigError(
            f"llm.model={deferred.source!r}: {deferred.directory} has no *.safetensors weights; allowed "
            "under train.parallelism=fsdp: a model saved as safetensors (each rank reads its rows of them)"
        )
    reader = HuggingFaceStorageReader(str(deferred.directory))
    missing = sorted(set(base) - set(reader.read_metadata().state_dict_metadata))
    if missing:
        raise ConfigError(
            f"llm.model={deferred.source!r}: the safetensors in {deferred.directory} lack {len(missing)} "
            f"weight(s) the model's config.json asks for ({', '.join(missing[:4])}); allowed: the files "
            "save_pretrained writes for that config"
        )
    dcp.load(base, storage_reader=reader)
    return _local_bytes(model), sum(p.numel() * p.element_size() for p in model.parameters())


def _local_bytes(model: nn.Module) -> int:
    from torch.distributed.tensor import DTensor

    tensors = [p.to_local() if isinstance(p, DTensor) else p for p in model.parameters()]
    return sum(t.numel() * t.element_size() for t in tensors)


def _copy_whole(param: torch.Tensor, whole: torch.Tensor) -> None:
    """`whole` into `param`: into this rank's shard when `param` is a DTensor (no communication: every
    rank holds the same `whole`)."""
    from torch.distributed.tensor import DTensor, distribute_tensor

    if isinstance(param, DTensor):
        shard = distribute_tensor(whole, param.device_mesh, param.placements, src_data_rank=None)
        param.to_local().copy_(shard.to_local())
    else:
        param.copy_(whole)


def _name(name: str) -> str:
    """A parameter's name without torch.compile's wrapper, which the loop may add after `defer`."""
    return ".".join(part for part in name.split(".") if part != "_orig_mod")


def _checkpoint_key(name: str) -> str:
    """The key save_pretrained gives a base weight of the model: peft's and compile's wrappers left out."""
    return ".".join(part for part in name.removeprefix(_PEFT_PREFIX).split(".") if part not in _WRAPPERS)


def _replace_parameters(model: nn.Module, new: Callable[[nn.Parameter], torch.Tensor]) -> None:
    """Every parameter by `new(it)`, keeping requires_grad and the ties (a parameter shared by two modules
    stays one)."""
    done: dict[int, tuple[nn.Parameter, nn.Parameter]] = {}  # the old one kept alive: its id stays its own
    for module in model.modules():
        for name, param in list(module._parameters.items()):
            if param is None:
                continue
            if id(param) not in done:
                done[id(param)] = (param, nn.Parameter(new(param), requires_grad=param.requires_grad))
            module._parameters[name] = done[id(param)][1]
