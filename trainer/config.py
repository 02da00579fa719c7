"""The trainer's configuration: kw-only dataclasses validated on construction.

A job is `JobConfig` = data + model + train + checkpoint + output (+ llm, mlflow). It is built from
defaults (the zIMDB job on synthetic data), then an optional YAML/JSON file, then `--<section>.<field>
VALUE` overrides.
Every error names the key, the value and what is allowed, and maps to exit code 2 (a permanent failure:
retrying the same pod would fail the same way).
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import importlib.util
import inspect
import json
import os
import re
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml


class ConfigError(ValueError):
    """An invalid job configuration (exit code 2)."""


def _help(text: str) -> Any:
    return {"help": text}


def _require(ok: bool, key: str, value: Any, allowed: str) -> None:
    if not ok:
        raise ConfigError(f"{key}={value!r} is invalid: allowed {allowed}")


def _require_package(module: str, key: str, value: Any, pip_name: str) -> None:
    # No silent fallback: an option that needs a package that is not installed is a config error.
    if importlib.util.find_spec(module) is None:
        raise ConfigError(
            f"{key}={value!r} needs the '{pip_name}' package, which is not installed: "
            f"pip install {pip_name} (or choose another {key})"
        )


@dataclass(kw_only=True)
class DataConfig:
    source: str = field(
        default="synthetic",
        metadata=_help(
            "'synthetic' (deterministic zIMDB corpus, offline), a .jsonl/.csv/.parquet file with text,label "
            "(local path or s3://bucket/key), or 'hf:<dataset>' (needs the datasets package)"
        ),
    )
    val_source: str = field(
        default="", metadata=_help("validation file (same formats); empty: split val_fraction off source")
    )
    val_fraction: float = field(default=0.1, metadata=_help("share of source held out when no val_source"))
    text_field: str = field(default="text", metadata=_help("column holding the review text"))
    label_field: str = field(default="label", metadata=_help("column holding the integer class label"))
    synthetic_train_size: int = field(default=6000, metadata=_help("synthetic training examples"))
    synthetic_val_size: int = field(default=1000, metadata=_help("synthetic validation examples"))
    tokenizer: str = field(
        default="wordlevel",
        metadata=_help("'wordlevel' or 'bpe' (trained on the training split, offline) or 'bytes'"),
    )
    vocab_size: int = field(default=8000, metadata=_help("maximum vocabulary size of a trained tokenizer"))
    max_len: int = field(default=64, metadata=_help("tokens per example after truncation"))
    pad_to_multiple: int = field(default=8, metadata=_help("pad each batch's length to a multiple of this"))
    num_workers: int = field(default=0, metadata=_help("DataLoader worker processes per rank"))
    seed: int = field(default=0, metadata=_help("seed of the synthetic corpus and of the train/val split"))

    def __post_init__(self) -> None:
        src = self.source
        _require(bool(src), "data.source", src, "'synthetic', a file path, s3://bucket/key or hf:<name>")
        if src.startswith("hf:"):
            _require(len(src) > 3, "data.source", src, "hf:<dataset name>, e.g. hf:imdb")
            _require_package("datasets", "data.source", src, "datasets")
        elif src != "synthetic":
            _require_file_source(src, "data.source")
        if self.val_source:
            _require_file_source(self.val_source, "data.val_source")
            # Validating on the training data reports memorization as accuracy.
            other = "a file other than data.source"
            _require(self.val_source != src, "data.val_source", self.val_source, other)
        for key in ("text_field", "label_field"):
            _require(bool(getattr(self, key)), f"data.{key}", getattr(self, key), "a column name")
        _require(
            self.text_field != self.label_field, "data.label_field", self.label_field,
            f"a column other than data.text_field={self.text_field!r}",
        )  # fmt: skip
        _require(0.0 < self.val_fraction < 1.0, "data.val_fraction", self.val_fraction, "0 < x < 1")
        _require(
            self.synthetic_train_size >= 8, "data.synthetic_train_size", self.synthetic_train_size, ">= 8"
        )
        _require(self.synthetic_val_size >= 2, "data.synthetic_val_size", self.synthetic_val_size, ">= 2")
        _require(
            self.tokenizer in TOKENIZERS, "data.tokenizer", self.tokenizer, " | ".join(sorted(TOKENIZERS))
        )
        _require(self.vocab_size >= 64, "data.vocab_size", self.vocab_size, ">= 64")
        _require(self.max_len >= 4, "data.max_len", self.max_len, ">= 4")
        _require(self.pad_to_multiple >= 1, "data.pad_to_multiple", self.pad_to_multiple, ">= 1")
        _require(self.num_workers >= 0, "data.num_workers", self.num_workers, ">= 0")


TOKENIZERS = {"wordlevel", "bpe", "bytes"}
FILE_FORMATS = (".jsonl", ".json", ".csv", ".parquet")


# A URL scheme the trainer does not read or write (gs://, S3://, s3:/ with one slash): as a local path it
# would name a missing file, or create a directory called "gs:".
_OTHER_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:/")


def _require_file_source(src: str, key: str) -> None:
    _require(
        src.startswith("s3://") or not _OTHER_SCHEME.match(src), key, src,
        "s3://bucket/key or a local path (no other URL scheme)",
    )  # fmt: skip
    _require(src.lower().endswith(FILE_FORMATS), key, src, f"a file ending in {', '.join(FILE_FORMATS)}")
    if src.startswith("s3://"):
        _require(len(src[5:].split("/", 1)) == 2, key, src, "s3://bucket/key")
    else:
        _require(Path(src).is_file(), key, src, "an existing file (no such file)")


@dataclass(kw_only=True)
class ModelConfig:
    name: str = field(
        default="transformer",
        metadata=_help("'transformer' (built-in encoder) or 'hf:<model>' (fine-tune; needs transformers)"),
    )
    dim: int = field(default=64, metadata=_help("embedding width of the built-in encoder"))
    layers: int = field(default=2, metadata=_help("encoder layers"))
    heads: int = field(default=4, metadata=_help("attention heads (must divide dim)"))
    ffn_dim: int = field(default=128, metadata=_help("feed-forward width"))
    dropout: float = field(
        default=0.0,
        metadata=_help("dropout probability (0: the synthetic corpus has no label noise to resist)"),
    )
    num_labels: int = field(default=2, metadata=_help("number of classes"))

    def __post_init__(self) -> None:
        if self.name.startswith("hf:"):
            _require(len(self.name) > 3, "model.name", self.name, "hf:<model name>")
            _require_package("transformers", "model.name", self.name, "transformers")
        else:
            _require(self.name == "transformer", "model.name", self.name, "'transformer' or 'hf:<model>'")
        for key in ("dim", "layers", "heads", "ffn_dim"):
            value = getattr(self, key)
            _require(value >= 1, f"model.{key}", value, ">= 1")
        _require(self.dim % self.heads == 0, "model.heads", self.heads, f"a divisor of model.dim={self.dim}")
        _require(0.0 <= self.dropout < 1.0, "model.dropout", self.dropout, "0 <= x < 1")
        _require(self.num_labels >= 2, "model.num_labels", self.num_labels, ">= 2")


PRECISIONS = {"auto", "fp32", "bf16", "fp16"}
# train.lr of an LLM job that does not set it: the classifier's 3e-3 (a model trained from scratch)
# overshoots a pretrained one. The usual peaks of LoRA (peft's examples; torchtune's LoRA recipes use 3e-4)
# and of full fine-tuning (torchtune's full recipes: 2e-5).
LLM_LR = {"lora": 2e-4, "full": 2e-5}


@dataclass(kw_only=True)
class TrainConfig:
    device: str = field(
        default="auto",
        metadata=_help(
            "'auto' (the GPUs when any are visible, else CPU: for local runs), 'cuda' (refuse to start "
            "without this rank's GPU, exit 201, retryable: what rendered GPU jobs use) or 'cpu'"
        ),
    )
    precision: str = field(
        default="auto",
        metadata=_help(
            "'auto' (by the GPU's architecture: bf16 on NVIDIA sm_80+ and AMD CDNA2/3, RDNA3; "
            "fp16+GradScaler on sm_70/sm_75 (V100, T4) and older AMD (V520); fp32 on CPU), "
            "'fp32', 'bf16' or 'fp16'"
        ),
    )
    parallelism: str = field(default="ddp", metadata=_help("'ddp' or 'fsdp' (shards params, for big models)"))
    batch_size: int = field(default=32, metadata=_help("micro-batch size per rank"))
    grad_accum_steps: int = field(default=1, metadata=_help("micro-batches per optimizer step"))
    max_steps: int = field(default=300, metadata=_help("optimizer steps in the whole run"))
    lr: float = field(
        default=3e-3,
        metadata=_help(
            f"peak learning rate (AdamW); unset with llm.model: {LLM_LR['lora']:g} for LoRA, "
            f"{LLM_LR['full']:g} for full fine-tuning"
        ),
    )
    weight_decay: float = field(default=0.01, metadata=_help("AdamW weight decay"))
    warmup_steps: int = field(
        default=-1,
        metadata=_help("linear warmup steps, then cosine decay; -1: a tenth of max_steps"),
    )
    min_lr_ratio: float = field(default=0.1, metadata=_help("final LR as a share of the peak"))
    grad_clip: float = field(default=1.0, metadata=_help("max gradient norm; 0 disables clipping"))
    grad_checkpointing: bool = field(default=False, metadata=_help("recompute activations in backward"))
    compile: bool = field(default=False, metadata=_help("torch.compile the model"))
    eval_every: int = field(default=50, metadata=_help("evaluate every N steps (and at the end)"))
    log_every: int = field(default=20, metadata=_help("progress line + metrics JSON line every N steps"))
    seed: int = field(default=0, metadata=_help("seed of model init, shuffling and dropout"))
    dist_timeout_s: int = field(
        default=600,
        metadata=_help(
            "timeout of collective operations, seconds (evaluation, checkpoints and start-up wait this long "
            "for a peer)"
        ),
    )
    step_timeout_s: int = field(
        default=120,
        metadata=_help(
            "a training step (forward, backward, optimizer step; not the first one, evaluations or "
            "checkpoints) that takes longer than this on any rank means a hung or lost peer: exit 202 "
            "(retryable); must exceed the slowest step"
        ),
    )
    max_bad_steps: int = field(
        default=5,
        metadata=_help(
            "optimizer steps in a row whose loss or gradient is not finite that are skipped (no weight "
            "update) before the run stops with exit 3 (diverged); 0: stop at the first. Under fp16 the "
            "GradScaler's own overflow skips do not count"
        ),
    )

    def __post_init__(self) -> None:
        _require(self.device in {"auto", "cpu", "cuda"}, "train.device", self.device, "auto | cpu | cuda")
        _require(
            self.precision in PRECISIONS, "train.precision", self.precision, " | ".join(sorted(PRECISIONS))
        )
        _require(self.parallelism in {"ddp", "fsdp"}, "train.parallelism", self.parallelism, "ddp | fsdp")
        for key in (
            "batch_size",
            "grad_accum_steps",
            "max_steps",
            "eval_every",
            "log_every",
            "dist_timeout_s",
            "step_timeout_s",
        ):
            value = getattr(self, key)
            _require(value >= 1, f"train.{key}", value, ">= 1")
        _require(self.lr > 0, "train.lr", self.lr, "> 0")
        _require(self.weight_decay >= 0, "train.weight_decay", self.weight_decay, ">= 0")
        if self.warmup_steps == -1:
            self.warmup_steps = self.max_steps // 10
        _require(
            0 <= self.warmup_steps < self.max_steps,
            "train.warmup_steps",
            self.warmup_steps,
            f"0 <= x < train.max_steps={self.max_steps}",
        )
        _require(0 <= self.min_lr_ratio <= 1, "train.min_lr_ratio", self.min_lr_ratio, "0 <= x <= 1")
        _require(self.grad_clip >= 0, "train.grad_clip", self.grad_clip, ">= 0")
        _require(self.max_bad_steps >= 0, "train.max_bad_steps", self.max_bad_steps, ">= 0")


# A checkpoint as `latest` names it: run-<id>/step-<9 digits>, or step-<9 digits> (older flat layout).
CHECKPOINT_NAME = re.compile(r"(run-[A-Za-z0-9_-]+/)?step-[0-9]{9}")


@dataclass(kw_only=True)
class CheckpointConfig:
    dir: str = field(
        default="runs/zimdb/checkpoints", metadata=_help("local directory or s3://bucket/prefix")
    )
    every_steps: int = field(default=100, metadata=_help("checkpoint every N steps (and at the end)"))
    keep: int = field(
        default=2, metadata=_help("complete checkpoints kept (>= 2, so one bad write is survivable)")
    )
    resume: bool = field(
        default=True,
        metadata=_help("resume the run `latest` names; false: a new run (other runs' checkpoints stay)"),
    )
    resume_from: str = field(
        default="",
        metadata=_help(
            "a checkpoint of checkpoint.dir to resume from instead, as `latest` names one "
            "(run-<id>/step-<N>, or its full location under checkpoint.dir): training goes on from it in "
            "a new run, which a restart resumes (not the chosen checkpoint again); empty: `latest`"
        ),
    )
    async_save: bool = field(
        default=True,
        metadata=_help(
            "write interval checkpoints in the background from a CPU copy of each rank's shard "
            "(the final and the SIGTERM ones are always written before going on)"
        ),
    )
    upload_retries: int = field(default=4, metadata=_help("attempts per S3 upload before giving up"))
    retry_backoff_s: float = field(default=1.0, metadata=_help("first retry delay; doubles per attempt"))

    def __post_init__(self) -> None:
        _require(bool(self.dir), "checkpoint.dir", self.dir, "a local directory or s3://bucket/prefix")
        _require_dir_uri(self.dir, "checkpoint.dir")
        _require(self.every_steps >= 1, "checkpoint.every_steps", self.every_steps, ">= 1")
        _require(self.keep >= 2, "checkpoint.keep", self.keep, ">= 2")
        _require(self.upload_retries >= 1, "checkpoint.upload_retries", self.upload_retries, ">= 1")
        _require(self.retry_backoff_s >= 0, "checkpoint.retry_backoff_s", self.retry_backoff_s, ">= 0")
        if self.resume_from:
            _require(self.resume, "checkpoint.resume", self.resume, "true when checkpoint.resume_from is set")
            self.resume_from = self.resume_from.removeprefix(self.dir.rstrip("/") + "/")
            _require(
                bool(CHECKPOINT_NAME.fullmatch(self.resume_from)), "checkpoint.resume_from", self.resume_from,
                f"run-<id>/step-<N> (as {self.dir.rstrip('/')}/latest names a checkpoint) or its location "
                "under checkpoint.dir",
            )  # fmt: skip


@dataclass(kw_only=True)
class OutputConfig:
    dir: str = field(
        default="runs/zimdb", metadata=_help("final model, summary.json, metrics.jsonl: local or s3://")
    )
    tensorboard: bool = field(
        default=False, metadata=_help("also write TensorBoard events (needs tensorboard)")
    )
    metrics_port: int = field(
        default=9464,
        metadata=_help(
            "Prometheus /metrics port, served by local rank 0 of each node for all its ranks; 0: none "
            "(workload stacks expose this port as `metrics` for the platform's PodMonitor)"
        ),
    )

    def __post_init__(self) -> None:
        _require(bool(self.dir), "output.dir", self.dir, "a local directory or s3://bucket/prefix")
        _require_dir_uri(self.dir, "output.dir")
        if self.tensorboard:
            _require_package("tensorboard", "output.tensorboard", True, "tensorboard")
        # prometheus-client is a dependency of the train extra, like torch: no package check here (the
        # workload stack validates this config where only the infra extra may be installed).
        _require(0 <= self.metrics_port <= 65535, "output.metrics_port", self.metrics_port, "0..65535")


# Pseudo-filesystems of the kernel: nothing can create a directory there.
_PSEUDO = ("/proc", "/sys", "/dev")


def _require_dir_uri(uri: str, key: str) -> None:
    if uri.startswith("s3://"):
        _require(bool(uri[5:].split("/", 1)[0]), key, uri, "s3://bucket[/prefix]")
        return
    _require(not _OTHER_SCHEME.match(uri), key, uri, "s3://bucket/prefix or a local directory (no other URL)")
    _require_creatable(uri, key)


def _require_creatable(path: str, key: str) -> None:
    """A local directory the trainer can create (or use): found at start, not at the first checkpoint."""
    target = Path(path).absolute()
    _require(
        not any(target == Path(p) or Path(p) in target.parents for p in _PSEUDO), key, path,
        f"a directory on a real filesystem (not under {', '.join(_PSEUDO)})",
    )  # fmt: skip
    existing = next(p for p in (target, *target.parents) if p.exists())
    if existing == target:
        _require(target.is_dir(), key, path, "a directory (this is a file)")
    else:
        _require(existing.is_dir(), key, path, f"a path whose parents are directories ({existing} is a file)")
    _require(
        os.access(existing, os.W_OK | os.X_OK), key, path,
        f"a directory this user (uid {os.getuid()}) can write ({existing} is not writable)",
    )  # fmt: skip


# Where an MLflow client can send a run: a tracking server (http/https), a local file store (file:), or a
# Databricks workspace. A SQL URI (sqlite:, postgresql:) is a server's backend, not the client's:
# mlflow-skinny has no SQL store.
MLFLOW_SCHEMES = ("http", "https", "file", "databricks")


@dataclass(kw_only=True)
class MlflowConfig:
    tracking_uri: str = field(
        default="",
        metadata=_help(
            "send params, metrics and the summary to MLflow (rank 0; needs the 'mlflow' extra): "
            "http(s)://host[:port] (a tracking server), file:/path (a local file store) or databricks; "
            "credentials come from MLFLOW_TRACKING_TOKEN or MLFLOW_TRACKING_USERNAME/_PASSWORD, never the "
            "URI; empty: no MLflow"
        ),
    )
    experiment: str = field(default="Default", metadata=_help("experiment name (created if missing)"))
    run_name: str = field(
        default="",
        metadata=_help("the MLflow run's name; empty: the checkpoint run's id (run-<time>-<hex>)"),
    )
    retry_backoff_s: float = field(
        default=2.0,
        metadata=_help(
            "first delay before sending again to a server that failed; doubles per failure, up to 60 s "
            "(training never waits for the server)"
        ),
    )
    flush_timeout_s: float = field(
        default=60.0,
        metadata=_help(
            "at the end of the run, how long to wait for the values still queued (on SIGTERM: 5 s at most); "
            "what is left is counted in summary.json"
        ),
    )

    def __post_init__(self) -> None:
        _require(bool(self.experiment.strip()), "mlflow.experiment", self.experiment, "a non-empty name")
        _require(self.retry_backoff_s >= 0, "mlflow.retry_backoff_s", self.retry_backoff_s, ">= 0")
        _require(self.flush_timeout_s >= 0, "mlflow.flush_timeout_s", self.flush_timeout_s, ">= 0")
        if not self.tracking_uri:
            return
        uri = urllib.parse.urlsplit(self.tracking_uri)
        allowed = "http(s)://host[:port][/path], file:/path (a local file store) or databricks[://profile]"
        if not uri.scheme and self.tracking_uri.startswith(("/", ".")):
            allowed += f" (for this directory: file:{Path(self.tracking_uri).absolute()})"
        scheme = "databricks" if self.tracking_uri == "databricks" else uri.scheme
        _require(scheme in MLFLOW_SCHEMES, "mlflow.tracking_uri", self.tracking_uri, allowed)
        if uri.scheme in ("http", "https"):
            _require(bool(uri.hostname), "mlflow.tracking_uri", self.tracking_uri, allowed)
        # The URI lands in the job's ConfigMap, the logs and summary.json: a password in it would too (and
        # in this message: it shows the URI without it).
        shown = self.tracking_uri.replace(f":{uri.password}@", ":***@") if uri.password else self.tracking_uri
        _require(
            uri.username is None and uri.password is None, "mlflow.tracking_uri", shown,
            "a URI without user:password@ (set MLFLOW_TRACKING_USERNAME/_PASSWORD or MLFLOW_TRACKING_TOKEN; "
            "a workload stack: the job's mlflow.auth and the secret config mlflowCredential)",
        )  # fmt: skip
        if uri.scheme == "file":
            _require(bool(uri.path), "mlflow.tracking_uri", self.tracking_uri, "file:/path/to/store")
            _require_creatable(uri.path, "mlflow.tracking_uri")


LLM_METHODS = {"lora", "full"}
LLM_EXPORTS = {"adapter", "merged"}
# Module names LoRA may target: "all-linear" (peft: every linear layer but the output head) or a
# comma-separated list of module name suffixes such as q_proj,v_proj.
_MODULE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.]*$")
_JINJA = re.compile(r"\{[{%]")  # a template has a Jinja expression or statement; a file name has none


@dataclass(kw_only=True)
class LlmConfig:
    model: str = field(
        default="",
        metadata=_help(
            "causal-LM fine-tuning (trainer/llm; needs the 'llm' extra): 'tiny' (a small model built "
            "offline from a config, random weights: local runs and tests), 'hf:<repo>' (the Hub, e.g. "
            "hf:Qwen/Qwen2.5-0.5B-Instruct), a local directory or s3://bucket/prefix holding a "
            "save_pretrained model; empty: the text classifier of the model section"
        ),
    )
    model_cache: str = field(
        default="",
        metadata=_help(
            "where an hf: model is staged once (s3://bucket/prefix or a local directory): the first run "
            "downloads it from the Hub and writes it here, restarts and later runs read it from here"
        ),
    )
    method: str = field(default="lora", metadata=_help("'lora' (adapters only) or 'full' fine-tuning"))
    lora_rank: int = field(default=8, metadata=_help("LoRA rank r"))
    lora_alpha: int = field(default=16, metadata=_help("LoRA alpha (the update is scaled by alpha/r)"))
    lora_dropout: float = field(default=0.05, metadata=_help("dropout on the LoRA input"))
    lora_targets: str = field(
        default="all-linear",
        metadata=_help("'all-linear' or module names, comma-separated (e.g. q_proj,k_proj,v_proj,o_proj)"),
    )
    seq_len: int = field(default=512, metadata=_help("tokens per training sequence"))
    packing: bool = field(
        default=True,
        metadata=_help(
            "whole conversations into seq_len sequences, best fit, each attending only to itself; "
            "false: one per row"
        ),
    )
    chat_template: str = field(
        default="",
        metadata=_help(
            "a Jinja chat template, or a file holding one, that replaces the tokenizer's (a base model "
            "without one, or another format); empty: the model's own"
        ),
    )
    export: str = field(
        default="adapter",
        metadata=_help(
            "what a LoRA run writes: 'adapter' (adapter/, loaded onto the base with peft) or 'merged' "
            "(model/, the base with the adapter merged in: a plain transformers model)"
        ),
    )

    def __post_init__(self) -> None:
        if not self.model:
            return
        allowed = "'tiny', hf:<repo>, a local directory or s3://bucket/prefix"
        if self.model.startswith("hf:"):
            _require(len(self.model) > 3, "llm.model", self.model, "hf:<repo>, e.g. hf:Qwen/Qwen2.5-0.5B")
        elif self.model.startswith("s3://"):
            _require(bool(self.model[5:].split("/", 1)[0]), "llm.model", self.model, "s3://bucket/prefix")
        elif self.model != "tiny":
            _require(not _OTHER_SCHEME.match(self.model), "llm.model", self.model, allowed)
            _require(Path(self.model).is_dir(), "llm.model", self.model, f"{allowed} (no such directory)")
        if self.model_cache:
            _require(self.model.startswith("hf:"), "llm.model_cache", self.model_cache,
                     f"empty unless llm.model is hf:<repo> (got llm.model={self.model!r})")  # fmt: skip
            _require_dir_uri(self.model_cache, "llm.model_cache")
        _require(self.method in LLM_METHODS, "llm.method", self.method, " | ".join(sorted(LLM_METHODS)))
        _require(self.lora_rank >= 1, "llm.lora_rank", self.lora_rank, ">= 1")
        _require(self.lora_alpha > 0, "llm.lora_alpha", self.lora_alpha, "> 0")
        _require(0 <= self.lora_dropout < 1, "llm.lora_dropout", self.lora_dropout, "0 <= x < 1")
        targets = self.target_modules
        _require(
            targets == "all-linear" or (bool(targets) and all(_MODULE_NAME.match(t) for t in targets)),
            "llm.lora_targets", self.lora_targets, "'all-linear' or module names, comma-separated",
        )  # fmt: skip
        _require(self.seq_len >= 8, "llm.seq_len", self.seq_len, ">= 8")
        _require(self.export in LLM_EXPORTS, "llm.export", self.export, " | ".join(sorted(LLM_EXPORTS)))
        _require(
            self.export == "adapter" or self.method == "lora", "llm.export", self.export,
            "'adapter' (the default) with llm.method=full: full fine-tuning exports the whole model already",
        )  # fmt: skip
        if self.chat_template and not _JINJA.search(self.chat_template):
            _require(
                Path(self.chat_template).is_file(), "llm.chat_template", self.chat_template,
                "a Jinja template ({% for message in messages %}...) or a file holding one (no such file)",
            )  # fmt: skip

    @property
    def chat_template_text(self) -> str:
        """The template itself: the value, or the file it names."""
        if not self.chat_template or _JINJA.search(self.chat_template):
            return self.chat_template
        return Path(self.chat_template).read_text()

    @property
    def target_modules(self) -> str | list[str]:
        if self.lora_targets.strip() == "all-linear":
            return "all-linear"
        return [t.strip() for t in self.lora_targets.split(",") if t.strip()]


@dataclass(kw_only=True)
class JobConfig:
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    output: OutputConfig = field(default_factory=OutputConfig)
    llm: LlmConfig = field(default_factory=LlmConfig)
    mlflow: MlflowConfig = field(default_factory=MlflowConfig)

    def __post_init__(self) -> None:
        if self.llm.model:  # the causal-LM task reads chat or instruction records (trainer/llm/data.py)
            _require(
                self.data.source.lower().endswith((".jsonl", ".json")), "data.source", self.data.source,
                f"a .jsonl or .json file of chat or instruction records when llm.model is set "
                f"(llm.model={self.llm.model!r})",
            )  # fmt: skip

    def to_dict(self) -> dict[str, dict[str, Any]]:
        return dataclasses.asdict(self)


SECTIONS: dict[str, type] = {f.name: f.default_factory for f in dataclasses.fields(JobConfig)}  # type: ignore[misc]


def _coerce(key: str, raw: Any, kind: type) -> Any:
    """Convert a file or CLI value to the field's type; a wrong type is a ConfigError naming the key."""
    if kind is bool:
        if isinstance(raw, bool):
            return raw
        if isinstance(raw, str) and raw.lower() in {"true", "false"}:
            return raw.lower() == "true"
        raise ConfigError(f"{key}={raw!r} is invalid: allowed true | false")
    if kind in (int, float):
        if isinstance(raw, bool):
            raise ConfigError(f"{key}={raw!r} is invalid: allowed a number")
        try:
            value = kind(raw)
        except (TypeError, ValueError):
            raise ConfigError(
                f"{key}={raw!r} is invalid: allowed {'an integer' if kind is int else 'a number'}"
            ) from None
        if kind is int and isinstance(raw, float) and raw != value:
            raise ConfigError(f"{key}={raw!r} is invalid: allowed an integer")
        return value
    if not isinstance(raw, str):
        quoted = " (quote it in YAML: an unquoted number is not text)" if isinstance(raw, int | float) else ""
        raise ConfigError(f"{key}={raw!r} is invalid: allowed a string{quoted}")
    return raw


