"""The causal-LM task (`llm.model` set): what trainer/loop.py runs instead of the classifier's data, model,
loss, evaluation and export. Everything else (precision, FSDP/DDP, the loop, non-finite guard, SIGTERM,
checkpoints, metrics) is the trainer's own.

The model comes from transformers (AutoModelForCausalLM; `tiny` is built in code), LoRA from peft. Only
trainable parameters are checkpointed (trainer/shards.py leaves frozen ones out): with LoRA a checkpoint
holds the adapters and their optimizer state, a few MB where the base model is GBs, and a resume loads
the base weights from the model source again. Under FSDP a model directory is read shard by shard
(trainer/llm/load.py). The export is the adapter as peft's `save_pretrained` writes it
(adapter_config.json + adapter_model.safetensors, and the tokenizer), which
`peft.PeftModel.from_pretrained(base, dir)` loads, or with `llm.export: merged` the base model with the
adapter merged in (trainer/llm/merge.py); full fine-tuning exports the whole model.
"""

from __future__ import annotations

import contextlib
import importlib.util
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from trainer.config import ConfigError, JobConfig, LlmConfig
from trainer.data import DataError
from trainer.dist import DistEnv, all_reduce_max, broadcast_object
from trainer.llm import data, load, merge, source, tiny

EXPORT_DIR = "adapter"  # under output.dir; `model` for a merged export and full fine-tuning
EXTRA = "llm"  # pyproject.toml's extra with transformers, peft and accelerate
# PyTorch's scaled_dot_product_attention, registered in transformers' AttentionInterface under a name of
# its own with no mask function: transformers then creates no mask and reads nothing on the host. Its own
# "sdpa" decides each forward whether it may drop the mask by reading device values (a padding mask's, or
# for no mask the position ids', to detect packing): one host sync per forward on a GPU. Without a mask
# SDPA runs causal (its flash kernel); a packed batch's block-diagonal mask (data.Collate, 4-D, boolean as
# SDPA takes it) passes through transformers as it is.
ATTENTION = "sdpa_without_mask_creation"


def require_packages(cfg: LlmConfig) -> None:
    """A config error (exit 2, one line) naming the extra when one of its packages is missing."""
    packages = ("transformers", "peft", "accelerate")
    missing = [name for name in packages if importlib.util.find_spec(name) is None]
    if missing:
        raise ConfigError(
            f"llm.model={cfg.model!r} needs the '{EXTRA}' extra ({' and '.join(missing)} not installed): "
            f"pip install 'mlops-eks[{EXTRA}]' (make dev installs it; the cuda image has it)"
        )


@dataclass
class Prepared:
    model: nn.Module  # on the device, not wrapped yet; its parameters on the meta device if `deferred`
    tokenizer: Any
    loader: Any
    val: Any
    train_sequences: int
    val_sequences: int
    deferred: load.Deferred | None = None  # FSDP from a model directory: the weights come after fully_shard
    device: torch.device = torch.device("cpu")
    say: Any = print

    def load_weights(self, model: nn.Module) -> None:
        """After fully_shard (the loop's _wrap): each rank reads its shard of the base weights; nothing to
        do when the model was loaded whole."""
        if self.deferred is None:
            return
        mine, whole = load.materialize(model, self.deferred, self.device)
        self.say(
            f"model weights read shard by shard from {self.deferred.directory}: {mine / 2**20:.1f} MiB of "
            f"parameters on this rank, {mine / whole:.2f} of the model's {whole / 2**20:.1f} MiB"
        )
        self.deferred = None  # the adapters' initial values and the buffers, kept until now


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
    if len(val) < env.world_size:
        say(
            f"warning: {len(val)} validation sequence(s) for {env.world_size} ranks: "
            f"{env.world_size - len(val)} rank(s) hold none and run an empty batch at each evaluation; "
            "more validation records (data.val_source, data.val_fraction) spread it over every rank"
        )
    if broadcast_object(env, train.fingerprint()) != train.fingerprint():
        raise DataError("the ranks tokenized the data differently (same config, different token ids)")
    loader, val_loader = data.loaders(
        train, val, cfg.data, batch_size=cfg.train.batch_size, seed=cfg.train.seed, rank=env.rank,
        world=env.world_size, pad_id=tok.pad_token_id, pin_memory=env.device.type == "cuda",
    )  # fmt: skip
    torch.manual_seed(cfg.train.seed)  # identical initial weights (tiny, LoRA) on every rank
    checkpointing = cfg.train.grad_checkpointing
    if local is not None and env.distributed and cfg.train.parallelism == "fsdp":
        model, deferred = build_sharded(
            cfg.llm, local, load_dtype=load_dtype, grad_checkpointing=checkpointing
        )
        return Prepared(model, tok, loader, val_loader, len(train), len(val), deferred, env.device, say)
    model = build(cfg.llm, local, tok, load_dtype=load_dtype, grad_checkpointing=checkpointing)
    return Prepared(model.to(env.device), tok, loader, val_loader, len(train), len(val))


