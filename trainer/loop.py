"""The training run, top to bottom: set up, resume, train with periodic eval and checkpoints, write outputs.

`run(cfg)` returns the process exit code: 0 when done, 143 when stopped by SIGTERM after a checkpoint
(the table of exit codes is in trainer/faults.py).

A training step never waits for the host to read a device value: the loss and token counts add up on
the device and are read at progress lines, the stop vote runs on the CPU without waiting
(dist.StopFlag), and a step with non-finite gradients is skipped on the device (guards.NonFiniteGuard).
On a GPU the CPU can then queue the next step's kernels while the current one runs.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any, cast

import torch
from torch import nn
from torch.distributed.fsdp import FSDPModule, fully_shard
from torch.nn.parallel import DistributedDataParallel

from trainer import checkpoint, data, faults, mfu, precision, token_store
from trainer.config import ConfigError, JobConfig, TrainConfig
from trainer.dist import (
    DistEnv,
    StopFlag,
    all_reduce_max,
    all_reduce_sum,
    barrier,
    broadcast_object,
    gather_objects,
    launch_id,
    setup,
    teardown,
)
from trainer.guards import NonFiniteGuard, StepWatchdog, fused_kernel
from trainer.llm import task as llm_task
from trainer.metrics import Exporter, Metrics
from trainer.model import attention_shape, build_model, transformer_blocks
from trainer.shards import is_disk_full
from trainer.storage import LocalStorage, Storage, open_storage

RUN_SCRATCH = "trainer-run"  # $TMPDIR/trainer-run-<random>: one per process and run


def _autocast(device: torch.device, dtype: torch.dtype | None) -> contextlib.AbstractContextManager:
    # No autocast context at all for fp32: entering a disabled one still costs a little every step.
    return torch.autocast(device.type, dtype=dtype) if dtype is not None else contextlib.nullcontext()


def _lr_lambda(cfg: TrainConfig):
    def factor(step: int) -> float:
        if step < cfg.warmup_steps:
            return (step + 1) / cfg.warmup_steps
        progress = (step - cfg.warmup_steps) / max(1, cfg.max_steps - cfg.warmup_steps)
        return cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))

    return factor


def _micro_batches(loader, epoch: int, done: int) -> Iterator[tuple[int, int, dict[str, torch.Tensor]]]:
    """Endless batches as (epoch, samples of that epoch all ranks have trained on after it, batch); starts
    `done` samples into the epoch after a resume, at any world size (data.ResumableSampler)."""
    sampler = loader.sampler
    while True:
        sampler.set_epoch(epoch)
        sampler.start = done
        with data.sigterm_held():  # the DataLoader's workers start here
            batches = iter(loader)
        for batch in batches:
            done += loader.batch_size * sampler.num_replicas
            yield epoch, done, batch
        epoch, done = epoch + 1, 0


def _samples_done(state: dict[str, Any]) -> int:
    """The epoch's samples a checkpoint's run trained on; checkpoints of older trainers count batches per
    rank (`position`) instead, at their own batch size and world size."""
    if "samples" in state:
        return int(state["samples"])
    return int(state["position"]) * state["config"]["train"]["batch_size"] * state["world_size"]


def _compile_blocks(model: nn.Module) -> list[nn.Module]:
    """Replace each transformer block by its torch.compile wrapper; returns the wrappers.

    Under FSDP torchtitan compiles each block before sharding it (llama3/infra/parallelize.py
    `apply_compile`, v0.2.2), and FSDP shards the compiled wrapper: its hooks stay outside the compiled
    code. A model compiled as a whole (or a block compiled in place) before fully_shard runs its FSDP
    hooks inside the compiled frame, where dynamo gives up and falls back to eager: nothing was
    compiled. State-dict keys stay the same (torch.distributed.checkpoint drops the wrapper's
    `_orig_mod.`)."""
    blocks = {id(b) for b in transformer_blocks(model)}
    compiled = []
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if id(child) in blocks:
                wrapper = cast(nn.Module, torch.compile(child))
                parent.register_module(name, wrapper)
                compiled.append(wrapper)
    return compiled


def _wrap(model: nn.Module, cfg: TrainConfig, env: DistEnv, prec: precision.Precision) -> nn.Module:
    fsdp = env.distributed and cfg.parallelism == "fsdp"
    if cfg.compile and not fsdp:
        model.compile()  # in place: state-dict keys stay the same
    if not env.distributed:
        return model
    if fsdp:
        # One FSDP unit per transformer block, innermost first: only one block's full parameters exist
        # at a time (the memory saving); the root unit keeps the embeddings and the head.
        policy = precision.fsdp_policy(prec)
        blocks = _compile_blocks(model) if cfg.compile else transformer_blocks(model)
        for block in reversed(blocks):
            fully_shard(block, mp_policy=policy)
        return cast(nn.Module, fully_shard(model, mp_policy=policy))
    return DistributedDataParallel(
        model, device_ids=[env.device.index] if env.device.type == "cuda" else None
    )


def _sync_context(model: nn.Module, sync: bool):
    """Skip the gradient all-reduce on all but the last micro-batch of an accumulation."""
    if isinstance(model, DistributedDataParallel) and not sync:
        return model.no_sync()
    if isinstance(model, FSDPModule):
        model.set_requires_gradient_sync(sync)
    return contextlib.nullcontext()


def _classifier_loss(model: nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    logits = model(batch["input_ids"], batch["attention_mask"])
    return nn.functional.cross_entropy(logits.float(), batch["labels"])


def _filler_batch() -> dict[str, torch.Tensor]:
    """One one-token padding example, for a rank that has no validation batch of its own."""
    return {
        "input_ids": torch.zeros(1, 1, dtype=torch.long),
        "attention_mask": torch.ones(1, 1, dtype=torch.bool),
        "labels": torch.zeros(1, dtype=torch.long),
    }


@torch.no_grad()
def evaluate(model: nn.Module, loader, env: DistEnv, dtype: torch.dtype | None) -> dict[str, float]:
    """Accuracy and loss over every rank's validation shard.

    Every rank runs the same number of forward passes: under FSDP each one all-gathers parameters, so a
    rank with fewer batches than its peers would leave them waiting in that collective until the timeout.
    A rank out of batches repeats its last one (or a padding example) and counts nothing for it."""
    model.eval()
    correct = total = loss_sum = 0.0
    rounds = all_reduce_max(env, len(loader))
    batches = iter(loader)
    filler = None
    for _ in range(rounds):
        batch = next(batches, None)
        counted = batch is not None
        batch = batch if batch is not None else filler or _filler_batch()
        filler = batch
        batch = {k: v.to(env.device, non_blocking=True) for k, v in batch.items()}
        with _autocast(env.device, dtype):
            logits = model(batch["input_ids"], batch["attention_mask"])
        if counted:
            loss_sum += nn.functional.cross_entropy(logits.float(), batch["labels"], reduction="sum").item()
            correct += (logits.argmax(-1) == batch["labels"]).sum().item()
            total += len(batch["labels"])
    correct, total, loss_sum = all_reduce_sum(env, [correct, total, loss_sum])
    model.train()
    return {"val_accuracy": correct / total, "val_loss": loss_sum / total}


def run(cfg: JobConfig, *, s3_client: Any = None) -> int:
    started = time.time()
    if cfg.llm.model:
        llm_task.require_packages(cfg.llm)  # exit 2 naming the extra, before any process group exists
    # Installed first: a SIGTERM during set-up is honoured at the first step boundary.
    stop = StopFlag(timeout_s=cfg.train.dist_timeout_s)
    env = setup(cfg.train)
    try:
        return _train(cfg, env, stop, started, s3_client)
    finally:
        teardown()


class _Window:
    """Loss, tokens and time since the last progress line; eval and checkpoint time is left out."""

    def __init__(self) -> None:
        self.start, self.steps = time.perf_counter(), 0
        self.loss: torch.Tensor | float = 0.0  # summed on the device: read at the progress line only
        self.tokens: torch.Tensor | float = 0.0
        self.total_steps, self.total_s = 0, 0.0

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.start += time.perf_counter() - t0

    def close(self, env: DistEnv) -> tuple[float, float, float, int]:
        """(mean loss over ranks, global tokens, seconds, steps) of the window; starts the next one."""
        loss_sum, tokens = all_reduce_sum(env, [float(self.loss), float(self.tokens)])
        elapsed = time.perf_counter() - self.start
        steps, loss = self.steps, loss_sum / (self.steps * env.world_size)
        self.total_steps, self.total_s = self.total_steps + steps, self.total_s + elapsed
        self.start, self.loss, self.tokens, self.steps = time.perf_counter(), 0.0, 0.0, 0
        return loss, tokens, elapsed, steps


def _open_sinks(cfg: JobConfig, env: DistEnv, workdir: Path, launch: str, s3_client: Any):
    """(output storage, its local staging dir, metrics, checkpoint manager)."""

    def storage(uri: str) -> Storage:
        return open_storage(
            uri,
            client=s3_client,
            retries=cfg.checkpoint.upload_retries,
            backoff_s=cfg.checkpoint.retry_backoff_s,
        )

    output = storage(cfg.output.dir)
    local_out = output.root if isinstance(output, LocalStorage) else workdir / "output"
    if env.is_main and not isinstance(output, LocalStorage):  # a restarted pod continues the metrics history
        local_out.mkdir(parents=True)
        (local_out / "metrics.jsonl").write_bytes(output.get_bytes("metrics.jsonl") or b"")
    port = cfg.output.metrics_port  # one endpoint per node, served by local rank 0 for all its ranks
    shared = token_store.node_scratch_dir("metrics", launch)
    metrics = Metrics(
        local_out / "metrics.jsonl",
        enabled=env.is_main,
        tensorboard_dir=local_out / "tensorboard" if cfg.output.tensorboard else None,
        total_steps=cfg.train.max_steps,
        exporter=Exporter(shared, local_rank=env.local_rank, rank=env.rank, port=port) if port else None,
    )
    store = storage(cfg.checkpoint.dir)
    ckpt = checkpoint.CheckpointManager(
        store, keep=cfg.checkpoint.keep, workdir=workdir, timeout_s=cfg.train.dist_timeout_s
    )
    ckpt.check_writable()  # exit 2 now, not a traceback at the first checkpoint interval
    return output, local_out, metrics, ckpt


def _resume_state(cfg: JobConfig, env: DistEnv, ckpt: checkpoint.CheckpointManager, metrics: Metrics):
    """The train state of the checkpoint to continue from (rank 0 picks, in the run `latest` names)."""
    return ckpt.begin(env, resume=cfg.checkpoint.resume)  # the run's checkpoints only; see checkpoint.py


def _prepare_data(
    cfg: JobConfig,
    env: DistEnv,
    workdir: Path,
    launch: str,
    tokenizer_spec: str | None,
    metrics: Metrics,
    stop: StopFlag,
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
        stop_requested=lambda: stop.requested,
    )
    if broadcast_object(env, prepared.fingerprint) != prepared.fingerprint:
        raise data.DataError("the nodes tokenized the data differently (same config, different token ids)")
    tokenizer_spec, encoder = prepared.spec, prepared.encoder
    train_ds, val_ds = prepared.train, prepared.val
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
    return tokenizer_spec, encoder, loader, val


def _train(cfg: JobConfig, env: DistEnv, stop: StopFlag, started: float, s3_client: Any) -> int:
    with contextlib.ExitStack() as cleanup:  # undone in reverse, however the run ends (143 included)
        # This process's scratch: staged checkpoint shards, downloaded data, the local copy of an S3
        # output. A resume reads only the checkpoint storage, so none of it outlives the run.
        scratch = tempfile.TemporaryDirectory(prefix=f"{RUN_SCRATCH}-", ignore_cleanup_errors=True)
        workdir = Path(cleanup.enter_context(scratch))
        # Claimed, so that the next attempt removes it if this one is SIGKILLed (its /tmp survives).
        cleanup.callback(token_store.claim_scratch(workdir).unlink, missing_ok=True)
        launch = launch_id(env)  # names the node's shared scratch: this launch's ranks only
        sinks = _open_sinks(cfg, env, workdir, launch, s3_client)
        cleanup.callback(sinks[2].close)  # the metrics port is free for the next run
        watchdog = StepWatchdog(cfg.train.step_timeout_s)
        cleanup.callback(watchdog.close)
        return _train_with(cfg, env, stop, started, workdir, launch, sinks, watchdog, s3_client)


def _train_with(
    cfg: JobConfig,
    env: DistEnv,
    stop: StopFlag,
    started: float,
    workdir: Path,
    launch: str,
    sinks,
    watchdog: StepWatchdog,
    s3_client: Any = None,
) -> int:
    t = cfg.train
    output, local_out, metrics, ckpt = sinks
    metrics.say(f"world size {env.world_size}, device {env.device}, checkpoints in {ckpt.storage.uri}")
    state = _resume_state(cfg, env, ckpt, metrics)
    if state is not None and state["step"] > t.max_steps:
        # Going on would train nothing and publish the checkpoint's model as this run's result.
        raise ConfigError(
            f"train.max_steps: {t.max_steps} is below the step of the checkpoint this run resumes "
            f"({ckpt.location(state['step'])}, step {state['step']}); allowed: >= {state['step']} to go on "
            "training, or --checkpoint.resume false (or another checkpoint.dir) for a new run"
        )
    prec = precision.choose(t.precision, env.device)
    if cfg.llm.model:
        fsdp = env.distributed and t.parallelism == "fsdp"
        llm = llm_task.prepare(
            cfg, env, workdir, launch, load_dtype=llm_task.load_dtype(cfg, prec.dtype, fsdp), say=metrics.say,
            s3_client=s3_client,
        )  # fmt: skip
        model, loader, val, spec, seq_len = llm.model, llm.loader, llm.val, cfg.llm.model, cfg.llm.seq_len
        loss_of, evaluate_with, llm_tokenizer = llm_task.loss, llm_task.evaluate, llm.tokenizer
        metrics.say(
            f"data {cfg.data.source}: {llm.train_sequences} train / {llm.val_sequences} val sequences of "
            f"<= {seq_len} tokens ({'packed' if cfg.llm.packing else 'one example each'})"
        )
    else:
        tokenizer = state and state["tokenizer"]
        spec, encoder, loader, val = _prepare_data(cfg, env, workdir, launch, tokenizer, metrics, stop)
        torch.manual_seed(t.seed)  # identical initial weights on every rank
        seq_len = -(-cfg.data.max_len // cfg.data.pad_to_multiple) * cfg.data.pad_to_multiple
        model = build_model(
            cfg.model,
            vocab_size=encoder.vocab_size,
            max_positions=seq_len,
            grad_checkpointing=t.grad_checkpointing,
        ).to(env.device)
        loss_of, evaluate_with, llm_tokenizer = _classifier_loss, evaluate, None
    params = sum(p.numel() for p in model.parameters())
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    metrics.say(f"device {prec.gpu}: precision {prec.name} ({prec.reason})")
    _enable_mfu(metrics, model, env, prec, seq_len=seq_len)
    model = _wrap(model, t, env, prec)
    if cfg.llm.model:  # FSDP from a model directory: each rank reads its own shard now (trainer/llm/load.py)
        llm.load_weights(model)
    optimizer = torch.optim.AdamW(
        [p for p in model.parameters() if p.requires_grad],  # LoRA: the adapters only
        lr=t.lr,
        weight_decay=t.weight_decay,
        fused=fused_kernel(env.device),
    )
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, _lr_lambda(t))
    dtype = prec.dtype
    scaler = torch.amp.GradScaler(env.device.type, enabled=prec.needs_scaler)
    guard = NonFiniteGuard(env.device, scaler_skips=scaler.is_enabled())
    torch.manual_seed(t.seed + 1 + env.rank)  # dropout differs per rank, reproducibly

    step, epoch, samples = 0, 0, 0
    if state is not None:
        state = ckpt.restore(env, state, model, optimizer)  # an older one of the run if this one is corrupt
    if state is not None:
        metrics.say(f"resuming from {ckpt.location(state['step'])} (step {state['step']})")
        scheduler.load_state_dict(state["scheduler"])
        _restore_scaler(scaler, state.get("scaler"), metrics)
        step, epoch, samples = state["step"], state["epoch"], _samples_done(state)
        state = None  # free the CPU copy
    metrics.say(
        f"model {cfg.llm.model or cfg.model.name}: {params:,} parameters"
        + (f" ({trainable:,} trainable)" if trainable != params else "")
        + f", precision {prec.name}, "
        f"{t.parallelism if env.distributed else 'single process'}; steps {step}..{t.max_steps}"
    )

    def record_checkpoints() -> None:  # background checkpoints are reported once committed
        for done in ckpt.completed():
            metrics.record("checkpoint", done, path=ckpt.location(done))

    def save(at_step: int, blocking: bool = True) -> bool | None:
        check_finite(at_step)  # a diverging run keeps its last good checkpoint as `latest`
        extra = {
            "step": at_step,
            "epoch": epoch,
            "samples": samples,
            "tokenizer": spec,
            "scheduler": scheduler.state_dict(),
            "scaler": scaler.state_dict(),
            "config": cfg.to_dict(),
        }
        saved = ckpt.save(env, at_step, model, optimizer, extra, blocking=blocking)  # every rank writes
        record_checkpoints()
        metrics.upload(output)  # an interrupted attempt's metrics reach S3 too
        barrier(env)  # nobody exits (and makes torchrun kill rank 0) before the write is finished
        return saved

    def check_finite(at_step: int) -> int:
        """Every rank, where it syncs anyway: exit 3 past train.max_bad_steps; the bad steps so far."""
        streak = all_reduce_max(env, guard.worst_streak())
        if streak > t.max_bad_steps:
            ckpt.wait()  # a background checkpoint began before the streak: let it land
            record_checkpoints()
            raise faults.Diverged(
                f"training diverged: {streak} optimizer steps in a row had a non-finite loss or gradient by "
                f"step {at_step} (train.max_bad_steps={t.max_bad_steps}; each was skipped, no weight "
                f"update); no checkpoint after it; latest is still {ckpt.latest_name() or 'nothing'}. "
                "Lower train.lr or check the data, then resume"
            )
        return all_reduce_max(env, int(guard.skipped.item()))

    batches = _micro_batches(loader, epoch, samples)
    samples_per_step = t.batch_size * t.grad_accum_steps * env.world_size
    window, last_eval, first_step = _Window(), {}, True
    model.train()
    while step < t.max_steps:
        step_loss = torch.zeros((), device=env.device)
        for micro in range(t.grad_accum_steps):
            epoch, samples, batch = next(batches)
            batch = {k: v.to(env.device, non_blocking=True) for k, v in batch.items()}
            with (
                _sync_context(model, micro == t.grad_accum_steps - 1),
                _autocast(env.device, dtype),
            ):
                loss = loss_of(model, batch) / t.grad_accum_steps
            scaler.scale(loss).backward()
            step_loss += loss.detach()
            window.tokens += batch["attention_mask"].sum()
        if scaler.is_enabled() and t.grad_clip:
            scaler.unscale_(optimizer)  # clip the true gradients, not the fp16-scaled ones
        guard.step(optimizer, model.parameters(), step_loss, t.grad_clip)  # steps unless not finite
        if scaler.is_enabled():
            scaler.step(optimizer)
            scaler.update()
        optimizer.zero_grad(set_to_none=True)
        scheduler.step()
        window.loss += step_loss
        step += 1
        window.steps += 1
        stopping = stop.poll(env)  # timed: a hung peer never votes
        watchdog.beat()
        if first_step:
            metrics.record("first_step", step, seconds_since_start=round(time.time() - started, 2))
            first_step = False

        if step % t.log_every == 0 or step == t.max_steps:
            bad_steps = check_finite(step)
            loss_mean, tokens, elapsed, steps = window.close(env)
            gpu = (
                {"gpu_mem_gb": round(torch.cuda.max_memory_allocated() / 2**30, 3)}
                if env.device.type == "cuda"
                else {}
            )
            metrics.record(
                "train",
                step,
                loss=loss_mean,
                lr=scheduler.get_last_lr()[0],
                samples_per_s=steps * samples_per_step / elapsed,
                tokens_per_s=tokens / elapsed,
                **gpu,
                **({"bad_steps": bad_steps} if bad_steps else {}),
            )
        # Eval and checkpoint time is neither training throughput nor a step the watchdog times.
        with window.paused(), watchdog.paused():
            # Stop first: a Spot notice leaves 120 s, not enough to spend on a due evaluation too.
            if stopping:
                if ckpt.in_flight(env) and ckpt.wait():  # the background one is the resume point
                    metrics.say(
                        f"SIGTERM at step {step} during a background checkpoint: exiting {faults.STOPPED}"
                    )
                    record_checkpoints()
                else:
                    metrics.say(
                        f"SIGTERM: checkpointing at step {step}, then exiting {faults.STOPPED} (retryable)"
                    )
                    save(step)
                metrics.close()
                return faults.STOPPED
            if step % t.eval_every == 0 or step == t.max_steps:
                last_eval = evaluate_with(model, val, env, dtype)
                metrics.record("eval", step, **last_eval)
            if step % cfg.checkpoint.every_steps == 0 or step == t.max_steps:
                saved = save(step, blocking=step == t.max_steps or not cfg.checkpoint.async_save)
                if stop.agreed(env):  # SIGTERM during that save: it is the resume point, no second save
                    ckpt.wait()
                    record_checkpoints()
                    metrics.say(f"SIGTERM during the checkpoint at step {step}: exiting {faults.STOPPED}")
                    metrics.close()
                    return faults.STOPPED
                if step == t.max_steps and saved is False:
                    # An interval checkpoint that fails is skipped (the next one follows); the final one
                    # is the run's result: exiting 0 would report an older checkpoint as the outcome.
                    raise faults.Retryable(
                        f"the final checkpoint {ckpt.location(step)} failed and was NOT written (the reason "
                        f"is logged above); latest is still {ckpt.latest_name() or 'nothing'}"
                    )

    with watchdog.paused():
        if not last_eval:  # resumed at the last step: report the model as it stands
            last_eval = evaluate_with(model, val, env, dtype)
            metrics.record("eval", step, **last_eval)
        latest = ckpt.latest_name()
        throughput = window.total_steps * samples_per_step / window.total_s if window.total_s else None
        summary = {
            "steps": step,
            "world_size": env.world_size,
            **last_eval,
            "samples_per_s": throughput,
            "wall_s": round(time.time() - started, 1),
            "checkpoint": latest and f"{ckpt.storage.uri}/{latest}",
        }
        _write_outputs(cfg, env, model, output, local_out, spec, metrics, summary, llm_tokenizer)
    return 0


def _enable_mfu(metrics: Metrics, model: nn.Module, env: DistEnv, prec: precision.Precision, seq_len: int):
    """MFU in the progress lines where the GPU's peak for the training dtype is known (trainer.mfu)."""
    if env.device.type != "cuda":
        return
    layers, heads, head_dim = attention_shape(model)
    flops = mfu.flops_per_token(
        non_embedding_params=mfu.non_embedding_params(model),
        layers=layers,
        heads=heads,
        head_dim=head_dim,
        seq_len=seq_len,
    )
    name = torch.cuda.get_device_name(env.device)
    peak = mfu.peak_flops(name, prec.dtype)
    if peak is None:
        metrics.say(f"MFU not reported: no dense {prec.name} peak known for {name!r} (trainer/mfu.py)")
    metrics.set_model(flops_per_token=flops, peak_per_gpu=peak, gpus=env.world_size)


