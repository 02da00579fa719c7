"""The causal-LM task (`llm.model` set): what trainer/loop.py runs instead of the classifier's data, model,
loss, evaluation and export. Everything else (precision, FSDP/DDP, the loop, non-finite guard, SIGTERM,
checkpoints, metrics) is the trainer's own.

The model comes from transformers (AutoModelForCausalLM; `tiny` is built in code), LoRA from peft. Only
trainable parameters are checkpointed (trainer/shards.py leaves frozen ones out): with LoRA a checkpoint
holds the adapters and their optimizer state, a few MB where the base model is GBs, and a resume loads
the base weights from the model source again. The export is the adapter as peft's `save_pretrained`
writes it (adapter_config.json + adapter_model.safetensors, and the tokenizer), which
`peft.PeftModel.from_pretrained(base, dir)` loads; full fine-tuning exports the whole model the same way.
"""

from __future__ import annotations

import contextlib
import importlib.util
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from trainer.config import ConfigError, JobConfig, LlmConfig
from trainer.data import DataError
from trainer.dist import DistEnv, all_reduce_max, all_reduce_sum, broadcast_object
from trainer.llm import data, source, tiny

EXPORT_DIR = "adapter"  # under output.dir; `model` for full fine-tuning
EXTRA = "llm"  # pyproject.toml's extra with transformers and peft


def require_packages(cfg: LlmConfig) -> None:
    """A config error (exit 2, one line) naming the extra when transformers or peft is missing."""
    missing = [name for name in ("transformers", "peft") if importlib.util.find_spec(name) is None]
    if missing:
        raise ConfigError(
            f"llm.model={cfg.model!r} needs the '{EXTRA}' extra ({' and '.join(missing)} not installed): "
            f"pip install 'mlops-eks[{EXTRA}]' (make dev installs it; the cuda image has it)"
        )


@dataclass
class Prepared:
    model: nn.Module  # on the device, not wrapped yet
    tokenizer: Any
    loader: Any
    val: Any
    train_sequences: int
    val_sequences: int


def prepare(
    cfg: JobConfig,
    env: DistEnv,
    workdir: Path,
    launch: str,
    *,
    load_dtype: torch.dtype,
    say,
    s3_client: Any = None,
) -> Prepared:
    """Every rank: the model files (once per node), the tokenizer, the packed data and the model."""
    local = source.model_dir(cfg.llm, env, launch, s3_client=s3_client, say=say)
    tok = tokenizer(cfg.llm, local)
    train, val = data.sequences(cfg.data, cfg.llm, tok, workdir, s3_client=s3_client)
    if broadcast_object(env, train.fingerprint()) != train.fingerprint():
        raise DataError("the ranks tokenized the data differently (same config, different token ids)")
    loader, val_loader = data.loaders(
        train, val, cfg.data, batch_size=cfg.train.batch_size, seed=cfg.train.seed, rank=env.rank,
        world=env.world_size, pad_id=tok.pad_token_id, pin_memory=env.device.type == "cuda",
    )  # fmt: skip
    torch.manual_seed(cfg.train.seed)  # identical initial weights (tiny, LoRA) on every rank
    model = build(cfg.llm, local, tok, load_dtype=load_dtype, grad_checkpointing=cfg.train.grad_checkpointing)
    return Prepared(model.to(env.device), tok, loader, val_loader, len(train), len(val))


def tokenizer(cfg: LlmConfig, local: Path | None) -> Any:
    if local is None:
        return tiny.tokenizer()
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(local)
    if not tok.chat_template:
        raise ConfigError(
            f"llm.model={cfg.model!r} has no chat template (a base model?); allowed: a model whose "
            "tokenizer_config.json or chat_template.jinja carries one, e.g. an -Instruct model"
        )
    if tok.pad_token_id is None:  # Llama's tokenizers have none; padding is masked out anyway
        tok.pad_token = tok.eos_token
    return tok


