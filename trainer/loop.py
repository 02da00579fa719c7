"""The training run, top to bottom: set up, resume, train with periodic eval and checkpoints, write outputs.

`run(cfg)` returns the process exit code: 0 when done, 143 when stopped by SIGTERM after a checkpoint
(the table of exit codes is in trainer/faults.py). `Trainer` reads in the order a run happens: __init__
builds (and resumes) the run, `train` is the loop, and each thing the loop does at a step is a method of
its own (`train_step`, `log_progress`, `evaluate`, `checkpoint`, `stop_at_once`, `finish`).

A training step never waits for the host to read a device value: the loss and token counts add up on
the device and are read at progress lines, the stop vote runs on the CPU without waiting
(dist.StopFlag), and a step with non-finite gradients is skipped on the device (guards.NonFiniteGuard).
On a GPU the CPU can then queue the next step's kernels while the current one runs.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import math
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NamedTuple, cast

import torch
from torch import nn
from torch.distributed.fsdp import FSDPModule, fully_shard
from torch.nn.parallel import DistributedDataParallel

from trainer import checkpoint, data, fabric, faults, mfu, outputs, precision, tasks, token_store, tracking
from trainer.config import ConfigError, JobConfig, TrainConfig
from trainer.dist import (
    DistEnv,
    GlobalSum,
    StopFlag,
    barrier,
    launch_id,
    max_over_ranks,
    setup,
    sum_over_ranks,
    teardown,
)
from trainer.guards import NonFiniteGuard, StepWatchdog, fused_kernel
from trainer.llm import task as llm_task
from trainer.metrics import Exporter, Metrics
from trainer.model import attention_shape, transformer_blocks
from trainer.schedule import LrSchedule, param_groups
from trainer.storage import LocalStorage, Storage, open_storage

RUN_SCRATCH = "trainer-run"  # $TMPDIR/trainer-run-<random>: one per process and run


def run(cfg: JobConfig, *, s3_client: Any = None) -> int:
    started = time.time()
    if cfg.llm.model:
        llm_task.require_packages(cfg.llm)  # exit 2 naming the extra, before any process group exists
    if cfg.mlflow.tracking_uri:
        tracking.require_package(cfg.mlflow)  # the same for the mlflow extra
        tracking.set_client_env(cfg.mlflow)
    # Installed first: a SIGTERM during set-up is honoured at the first step boundary.
    stop = StopFlag(timeout_s=cfg.train.dist_timeout_s)
    env = setup(cfg.train)
    try:
        fabric.confirm(env)  # an EFA pool's job that fell back to sockets exits 2 here, before training
        with contextlib.ExitStack() as cleanup:  # undone in reverse, however the run ends (143 included)
            return Trainer(cfg, env, stop, started, cleanup, s3_client).train()
    finally:
        teardown()


class Sinks(NamedTuple):
    output: Storage  # output.dir
    local_out: Path  # its local staging directory (the directory itself when it is local)
    metrics: Metrics
    ckpt: checkpoint.CheckpointManager


class Trainer:
    """One rank's run. Every rank takes the same steps and calls the same collectives in the same order."""

    def __init__(
        self,
        cfg: JobConfig,
        env: DistEnv,
        stop: StopFlag,
        started: float,
        cleanup: contextlib.ExitStack,
        s3_client: Any = None,
    ) -> None:
        self.cfg, self.t, self.env, self.stop, self.started = cfg, cfg.train, env, stop, started
        t = cfg.train
        workdir, launch = _scratch(env, cleanup)
        self.sinks = _open_sinks(cfg, env, workdir, launch, s3_client)
        self.metrics, self.ckpt = self.sinks.metrics, self.sinks.ckpt
        cleanup.callback(self.metrics.close)  # the metrics port is free for the next run
        self.watchdog = StepWatchdog(t.step_timeout_s)
        cleanup.callback(self.watchdog.close)
        self.metrics.say(
            f"world size {env.world_size}, device {env.device}, checkpoints in {self.ckpt.storage.uri}"
        )
        state = self._resume_state()
        self.prec = precision.choose(t.precision, env.device)
        self.task = tasks.prepare(
            cfg, env, workdir=workdir, launch=launch, resumed_tokenizer=state["tokenizer"] if state else None,
            load_dtype=llm_task.load_dtype(cfg, self.prec.dtype, self.fsdp), metrics=self.metrics,
            stop_requested=lambda: stop.requested, s3_client=s3_client,
        )  # fmt: skip
        self.model = self._build_model()
        self.optimizer = torch.optim.AdamW(
            param_groups(self.model, t.weight_decay), lr=t.lr, fused=fused_kernel(env.device)
        )
        self.schedule = LrSchedule(t.lr, t.warmup_steps, t.max_steps, t.min_lr_ratio)
        self.scaler = torch.amp.GradScaler(env.device.type, enabled=self.prec.needs_scaler)
        self.guard = NonFiniteGuard(env.device, scaler_skips=self.scaler.is_enabled())
        torch.manual_seed(t.seed + 1 + env.rank)  # dropout differs per rank, reproducibly
        self.step, self.epoch, self.samples = 0, 0, 0
        self._restore(state)
        self._start_tracking()
        self.window = _Window(env.device)
        self.last_eval: dict[str, float] = {}
        self.samples_per_step = t.batch_size * t.grad_accum_steps * env.world_size

    @property
    def on_gpu(self) -> bool:
        return self.env.device.type == "cuda"

    @property
    def fsdp(self) -> bool:
        return self.env.distributed and self.t.parallelism == "fsdp"

    # -- set-up -------------------------------------------------------------------------------------------

    def _resume_state(self) -> dict[str, Any] | None:
        """The train state of the checkpoint to continue from (rank 0 picks; see checkpoint.py)."""
        c = self.cfg.checkpoint
        state = self.ckpt.begin(self.env, resume=c.resume, resume_from=c.resume_from)
        if state is not None and state["step"] > self.t.max_steps:
            # Going on would train nothing and publish the checkpoint's model as this run's result.
            raise ConfigError(
                f"train.max_steps: {self.t.max_steps} is below the step of the checkpoint this run resumes "
                f"({self.ckpt.source(state)}, step {state['step']}); allowed: >= {state['step']} "
                "to go on training, or --checkpoint.resume false (or another checkpoint.dir) for a new run"
            )
        return state

    def _build_model(self) -> nn.Module:
        model = self.task.model
        params = sum(p.numel() for p in model.parameters())
        trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
        self.model_line = (
            f"model {self.cfg.llm.model or self.cfg.model.name}: {params:,} parameters"
            + (f" ({trainable:,} trainable)" if trainable != params else "")
            + f", precision {self.prec.name}, "
            + (self.t.parallelism if self.env.distributed else "single process")
        )
        self.metrics.say(f"device {self.prec.gpu}: precision {self.prec.name} ({self.prec.reason})")
        _enable_mfu(self.metrics, model, self.env, self.prec, seq_len=self.task.seq_len)
        model = _wrap(model, self.t, self.env, self.prec)
        self.task.load_weights(model)  # before the optimizer and the checkpoint's restore
        return model

    def _restore(self, state: dict[str, Any] | None) -> None:
        """Load the checkpoint's model, optimizer, schedule and data position (an older checkpoint of the
        run if this one is corrupt; none: step 0)."""
        if state is not None:
            state = self.ckpt.restore(self.env, state, self.model, self.optimizer)
        if state is not None:
            self.metrics.say(f"resuming from {self.ckpt.source(state)} (step {state['step']})")
            _restore_scaler(self.scaler, state.get("scaler"), self.metrics)
            self.step, self.epoch, self.samples = state["step"], state["epoch"], _samples_done(state)
            self._resume_schedule(state)
        self.metrics.say(f"{self.model_line}; steps {self.step}..{self.t.max_steps}")

    def _start_tracking(self) -> None:
        """Rank 0's MLflow run (mlflow.tracking_uri): the checkpoint run's, so a restart resumes it. Its
        params are the config, flattened (`train.lr`), and what `auto` settings resolved to."""
        config = self.cfg.to_dict()
        params = {f"{section}.{k}": v for section, values in config.items() for k, v in values.items()}
        params |= {"world_size": self.env.world_size, "resolved.precision": self.prec.name}
        tags = {"mlops-eks.checkpoint_dir": self.ckpt.storage.uri}
        if self.cfg.checkpoint.resume_from:
            tags["mlops-eks.resumed_from"] = self.cfg.checkpoint.resume_from
        # A checkpoint directory of older trainers (flat layout) is one run without an id: named by where.
        flat = "flat-" + hashlib.sha256(self.ckpt.storage.uri.encode()).hexdigest()[:12]
        self.metrics.start_tracking(self.ckpt.run or flat, params, tags)

    def _resume_schedule(self, state: dict[str, Any]) -> None:
        """The checkpoint's schedule; a new segment when train.max_steps changed (trainer/schedule.py)."""
        saved_max = state["config"]["train"]["max_steps"]
        self.schedule = self.schedule.resumed(self.step, state.get("schedule"), saved_max)
        if saved_max != self.t.max_steps:
            self.metrics.say(
                f"train.max_steps {saved_max} -> {self.t.max_steps}: the learning rate goes from "
                f"{self.schedule.peak * self.schedule.start_factor:.3g} back up to {self.t.lr:g} over "
                f"{self.schedule.warmup_steps} steps, then decays to {self.t.lr * self.t.min_lr_ratio:.3g} "
                f"by step {self.t.max_steps}"
            )

    # -- the loop -----------------------------------------------------------------------------------------

    def train(self) -> int:
        try:
            return self._train()
        except faults.Diverged as err:  # every rank alike; exit 3 once summary.json says why
            self.diverged(err)
            raise

    def _train(self) -> int:
        batches = _micro_batches(self.task.loader, self.epoch, self.samples)
        self.model.train()
        first = True
        while self.step < self.t.max_steps:
            self.train_step(batches)
            stopping = self.stop.poll(self.env)  # timed: a hung peer never votes
            self.watchdog.beat()
            if first:
                self._after_first_step()
                first = False
            if self._due(self.t.log_every):
                self.log_progress()
            # Eval and checkpoint time is neither training throughput nor a step the watchdog times.
            with self.window.paused(), self.watchdog.paused():
                if stopping:  # first: a Spot notice leaves 120 s, not enough for a due evaluation too
                    return self.stop_at_once()
                if self._due(self.t.eval_every):
                    self.evaluate()
                if self._due(self.cfg.checkpoint.every_steps) and self.checkpoint() == faults.STOPPED:
                    return faults.STOPPED
        return self.finish()

    def _due(self, every: int) -> bool:
        return self.step % every == 0 or self.step == self.t.max_steps

    def train_step(self, batches: Iterator[tuple[int, int, tasks.Batch]]) -> None:
        """One optimizer step over `train.grad_accum_steps` micro-batches. Each micro-batch's loss sum is
        divided by the step's global count (every micro-batch on every rank: tasks.py), times the world
        size, because DDP and FSDP average the ranks' gradients."""
        micro = []
        for _ in range(self.t.grad_accum_steps):
            self.epoch, self.samples, batch = next(batches)
            micro.append({k: v.to(self.env.device, non_blocking=True) for k, v in batch.items()})
        per_rank = self._count_per_rank(micro)  # the LM's is all-reduced while the first forward runs
        loss_sum = torch.zeros((), device=self.env.device)
        count: torch.Tensor | int = 0
        tokens: torch.Tensor | int = 0
        for i, batch in enumerate(micro):
            with (
                _sync_context(self.model, i == len(micro) - 1),
                precision.autocast(self.env.device, self.prec.dtype),
            ):
                total, units = self.task.loss(self.model, batch)
            self.scaler.scale(total / per_rank()).backward()
            loss_sum, count = loss_sum + total.detach(), count + units
            tokens = tokens + batch["attention_mask"].sum()
        self._optimizer_step(loss_sum)
        self.window.add(loss_sum, count, tokens, finite=~self.guard.last_bad, grad_norm=self.guard.grad_norm)
        self.step += 1

    def _count_per_rank(self, micro: list[tasks.Batch]) -> Callable[[], torch.Tensor | float]:
        """The step's global count of loss units over the world size, when first asked for. The
        classifier's is known (every micro-batch holds train.batch_size examples); the LM's labelled
        tokens are counted on the device and summed over the ranks by one collective per step."""
        if self.task.count is None:
            return lambda: float(self.t.batch_size * self.t.grad_accum_steps)
        counting = GlobalSum(self.env, torch.stack([self.task.count(b) for b in micro]).sum())
        world = self.env.world_size
        return functools.cache(lambda: counting.result().clamp(min=1).float() / world)

    def _optimizer_step(self, loss_sum: torch.Tensor) -> None:
        self.schedule.apply(self.optimizer, self.step)
        if self.scaler.is_enabled():
            self.scaler.unscale_(self.optimizer)  # clip and report the true gradients, not fp16-scaled ones
        # The optimizer steps unless the gradients are not finite (the guard decides on the device).
        self.guard.step(self.optimizer, self.model.parameters(), loss_sum, self.t.grad_clip)
        if self.scaler.is_enabled():
            self.scaler.step(self.optimizer)
            self.scaler.update()
        self.optimizer.zero_grad(set_to_none=True)

    def _after_first_step(self) -> None:
        """The first step of a process compiles and warms up: throughput is measured from its end."""
        if self.on_gpu:
            torch.cuda.synchronize(self.env.device)  # once per run: its queued work is not the next's
        since = round(time.time() - self.started, 2)
        self.metrics.record("first_step", self.step, seconds_since_start=since)
        self.window.restart_clock()

    def log_progress(self) -> None:
        """A progress line: the loss since the last one (per token for the LM, per example for the
        classifier; skipped steps left out), the next step's learning rate, the last step's gradient
        norm, throughput, skipped steps so far."""
        bad_steps = self._check_finite()
        window = self.window.close(self.env)
        rates = {}
        if window.timed_steps:  # none when the first step of the process is the only one
            rates = {
                "samples_per_s": window.timed_steps * self.samples_per_step / window.seconds,
                "tokens_per_s": window.tokens / window.seconds,
            }
        gpu = {"gpu_mem_gb": round(torch.cuda.max_memory_allocated() / 2**30, 3)} if self.on_gpu else {}
        self.metrics.record(
            "train",
            self.step,
            loss=window.loss,
            lr=self.schedule.lr(self.step),
            grad_norm=window.grad_norm,
            **rates,
            **gpu,
            **({"bad_steps": bad_steps} if bad_steps else {}),
        )

    def evaluate(self) -> None:
        self.last_eval = self.task.evaluate(self.model, self.task.val, self.env, self.prec.dtype)
        self.metrics.record("eval", self.step, **self.last_eval)
        bad = {k: v for k, v in self.last_eval.items() if isinstance(v, float) and not math.isfinite(v)}
        if bad:  # the weights went non-finite while each step's loss stayed finite: no result to keep
            self.ckpt.wait()
            self._record_checkpoints()
            raise faults.Diverged(
                f"training diverged: the evaluation at step {self.step} got "
                + ", ".join(f"{k} {v}" for k, v in bad.items())
                + f" (train.lr={self.t.lr}); latest checkpoint is still "
                f"{self.ckpt.latest_name() or 'nothing'}. Lower train.lr or check the data, then resume"
            )

    def checkpoint(self) -> int | None:
        """The interval (or final) checkpoint; faults.STOPPED when a SIGTERM arrived while it was written."""
        final = self.step == self.t.max_steps
        saved = self._save(blocking=final or not self.cfg.checkpoint.async_save)
        if self.stop.agreed(self.env):  # SIGTERM during that save: it is the resume point, no second save
            self.ckpt.wait()
            self._record_checkpoints()
            return self._stopped(
                f"SIGTERM during the checkpoint at step {self.step}: exiting {faults.STOPPED}"
            )
        if final and saved is False:
            # An interval checkpoint that fails is skipped (the next one follows); the final one is the
            # run's result: exiting 0 would report an older checkpoint as the outcome.
            raise faults.Retryable(
                f"the final checkpoint {self.ckpt.location(self.step)} failed and was NOT written (the "
                f"reason is logged above); latest is still {self.ckpt.latest_name() or 'nothing'}"
            )
        return None

    def stop_at_once(self) -> int:
        """Every rank agreed to stop (SIGTERM): checkpoint unless one is being written, then exit 143."""
        if self.ckpt.in_flight(self.env) and self.ckpt.wait():  # the background one is the resume point
            self._record_checkpoints()
            return self._stopped(
                f"SIGTERM at step {self.step} during a background checkpoint: exiting {faults.STOPPED}"
            )
        self.metrics.say(
            f"SIGTERM: checkpointing at step {self.step}, then exiting {faults.STOPPED} (retryable)"
        )
        self._save()
        return self._stopped(None)

    def _stopped(self, message: str | None) -> int:
        if message:
            self.metrics.say(message)
        self.metrics.end_tracking("KILLED")  # MLflow's word for a run stopped from outside; a restart resumes
        self.metrics.close()
        return faults.STOPPED

    def finish(self) -> int:
        """After the last step: the final evaluation (if the last step had none) and the outputs."""
        with self.watchdog.paused():
            if not self.last_eval:  # resumed at the last step: report the model as it stands
                self.evaluate()
            summary = self._summary("finished")
            sinks, task = self.sinks, self.task
            outputs.write_outputs(
                self.cfg, self.env, self.model, sinks.output, sinks.local_out, task.spec, self.metrics,
                summary, task.tokenizer,
            )  # fmt: skip
        return 0

    def _summary(self, status: str) -> dict[str, Any]:
        timed = self.window.total_steps * self.samples_per_step
        latest = self.ckpt.latest_name()
        return {
            "status": status,
            "steps": self.step,
            "world_size": self.env.world_size,
            **self.last_eval,
            "samples_per_s": timed / self.window.total_s if self.window.total_s else None,
            "wall_s": round(time.time() - self.started, 1),
            "checkpoint": latest and f"{self.ckpt.storage.uri}/{latest}",
        }

    def diverged(self, err: faults.Diverged) -> None:
        """Rank 0: summary.json says the run diverged, at which step and why (no model is written). Its
        write is bookkeeping: a failure is said and the run still exits 3."""
        if not self.env.is_main:
            return
        try:
            summary = {**self._summary("diverged"), "reason": str(err)}
            outputs.write_summary(self.sinks.output, self.sinks.local_out, self.metrics, summary, "FAILED")
        except Exception as failure:
            self.metrics.say(
                f"warning: summary.json of the diverged run not written ({type(failure).__name__}: "
                f"{str(failure)[:200]}); exit {faults.DIVERGED} stands"
            )

    # -- checkpoints and the non-finite guard -------------------------------------------------------------

    def _save(self, blocking: bool = True) -> bool | None:
        """Every rank writes its shard of the checkpoint of this step (see CheckpointManager.save)."""
        self._check_finite()  # a diverging run keeps its last good checkpoint as `latest`
        extra = {
            "step": self.step,
            "epoch": self.epoch,
            "samples": self.samples,
            "tokenizer": self.task.spec,
            "schedule": self.schedule.state(),
            "scaler": self.scaler.state_dict(),
            "config": self.cfg.to_dict(),
            "resumed_from": self.cfg.checkpoint.resume_from,  # a restart of this run resumes it, not that
        }
        saved = self.ckpt.save(self.env, self.step, self.model, self.optimizer, extra, blocking=blocking)
        self._record_checkpoints()
        self.metrics.upload(self.sinks.output)  # an interrupted attempt's metrics reach S3 too
        barrier(self.env)  # nobody exits (and makes torchrun kill rank 0) before the write is finished
        return saved

    def _record_checkpoints(self) -> None:  # background checkpoints are reported once committed
        for done in self.ckpt.completed():
            self.metrics.record("checkpoint", done, path=self.ckpt.location(done))

    def _check_finite(self) -> int:
        """Every rank, where it syncs anyway: exit 3 past train.max_bad_steps; the bad steps so far."""
        guard = self.guard
        streak, skipped = max_over_ranks(self.env, torch.stack([guard.worst, guard.skipped]))
        if streak > self.t.max_bad_steps:
            self.ckpt.wait()  # a background checkpoint began before the streak: let it land
            self._record_checkpoints()
            raise faults.Diverged(
                f"training diverged: {streak} optimizer steps in a row had a non-finite loss or gradient by "
                f"step {self.step} (train.max_bad_steps={self.t.max_bad_steps}; each was skipped, no weight "
                f"update); no checkpoint after it; latest is still {self.ckpt.latest_name() or 'nothing'}. "
                "Lower train.lr or check the data, then resume"
            )
        return skipped


