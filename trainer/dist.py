"""Process group set-up and teardown, and the SIGTERM flag that every rank agrees on.

Rank and world size come from torchrun (RANK, WORLD_SIZE, LOCAL_RANK). Without torchrun, a pod started by
Kubeflow with one process per pod has only PET_NNODES/PET_NODE_RANK/PET_MASTER_*, and a rank started by
Open MPI's mpirun (an MPIJob) only OMPI_COMM_WORLD_* and the launcher's MASTER_ADDR: those are mapped; with
none of them, the run is a single process without a process group.
"""

from __future__ import annotations

import datetime
import os
import secrets
import signal
import threading
import time
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from trainer import mpi_env
from trainer.config import ConfigError, TrainConfig
from trainer.faults import GpuUnavailable


@dataclass(frozen=True)
class DistEnv:
    rank: int
    world_size: int
    local_rank: int
    device: torch.device

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1


def _ranks_from_env(env: dict[str, str]) -> tuple[int, int, int]:
    if mpi_env.started_by_mpirun(env):  # an MPIJob's ranks (trainer/mpi_env.py)
        try:
            mapped = mpi_env.torch_env(env)
        except mpi_env.MpiEnvError as err:
            raise ConfigError(f"started by mpirun: {err}") from None
        os.environ.update(mapped)  # init_process_group's env:// rendezvous reads MASTER_ADDR/PORT here
        env = {**env, **mapped}
    if "RANK" in env:
        return int(env["RANK"]), int(env.get("WORLD_SIZE", "1")), int(env.get("LOCAL_RANK", "0"))
    if "PET_NNODES" in env:
        if env.get("PET_NPROC_PER_NODE", "1") not in {"1", "auto"}:
            raise ConfigError(
                f"PET_NPROC_PER_NODE={env['PET_NPROC_PER_NODE']} needs torchrun: "
                "start the trainer with `python -m trainer.launch -m trainer ...`"
            )
        # One process per pod: the node rank is the global rank; torchrun-style rendezvous variables.
        os.environ.setdefault("MASTER_ADDR", env.get("PET_MASTER_ADDR", "localhost"))
        os.environ.setdefault("MASTER_PORT", env.get("PET_MASTER_PORT", "29500"))
        return int(env.get("PET_NODE_RANK", "0")), int(env["PET_NNODES"]), 0
    return 0, 1, 0


def _device(choice: str, local_rank: int) -> torch.device:
    """'cuda' (what rendered GPU jobs ask for) refuses to run without this rank's GPU; 'auto' (local runs)
    takes the GPUs when there are any and the CPU when there are none."""
    if choice == "cpu":
        return torch.device("cpu")
    visible = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if choice == "auto" and visible == 0:
        return torch.device("cpu")
    if not (torch.version.cuda or torch.version.hip):  # no restart gets a GPU into a CPU-only build
        raise ConfigError(
            f"train.device={choice!r} but this torch {torch.__version__} is built without CUDA or ROCm: "
            "run the cuda or rocm image (or allowed: train.device auto | cpu)"
        )
    if visible <= local_rank:
        raise GpuUnavailable(
            f"train.device={choice!r} but this process (local rank {local_rank}) sees {visible} GPU(s) "
            f"(CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', '<unset>')}, "
            f"HIP_VISIBLE_DEVICES={os.environ.get('HIP_VISIBLE_DEVICES', '<unset>')}): "
            "refusing to train on CPU; the node's GPU device plugin may not be ready"
        )
    torch.cuda.set_device(local_rank)
    return torch.device("cuda", local_rank)


def setup(cfg: TrainConfig) -> DistEnv:
    rank, world, local_rank = _ranks_from_env(dict(os.environ))
    device = _device(cfg.device, local_rank)
    if world > 1 and not dist.is_initialized():  # Ray Train (trainer.ray_train) makes it before the program
        # nccl on CUDA (PyTorch's ROCm build maps it to RCCL), gloo on CPU.
        dist.init_process_group(
            backend="nccl" if device.type == "cuda" else "gloo",
            timeout=datetime.timedelta(seconds=cfg.dist_timeout_s),
            rank=rank,
            world_size=world,
            device_id=device if device.type == "cuda" else None,
        )
    return DistEnv(rank=rank, world_size=world, local_rank=local_rank, device=device)


def teardown() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()


def launch_id(env: DistEnv) -> str:
    """A random id every rank of this launch shares (rank 0's) and no other launch has."""
    return str(broadcast_object(env, secrets.token_hex(8)))


def broadcast_object(env: DistEnv, obj: Any) -> Any:
    """Rank 0's `obj` on every rank."""
    if not env.distributed:
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def gather_objects(env: DistEnv, obj: Any) -> list[Any]:
    """Every rank's `obj`, in rank order, on every rank."""
    if not env.distributed:
        return [obj]
    out: list[Any] = [None] * env.world_size
    dist.all_gather_object(out, obj)
    return out


def all_reduce_sum(env: DistEnv, values: list[float]) -> list[float]:
    t = torch.tensor(values, dtype=torch.float64, device=env.device)
    if env.distributed:
        dist.all_reduce(t)
    return t.tolist()


