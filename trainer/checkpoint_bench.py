"""Checkpoint figures for `python -m trainer.bench`: save seconds per GiB of training state, sharded (every
rank writes, hashes and publishes its own DCP shard) against the full state gathered to rank 0 (what the
trainer did before), and the largest model whose checkpoint fits in a Spot interruption notice.

`python -m trainer.checkpoint_bench` prints the rows alone. Each figure comes from a real torchrun run
(gloo on CPU, or NCCL with the state staged off the GPU when one is visible) saving a stack of linear
layers with its AdamW state into a local directory.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SPOT_NOTICE_S = 120
MARGIN_S = 20  # the step in flight, the SIGTERM agreement and the exit, out of the notice
S3_MIB_PER_S_PER_RANK = 200  # assumed: boto3 upload_file defaults (8 MiB parts, 10 threads) from one pod
BYTES_PER_PARAM = 12  # fp32 weights + AdamW's two fp32 moments
WIDTH, LAYERS = 1024, 40  # 42 M parameters: 0.47 GiB of state
REPEATS = 2
TAG = "CHECKPOINT_BENCH "


def _worker(out: Path, mode: str) -> None:
    import os

    import torch
    from torch import nn
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict
    from torch.distributed.fsdp import fully_shard

    from trainer.checkpoint import CheckpointManager, _sha256
    from trainer.config import TrainConfig
    from trainer.dist import DistEnv, barrier, setup, teardown
    from trainer.storage import LocalStorage

    env: DistEnv = setup(TrainConfig(max_steps=1))
    model = nn.Sequential(*(nn.Linear(WIDTH, WIDTH) for _ in range(LAYERS))).to(env.device)
    if env.distributed:
        for layer in model:
            fully_shard(layer)
        fully_shard(model)
    optimizer = torch.optim.AdamW(model.parameters())
    model(torch.ones(2, WIDTH, device=env.device)).sum().backward()
    optimizer.step()  # creates the moments: the state a real checkpoint holds
    state_bytes = LAYERS * (WIDTH * WIDTH + WIDTH) * BYTES_PER_PARAM
    ckpt = CheckpointManager(LocalStorage(out / "ckpt"), keep=2, workdir=out)
    ckpt.begin(env, resume=False)
    times = []
    for step in range(1, REPEATS + 1):
        barrier(env)
        start = time.perf_counter()
        if mode == "sharded":
            assert ckpt.save(env, step, model, optimizer, {"step": step})
        elif mode == "async":  # what training waits for: the copy to CPU memory; the rest overlaps
            assert ckpt.save(env, step, model, optimizer, {"step": step}, blocking=False) is None
            times.append(time.perf_counter() - start)
            assert ckpt.wait()
            continue
        else:  # the earlier design: gather everything to rank 0, which writes and hashes one file
            options = StateDictOptions(full_state_dict=True, cpu_offload=True)
            full = get_state_dict(model, optimizer, options=options)
            if env.is_main:
                path = out / f"full-{step}.pt"
                torch.save(full, path)
                with open(path, "rb+") as f:  # as LocalStorage.put_file did
                    os.fsync(f.fileno())
                _sha256(path)
                path.unlink()
            barrier(env)
        times.append(time.perf_counter() - start)
    if env.is_main:
        print(TAG + json.dumps({"seconds": min(times), "gib": state_bytes / 2**30}), flush=True)
    teardown()


def measure(nproc: int, mode: str) -> dict:
    with tempfile.TemporaryDirectory(prefix="ckpt-bench-") as tmp:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(nproc)]
        cmd += ["-m", "trainer.checkpoint_bench", "--worker", tmp, mode]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=_env())
    line = next((x for x in proc.stdout.splitlines() if x.startswith(TAG)), None)
    if proc.returncode != 0 or line is None:
        raise SystemExit(f"checkpoint bench ({mode}, {nproc} procs) failed:\n{proc.stdout}\n{proc.stderr}")
    return json.loads(line[len(TAG) :])


def _env() -> dict[str, str]:
    import os

    root = str(Path(__file__).resolve().parents[1])
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": root}


def largest_params(s_per_gib_per_rank: float, ranks: int) -> float:
    """Parameters whose state each of `ranks` pods writes locally and uploads within the budget."""
    per_gib = s_per_gib_per_rank + 1024 / S3_MIB_PER_S_PER_RANK
    gib_per_rank = (SPOT_NOTICE_S - MARGIN_S) / per_gib
    return gib_per_rank * 2**30 * ranks / BYTES_PER_PARAM


def rows() -> list[tuple[str, str, str]]:
    out = []
    one, sharded, full = measure(1, "sharded"), measure(2, "sharded"), measure(2, "full")
    stall = measure(2, "async")
    for name, nproc, m, how in (
        ("sharded (DCP)", 1, one, "one rank: its shard is the whole state"),
        ("sharded (DCP)", 2, sharded, "every rank writes, hashes and publishes its shard"),
        ("full state on rank 0", 2, full, "gathered, one file, fsync, hashed (the previous design)"),
        ("background (async), training stall", 2, stall, "copy to CPU memory; writing overlaps training"),
    ):
        out.append(
            (
                f"checkpoint save, {name}, {nproc} proc(s)",
                f"{m['seconds'] / m['gib']:.2f} s/GiB",
                f"{m['gib']:.2f} GiB of weights + AdamW state in {m['seconds']:.2f} s, "
                f"best of {REPEATS}; {how}",
            )
        )
    per_rank = one["seconds"] / one["gib"]  # one rank per pod, each with its own disk and network
    for ranks in (1, 4):
        out.append(
            (
                f"largest model checkpointed in the Spot notice, {ranks} pod(s)",
                f"{largest_params(per_rank, ranks) / 1e9:.2f} B params",
                f"{SPOT_NOTICE_S} s notice - {MARGIN_S} s margin; local write {per_rank:.2f} s/GiB per "
                f"rank (measured) + S3 upload at {S3_MIB_PER_S_PER_RANK} MiB/s per pod (assumed); "
                f"{BYTES_PER_PARAM} B/param",
            )
        )
    return out


def main(argv: list[str]) -> int:
    if argv[:1] == ["--worker"]:
        _worker(Path(argv[1]), argv[2])
        return 0
    # Parsed before any work, so `--help` (and a typo) answers at once instead of starting torchrun runs.
    argparse.ArgumentParser(
        prog="python -m trainer.checkpoint_bench", description=__doc__.split("\n\n")[0]
    ).parse_args(argv)
    table = rows()
    width = max(len(r[0]) for r in table)
    for label, value, note in table:
        print(f"{label:<{width}}  {value:>18}  {note}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