def _field_types(section_cls: type) -> dict[str, type]:
    kinds = {"str": str, "int": int, "float": float, "bool": bool}
    return {f.name: kinds[str(f.type)] for f in dataclasses.fields(section_cls)}


def _unknown_key(section: str, key: str, types: dict[str, type]) -> str:
    """The one message for a key the section does not have, from a flag or from a file."""
    close = difflib.get_close_matches(key, list(types), n=1, cutoff=0.6)
    hint = f" (did you mean {section}.{close[0]}?)" if close else ""
    return f"unknown key {section}.{key}{hint}: allowed {', '.join(sorted(types))}"


# What only the text classifier reads: set under an LLM run, it would be ignored without a word.
CLASSIFIER_ONLY = {"model": None, "data": ("tokenizer", "vocab_size")}


def _refuse_classifier_keys(values: dict[str, Any], llm_model: str) -> None:
    for section, keys in CLASSIFIER_ONLY.items():
        for key, value in values.get(section, {}).items():
            if keys is None or key in keys:
                raise ConfigError(
                    f"{section}.{key}={value!r} is invalid: allowed unset when llm.model is set "
                    f"(llm.model={llm_model!r} is the model and brings its own tokenizer; {section}.{key} "
                    "configures the text classifier only)"
                )


def build(values: dict[str, Any]) -> JobConfig:
    """Build a JobConfig from {section: {field: value}}; unknown sections/fields are errors."""
    if not isinstance(values, dict):
        raise ConfigError(f"config must be a mapping of sections, got {type(values).__name__}")
    sections = {}
    for name, raw in values.items():
        if name not in SECTIONS:
            raise ConfigError(f"unknown config section {name!r}: allowed {', '.join(SECTIONS)}")
        if not isinstance(raw, dict):
            raise ConfigError(f"config section {name!r} must be a mapping, got {raw!r}")
        types = _field_types(SECTIONS[name])
        for key in raw:
            if key not in types:
                raise ConfigError(_unknown_key(name, str(key), types))
    llm = {
        k: _coerce(f"llm.{k}", v, str) for k, v in values.get("llm", {}).items() if k in ("model", "method")
    }
    if llm.get("model"):
        _refuse_classifier_keys(values, llm["model"])
    for name, cls in SECTIONS.items():
        types = _field_types(cls)
        kwargs = {k: _coerce(f"{name}.{k}", v, types[k]) for k, v in values.get(name, {}).items()}
        if name == "train" and "lr" not in kwargs and llm.get("model"):
            method = llm.get("method", "lora")  # a method that is not allowed: LlmConfig refuses it
            kwargs["lr"] = LLM_LR.get(method, LLM_LR["lora"])
        try:
            inspect.signature(cls).bind(**kwargs)
        except TypeError as err:  # arguments that do not fit; a TypeError of __post_init__ is a bug
            raise ConfigError(f"config section {name!r}: {err}") from None
        sections[name] = cls(**kwargs)
    return JobConfig(**sections)


