"""Worker programs `trainer.bench` runs under `trainer.launch` (torchrun), one per rank:

bare OUT.json STEPS [CONFIG.json]
                           the trainer's model, data, batch and optimizer (the trainer's defaults, or the
                           {section: {field: value}} of CONFIG.json) in a minimal loop of its own: forward,
                           loss, backward, optimizer step, nothing else; plain DDP with 2 processes or
                           more. The yardstick of the trainer's throughput
data-prep SOURCE OUT.json  the trainer's data preparation (trainer.token_store) on SOURCE; every rank
                           reports its peak resident memory and the time it spent
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import secrets
import sys
import tempfile
import time
from pathlib import Path


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m trainer.bench_workers",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = p.add_subparsers(dest="worker", required=True)
    loop = sub.add_parser(
        "bare", help="a minimal loop (plain DDP with 2 processes) on the trainer's model and data"
    )
    loop.add_argument("out", type=Path)
    loop.add_argument("steps", type=int)
    loop.add_argument(
        "config", type=Path, nargs="?", help="{section: {field: value}} over the trainer's defaults"
    )
    prep = sub.add_parser("data-prep", help="the trainer's data preparation; peak memory and time per rank")
    prep.add_argument("source")
    prep.add_argument("out", type=Path)
    return p.parse_args(argv)


if __name__ == "__main__":
    parse_args(None)  # --help and bad arguments answer here, before torch is imported (seconds)

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.nn.parallel import DistributedDataParallel  # noqa: E402
from torch.utils.data import DistributedSampler  # noqa: E402

from trainer import data, token_store  # noqa: E402
from trainer.config import DataConfig, JobConfig, build  # noqa: E402
from trainer.guards import fused_kernel  # noqa: E402
from trainer.model import build_model  # noqa: E402


def peak_rss_mib() -> float:
    """This process's peak resident memory. VmHWM, not getrusage's ru_maxrss: that one carries over the
    RSS of the process it was forked from (the launcher, with torch imported) across exec."""
    try:
        status = Path("/proc/self/status").read_text()
    except OSError:  # not Linux: ru_maxrss (bytes on macOS)
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    return int(next(line for line in status.splitlines() if line.startswith("VmHWM:")).split()[1]) / 1024


def _gather_to_rank0(row: dict, out: Path) -> None:
    rows: list = [None] * dist.get_world_size()
    dist.all_gather_object(rows, row)
    if dist.get_rank() == 0:
        out.write_text(json.dumps(rows))


def bare(out: Path, steps: int, cfg: JobConfig) -> None:
    rank, world = dist.get_rank(), dist.get_world_size()
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    device = torch.device("cuda", local_rank) if cfg.train.device == "cuda" else torch.device("cpu")
    train, _ = data.load_splits(cfg.data, Path(tempfile.gettempdir()))
    encoder = data.train_tokenizer(cfg.data.tokenizer, (t for t, _ in train), cfg.data.vocab_size)
    ds = data.encode(train, encoder, cfg.data.max_len)
    sampler: DistributedSampler = DistributedSampler(
        ds, num_replicas=world, rank=rank, shuffle=True, seed=0, drop_last=True
    )
    loader = torch.utils.data.DataLoader(
        ds,
        batch_size=cfg.train.batch_size,
        sampler=sampler,
        collate_fn=data.PadCollate(cfg.data.pad_to_multiple),
        drop_last=True,
    )
    torch.manual_seed(0)
    max_positions = -(-cfg.data.max_len // cfg.data.pad_to_multiple) * cfg.data.pad_to_multiple
    model = build_model(cfg.model, vocab_size=encoder.vocab_size, max_positions=max_positions).to(device)
    if world > 1:
        model = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    # The trainer's optimizer, built the same way (fused AdamW, its learning rate and weight decay).
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=cfg.train.lr, weight_decay=cfg.train.weight_decay, fused=fused_kernel(device)
    )
    warmup, done, epoch, start = steps // 5, 0, 0, time.perf_counter()
    while done < steps:
        sampler.set_epoch(epoch)
        for batch in loader:
            if done == warmup:
                if device.type == "cuda":
                    torch.cuda.synchronize()
                start = time.perf_counter()
            batch = {k: v.to(device, non_blocking=True) for k, v in batch.items()}
            loss = torch.nn.functional.cross_entropy(
                model(batch["input_ids"], batch["attention_mask"]), batch["labels"]
            )
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            done += 1
            if done == steps:
                break
        epoch += 1
    if device.type == "cuda":
        torch.cuda.synchronize()
    samples_per_s = (steps - warmup) * cfg.train.batch_size * world / (time.perf_counter() - start)
    _gather_to_rank0({"rank": rank, "samples_per_s": samples_per_s}, out)


def _launch_id() -> str:
    box = [secrets.token_hex(8)]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def data_prep(source: str, out: Path) -> None:
    cfg = DataConfig(source=source)
    # Growth is measured over the imports and the first collective (gloo sets up its buffers then), so it
    # is what the data costs a rank: the tokenizing rank's grows with the source, a mapping rank's not.
    import tokenizers  # noqa: F401  (imported by the first tokenizer a rank builds or loads)

    shared = token_store.node_scratch_dir("bench-data", _launch_id())
    before = peak_rss_mib()
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench-") as workdir:  # only an s3:// source is copied there
        prepared = token_store.prepare(
            cfg,
            num_labels=2,
            model_name="transformer",
            tokenizer_spec=None,
            workdir=Path(workdir),
            shared=shared,
            local_rank=int(os.environ.get("LOCAL_RANK", "0")),
        )
    touched = sum(len(prepared.train[i][0]) for i in range(0, len(prepared.train), 97))  # read the data
    row = {
        "rank": dist.get_rank(),
        "peak_rss_mib": peak_rss_mib(),
        "rss_growth_mib": peak_rss_mib() - before,
        "seconds": time.perf_counter() - started,
        "examples": len(prepared.train) + len(prepared.val),
        "tokens_read": touched,
    }
    _gather_to_rank0(row, out)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    try:
        if args.worker == "bare":
            bare(args.out, args.steps, build(json.loads(args.config.read_text()) if args.config else {}))
        else:
            data_prep(args.source, args.out)
    finally:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
