"""`python -m trainer.bench [--strict] [--data-mib N]`: throughput and memory figures of the trainer (a
benchmark, not a test; targets are checked here, and fail the exit code only with --strict).

1. trainer vs a bare PyTorch loop (forward, backward, optimizer step, nothing else) on the same model,
   batch and data, in this process, one thread each, interleaved and repeated (target: >= 0.95);
2. trainer vs a bare DDP loop, both 2 processes under the same launcher (target: >= 0.95), and the
   trainer's 2 processes vs 1 (target: >= 1.8x), start to first step;
3. data preparation of an N MiB JSONL file under 2 processes: peak memory and time per rank (local
   rank 0 tokenizes, the other maps its files);
4. on a CUDA machine: samples/s, tokens/s and peak memory for fp32 and AMP on a bigger model;
5. checkpoint save s/GiB and the largest model that checkpoints in the Spot notice (trainer.checkpoint_bench).
Timings on a shared machine are noisy: every figure says how many repetitions it took the best of.
"""

from __future__ import annotations

import argparse
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
from dataclasses import dataclass
from pathlib import Path
from typing import Any


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m trainer.bench",
        description="Trainer benchmarks on this machine's CPUs (and its GPU, if any): trainer vs bare "
        "loops (1 process, and DDP with 2), 2 vs 1 processes, start-up time, data preparation memory "
        "per rank. Takes a few minutes on 2 cores; prints progress, then a table.",
    )
    p.add_argument("--strict", action="store_true", help="exit 1 when a target is missed (default: report)")
    p.add_argument("--data-mib", type=float, default=100.0, help="size of the data-prep JSONL (default 100)")
    return p


if __name__ == "__main__":
    parser().parse_args()  # --help answers here, before torch is imported (seconds)

import numpy as np  # noqa: E402
import torch  # noqa: E402

from trainer import checkpoint_bench, data, zimdb  # noqa: E402
from trainer.config import JobConfig, build  # noqa: E402
from trainer.loop import run  # noqa: E402
from trainer.model import build_model  # noqa: E402

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


@dataclass
class Row:
    label: str
    value: str
    note: str
    met: bool | None = None  # a target's outcome; None: a figure without a target


def _target(label: str, value: str, met: bool, target: str, note: str = "") -> Row:
    return Row(label, value, f"target {target} ({'met' if met else 'NOT met'}){note}", met)


