"""`python -m trainer.bench [--strict] [--repeats N] [--data-mib N]`: throughput and memory figures of the
trainer (a benchmark, not a test; targets are checked here, and fail the exit code only with --strict).

1. trainer vs a bare loop with 1 process and with 2 (targets: >= 0.95 each), and the trainer's 2 processes
   vs 1 (target: >= 1.8x), start to first step. The bare loops are minimal loops of their own
   (trainer.bench_workers `bare`: forward, loss, backward, optimizer step; plain DDP with 2 processes) on
   the trainer's model, data, batch and optimizer. Every run is a process under the same launcher with
   one thread per process; the four kinds of run take turns, `--repeats` times, and each row is the
   median of its repeats, with the 1-minute load average during them (other work on the machine takes
   cores from whichever run is going: an idle machine gives the figures to compare with the targets);
2. data preparation of an N MiB JSONL file under 2 processes: peak memory and time per rank (local
   rank 0 tokenizes, the other maps its files);
3. on a CUDA machine: samples/s, tokens/s, MFU and peak memory for fp32 and AMP on a bigger model, and
   the bare loop on it;
4. checkpoint save s/GiB and the largest model that checkpoints in the Spot notice (trainer.checkpoint_bench).
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

REPEATS = 3


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m trainer.bench",
        description="Trainer benchmarks on this machine's CPUs (and its GPU, if any): trainer vs bare "
        "loops with 1 and 2 processes, 2 vs 1 processes, start-up time, data preparation memory per "
        "rank, checkpoint save time. Takes a quarter of an hour on 2 cores; prints progress, then a table.",
    )
    p.add_argument("--strict", action="store_true", help="exit 1 when a target is missed (default: report)")
    p.add_argument(
        "--repeats", type=int, default=REPEATS, help=f"runs per throughput row (>= 3, default {REPEATS})"
    )
    p.add_argument("--data-mib", type=float, default=100.0, help="size of the data-prep JSONL (default 100)")
    return p


if __name__ == "__main__":
    parser().parse_args()  # --help answers here, before torch is imported (seconds)

import numpy as np  # noqa: E402
import torch  # noqa: E402

from trainer import checkpoint_bench, zimdb  # noqa: E402
from trainer.config import JobConfig, build  # noqa: E402
from trainer.loop import run  # noqa: E402

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


def _spread(values: list[float]) -> str:
    return ", ".join(f"{v:,.0f}" for v in values)


def _launcher(nproc: int, *target: str) -> list[str]:
    # --standalone: the rendezvous store takes a port the OS picks, not torchrun's fixed 29500
    launcher = [sys.executable, "-m", "trainer.launch", "--standalone", "--nproc-per-node", str(nproc)]
    return [*launcher, "-m", *target]


@dataclass
class Run:
    samples_per_s: float
    load: float  # 1-minute load average, mean of its value before and after the run
    first_step_s: float = 0.0  # process start to first optimizer step
    cpu_s: float = 0.0  # CPU seconds of all its processes


def _run(cmd: list[str]) -> tuple[float, float]:
    """Runs `cmd` with one thread per process; (its CPU seconds, the load average around it)."""
    load, cpu_before = os.getloadavg()[0], resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run(cmd, env={**os.environ, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(
            f"{' '.join(cmd[:8])} … failed ({proc.returncode}):\n{proc.stdout[-2000:]}{proc.stderr[-3000:]}"
        )
    cpu_after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (cpu_after.ru_utime + cpu_after.ru_stime) - (cpu_before.ru_utime + cpu_before.ru_stime)
    return cpu, (load + os.getloadavg()[0]) / 2


def trainer_run(out: Path, nproc: int, steps: int = STEPS) -> Run:
    """The trainer under trainer.launch, the way a pod starts it (no gradient clipping: the bare loops
    have none; no evaluation or checkpoint inside the measured steps)."""
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
    started = time.time()
    cpu, load = _run(cmd)
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    first = next(r["time"] for r in rows if r["event"] == "first_step")
    speed = _trainer_samples_per_s(out) if steps > 1 else 0.0
    return Run(speed, load, first_step_s=first - started, cpu_s=cpu)


def bare_run(out: Path, nproc: int, sections: dict[str, Any] | None = None) -> Run:
    """The bare loop (trainer.bench_workers) on `nproc` processes; `sections` overrides the trainer's
    default config ({section: {field: value}})."""
    args = [str(out), str(STEPS)]
    if sections:
        config = out.with_suffix(".config.json")
        config.write_text(json.dumps(sections))
        args.append(str(config))
    _, load = _run(_launcher(nproc, "trainer.bench_workers", "bare", *args))
    return Run(json.loads(out.read_text())[0]["samples_per_s"], load)


def _median_row(label: str, runs: list[Run]) -> Row:
    speeds = [r.samples_per_s for r in runs]
    load = statistics.mean(r.load for r in runs)
    note = f"median of {len(runs)}: {_spread(speeds)}; load average {load:.1f} on {os.cpu_count()} CPUs"
    return Row(label, f"{statistics.median(speeds):,.0f} samples/s", note)


def throughput(repeats: int = REPEATS) -> list[Row]:
    runs: dict[tuple[str, int], list[Run]] = {(kind, n): [] for kind in ("bare", "trainer") for n in (1, 2)}
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(repeats):  # taking turns: load from other work hits every kind alike
            for n in (1, 2):
                progress(f"{n} process(es): bare loop, then trainer (repetition {i + 1}/{repeats})")
                runs["bare", n].append(bare_run(Path(tmp) / f"bare{n}-{i}.json", n))
                runs["trainer", n].append(trainer_run(Path(tmp) / f"trainer{n}-{i}", n))
        progress("samples per CPU-second, 1 and 2 processes")
        per_cpu = {n: _samples_per_cpu_second(Path(tmp), n) for n in (1, 2)}
    median = {key: statistics.median(r.samples_per_s for r in found) for key, found in runs.items()}
    rows = []
    for n in (1, 2):
        bare, trainer = runs["bare", n], runs["trainer", n]
        ratio = median["trainer", n] / median["bare", n]
        load = statistics.mean(r.load for r in bare + trainer)
        rows += [
            _median_row(f"bare loop, {n} process(es), 1 thread each" + (" (DDP)" if n > 1 else ""), bare),
            _median_row(f"trainer, {n} process(es), 1 thread each", trainer),
            _target(
                f"trainer / bare loop, {n} process(es)",
                f"{ratio:.2f}",
                ratio >= 0.95,
                ">= 0.95",
                f"; load average {load:.1f} on {os.cpu_count()} CPUs",
            ),
        ]
    speedup = median["trainer", 2] / median["trainer", 1]
    load = statistics.mean(r.load for n in (1, 2) for r in runs["trainer", n])
    efficiency = per_cpu[2] / per_cpu[1]
    start = {n: min(r.first_step_s for r in runs["trainer", n]) for n in (1, 2)}
    return rows + [
        _target(
            "trainer 2 processes / 1 process",
            f"{speedup:.2f}x",
            speedup >= 1.8,
            ">= 1.8x",
            f"; load average {load:.1f} on {os.cpu_count()} CPUs (2 processes need 2 free cores)",
        ),
        Row(
            "samples per CPU-second, 1 / 2 processes",
            f"{per_cpu[1]:,.0f} / {per_cpu[2]:,.0f}",
            f"2-process CPU efficiency {efficiency:.2f}: {2 * efficiency:.2f}x expected on 2 free cores",
        ),
        Row("start to first step, 1 process", f"{start[1]:.1f} s", "process spawn -> first optimizer step"),
        Row("start to first step, 2 processes", f"{start[2]:.1f} s", "includes torchrun rendezvous"),
    ]


def _samples_per_cpu_second(tmp: Path, nproc: int) -> float:
    """Training samples per CPU-second: a 1-step run's CPU (imports, set-up) is subtracted. Unlike
    samples/s it does not drop when other work on the machine takes a core away."""
    full = trainer_run(tmp / f"cpu{nproc}", nproc).cpu_s
    setup = trainer_run(tmp / f"setup{nproc}", nproc, steps=1).cpu_s
    return (STEPS - 1) * JobConfig().train.batch_size * nproc / (full - setup)


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
                train={"device": "cuda", "precision": precision, "batch_size": 64, "grad_clip": 0.0},
            )
            torch.cuda.reset_peak_memory_stats()
            _quiet_run(cfg)
            metrics = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
            train_rows = [r for r in metrics if r["event"] == "train"][1:]
            summary = json.loads((out / "summary.json").read_text())
            mfu = [r["mfu"] for r in train_rows if "mfu" in r]
            rows.append(
                Row(
                    f"CUDA {name}, {precision}",
                    f"{statistics.mean(r['samples_per_s'] for r in train_rows):,.0f} samples/s",
                    f"{statistics.mean(r['tokens_per_s'] for r in train_rows):,.0f} tokens/s, "
                    + (f"MFU {statistics.mean(mfu):.1%}, " if mfu else "no MFU (peak unknown), ")
                    + f"peak {max(r['gpu_mem_gb'] for r in train_rows):.2f} GiB, "
                    f"val acc {summary['val_accuracy']:.3f}",
                )
            )
        sections = {**big, "train": {"device": "cuda", "precision": "fp32", "batch_size": 64}}
        bare = bare_run(Path(tmp) / "bare.json", 1, sections)
        speed = f"{bare.samples_per_s:,.0f} samples/s"
        rows.append(Row(f"CUDA {name}, bare loop fp32", speed, "same model and batch"))
    return rows


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.repeats < 3:
        parser().error(f"--repeats {args.repeats}: allowed 3 or more (a median needs them)")
    print(
        f"trainer benchmark: torch {torch.__version__}, {os.cpu_count()} CPUs, load average "
        f"{os.getloadavg()[0]:.1f} (a shared machine makes every figure noisy)",
        flush=True,
    )
    rows = throughput(args.repeats) + data_memory(args.data_mib)
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