def load_file(path: str) -> dict[str, Any]:
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"--config {path!r}: no such file")
    if p.suffix not in {".yaml", ".yml", ".json"}:
        raise ConfigError(f"--config {path!r}: allowed a .yaml, .yml or .json file")
    try:
        data = json.loads(p.read_text()) if p.suffix == ".json" else yaml.safe_load(p.read_text())
    except (json.JSONDecodeError, yaml.YAMLError) as err:
        raise ConfigError(f"--config {path!r} is not valid {p.suffix[1:].upper()}: {err}") from None
    return data or {}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m trainer",
        # A flag is matched whole: a prefix such as --train.step must not set train.step_timeout_s.
        allow_abbrev=False,
        description="Distributed PyTorch training: a text classifier (the zIMDB job; a built-in "
        "transformer or an hf: model) or, with llm.model set, LLM fine-tuning (full or LoRA) on chat or "
        "instruction records. Run under torchrun, or `python -m trainer.launch` "
        "to get exit code 143 on SIGTERM. With no arguments: the zIMDB job on synthetic data. "
        "Exit codes: 0 done, 2 invalid config or data, 3 diverged (non-finite loss), 143 stopped by "
        "SIGTERM after a checkpoint, "
        "200 storage unavailable, 201 no GPU for train.device cuda, 202 peer rank lost or hung "
        "(128+: retryable; the table is in trainer/faults.py).",
    )
    p.add_argument("--config", help="YAML or JSON file of {section: {field: value}}; flags override it")
    for name, cls in SECTIONS.items():
        group = p.add_argument_group(name)
        for f in dataclasses.fields(cls):
            group.add_argument(
                f"--{name}.{f.name}",
                dest=f"{name}.{f.name}",
                metavar=str(f.type).upper(),
                default=argparse.SUPPRESS,
                help=f"{f.metadata['help']} (default: {f.default!r})",
            )
    return p


