"""`python -m trainer.bench`: throughput figures of the trainer (a benchmark, not a test).

1. trainer vs a bare PyTorch loop (forward, backward, optimizer step, nothing else) on the same model,
   batch and data, in this process, one thread each, interleaved and repeated (target: >= 0.95);
2. torchrun 2 processes vs 1 process on CPU, one thread each (target: >= 1.8x);
3. time from process start to the first optimizer step (1 process, and 2 under trainer.launch);
4. on a CUDA machine: samples/s, tokens/s and peak memory for fp32 and AMP on a bigger model.
Timings on a shared machine are noisy: every figure says how many repetitions it took the best of.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from trainer import data
from trainer.config import JobConfig, build
from trainer.loop import run
from trainer.model import build_model

REPEATS = 3
STEPS = 240  # the first fifth of each run is warm-up and not counted


def _job(out: Path, **sections: dict) -> JobConfig:
    values = {
        "train": {
            "max_steps": STEPS,
            "log_every": STEPS // 5,
            "eval_every": 10**6,
            **sections.get("train", {}),
        },
        "checkpoint": {"dir": str(out / "ckpt"), "every_steps": 10**6, "resume": False},
        "output": {"dir": str(out)},
        "data": sections.get("data", {}),
        "model": sections.get("model", {}),
    }
    return build(values)


def _quiet_run(cfg: JobConfig) -> None:
    with contextlib.redirect_stdout(io.StringIO()):  # the trainer's progress lines would bury the table
        code = run(cfg)
    if code != 0:
        raise SystemExit(f"trainer run failed with exit code {code}")


def _trainer_samples_per_s(out: Path) -> float:
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    windows = [r["samples_per_s"] for r in rows if r["event"] == "train"][1:]  # skip the warm-up window
    return statistics.harmonic_mean(windows)  # equal-sized windows: total samples / total time


def bare_loop_samples_per_s(cfg: JobConfig) -> float:
    """The same model, batches and optimizer as the trainer, with nothing around them."""
    device = torch.device("cuda" if cfg.train.device == "cuda" else "cpu")
    train, _ = data.load_splits(cfg.data, Path(tempfile.gettempdir()))
    encoder = data.train_tokenizer(cfg.data.tokenizer, [t for t, _ in train], cfg.data.vocab_size)
    ds = data.encode(train, encoder, cfg.data.max_len)
    loader = data.train_loader(
        ds, cfg.data, batch_size=cfg.train.batch_size, rank=0, world=1, seed=0, pin_memory=False
    )
    torch.manual_seed(0)
    max_positions = -(-cfg.data.max_len // cfg.data.pad_to_multiple) * cfg.data.pad_to_multiple
    model = build_model(cfg.model, vocab_size=encoder.vocab_size, max_positions=max_positions).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.train.lr)
    warmup, steps, done = STEPS // 5, 0, False
    while not done:
        for batch in loader:
            if steps == warmup:
                if device.type == "cuda":
                    torch.cuda.synchronize()
                start = time.perf_counter()
            batch = {k: v.to(device) for k, v in batch.items()}
            loss = torch.nn.functional.cross_entropy(
                model(batch["input_ids"], batch["attention_mask"]), batch["labels"]
            )
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            steps += 1
            if steps == STEPS:
                done = True
                break
    if device.type == "cuda":
        torch.cuda.synchronize()
    return (STEPS - warmup) * cfg.train.batch_size / (time.perf_counter() - start)


def trainer_vs_bare() -> list[tuple[str, str, str]]:
    torch.set_num_threads(1)
    trainer, bare = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(REPEATS):  # interleaved, so load from other processes hits both alike
            cfg = _job(Path(tmp) / f"t{i}", train={"grad_clip": 0.0, "device": "cpu"})
            bare.append(bare_loop_samples_per_s(cfg))
            _quiet_run(cfg)
            trainer.append(_trainer_samples_per_s(Path(tmp) / f"t{i}"))
    ratio = max(trainer) / max(bare)
    return [
        (
            "bare loop, 1 process, 1 thread",
            f"{max(bare):,.0f} samples/s",
            f"best of {REPEATS}: {_spread(bare)}",
        ),
        (
            "trainer, 1 process, 1 thread (no clipping)",
            f"{max(trainer):,.0f} samples/s",
            f"best of {REPEATS}: {_spread(trainer)}",
        ),
        (
            "trainer / bare loop",
            f"{ratio:.2f}",
            "target >= 0.95" + (" (met)" if ratio >= 0.95 else " (NOT met)"),
        ),
    ]


def _spread(values: list[float]) -> str:
    return ", ".join(f"{v:,.0f}" for v in values)


def _launch(out: Path, nproc: int, steps: int = STEPS) -> tuple[float, float, float]:
    """(samples/s, seconds from process start to first step, CPU seconds of all processes) of a run
    under trainer.launch, the way a pod starts it."""
    flags = {
        "train.max_steps": steps,
        "train.warmup_steps": min(JobConfig().train.warmup_steps, steps - 1),
        "train.log_every": max(1, steps // 5),
        "train.eval_every": 10**6,
        "checkpoint.every_steps": 10**6,
        "checkpoint.resume": "false",
        "train.device": "cpu",
        "output.dir": out,
        "checkpoint.dir": out / "ckpt",
    }
    cmd = [sys.executable, "-m", "trainer.launch", "--nproc-per-node", str(nproc), "-m", "trainer"]
    cmd += [arg for key, value in flags.items() for arg in (f"--{key}", str(value))]
    cpu_before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.time()
    subprocess.run(cmd, env={**os.environ, "OMP_NUM_THREADS": "1"}, check=True, capture_output=True)
    cpu_after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (cpu_after.ru_utime + cpu_after.ru_stime) - (cpu_before.ru_utime + cpu_before.ru_stime)
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    first = next(r["time"] for r in rows if r["event"] == "first_step")
    return (_trainer_samples_per_s(out) if steps > 1 else 0.0), first - started, cpu


def _samples_per_cpu_second(tmp: Path, nproc: int) -> float:
    """Training samples per CPU-second: a 1-step run's CPU (imports, set-up) is subtracted. Unlike
    samples/s it does not drop when other work on the machine takes a core away."""
    _, _, cpu_full = _launch(tmp / f"cpu{nproc}", nproc)
    _, _, cpu_setup = _launch(tmp / f"setup{nproc}", nproc, steps=1)
    return (STEPS - 1) * JobConfig().train.batch_size * nproc / (cpu_full - cpu_setup)


def scaling() -> list[tuple[str, str, str]]:
    one, two, start1, start2 = [], [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(2):
            s, t, _ = _launch(Path(tmp) / f"one{i}", 1)
            one.append(s)
            start1.append(t)
            s, t, _ = _launch(Path(tmp) / f"two{i}", 2)
            two.append(s)
            start2.append(t)
        per_cpu = {n: _samples_per_cpu_second(Path(tmp), n) for n in (1, 2)}
    speedup = max(two) / max(one)
    load = os.getloadavg()[0]  # 2 processes cannot reach 2x while other work holds a core
    efficiency = per_cpu[2] / per_cpu[1]
    return [
        ("torchrun 1 process, 1 thread", f"{max(one):,.0f} samples/s", f"best of 2: {_spread(one)}"),
        ("torchrun 2 processes, 1 thread each", f"{max(two):,.0f} samples/s", f"best of 2: {_spread(two)}"),
        (
            "2 processes / 1 process",
            f"{speedup:.2f}x",
            f"target >= 1.8x ({'met' if speedup >= 1.8 else 'NOT met'}; 1-min load average {load:.1f} "
            f"on {os.cpu_count()} CPUs)",
        ),
        (
            "samples per CPU-second, 1 / 2 processes",
            f"{per_cpu[1]:,.0f} / {per_cpu[2]:,.0f}",
            f"2-process CPU efficiency {efficiency:.2f}: {2 * efficiency:.2f}x expected on 2 free cores",
        ),
        ("start to first step, 1 process", f"{min(start1):.1f} s", "process spawn -> first optimizer step"),
        ("start to first step, 2 processes", f"{min(start2):.1f} s", "includes torchrun rendezvous"),
    ]


def cuda() -> list[tuple[str, str, str]]:
    rows = []
    big: dict[str, dict[str, Any]] = {
        "data": {"tokenizer": "bytes", "max_len": 256, "synthetic_train_size": 20000},
        "model": {"dim": 512, "layers": 6, "heads": 8, "ffn_dim": 2048},
    }
    name = torch.cuda.get_device_name()
    with tempfile.TemporaryDirectory() as tmp:
        for precision in ("fp32", "auto"):
            out = Path(tmp) / precision
            cfg = _job(
                out,
                data=big["data"],
                model=big["model"],
                train={"device": "cuda", "precision": precision, "batch_size": 64},
            )
            torch.cuda.reset_peak_memory_stats()
            _quiet_run(cfg)
            metrics = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
            train_rows = [r for r in metrics if r["event"] == "train"][1:]
            summary = json.loads((out / "summary.json").read_text())
            rows.append(
                (
                    f"CUDA {name}, {precision}",
                    f"{statistics.mean(r['samples_per_s'] for r in train_rows):,.0f} samples/s",
                    f"{statistics.mean(r['tokens_per_s'] for r in train_rows):,.0f} tokens/s, peak "
                    f"{max(r['gpu_mem_gb'] for r in train_rows):.2f} GiB, "
                    f"val acc {summary['val_accuracy']:.3f}",
                )
            )
        bare = bare_loop_samples_per_s(
            _job(
                Path(tmp) / "bare",
                data=big["data"],
                model=big["model"],
                train={"device": "cuda", "precision": "fp32", "batch_size": 64},
            )
        )
        rows.append((f"CUDA {name}, bare loop fp32", f"{bare:,.0f} samples/s", "same model and batch"))
    return rows


def main() -> int:
    print(
        f"trainer benchmark: torch {torch.__version__}, {os.cpu_count()} CPUs, load average "
        f"{os.getloadavg()[0]:.1f} (a shared machine makes every figure noisy)",
        flush=True,
    )
    rows = trainer_vs_bare() + scaling()
    if torch.cuda.is_available():
        rows += cuda()
    else:
        rows.append(("CUDA", "skipped", "no CUDA device visible"))
    width = max(len(r[0]) for r in rows)
    print(f"\n{'measure':<{width}}  {'value':>18}  notes")
    for label, value, note in rows:
        print(f"{label:<{width}}  {value:>18}  {note}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