class _WindowTotals(NamedTuple):
    loss: float  # per loss unit, over every rank; NaN when every step of the window was skipped
    grad_norm: float  # of the window's last step
    tokens: float  # non-padding tokens of the timed steps, every rank
    timed_steps: int
    seconds: float


class _Window:
    """What the steps since the last progress line add up to. The sums stay on the device and are read
    at the progress line only: the loss sum and count of the steps that were not skipped (one non-finite
    step does not make the window's loss NaN), the tokens and the last gradient norm. The time counts
    the timed steps: not the first step of a process (`restart_clock`), nor evaluations and checkpoints
    (`paused`)."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.total_steps, self.total_s = 0, 0.0
        self._start()

    def _start(self) -> None:
        zero = functools.partial(torch.zeros, (), dtype=torch.float64, device=self.device)
        self.loss, self.count, self.tokens, self.grad_norm = zero(), zero(), zero(), zero()
        self.timed_steps, self.start = 0, time.perf_counter()

    def add(self, loss_sum, count, tokens, *, finite: torch.Tensor, grad_norm: torch.Tensor) -> None:
        self.loss += torch.where(finite, loss_sum, 0.0)
        self.count += torch.where(finite, count, 0)
        self.tokens += tokens
        self.grad_norm.copy_(grad_norm)
        self.timed_steps += 1

    def restart_clock(self) -> None:
        self.tokens.zero_()
        self.timed_steps, self.start = 0, time.perf_counter()

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.start += time.perf_counter() - t0

    def close(self, env: DistEnv) -> _WindowTotals:
        """The window's totals over every rank (one collective, one read); starts the next window."""
        sums = torch.stack([self.loss, self.count, self.tokens, self.grad_norm])
        loss, count, tokens, norm = sum_over_ranks(env, sums)
        seconds = time.perf_counter() - self.start
        totals = _WindowTotals(loss / count if count else math.nan, norm / env.world_size, tokens,
                               self.timed_steps, seconds)  # fmt: skip
        if self.timed_steps:
            self.total_steps, self.total_s = self.total_steps + self.timed_steps, self.total_s + seconds
        self._start()
        return totals