def tokenizer(cfg: LlmConfig, local: Path | None) -> Any:
    if local is None:
        tok = tiny.tokenizer()
    else:
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(local)
    if cfg.chat_template:
        tok.chat_template = cfg.chat_template_text
        _check_template(tok, cfg.chat_template)
    if not tok.chat_template:
        raise ConfigError(
            f"llm.model={cfg.model!r} has no chat template (a base model?); allowed: a model whose "
            "tokenizer_config.json or chat_template.jinja carries one (e.g. an -Instruct model), or "
            "llm.chat_template set to one"
        )
    if tok.pad_token_id is None:  # Llama's tokenizers have none; padding is masked out anyway
        tok.pad_token = tok.eos_token
    return tok


def _check_template(tok: Any, value: str) -> None:
    """A config error naming llm.chat_template when the template does not render a short chat."""
    from jinja2 import TemplateError

    chat = [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"}]
    try:
        tok.apply_chat_template(chat, tokenize=False)
    except TemplateError as err:
        line = getattr(err, "lineno", None)  # a syntax error's
        where = f" (line {line})" if line else ""
        shown = value if len(value) <= 60 else f"{value[:57]}..."
        raise ConfigError(
            f"llm.chat_template={shown!r} is invalid: Jinja {type(err).__name__}{where}: {err.message}; "
            "allowed: a template that renders `messages` (a list of role/content) as the model's chat "
            "format, e.g. trainer/llm/tiny.py's CHAT_TEMPLATE"
        ) from None


def build(
    cfg: LlmConfig, local: Path | None, tok: Any, *, load_dtype: torch.dtype, grad_checkpointing: bool
) -> nn.Module:
    """The causal LM from its source, with LoRA adapters (peft) unless llm.method is full."""
    register_attention()
    if local is None:
        return _finish(cfg, tiny.model(tok, attention=ATTENTION), grad_checkpointing, torch.float32)
    from transformers import AutoConfig, AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(local, dtype=load_dtype, attn_implementation=ATTENTION)
    return _finish(cfg, model, grad_checkpointing, AutoConfig.from_pretrained(local).dtype)


def build_sharded(
    cfg: LlmConfig, local: Path, *, load_dtype: torch.dtype, grad_checkpointing: bool
) -> tuple[nn.Module, load.Deferred]:
    """The model of `local` as build makes it, but with its parameters on the meta device, and what
    load.materialize needs to fill its shards once fully_shard has cut it."""
    from transformers import AutoConfig

    register_attention()
    model = load.empty_model(local, dtype=load_dtype, attention=ATTENTION)
    base = {id(p) for p in model.parameters()}
    model = _finish(cfg, model, grad_checkpointing, AutoConfig.from_pretrained(local).dtype)
    return model, load.defer(model, base, local, cfg.model)


def _finish(cfg: LlmConfig, model: Any, grad_checkpointing: bool, published: Any) -> nn.Module:
    """Training settings and the adapters; `published`: the dtype of the source's weights, which the model
    keeps as `published_dtype` for a merged export (fp32 when the source does not say)."""
    model.config.use_cache = False  # the KV cache is for generation; training only wastes memory on it
    if grad_checkpointing:
        # Non-reentrant: recomputation that works with frozen inputs (LoRA) and under FSDP2.
        model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
    if cfg.method == "lora":
        model = _with_lora(cfg, model)
    model.published_dtype = published or torch.float32
    return model


def _with_lora(cfg: LlmConfig, model: nn.Module) -> nn.Module:
    from peft import LoraConfig, get_peft_model

    lora = LoraConfig(
        r=cfg.lora_rank,
        lora_alpha=cfg.lora_alpha,
        lora_dropout=cfg.lora_dropout,
        target_modules=cfg.target_modules,
        task_type="CAUSAL_LM",
    )
    _check_targets(cfg, model)
    # The adapters are created in fp32 whatever the base's dtype (peft's autocast_adapter_dtype): the
    # optimizer updates them in full precision, and fp16's GradScaler can unscale their gradients.
    return get_peft_model(model, lora)


def _check_targets(cfg: LlmConfig, model: nn.Module) -> None:
    """A config error naming the model's linear layers when a name in llm.lora_targets matches none of
    them (peft matches a name against the end of each module's path)."""
    if cfg.target_modules == "all-linear":
        return
    linear = [name for name, module in model.named_modules() if isinstance(module, nn.Linear)]
    unknown = [t for t in cfg.target_modules if not any(n == t or n.endswith(f".{t}") for n in linear)]
    if unknown:
        names = sorted({n.rsplit(".", 1)[-1] for n in linear})
        raise ConfigError(
            f"llm.lora_targets={cfg.lora_targets!r}: {', '.join(unknown)} is no linear layer of "
            f"llm.model={cfg.model!r}; allowed: 'all-linear' or names among {', '.join(names)}"
        )


def register_attention() -> None:
    from transformers import AttentionInterface
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    AttentionInterface.register(ATTENTION, sdpa_attention_forward)


def load_dtype(cfg: JobConfig, compute: torch.dtype | None, fsdp: bool) -> torch.dtype:
    """The dtype the base weights are loaded in. LoRA without FSDP: the compute dtype (half the memory,
    the frozen weights are never updated). FSDP or full fine-tuning: fp32, the optimizer's master copy;
    FSDP's mixed-precision policy casts the gathered parameters to the compute dtype."""
    if cfg.llm.method == "lora" and not fsdp and compute is not None:
        return compute
    return torch.float32


def token_loss(model: nn.Module, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """(sum of the next-token losses over labelled tokens, their count) of a batch."""
    logits = model(**data.forward_inputs(batch)).logits
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

    Every rank runs the same number of forward passes (FSDP all-gathers in each): a rank out of batches,
    or with none at all (fewer validation sequences than ranks), runs a batch whose labels are all
    ignored, which adds nothing to either sum. The sums stay on the device and are read once, at the end."""
    model.eval()
    loss_sum = torch.zeros((), dtype=torch.float64, device=env.device)
    tokens = torch.zeros((), dtype=torch.long, device=env.device)
    batches = iter(loader)
    for _ in range(all_reduce_max(env, len(loader))):
        batch = next(batches, None) or _ignored_batch()
        batch = {k: v.to(env.device, non_blocking=True) for k, v in batch.items()}
        autocast = torch.autocast(env.device.type, dtype=dtype) if dtype else contextlib.nullcontext()
        with autocast:
            total, count = token_loss(model, batch)
        loss_sum += total
        tokens += count
    sums = torch.stack([loss_sum, tokens.double()])
    if env.distributed:
        dist.all_reduce(sums)
    loss_sum, tokens = sums.tolist()
    model.train()
    val_loss = loss_sum / tokens
    return {"val_loss": val_loss, "val_perplexity": math.exp(min(val_loss, 700.0)), "val_tokens": tokens}


def _ignored_batch() -> dict[str, torch.Tensor]:
    """Eight tokens of id 0 (in every vocabulary), every label ignored: a forward that counts nothing."""
    return {
        "input_ids": torch.zeros(1, 8, dtype=torch.long),
        "attention_mask": torch.zeros(1, 8, dtype=torch.long),
        "labels": torch.full((1, 8), data.IGNORE, dtype=torch.long),
    }


def export_name(cfg: LlmConfig) -> str:
    """The directory the export writes under output.dir."""
    return EXPORT_DIR if cfg.method == "lora" and cfg.export == "adapter" else "model"


def export(cfg: LlmConfig, model: nn.Module, tok: Any, env: DistEnv, into: Path) -> str:
    """Every rank (the full state dict is gathered): rank 0 writes the adapter, the merged model or the
    whole model with save_pretrained, and the tokenizer, into `into`/<export_name>. Returns that name.

    It writes nothing else, anywhere (no Hub look-up, no cache), so `into` may be a temporary directory
    renamed into place; a full disk raises its OSError (ENOSPC) as it is."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    adapter_only = cfg.method == "lora" and cfg.export == "adapter"
    options = StateDictOptions(full_state_dict=True, cpu_offload=True, ignore_frozen_params=adapter_only)
    weights = get_model_state_dict(model, options=options)
    name = export_name(cfg)
    if env.is_main:
        target = into / name
        pretrained: Any = model.module if isinstance(model, DistributedDataParallel) else model
        if cfg.method == "lora" and cfg.export == "merged":
            merge.save_merged(pretrained, weights, target)
        elif adapter_only:
            # The base a user loads it onto: the Hub name or the location, not this pod's scratch copy.
            pretrained.peft_config["default"].base_model_name_or_path = cfg.model.removeprefix("hf:")
            # LoRA here never trains the embeddings, so peft need not look up (on the Hub) whether the
            # base's vocabulary changed.
            pretrained.save_pretrained(target, state_dict=weights, save_embedding_layers=False)
        else:
            pretrained.save_pretrained(target, state_dict=weights)
        tok.save_pretrained(target)
    return name
