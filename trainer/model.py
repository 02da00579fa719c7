"""The classifier: a small transformer encoder in plain PyTorch, or a Hugging Face encoder by name."""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from trainer.config import ModelConfig


class EncoderClassifier(nn.Module):
    """Token + position embeddings, pre-norm transformer layers, masked mean pooling, linear head."""

    position: torch.Tensor
    # Its only buffer, the position table, never changes: DDP need not resend it before each forward.
    constant_buffers = True

    def __init__(self, cfg: ModelConfig, *, vocab_size: int, max_positions: int):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, cfg.dim, padding_idx=0)
        # Fixed sinusoidal positions: "attend to the previous word" is the same linear map at every
        # position, so short-range patterns like negation are learnt in a few hundred steps.
        self.register_buffer("position", _sinusoidal(max_positions, cfg.dim), persistent=False)
        # A convolution over neighbouring tokens before attention: short-range patterns such as a
        # negation in front of a sentiment word become one learnt filter instead of an attention pattern.
        self.local = nn.Conv1d(cfg.dim, cfg.dim, kernel_size=3, padding=1)
        self.layers = nn.ModuleList(
            nn.TransformerEncoderLayer(
                cfg.dim, cfg.heads, cfg.ffn_dim, cfg.dropout, batch_first=True, norm_first=True
            )
            for _ in range(cfg.layers)
        )
        self.norm = nn.LayerNorm(cfg.dim)
        self.head = nn.Linear(cfg.dim, cfg.num_labels)
        self.grad_checkpointing = False

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)
        x = self.embed(input_ids) + self.position[positions]
        padding = ~attention_mask
        x = x.masked_fill(padding.unsqueeze(-1), 0.0)
        x = x + self.local(x.transpose(1, 2)).transpose(1, 2)
        for layer in self.layers:
            if self.grad_checkpointing and self.training:
                # Trade compute for memory: activations of this layer are recomputed in backward.
                x = checkpoint(layer, x, None, padding, use_reentrant=False)
            else:
                x = layer(x, src_key_padding_mask=padding)
        x = self.norm(x)
        mask = attention_mask.unsqueeze(-1).to(x.dtype)
        pooled = (x * mask).sum(1) / mask.sum(1).clamp(min=1)
        return self.head(pooled)


def _sinusoidal(length: int, dim: int) -> torch.Tensor:
    position = torch.arange(length).unsqueeze(1)
    freq = torch.exp(torch.arange(0, dim, 2) * (-math.log(10000.0) / dim))
    table = torch.zeros(length, dim)
    table[:, 0::2] = torch.sin(position * freq)
    table[:, 1::2] = torch.cos(position * freq[: dim // 2])
    return table


class HuggingFaceClassifier(nn.Module):
    """A pretrained encoder with a fresh classification head (needs `transformers` and the weights)."""

    def __init__(self, name: str, num_labels: int):
        super().__init__()
        from transformers import AutoModelForSequenceClassification  # checked by ModelConfig

        self.inner = AutoModelForSequenceClassification.from_pretrained(name, num_labels=num_labels)
        self.grad_checkpointing = False

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        if self.grad_checkpointing and not self.inner.is_gradient_checkpointing:
            self.inner.gradient_checkpointing_enable()
        return self.inner(input_ids=input_ids, attention_mask=attention_mask).logits


def transformer_blocks(model: nn.Module) -> list[nn.Module]:
    """The repeated blocks of `model`, outermost first: the units FSDP shards one by one.

    Ours are `nn.TransformerEncoderLayer`s. A Hugging Face model names its block classes in
    `_no_split_modules` (e.g. ["BertLayer"]), the list Accelerate's FSDP plugin and `device_map` use as
    the transformer layers to wrap; every module of the model that is one of those classes is a block."""
    names: set[str] = set()
    for module in model.modules():
        names.update(getattr(module, "_no_split_modules", None) or ())
    return [
        m
        for m in model.modules()
        if m is not model and (isinstance(m, nn.TransformerEncoderLayer) or type(m).__name__ in names)
    ]


def attention_shape(model: nn.Module) -> tuple[int, int, int]:
    """(layers, heads, head dimensions) of the model's self-attention: the shape MFU counts (trainer.mfu)."""
    # A Hugging Face model (our classifier's `inner`, a causal LM, a peft model around one) has its config.
    config = getattr(getattr(model, "inner", model), "config", None)
    if config is not None and hasattr(config, "num_hidden_layers"):
        heads = config.num_attention_heads
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
        return config.num_hidden_layers, heads, head_dim
    attention = [m for m in model.modules() if isinstance(m, nn.MultiheadAttention)]
    return len(attention), attention[0].num_heads, attention[0].head_dim


def build_model(
    cfg: ModelConfig, *, vocab_size: int, max_positions: int, grad_checkpointing: bool = False
) -> nn.Module:
    model: EncoderClassifier | HuggingFaceClassifier
    if cfg.name.startswith("hf:"):
        model = HuggingFaceClassifier(cfg.name[3:], cfg.num_labels)
    else:
        model = EncoderClassifier(cfg, vocab_size=vocab_size, max_positions=max_positions)
    model.grad_checkpointing = grad_checkpointing
    return model
