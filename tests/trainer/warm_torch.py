"""Trainer ranks forked from an interpreter that has already imported torch (tests/warm_fork.py), for tests
that start dozens of 2-process runs.

A cold rank spends about 6 s of CPU before its first step on a 2-core machine, nearly all of it importing
torch and torch._dynamo (which every run's optimizer imports); the suite starts forty of them. torchrun
starts each rank as `$PYTHON_EXEC -u -m trainer ...` (torch/distributed/run.py reads PYTHON_EXEC, a
documented override of sys.executable), so a run given `warm_torch(...).env()` starts its ranks through the
server's stub, which torchrun starts, signals and kills as it would the rank. `python(env)` starts the run's
other torch processes (the launcher itself, a single-process trainer) from the server too. The cold runs of
test_distributed.py keep what a fork could change (each rank's own hash seed), and
test_a_warm_run_trains_what_a_cold_run_trains compares a warm run with a cold one bit for bit.
"""

from __future__ import annotations

import atexit
import sys
from collections.abc import Mapping

from tests.warm_fork import WARM_SUPPORTED, WarmServer

__all__ = ["WARM_SUPPORTED", "WarmTorch", "python", "warm_env", "warm_torch"]

# What every rank imports before the trainer's code runs (trainer/__main__.py), the libraries of the loop, and
# those an LLM run imports when it builds its model (trainer/llm/task.py).
PRELOAD = """
import torch._dynamo
import torch.distributed.run
import trainer.loop
import peft, transformers
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
"""


class WarmTorch(WarmServer):
    def env(self) -> dict[str, str]:
        """A run's variables that route its ranks to the server."""
        return {**super().env(), "PYTHON_EXEC": self.stub}


_SERVERS: list[WarmTorch] = []


def warm_torch(env: dict[str, str]) -> WarmTorch:
    """This test process's server: started on first use with `env` (a run's environment), closed at exit."""
    if not _SERVERS:
        _SERVERS.append(WarmTorch(PRELOAD, env))
        atexit.register(_SERVERS[0].close)
    return _SERVERS[0]


def warm_env(env: dict[str, str]) -> dict[str, str]:
    """`env` with what routes a run's processes to the server, where forks are supported (else `env`)."""
    return {**env, **warm_torch(env).env()} if WARM_SUPPORTED else env


def python(env: Mapping[str, str]) -> list[str]:
    """How a process of a run with `env` starts `python ...`: through the server's stub when `env` routes
    there (the stub takes torchrun's `-u` form only), else as this interpreter."""
    return [env["PYTHON_EXEC"], "-u"] if "WARM_FORK_SOCKET" in env else [sys.executable]