def _restore_scaler(scaler: torch.amp.GradScaler, saved: dict[str, Any] | None, metrics: Metrics) -> None:
    """Checkpoints move between precisions: one written under fp32/bf16 (disabled scaler, empty state)
    resumes under fp16 with a fresh loss scale, and an fp16 scale is ignored by a run that needs none."""
    if not scaler.is_enabled():
        return
    if saved:
        scaler.load_state_dict(saved)
    else:
        metrics.say(f"checkpoint has no fp16 loss scale: starting at {scaler.get_scale():g}")


def _write_outputs(
    cfg: JobConfig,
    env: DistEnv,
    model: nn.Module,
    output,
    local_out: Path,
    spec: str,
    metrics: Metrics,
    summary: dict[str, Any],
    llm_tokenizer: Any = None,
) -> None:
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    exported: list[str] = []
    if cfg.llm.model:  # the adapter (or the whole model) in Hugging Face's format, for peft/transformers
        name = llm_task.export(cfg.llm, model, llm_tokenizer, env, local_out)
        summary["model"] = f"{output.uri}/{name}"
        exported = [p.relative_to(local_out).as_posix() for p in sorted((local_out / name).rglob("*"))
                    if p.is_file()] if env.is_main else []  # fmt: skip
    else:
        full = StateDictOptions(full_state_dict=True, cpu_offload=True)
        weights = get_model_state_dict(model, options=full)
    if isinstance(model, DistributedDataParallel):  # replicas must agree; a desync would be a silent bug
        digests = gather_objects(env, _digest(model.module))
        summary["ranks_identical"] = len(set(digests)) == 1
    if env.is_main:
        local_out.mkdir(parents=True, exist_ok=True)
        if not cfg.llm.model:
            summary["model"] = f"{output.uri}/model.pt"
            model_file = {
                "model": weights,
                "model_config": asdict(cfg.model),
                "tokenizer": spec,
                "max_len": cfg.data.max_len,
            }
            _write_output(local_out / "model.pt", lambda f: torch.save(model_file, f), summary["checkpoint"])
            exported = ["model.pt"]
        for name, content in (("config.json", cfg.to_dict()), ("summary.json", summary)):  # summary last
            text = json.dumps(content, indent=1).encode()
            _write_output(local_out / name, lambda f, text=text: f.write(text), summary["checkpoint"])
        metrics.close()
        if not isinstance(output, LocalStorage):
            for name in (*exported, "summary.json", "config.json"):
                output.put_file(name, local_out / name)
        metrics.upload(output)  # metrics.jsonl and the TensorBoard events
        metrics.say(
            "done: "
            + ", ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in summary.items())
        )
    barrier(env)


def _write_output(path: Path, write, checkpoint: str | None) -> None:
    """Write `path` whole or not at all (temp file, rename). A full disk is not a bug (exit 1) but a
    retryable exit: the final checkpoint is committed, so the restart only writes the outputs again."""
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        with open(tmp, "wb") as f:
            write(f)
        os.replace(tmp, path)
    except Exception as err:
        tmp.unlink(missing_ok=True)
        if not is_disk_full(err):
            raise
        free = shutil.disk_usage(path.parent).free / 2**20
        raise faults.Retryable(
            f"disk full: writing {path} failed ({free:.0f} MiB free on its file system); the final "
            f"checkpoint {checkpoint} is committed, so the restart only writes the outputs again"
        ) from err


def _digest(module: nn.Module) -> str:
    h = hashlib.sha256()
    for p in module.parameters():
        h.update(p.detach().cpu().reshape(-1).view(torch.uint8).numpy().tobytes())  # bf16 has no numpy
    return h.hexdigest()
