"""`run-local` for a job with `operator: rayjob`: the RayJob's entry point (trainer.ray_train) on a local Ray.

The same driver, the same program and trainer config as on the cluster; `ray.init()` starts a Ray on this
machine, and the workers train on CPU with gloo. Ray is an optional extra: without it `run-local` stops
before anything runs and says what to install.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

INSTALL = "pip install -e '.[train,ray]'"
# A local Ray is one machine that nothing drains: Ray Train's PreemptionWatcher, an actor (a Python process
# of its own, seconds of CPU to start) polling Ray's drain state for the nodes of the run (Ray 2.60's
# ray/train/v2/_internal/callbacks/preemption_callback.py), has nothing to see, and its start competes with
# the workers' for the cores. Ray's own switch turns it off (ray/train/v2/_internal/constants.py
# RAY_TRAIN_ENABLE_PREEMPTION_WATCHER, read by the controller); a value in the environment wins.
LOCAL_RAY_ENV = {"RAY_TRAIN_ENABLE_PREEMPTION_WATCHER": "0"}


def ray_missing(stack_name: str) -> str | None:
    """Why this machine cannot run the job's Ray entry point, or None when it can."""
    if importlib.util.find_spec("ray") is not None:
        return None
    return (
        f"run-local {stack_name}: operator rayjob runs under Ray Train (ray[train]), which is not installed "
        f"in {sys.prefix}; install it: {INSTALL} (ray 2.60.0, about 630 MB), or try the job with torchrun: "
        "the same stack with operator: trainjob"
    )


def ray_launcher(nproc: int, run_dir: Path, name: str) -> list[str]:
    """The RayJob's entry point with `nproc` CPU workers; its run directory beside the checkpoints."""
    return [
        sys.executable,
        "-m",
        "trainer.ray_train",
        "--workers",
        str(nproc),
        "--name",
        name,
        "--storage-path",
        str(run_dir / "ray"),
        "--",
    ]