def all_reduce_max(env: DistEnv, value: int) -> int:
    if not env.distributed:
        return value
    t = torch.tensor([value], dtype=torch.int64, device=env.device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return int(t.item())


def sum_over_ranks(env: DistEnv, values: torch.Tensor) -> list[float]:
    """`values` (a tensor on the device; summed in place) over every rank, read by the host once."""
    if env.distributed:
        dist.all_reduce(values)
    return values.tolist()


def max_over_ranks(env: DistEnv, values: torch.Tensor) -> list[int]:
    """`values` (integers on the device; maximised in place) over every rank, read by the host once."""
    if env.distributed:
        dist.all_reduce(values, op=dist.ReduceOp.MAX)
    return [int(v) for v in values.tolist()]


class GlobalSum:
    """A device tensor's sum over the ranks, started now (asynchronously) and waited for where it is first
    needed. On a GPU the wait only orders the device's work after the all-reduce: the host never blocks."""

    def __init__(self, env: DistEnv, value: torch.Tensor) -> None:
        self._value = value
        self._work = dist.all_reduce(value, async_op=True) if env.distributed else None

    def result(self) -> torch.Tensor:
        if self._work is not None:
            self._work.wait()
            self._work = None
        return self._value


def barrier(env: DistEnv) -> None:
    if env.distributed:
        dist.barrier()


class StopFlag:
    """SIGTERM (Spot reclaim, pod eviction, torchrun forwarding) asks for a checkpoint and a clean exit.

    The handler only sets a flag: the training step in flight finishes, then all ranks agree at a step
    boundary (a MAX all-reduce), so every rank stops at the same step even if only one got the signal.
    The vote runs on a gloo group of its own, on a CPU tensor, without waiting: a vote boundary reads the
    vote started at the previous one and starts the next, so a step never waits for the host to read a
    device value (on a GPU that sync would stop the CPU from queueing the next step's kernels) nor for
    the peers' votes to arrive.

    A vote is a collective, with its own thread hand-offs and a round trip: fast steps vote only about
    every `interval_s` seconds. Each rank proposes in its vote how many of its steps that is, and the
    ranks take the largest proposal in the same all-reduce, so they all reach the next vote boundary at
    the same step. A SIGTERM is honoured within about two intervals (or two steps, if steps are slower).
    """

    MAX_STEPS_BETWEEN_VOTES = 100

    def __init__(self, timeout_s: float = 1800, *, interval_s: float = 0.5, group: Any = None) -> None:
        """`interval_s`: 0 votes at every step. `group`: the process group to vote on (tests: one per
        thread); by default a gloo group of its own, made at the first vote."""
        self.requested = False
        self.timeout = datetime.timedelta(seconds=timeout_s)  # of the vote's group
        self.interval_s = interval_s
        self._group: Any = group
        self._vote: tuple[Any, torch.Tensor] | None = None
        self._every, self._since_vote, self._vote_time = 1, 0, time.monotonic()
        # Only the main thread may set a handler: Ray Train runs the program in a worker thread, where
        # SIGTERM ends the worker and Ray restarts the gang from the last periodic checkpoint instead.
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, self._on_signal)

    def _on_signal(self, signum: int, frame: Any) -> None:
        self.requested = True

    def poll(self, env: DistEnv) -> bool:
        """Every rank, at every step boundary: whether the ranks agreed to stop (by the vote started at the
        previous vote boundary); at a vote boundary, starts the next vote."""
        if not env.distributed:
            return self.requested
        self._since_vote += 1
        if self._since_vote < self._every:
            return False
        agreed = self._result()
        self._start(env)
        return agreed

    def agreed(self, env: DistEnv) -> bool:
        """Every rank, at the same step: whether any rank has been asked to stop by now (waits for a
        fresh vote); the next poll starts the next vote."""
        if not env.distributed:
            return self.requested
        earlier = self._result()
        self._start(env)
        now = self._result()
        self._since_vote = self._every - 1
        return now or earlier

    def _start(self, env: DistEnv) -> None:
        if self._group is None:  # every rank gets here first at the same step
            self._group = dist.new_group(backend="gloo", timeout=self.timeout)
        vote = torch.tensor([int(self.requested), self._proposal()], dtype=torch.int32)
        work = dist.all_reduce(vote, op=dist.ReduceOp.MAX, group=self._group, async_op=True)
        self._vote, self._since_vote, self._vote_time = (work, vote), 0, time.monotonic()

    def _proposal(self) -> int:
        """Steps until the next vote: about `interval_s` of this rank's steps since the last vote."""
        if not self.interval_s or not self._since_vote:
            return 1
        step_s = (time.monotonic() - self._vote_time) / self._since_vote
        return max(1, min(self.MAX_STEPS_BETWEEN_VOTES, int(self.interval_s / max(step_s, 1e-6))))

    def _result(self) -> bool:
        vote, self._vote = self._vote, None
        if vote is None:
            return False
        work, values = vote
        work.wait()
        stop, self._every = values.tolist()
        return bool(stop)
