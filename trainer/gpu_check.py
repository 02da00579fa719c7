"""Post-provisioning check of a GPU platform, run under torchrun on every node of a job.

1. Per node: the GPUs visible in the container equal the count the pod requested (`--expect-gpus`).
2. Across ranks: an all-reduce bandwidth sweep; rank 0 prints time, algorithm and bus bandwidth (GB/s,
   nccl-tests' definitions) per message size, and the check fails when the bus bandwidth of the largest
   message is below `--min-busbw-gbps`.

Uses torch only (no project imports) so it ships as a single file in a ConfigMap and runs from any image
with torch. On CPU it runs the same sweep over gloo: `--device cpu --expect-gpus 0`.
Exit codes: 0 pass, 1 a check failed, 2 bad arguments.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import time
from datetime import timedelta

DEFAULT_SIZES = "1KiB,64KiB,1MiB,16MiB,64MiB"
UNITS = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}


class CheckFailed(Exception):
    pass


def parse_size(text: str) -> int:
    for unit in sorted(UNITS, key=len, reverse=True):
        if text.endswith(unit) and text[: -len(unit)].isdigit():
            return int(text[: -len(unit)]) * UNITS[unit]
    raise argparse.ArgumentTypeError(
        f"size {text!r}: expected <integer><unit>, unit one of {', '.join(UNITS)}"
    )


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--expect-gpus", type=int, required=True, help="GPUs each node's pod requested (0 on CPU)")
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda", help="cuda (NCCL) or cpu (gloo)")
    p.add_argument("--sizes", default=DEFAULT_SIZES, help=f"comma-separated message sizes ({DEFAULT_SIZES})")
    p.add_argument("--warmup", type=int, default=5, help="untimed all-reduces per size")
    p.add_argument("--iters", type=int, default=20, help="timed all-reduces per size")
    p.add_argument("--min-busbw-gbps", type=float, default=0.0, help="fail below this bus bandwidth, GB/s")
    args = p.parse_args(argv)
    try:
        args.sizes = [parse_size(s.strip()) for s in args.sizes.split(",")]
    except argparse.ArgumentTypeError as err:
        p.error(str(err))
    if args.expect_gpus < 0 or args.warmup < 0 or args.iters < 1:
        p.error("--expect-gpus and --warmup must be >= 0, --iters >= 1")
    if args.device == "cpu" and args.expect_gpus:
        p.error("--device cpu checks no GPUs: pass --expect-gpus 0")
    return args


if __name__ == "__main__":
    parse_args(None)  # --help and bad arguments answer here, before torch is imported (seconds)

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402


def check_visible_gpus(expected: int, device: str, local_world: int) -> str:
    """The node's GPU facts as one line, or CheckFailed. No fallback to CPU: a missing GPU is a failure."""
    if device == "cpu":
        return f"{socket.gethostname()}: cpu, {os.cpu_count()} cores"
    if not torch.cuda.is_available():
        raise CheckFailed(f"{socket.gethostname()}: CUDA is not available (driver or device plugin missing?)")
    visible = torch.cuda.device_count()
    if visible != expected:
        raise CheckFailed(f"{socket.gethostname()}: {visible} GPUs visible, the pod requested {expected}")
    if local_world > visible:
        raise CheckFailed(f"{socket.gethostname()}: {local_world} processes for {visible} GPUs")
    names = sorted({torch.cuda.get_device_name(i) for i in range(visible)})
    return f"{socket.gethostname()}: {visible} x {', '.join(names)}"


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_all_reduce(size: int, device: torch.device, warmup: int, iters: int) -> float:
    """Seconds per all-reduce of `size` bytes, the slowest rank's (a collective is as fast as that)."""
    tensor = torch.ones(max(1, size // 4), dtype=torch.float32, device=device)
    for _ in range(warmup):
        dist.all_reduce(tensor)
    _sync(device)
    dist.barrier()
    start = time.perf_counter()
    for _ in range(iters):
        dist.all_reduce(tensor)
    _sync(device)
    elapsed = torch.tensor([(time.perf_counter() - start) / iters], dtype=torch.float64, device=device)
    dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
    return float(elapsed.item())


def check_sum(device: torch.device, world: int) -> None:
    t = torch.ones(4, device=device)
    dist.all_reduce(t)
    if not torch.all(t == world):
        raise CheckFailed(f"all-reduce of ones gave {t.tolist()}, expected {world}: a rank computes wrongly")


def sweep(args: argparse.Namespace, device: torch.device, rank: int, world: int) -> float:
    """Print the bandwidth table on rank 0; return the largest message's bus bandwidth (GB/s)."""
    if rank == 0:
        print(f"{'size':>10} {'time_us':>10} {'algbw_GB/s':>11} {'busbw_GB/s':>11}", flush=True)
    busbw = 0.0
    for size in args.sizes:
        seconds = time_all_reduce(size, device, args.warmup, args.iters)
        algbw = size / seconds / 1e9
        busbw = algbw * 2 * (world - 1) / world  # bytes each rank moves in a ring all-reduce
        if rank == 0:
            print(f"{size:>10} {seconds * 1e6:>10.1f} {algbw:>11.3f} {busbw:>11.3f}", flush=True)
    return busbw


def check_floor(busbw: float, floor: float, world: int, what: str) -> None:
    if world == 1 and floor > 0:
        raise CheckFailed("one rank moves no all-reduce traffic: a bandwidth floor needs >= 2 ranks")
    if busbw < floor:
        raise CheckFailed(
            f"bus bandwidth {busbw:.3f} GB/s is below the floor {floor} GB/s ({what}, {world} ranks)"
        )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    rank, world = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    local_rank, local_world = (
        int(os.environ.get("LOCAL_RANK", "0")),
        int(os.environ.get("LOCAL_WORLD_SIZE", "1")),
    )
    try:
        node = check_visible_gpus(args.expect_gpus, args.device, local_world)
        if local_rank == 0:
            print(f"node check ok: {node}", flush=True)
        if args.device == "cuda":
            torch.cuda.set_device(local_rank)
            device = torch.device("cuda", local_rank)
        else:
            device = torch.device("cpu")
        if "MASTER_ADDR" not in os.environ:
            raise CheckFailed("no torchrun environment (MASTER_ADDR unset): run under torchrun")
        backend = "nccl" if device.type == "cuda" else "gloo"
        dist.init_process_group(backend, timeout=timedelta(minutes=5))
        try:
            check_sum(device, world)
            busbw = sweep(args, device, rank, world)
        finally:
            dist.destroy_process_group()
        check_floor(busbw, args.min_busbw_gbps, world, f"{args.sizes[-1]} bytes, {backend}")
    except CheckFailed as err:
        print(f"gpu-check FAILED on rank {rank}: {err}", file=sys.stderr, flush=True)
        return 1
    if rank == 0:
        print(f"gpu-check passed: {world} ranks, {backend}, bus bandwidth {busbw:.3f} GB/s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