# -- set-up helpers -------------------------------------------------------------------------------------


def _scratch(env: DistEnv, cleanup: contextlib.ExitStack) -> tuple[Path, str]:
    """(this process's scratch directory, the launch id that names the node's shared scratch)."""
    # Staged checkpoint shards, downloaded data, the local copy of an S3 output. A resume reads only the
    # checkpoint storage, so none of it outlives the run.
    scratch = tempfile.TemporaryDirectory(prefix=f"{RUN_SCRATCH}-", ignore_cleanup_errors=True)
    workdir = Path(cleanup.enter_context(scratch))
    # Claimed, so that the next attempt removes it if this one is SIGKILLed (its /tmp survives).
    cleanup.callback(token_store.claim_scratch(workdir).unlink, missing_ok=True)
    return workdir, launch_id(env)  # this launch's ranks only


def _open_sinks(cfg: JobConfig, env: DistEnv, workdir: Path, launch: str, s3_client: Any) -> Sinks:
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
        mlflow=cfg.mlflow,
    )
    ckpt = checkpoint.CheckpointManager(
        storage(cfg.checkpoint.dir),
        keep=cfg.checkpoint.keep,
        workdir=workdir,
        timeout_s=cfg.train.dist_timeout_s,
    )
    ckpt.check_writable()  # exit 2 now, not a traceback at the first checkpoint interval
    return Sinks(output, local_out, metrics, ckpt)


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


