"""torch.distributed's environment from Open MPI's, for a trainer started by `mpirun` instead of torchrun.

torchrun gives each process RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR and MASTER_PORT.
Open MPI (4.x and 5.x alike) gives each process it starts OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK and
_LOCAL_SIZE, and nothing about a rendezvous: the address of rank 0 must come from whoever runs `mpirun`
(`-x MASTER_ADDR=<address>`). In an MPIJob the hostfile's names are pod names that no DNS record resolves
(Training Operator v1 creates no Service for MPI jobs), so the launcher passes rank 0's pod IP.

Pure: no torch, no other module of this project, so it can be checked anywhere.
"""

from __future__ import annotations

from collections.abc import Mapping

OMPI_RANK = "OMPI_COMM_WORLD_RANK"
OMPI_SIZE = "OMPI_COMM_WORLD_SIZE"
OMPI_LOCAL_RANK = "OMPI_COMM_WORLD_LOCAL_RANK"
OMPI_LOCAL_SIZE = "OMPI_COMM_WORLD_LOCAL_SIZE"
DEFAULT_MASTER_PORT = "29500"  # torchrun's default


class MpiEnvError(ValueError):
    """An mpirun environment the trainer cannot build a process group from."""


def started_by_mpirun(env: Mapping[str, str]) -> bool:
    """Whether Open MPI started this process and no torchrun-style launcher set RANK already."""
    return OMPI_RANK in env and "RANK" not in env


def _int(env: Mapping[str, str], key: str, default: str | None = None) -> int:
    raw = env.get(key, default)
    if raw is None:
        raise MpiEnvError(f"{key} is unset: Open MPI sets it for every process that mpirun starts")
    try:
        value = int(raw)
    except ValueError:
        raise MpiEnvError(f"{key}={raw!r} is not an integer") from None
    if value < 0:
        raise MpiEnvError(f"{key}={raw!r} is negative")
    return value


def torch_env(env: Mapping[str, str]) -> dict[str, str]:
    """The torchrun variables for the process whose environment is `env` (Open MPI's). Raises
    MpiEnvError naming the variable when one is missing or wrong."""
    rank, size = _int(env, OMPI_RANK), _int(env, OMPI_SIZE)
    local_rank = _int(env, OMPI_LOCAL_RANK, "0")
    local_size = _int(env, OMPI_LOCAL_SIZE, "1")
    if not rank < size:
        raise MpiEnvError(f"{OMPI_RANK}={rank} is not below {OMPI_SIZE}={size}")
    if not local_rank < local_size:
        raise MpiEnvError(f"{OMPI_LOCAL_RANK}={local_rank} is not below {OMPI_LOCAL_SIZE}={local_size}")
    master = env.get("MASTER_ADDR", "")
    if not master:
        if size > 1:
            raise MpiEnvError(
                "MASTER_ADDR is unset: under mpirun every rank must be told rank 0's address; allowed: "
                "`mpirun -x MASTER_ADDR=<rank 0's host or IP> ...` (the MPIJob launcher passes it)"
            )
        master = "localhost"
    port = env.get("MASTER_PORT", DEFAULT_MASTER_PORT)
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise MpiEnvError(f"MASTER_PORT={port!r} is not a TCP port; allowed: 1-65535")
    return {
        "RANK": str(rank),
        "WORLD_SIZE": str(size),
        "LOCAL_RANK": str(local_rank),
        "LOCAL_WORLD_SIZE": str(local_size),
        "MASTER_ADDR": master,
        "MASTER_PORT": port,
    }