def progress(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", flush=True)


def trainer_vs_bare() -> list[Row]:
    torch.set_num_threads(1)
    trainer, bare = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(REPEATS):  # interleaved, so load from other processes hits both alike
            progress(f"1 process: bare loop and trainer, repetition {i + 1}/{REPEATS}")
            cfg = _job(Path(tmp) / f"t{i}", train={"grad_clip": 0.0, "device": "cpu"})
            bare.append(bare_loop_samples_per_s(cfg))
            _quiet_run(cfg)
            trainer.append(_trainer_samples_per_s(Path(tmp) / f"t{i}"))
    ratio = max(trainer) / max(bare)
    return [
        Row(
            "bare loop, 1 process, 1 thread",
            f"{max(bare):,.0f} samples/s",
            f"best of {REPEATS}: {_spread(bare)}",
        ),
        Row(
            "trainer, 1 process, 1 thread (no clipping)",
            f"{max(trainer):,.0f} samples/s",
            f"best of {REPEATS}: {_spread(trainer)}",
        ),
        _target("trainer / bare loop", f"{ratio:.2f}", ratio >= 0.95, ">= 0.95"),
    ]


def _spread(values: list[float]) -> str:
    return ", ".join(f"{v:,.0f}" for v in values)


def _launcher(nproc: int, *target: str) -> list[str]:
    # --standalone: the rendezvous store takes a port the OS picks, not torchrun's fixed 29500
    launcher = [sys.executable, "-m", "trainer.launch", "--standalone", "--nproc-per-node", str(nproc)]
    return [*launcher, "-m", *target]


def _launch(out: Path, nproc: int, steps: int = STEPS) -> tuple[float, float, float]:
    """(samples/s, seconds from process start to first step, CPU seconds of all processes) of a run
    under trainer.launch, the way a pod starts it (no gradient clipping: the bare loops have none)."""
    flags = {
        "train.max_steps": steps,
        "train.warmup_steps": min(JobConfig().train.warmup_steps, steps - 1),
        "train.log_every": max(1, steps // 5),
        "train.eval_every": 10**6,
        "train.grad_clip": 0.0,
        "checkpoint.every_steps": 10**6,
        "checkpoint.resume": "false",
        "train.device": "cpu",
        "output.dir": out,
        "output.metrics_port": 0,
        "checkpoint.dir": out / "ckpt",
    }
    cmd = _launcher(nproc, "trainer") + [arg for k, v in flags.items() for arg in (f"--{k}", str(v))]
    cpu_before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.time()
    _run(cmd)
    cpu_after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (cpu_after.ru_utime + cpu_after.ru_stime) - (cpu_before.ru_utime + cpu_before.ru_stime)
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    first = next(r["time"] for r in rows if r["event"] == "first_step")
    return (_trainer_samples_per_s(out) if steps > 1 else 0.0), first - started, cpu


def _run(cmd: list[str]) -> None:
    proc = subprocess.run(cmd, env={**os.environ, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(
            f"{' '.join(cmd[:8])} … failed ({proc.returncode}):\n{proc.stdout[-2000:]}{proc.stderr[-3000:]}"
        )


def _bare_ddp(out: Path) -> float:
    _run(_launcher(2, "trainer.bench_workers", "bare-ddp", str(out), str(STEPS)))
    return json.loads(out.read_text())[0]["samples_per_s"]


def _samples_per_cpu_second(tmp: Path, nproc: int) -> float:
    """Training samples per CPU-second: a 1-step run's CPU (imports, set-up) is subtracted. Unlike
    samples/s it does not drop when other work on the machine takes a core away."""
    _, _, cpu_full = _launch(tmp / f"cpu{nproc}", nproc)
    _, _, cpu_setup = _launch(tmp / f"setup{nproc}", nproc, steps=1)
    return (STEPS - 1) * JobConfig().train.batch_size * nproc / (cpu_full - cpu_setup)


def distributed() -> list[Row]:
    one, two, bare, start1, start2 = [], [], [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(2):  # interleaved, so load from other processes hits all three alike
            progress(f"2 processes: bare DDP loop, trainer; 1 process: trainer (repetition {i + 1}/2)")
            bare.append(_bare_ddp(Path(tmp) / f"bare{i}.json"))
            s, t, _ = _launch(Path(tmp) / f"two{i}", 2)
            two.append(s)
            start2.append(t)
            s, t, _ = _launch(Path(tmp) / f"one{i}", 1)
            one.append(s)
            start1.append(t)
        progress("samples per CPU-second, 1 and 2 processes")
        per_cpu = {n: _samples_per_cpu_second(Path(tmp), n) for n in (1, 2)}
    ratio, speedup = max(two) / max(bare), max(two) / max(one)
    load = os.getloadavg()[0]  # 2 processes cannot reach 2x while other work holds a core
    efficiency = per_cpu[2] / per_cpu[1]
    return [
        Row(
            "bare DDP loop, 2 processes, 1 thread each",
            f"{max(bare):,.0f} samples/s",
            f"best of 2: {_spread(bare)}",
        ),
        Row(
            "trainer, 2 processes, 1 thread each", f"{max(two):,.0f} samples/s", f"best of 2: {_spread(two)}"
        ),
        _target("trainer / bare DDP loop, 2 processes", f"{ratio:.2f}", ratio >= 0.95, ">= 0.95"),
        Row("trainer, 1 process, 1 thread", f"{max(one):,.0f} samples/s", f"best of 2: {_spread(one)}"),
        _target(
            "trainer 2 processes / 1 process",
            f"{speedup:.2f}x",
            speedup >= 1.8,
            ">= 1.8x",
            f"; 1-min load average {load:.1f} on {os.cpu_count()} CPUs",
        ),
        Row(
            "samples per CPU-second, 1 / 2 processes",
            f"{per_cpu[1]:,.0f} / {per_cpu[2]:,.0f}",
            f"2-process CPU efficiency {efficiency:.2f}: {2 * efficiency:.2f}x expected on 2 free cores",
        ),
        Row(
            "start to first step, 1 process", f"{min(start1):.1f} s", "process spawn -> first optimizer step"
        ),
        Row("start to first step, 2 processes", f"{min(start2):.1f} s", "includes torchrun rendezvous"),
    ]


def write_reviews_jsonl(path: Path, mib: float) -> None:
    """A JSONL file of zIMDB-like reviews, `mib` MiB, quickly (numpy draws, no per-word Python loop)."""
    rng = np.random.default_rng(0)
    words = np.array(zimdb.PLOT_WORDS + zimdb.POSITIVE + zimdb.NEGATIVE)
    with open(path, "w") as f:
        while f.tell() < mib * 2**20:
            lines = (
                json.dumps({"text": " ".join(rng.choice(words, rng.integers(50, 300))), "label": i % 2})
                for i in range(1000)
            )
            f.write("\n".join(lines) + "\n")


def data_memory(mib: float) -> list[Row]:
    with tempfile.TemporaryDirectory() as tmp:
        source, out = Path(tmp) / "reviews.jsonl", Path(tmp) / "prep.json"
        progress(f"data: writing a {mib:g} MiB JSONL file")
        write_reviews_jsonl(source, mib)
        size = source.stat().st_size / 2**20
        progress("data: preparing it under 2 processes (local rank 0 tokenizes, the other maps the files)")
        _run(_launcher(2, "trainer.bench_workers", "data-prep", str(source), str(out)))
        ranks = json.loads(out.read_text())
    return [
        Row(
            f"data prep {size:.0f} MiB JSONL, rank {r['rank']} of 2",
            f"{r['peak_rss_mib']:,.0f} MiB peak",
            f"+{r['rss_growth_mib']:,.0f} MiB over the imports, {r['seconds']:.1f} s, {r['examples']:,} "
            + ("examples tokenized" if r["rank"] == 0 else "examples memory-mapped from rank 0's files"),
        )
        for r in ranks
    ]


def cuda() -> list[Row]:
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
                Row(
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
        rows.append(Row(f"CUDA {name}, bare loop fp32", f"{bare:,.0f} samples/s", "same model and batch"))
    return rows


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    print(
        f"trainer benchmark: torch {torch.__version__}, {os.cpu_count()} CPUs, load average "
        f"{os.getloadavg()[0]:.1f} (a shared machine makes every figure noisy)",
        flush=True,
    )
    rows = trainer_vs_bare() + distributed() + data_memory(args.data_mib)
    progress("checkpoint save: sharded (DCP) vs full state on rank 0")
    rows += [Row(*r) for r in checkpoint_bench.rows()]
    if torch.cuda.is_available():
        progress("CUDA: fp32 and AMP")
        rows += cuda()
    else:
        rows.append(Row("CUDA", "skipped", "no CUDA device visible"))
    width = max(len(r.label) for r in rows)
    print(f"\n{'measure':<{width}}  {'value':>18}  notes")
    for r in rows:
        print(f"{r.label:<{width}}  {r.value:>18}  {r.note}")
    return exit_code(rows, strict=args.strict)


def exit_code(rows: list[Row], *, strict: bool) -> int:
    missed = [r.label for r in rows if r.met is False]
    if missed:
        print(f"\ntargets missed: {', '.join(missed)}" + ("" if strict else " (exit 0: no --strict)"))
    return 1 if strict and missed else 0


if __name__ == "__main__":
    sys.exit(main())
