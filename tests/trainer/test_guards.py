"""The step's guards and its speed: a non-finite step is skipped on the device, the SIGTERM vote never
makes a step wait, a hung peer ends the run in seconds, and torch.compile under FSDP compiles the blocks."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest
import torch
import torch.distributed as dist
from torch.utils._python_dispatch import TorchDispatchMode
from trainer_runs import REPO, run_env

from trainer import faults, tasks
from trainer.config import ModelConfig, TrainConfig
from trainer.dist import DistEnv, StopFlag
from trainer.guards import NonFiniteGuard, fused_kernel
from trainer.loop import _wrap
from trainer.model import build_model
from trainer.precision import Precision

CPU = torch.device("cpu")
# How a distributed run's ranks see themselves; the process group under it has one rank (this process).
TWO_RANKS = DistEnv(rank=0, world_size=2, local_rank=0, device=CPU)


class HostReads(TorchDispatchMode):
    """Records every read of a tensor's value by the host (`.item()`, `bool()`, `.tolist()`): on a GPU,
    each one waits for the device to finish all the work queued so far."""

    def __init__(self) -> None:
        super().__init__()
        self.reads = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is torch.ops.aten._local_scalar_dense.default:
            self.reads += 1
        return func(*args, **(kwargs or {}))


@pytest.fixture
def one_rank_group():
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def _trainee() -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    return model, torch.optim.AdamW(model.parameters(), lr=0.1, fused=fused_kernel(CPU))


def _backward(model: torch.nn.Module, poison: bool = False) -> torch.Tensor:
    loss = model(torch.ones(3, 4)).square().mean()
    loss = loss * float("nan") if poison else loss
    loss.backward()
    return loss.detach()


def test_a_non_finite_step_is_skipped_on_the_device_without_a_host_read():
    model, optimizer = _trainee()
    guard = NonFiniteGuard(CPU, scaler_skips=False)
    before = [p.detach().clone() for p in model.parameters()]
    with HostReads() as host:
        for _ in range(2):  # two bad steps in a row
            guard.step(optimizer, model.parameters(), _backward(model, poison=True), max_norm=1.0)
            optimizer.zero_grad()
    assert host.reads == 0
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))
    assert all(s["step"].item() == 0 for s in optimizer.state.values())  # Adam's step count stays too
    assert guard.worst_streak() == 2 and guard.skipped.item() == 2
    guard.step(optimizer, model.parameters(), _backward(model), max_norm=1.0)  # a good one trains
    assert not torch.equal(before[0], model.weight) and torch.isfinite(model.weight).all()
    assert guard.worst_streak() == 2 and guard.skipped.item() == 2


def test_under_fp16_the_scalers_overflow_skips_do_not_count_but_a_non_finite_loss_does():
    model, optimizer = _trainee()
    guard = NonFiniteGuard(CPU, scaler_skips=True)
    model(torch.ones(1, 4)).sum().mul(float("inf")).backward()  # an overflowing gradient, finite loss
    guard.step(optimizer, model.parameters(), torch.tensor(0.5), max_norm=0.0)
    assert guard.worst_streak() == 0
    guard.step(optimizer, model.parameters(), torch.tensor(float("nan")), max_norm=0.0)
    assert guard.worst_streak() == 1


def test_an_evaluation_reads_the_device_once_however_many_batches_it_has():
    """A read per batch makes the host wait for the device at every batch: the sums stay on the device."""
    torch.manual_seed(0)
    model = build_model(ModelConfig(dim=16, heads=2, ffn_dim=32, layers=1), vocab_size=50, max_positions=8)
    batch = {
        "input_ids": torch.randint(1, 50, (4, 8)),
        "attention_mask": torch.ones(4, 8, dtype=torch.bool),
        "labels": torch.randint(0, 2, (4,)),
    }
    one_rank = DistEnv(rank=0, world_size=1, local_rank=0, device=CPU)
    reads = []
    for batches in (2, 6):
        with HostReads() as host:
            result = tasks.evaluate(model, [batch] * batches, one_rank, None)
        reads.append(host.reads)
        assert 0 <= result["val_accuracy"] <= 1 and result["val_loss"] > 0
    assert reads[0] == reads[1] <= 3, reads


def test_the_stop_vote_runs_on_the_cpu_in_the_background_and_is_read_a_step_later(
    one_rank_group, monkeypatch
):
    started = []
    real_all_reduce = dist.all_reduce

    def recording(tensor, *args, **kwargs):
        started.append((tensor.device.type, kwargs.get("async_op"), kwargs.get("group")))
        return real_all_reduce(tensor, *args, **kwargs)

    monkeypatch.setattr(dist, "all_reduce", recording)
    before = signal.getsignal(signal.SIGTERM)
    try:
        stop = StopFlag(interval_s=0)  # a vote at every step boundary
        assert stop.poll(TWO_RANKS) is False  # nothing voted yet; the first vote starts
        stop.requested = True  # SIGTERM during the next step
        assert stop.poll(TWO_RANKS) is False  # the vote from before it
        assert stop.poll(TWO_RANKS) is True  # every rank reads the same vote at the same step
    finally:
        signal.signal(signal.SIGTERM, before)
    assert [(d, a) for d, a, _ in started] == [("cpu", True)] * 3
    assert all(g is not None and g is not dist.group.WORLD for _, _, g in started)  # its own gloo group


def test_torch_compile_under_fsdp_compiles_each_transformer_block(one_rank_group, monkeypatch):
    graphs: list[int] = []

    def counting_backend(gm, example_inputs):
        graphs.append(len(gm.graph.nodes))
        return gm.forward

    real_compile = torch.compile
    monkeypatch.setattr(
        torch, "compile", lambda *a, **k: real_compile(*a, **{**k, "backend": counting_backend})
    )
    torch._dynamo.reset()
    model = build_model(ModelConfig(), vocab_size=100, max_positions=64)
    keys = set(model.state_dict())
    cfg = TrainConfig(parallelism="fsdp", compile=True)
    wrapped = _wrap(model, cfg, TWO_RANKS, Precision(None, "cpu", "test"))
    ids, mask = torch.randint(1, 100, (4, 16)), torch.ones(4, 16, dtype=torch.bool)
    wrapped(ids, mask).sum().backward()
    assert graphs, "no graph was compiled: FSDP's hooks made dynamo fall back to eager"
    from torch.distributed.checkpoint.state_dict import get_model_state_dict

    assert set(get_model_state_dict(wrapped)) == keys  # checkpoints of compiled and eager runs interchange


WATCHED = """
import sys, time
from trainer.guards import StepWatchdog
watchdog = StepWatchdog(float(sys.argv[1]))
watchdog.beat()  # a first step finished
with watchdog.paused():  # an evaluation longer than the timeout is not a hang
    time.sleep(float(sys.argv[1]) * 3)
print("evaluated", flush=True)
time.sleep(60)  # the next step never finishes: a peer hung
"""


def test_no_training_step_within_the_step_timeout_exits_202_at_once():
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-c", WATCHED, "0.5"],
        cwd=REPO,
        env=run_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == faults.PEER_LOST, proc.stderr
    assert "evaluated" in proc.stdout and time.monotonic() - started < 45
    assert "no training step finished in" in proc.stderr and "exit 202 (retryable" in proc.stderr
