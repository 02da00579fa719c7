"""What a run trains, behind one interface the loop uses: the text classifier (built in) or the causal LM
(`llm.model` set; trainer/llm/task.py).

A task's loss returns (sum over the batch's units, their count): examples for the classifier, labelled
tokens for the LM. The loop divides the sum by the count over the whole global batch (every micro-batch
of the step on every rank), so a step's gradient does not depend on how the batch is split between
micro-batches and ranks. The classifier's micro-batches all hold `train.batch_size` examples, so its
count is known without asking the other ranks (`count` is None): a per-example mean, as before.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from trainer import data, precision, token_store
from trainer.config import JobConfig
from trainer.dist import DistEnv, all_reduce_max, broadcast_object, sum_over_ranks
from trainer.llm import task as llm_task
from trainer.metrics import Metrics
from trainer.model import build_model

Batch = dict[str, torch.Tensor]


@dataclass
class Task:
    model: nn.Module  # on the device, not wrapped yet
    loader: Any  # training batches of this rank (data.ResumableSampler)
    val: Any  # validation batches of this rank
    spec: str  # what checkpoints record as the tokenizer (the classifier's spec; the LM's model)
    seq_len: int  # tokens per sequence, for MFU
    loss: Callable[[nn.Module, Batch], tuple[torch.Tensor, torch.Tensor | int]]  # (sum, count)
    count: Callable[[Batch], torch.Tensor] | None  # a batch's units before its forward; None: examples
    evaluate: Callable[[nn.Module, Any, DistEnv, torch.dtype | None], dict[str, float]]
    tokenizer: Any = None  # the LM's, saved with its export
    # After the model is wrapped: FSDP from a model directory reads each rank's shard (trainer/llm/load.py)
    load_weights: Callable[[nn.Module], None] = lambda model: None


def prepare(
    cfg: JobConfig,
    env: DistEnv,
    *,
    workdir: Path,
    launch: str,
    resumed_tokenizer: str | None,
    load_dtype: torch.dtype,
    metrics: Metrics,
    stop_requested: Callable[[], bool],
    s3_client: Any = None,
) -> Task:
    """Every rank: the task's data, model (identical initial weights on every rank) and loss."""
    if cfg.llm.model:
        llm = llm_task.prepare(
            cfg, env, workdir, launch, load_dtype=load_dtype, say=metrics.say, s3_client=s3_client
        )
        metrics.say(
            f"data {cfg.data.source}: {llm.train_sequences} train / {llm.val_sequences} val sequences of "
            f"<= {cfg.llm.seq_len} tokens ({'packed' if cfg.llm.packing else 'one example each'})"
        )
        return Task(
            llm.model, llm.loader, llm.val, cfg.llm.model, cfg.llm.seq_len,
            loss=llm_task.loss, count=llm_task.labelled_tokens, evaluate=llm_task.evaluate,
            tokenizer=llm.tokenizer, load_weights=llm.load_weights,
        )  # fmt: skip
    spec, encoder, loader, val = prepare_classifier_data(
        cfg, env, workdir, launch, resumed_tokenizer, metrics, stop_requested
    )
    torch.manual_seed(cfg.train.seed)  # identical initial weights on every rank
    seq_len = -(-cfg.data.max_len // cfg.data.pad_to_multiple) * cfg.data.pad_to_multiple
    model = build_model(
        cfg.model,
        vocab_size=encoder.vocab_size,
        max_positions=seq_len,
        grad_checkpointing=cfg.train.grad_checkpointing,
    ).to(env.device)
    return Task(model, loader, val, spec, seq_len, loss=classifier_loss, count=None, evaluate=evaluate)


def prepare_classifier_data(
    cfg: JobConfig,
    env: DistEnv,
    workdir: Path,
    launch: str,
    tokenizer_spec: str | None,
    metrics: Metrics,
    stop_requested: Callable[[], bool],
):
    """(tokenizer spec, encoder, train loader, validation loader)."""
    # Tokenized once per node by local rank 0 and memory-mapped by the others (trainer.token_store).
    prepared = token_store.prepare(
        cfg.data,
        num_labels=cfg.model.num_labels,
        model_name=cfg.model.name,
        tokenizer_spec=tokenizer_spec,
        workdir=workdir,
        shared=token_store.node_scratch_dir("data", launch),
        local_rank=env.local_rank,
        on_built=lambda s: metrics.say(f"data tokenized in {s:.1f} s, shared with this node's ranks"),
        stop_requested=stop_requested,
    )
    if broadcast_object(env, prepared.fingerprint) != prepared.fingerprint:
        raise data.DataError("the nodes tokenized the data differently (same config, different token ids)")
    encoder, train_ds, val_ds = prepared.encoder, prepared.train, prepared.val
    shard = {"rank": env.rank, "world": env.world_size, "pad_id": encoder.pad_id}
    loader = data.train_loader(
        train_ds,
        cfg.data,
        batch_size=cfg.train.batch_size,
        seed=cfg.train.seed,
        pin_memory=env.device.type == "cuda",
        **shard,
    )
    val = data.val_loader(val_ds, cfg.data, batch_size=cfg.train.batch_size * 2, **shard)
    metrics.say(
        f"data {cfg.data.source}: {len(train_ds)} train / {len(val_ds)} val examples, "
        f"vocab {encoder.vocab_size}"
    )
    return prepared.spec, encoder, loader, val


def classifier_loss(model: nn.Module, batch: Batch) -> tuple[torch.Tensor, int]:
    """(sum of the examples' cross-entropy, the number of examples)."""
    logits = model(batch["input_ids"], batch["attention_mask"])
    labels = batch["labels"]
    return nn.functional.cross_entropy(logits.float(), labels, reduction="sum"), len(labels)


def _filler_batch() -> Batch:
    """One one-token padding example, for a rank that has no validation batch of its own."""
    return {
        "input_ids": torch.zeros(1, 1, dtype=torch.long),
        "attention_mask": torch.ones(1, 1, dtype=torch.bool),
        "labels": torch.zeros(1, dtype=torch.long),
    }


@torch.no_grad()
def evaluate(model: nn.Module, loader, env: DistEnv, dtype: torch.dtype | None) -> dict[str, float]:
    """Accuracy and loss over every rank's validation shard; the sums stay on the device and are read
    once, at the end (a read per batch would make the host wait for the device at every batch).

    Every rank runs the same number of forward passes: under FSDP each one all-gathers parameters, so a
    rank with fewer batches than its peers would leave them waiting in that collective until the timeout.
    A rank out of batches repeats its last one (or a padding example) and counts nothing for it."""
    model.eval()
    sums = torch.zeros(3, dtype=torch.float64, device=env.device)  # correct, examples, loss
    rounds = all_reduce_max(env, len(loader))
    batches = iter(loader)
    filler = None
    for _ in range(rounds):
        batch = next(batches, None)
        counted = batch is not None
        batch = batch if batch is not None else filler or _filler_batch()
        filler = batch
        batch = {k: v.to(env.device, non_blocking=True) for k, v in batch.items()}
        with precision.autocast(env.device, dtype):
            logits = model(batch["input_ids"], batch["attention_mask"])
        if counted:
            labels = batch["labels"]
            sums[0] += (logits.argmax(-1) == labels).sum()
            sums[1] += len(labels)
            sums[2] += nn.functional.cross_entropy(logits.float(), labels, reduction="sum")
    correct, total, loss_sum = sum_over_ranks(env, sums)
    model.train()
    return {"val_accuracy": correct / total, "val_loss": loss_sum / total}