def _refuse_unknown_flags(unknown: list[str]) -> None:
    """An unknown --section.key flag gets the message the same key gets in a --config file."""
    for arg in unknown:
        flag = arg.split("=", 1)[0]
        section, dot, key = flag.removeprefix("--").partition(".")
        if flag.startswith("--") and dot and section in SECTIONS:
            raise ConfigError(_unknown_key(section, key, _field_types(SECTIONS[section])))
        raise ConfigError(
            f"unknown argument {arg!r}: allowed --config FILE and --<section>.<field> VALUE with sections "
            f"{', '.join(SECTIONS)} (see --help)"
        )


def from_args(argv: list[str] | None = None) -> JobConfig:
    """Parse CLI arguments into a JobConfig. argparse exits 2 on unknown flags, as ConfigError does."""
    namespace, unknown = parser().parse_known_args(argv)
    _refuse_unknown_flags(unknown)
    args = vars(namespace)
    values: dict[str, Any] = load_file(args.pop("config")) if args.get("config") else {}
    args.pop("config", None)
    if not isinstance(values, dict):
        raise ConfigError(
            f"--config must hold a mapping of sections, got {type(values).__name__}; allowed: "
            f"{{section: {{field: value}}}} with sections {', '.join(SECTIONS)}"
        )
    for dotted, raw in args.items():
        section, key = dotted.split(".", 1)
        values.setdefault(section, {})
        if not isinstance(values[section], dict):
            raise ConfigError(f"config section {section!r} must be a mapping, got {values[section]!r}")
        values[section][key] = raw
    return build(values)
