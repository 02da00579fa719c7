"""Helpers for trainer tests: real runs under torchrun (through trainer.launch), S3 faults, weight checks."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path

from botocore.exceptions import EndpointConnectionError

from tests.trainer.warm_torch import python, warm_env

REPO = Path(__file__).resolve().parents[2]

# A model and corpus small enough that a 2-process run takes seconds on a shared 2-core machine.
TINY = {
    "data.synthetic_train_size": 512,
    "data.synthetic_val_size": 64,
    "data.max_len": 24,
    "model.dim": 16,
    "model.layers": 1,
    "model.heads": 2,
    "model.ffn_dim": 32,
    "model.dropout": 0.1,  # non-zero so the resume test also covers the saved RNG streams
    "train.batch_size": 8,
    "train.warmup_steps": 5,
    "train.log_every": 5,
    "train.eval_every": 1000,
    "train.max_steps": 300,
    "checkpoint.every_steps": 1000,
    "output.metrics_port": 0,  # off: in-process and parallel runs would contend for the default port
}


def trainer_args(out: Path, **overrides) -> list[str]:
    """The tiny run's flags with `overrides`; an LLM run (`llm.model`) leaves out the classifier's model.*
    keys, which the trainer refuses beside it."""
    tiny = {k: v for k, v in TINY.items() if not ("llm.model" in overrides and k.startswith("model."))}
    values = {**tiny, "output.dir": out, "checkpoint.dir": out / "ckpt", **overrides}
    return [a for k, v in values.items() for a in (f"--{k}", str(v))]


def launch_cmd(
    out: Path,
    nproc: int = 2,
    rendezvous: tuple[str, ...] = ("--standalone",),
    interpreter: Sequence[str] = (sys.executable,),
    **overrides,
) -> list[str]:
    """`rendezvous`: torchrun's rendezvous flags; by default one node whose store takes a port the OS picks
    (torchrun's own default, a static store on port 29500, would collide with a parallel test's run).
    `interpreter`: how the launcher starts (`python(env)`: from the warm server when env routes there)."""
    return [
        *interpreter,
        "-m",
        "trainer.launch",
        *rendezvous,
        "--nproc-per-node",
        str(nproc),
        "-m",
        "trainer",
        *trainer_args(out, **overrides),
    ]


def run_env(cold: bool = True) -> dict[str, str]:
    """The environment of a run; unless `cold`, its ranks start from this process's warm torch server
    (warm_torch.py), which a cold run's ranks would be, less the seconds of importing torch."""
    env = {k: v for k, v in os.environ.items() if k not in {"RANK", "WORLD_SIZE", "LOCAL_RANK"}}
    env = {**env, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    return env if cold else warm_env(env)


def launch(
    out: Path, env: dict[str, str] | None = None, cold: bool = False, **overrides
) -> subprocess.CompletedProcess:
    """`env`: variables set for this run on top of run_env(); `cold`: the launcher and the ranks started as
    fresh interpreters."""
    run = {**run_env(cold), **(env or {})}
    return subprocess.run(
        launch_cmd(out, interpreter=python(run), **overrides),
        cwd=out.parent,
        env=run,
        capture_output=True,
        text=True,
        timeout=300,
    )


def cold_workers(out: Path) -> list[int]:
    """The processes started as `python -u -m trainer ... --output.dir out` by this interpreter's path: the
    workers of a launcher (warm or cold) that torchrun starts cold, not through the warm server's stub. A
    test that signals a worker finds it here: a warm launcher is no child of the process that started it."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            argv = (proc / "cmdline").read_bytes().decode().split("\0")
        except (OSError, ValueError):
            continue  # not a process, or one that ended meanwhile
        if argv[:4] == [sys.executable, "-u", "-m", "trainer"] and str(out) in argv:
            found.append(int(proc.name))
    return found


def scrape(port: int) -> dict[str, float]:
    """The samples a run's Prometheus endpoint on 127.0.0.1:`port` serves now."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    samples = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            samples[name] = float(value)
    return samples


def metrics(out: Path, event: str) -> list[dict]:
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return [r for r in rows if r["event"] == event]


def start_and_wait_for_step(
    out: Path, step: int, env: dict[str, str] | None = None, cold: bool = False, **overrides
) -> subprocess.Popen:
    """Start a 2-process run in the background and return once it has logged `step` (or ended)."""
    run = {**run_env(cold), **(env or {})}
    proc = subprocess.Popen(
        launch_cmd(out, interpreter=python(run), **overrides),
        cwd=out.parent,
        env=run,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        if (out / "metrics.jsonl").exists() and any(r["step"] >= step for r in metrics(out, "train")):
            break
        time.sleep(0.05)
    return proc


class FlakyS3:
    """A moto S3 client whose uploads fail the first `failures` times (S3 unavailable); with `prefix`,
    only uploads of keys under it count (the others, e.g. metrics, go through)."""

    def __init__(self, client, failures, prefix=""):
        self._client, self.failures, self.calls, self.prefix = client, failures, 0, prefix

    def _maybe_fail(self, key):
        if not key.startswith(self.prefix):
            return
        self.calls += 1
        if self.calls <= self.failures:
            raise EndpointConnectionError(endpoint_url="https://s3.us-east-1.amazonaws.com")

    def upload_file(self, filename, bucket, key, *args, **kwargs):
        self._maybe_fail(key)
        return self._client.upload_file(filename, bucket, key, *args, **kwargs)

    def put_object(self, **kwargs):
        self._maybe_fail(kwargs["Key"])
        return self._client.put_object(**kwargs)

    def __getattr__(self, name):
        return getattr(self._client, name)


def assert_same_weights(a: dict, b: dict) -> None:
    """Equal up to float reordering. The attention key bias gets an exactly-zero gradient in exact math
    (softmax ignores a shift), so Adam turns rounding noise there into steps of up to lr: looser for it."""
    import torch

    assert a.keys() == b.keys()
    for key in a:
        atol = 1e-3 if key.endswith("in_proj_bias") else 1e-5
        torch.testing.assert_close(a[key], b[key], rtol=1e-4, atol=atol, msg=lambda m, k=key: f"{k}: {m}")