def build(
    cfg: LlmConfig, local: Path | None, tok: Any, *, load_dtype: torch.dtype, grad_checkpointing: bool
) -> nn.Module:
    """The causal LM from its source, with LoRA adapters (peft) unless llm.method is full."""
    if local is None:
        model = tiny.model(tok)
    else:
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained(local, dtype=load_dtype)
    model.config.use_cache = False  # the KV cache is for generation; training only wastes memory on it
    if grad_checkpointing:
        # Non-reentrant: recomputation that works with frozen inputs (LoRA) and under FSDP2.
        model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
    if cfg.method == "full":
        return model
    from peft import LoraConfig, get_peft_model

    lora = LoraConfig(
        r=cfg.lora_rank,
        lora_alpha=cfg.lora_alpha,
        lora_dropout=cfg.lora_dropout,
        target_modules=cfg.target_modules,
        task_type="CAUSAL_LM",
    )
    # The adapters are created in fp32 whatever the base's dtype (peft's autocast_adapter_dtype): the
    # optimizer updates them in full precision, and fp16's GradScaler can unscale their gradients.
    return get_peft_model(model, lora)


def load_dtype(cfg: JobConfig, compute: torch.dtype | None, fsdp: bool) -> torch.dtype:
    """The dtype the base weights are loaded in. LoRA without FSDP: the compute dtype (half the memory,
    the frozen weights are never updated). FSDP or full fine-tuning: fp32, the optimizer's master copy;
    FSDP's mixed-precision policy casts the gathered parameters to the compute dtype."""
    if cfg.llm.method == "lora" and not fsdp and compute is not None:
        return compute
    return torch.float32


def token_loss(model: nn.Module, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """(sum of the next-token losses over labelled tokens, their count) of a batch."""
    logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    labels = batch["labels"][:, 1:]
    total = nn.functional.cross_entropy(
        logits[:, :-1].flatten(0, 1).float(), labels.flatten(), ignore_index=data.IGNORE, reduction="sum"
    )
    return total, labelled_tokens(batch)


def labelled_tokens(batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """The tokens a batch's loss counts (the next-token targets that are labelled), before its forward."""
    return (batch["labels"][:, 1:] != data.IGNORE).sum()


# The training loss: (sum, count) of a micro-batch. The loop divides the sum by the count over the
# global batch (every micro-batch of the step on every rank): a loss per labelled token, the same
# however the batch is split into micro-batches and ranks.
loss = token_loss


@torch.no_grad()
def evaluate(model: nn.Module, loader, env: DistEnv, dtype: torch.dtype | None) -> dict[str, float]:
    """Loss per labelled token over every rank's validation shard, and its perplexity exp(loss).

    Every rank runs the same number of forward passes (FSDP all-gathers in each): a rank out of batches
    repeats its last one and counts nothing for it."""
    model.eval()
    loss_sum = tokens = 0.0
    rounds = all_reduce_max(env, len(loader))
    batches, last = iter(loader), None
    for _ in range(rounds):
        batch = next(batches, None)
        counted, batch = batch is not None, batch if batch is not None else last
        last = batch
        assert batch is not None  # every rank has at least one validation batch or none reach here
        batch = {k: v.to(env.device, non_blocking=True) for k, v in batch.items()}
        autocast = torch.autocast(env.device.type, dtype=dtype) if dtype else contextlib.nullcontext()
        with autocast:
            total, count = token_loss(model, batch)
        if counted:
            loss_sum += total.item()
            tokens += count.item()
    loss_sum, tokens = all_reduce_sum(env, [loss_sum, tokens])
    model.train()
    val_loss = loss_sum / tokens
    return {"val_loss": val_loss, "val_perplexity": math.exp(min(val_loss, 700.0)), "val_tokens": tokens}


def export(cfg: LlmConfig, model: nn.Module, tok: Any, env: DistEnv, into: Path) -> str:
    """Every rank (the full state dict is gathered): rank 0 writes the adapter (or the whole model) with
    save_pretrained into `into`/<dir>. Returns <dir>."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    lora = cfg.method == "lora"
    options = StateDictOptions(full_state_dict=True, cpu_offload=True, ignore_frozen_params=lora)
    weights = get_model_state_dict(model, options=options)
    name = EXPORT_DIR if lora else "model"
    if env.is_main:
        target = into / name
        pretrained: Any = model.module if isinstance(model, DistributedDataParallel) else model
        if lora:  # the base a user loads it onto: the Hub name or the location, not this pod's scratch copy
            pretrained.peft_config["default"].base_model_name_or_path = cfg.model.removeprefix("hf:")
        # The adapters only: LoRA here never trains the embeddings, so peft need not look up (on the Hub)
        # whether the base's vocabulary changed.
        extra = {"save_embedding_layers": False} if lora else {}
        pretrained.save_pretrained(target, state_dict=weights, **extra)
        tok.save_pretrained(target)
    return name