def _restore_scaler(scaler: torch.amp.GradScaler, saved: dict[str, Any] | None, metrics: Metrics) -> None:
    """Checkpoints move between precisions: one written under fp32/bf16 (disabled scaler, empty state)
    resumes under fp16 with a fresh loss scale, and an fp16 scale is ignored by a run that needs none."""
    if not scaler.is_enabled():
        return
    if saved:
        scaler.load_state_dict(saved)
    else:
        metrics.say(f"checkpoint has no fp16 loss scale: starting at {scaler.get_scale():g}")


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


# -- model wrapping -------------------------------------------------------------------------------------


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
    # torch's DDP broadcasts rank 0's buffers before every forward, for buffers that a forward changes
    # (batch norm's running statistics). A model whose buffers are constants gets them once, when DDP
    # wraps it: resending them was a collective per forward, a tenth of a small model's step on CPU.
    return DistributedDataParallel(
        model,
        device_ids=[env.device.index] if env.device.type == "cuda" else None,
        forward_sync_buffers=not getattr(model, "constant_buffers", False),
    )


def _sync_context(model: nn.Module, sync: bool):
    """Skip the gradient all-reduce on all but the last micro-batch of an accumulation."""
    if isinstance(model, DistributedDataParallel) and not sync:
        return model.no_sync()
    if isinstance(model, FSDPModule):
        model.set_requires_gradient_sync(sync)
    return contextlib.nullcontext()
