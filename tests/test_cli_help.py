"""Every command the README names answers --help at once: exit 0, its usage on stdout, nothing started and
no file written (in the working directory, $HOME or $TMPDIR)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PY = [sys.executable, "-m"]

COMMANDS = {
    "policy.scan": ([*PY, "policy.scan", "--help"], "usage: python -m policy.scan"),
    "policy": ([*PY, "policy", "--help"], "usage: pulumi preview|up --policy-pack policy"),
    "build-images.sh": (
        [str(REPO / "scripts" / "build-images.sh"), "--help"],
        "scripts/build-images.sh --stack",
    ),
    "infra": ([*PY, "infra", "--help"], "usage: python -m infra"),
    "infra synth": ([*PY, "infra", "synth", "--help"], "usage: python -m infra synth"),
    "workloads": ([*PY, "workloads", "--help"], "usage: python -m workloads"),
    **{
        f"workloads {sub}": ([*PY, "workloads", sub, "--help"], f"usage: python -m workloads {sub}")
        for sub in ("render", "run-local", "status", "logs")
    },
    "trainer": ([*PY, "trainer", "--help"], "usage: python -m trainer"),
    "trainer.launch": ([*PY, "trainer.launch", "--help"], "usage: "),
    "trainer.mpi_launch": ([*PY, "trainer.mpi_launch", "--help"], "usage: python -m trainer.mpi_launch"),
    "trainer.mpi_worker": ([*PY, "trainer.mpi_worker", "--help"], "usage: python -m trainer.mpi_worker"),
    "trainer.bench": ([*PY, "trainer.bench", "--help"], "usage: python -m trainer.bench"),
    "trainer.checkpoint_bench": (
        [*PY, "trainer.checkpoint_bench", "--help"],
        "usage: python -m trainer.checkpoint_bench",
    ),
}


@pytest.mark.parametrize("name", COMMANDS)
def test_help_exits_0_with_usage_and_no_side_effects(name, tmp_path):
    command, usage = COMMANDS[name]
    cwd, home, tmp = (tmp_path / d for d in ("cwd", "home", "tmp"))
    for d in (cwd, home, tmp):
        d.mkdir()
    env = os.environ | {"HOME": str(home), "TMPDIR": str(tmp), "PYTHONDONTWRITEBYTECODE": "1"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    start = time.monotonic()
    proc = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=60)
    took = time.monotonic() - start
    assert proc.returncode == 0, proc.stderr
    assert usage in proc.stdout
    assert took < 30, f"{name} --help took {took:.0f} s: it did work before parsing its arguments"
    assert [p for d in (cwd, home, tmp) for p in d.rglob("*")] == []
