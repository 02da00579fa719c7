"""Worker programs `trainer.bench` runs under `trainer.launch` (torchrun), one per rank:

bare-ddp OUT.json [STEPS]  the trainer's model, data, batch and optimizer in a plain DDP loop (forward,
                           backward, all-reduce, step, nothing else): the yardstick for the trainer's
                           own 2-process throughput
data-prep SOURCE OUT.json  the trainer's data preparation (trainer.token_store) on SOURCE; every rank
                           reports its peak resident memory and the time it spent
"""

from __future__ import annotations

import argparse
import json
import os
import resource
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
    ddp = sub.add_parser("bare-ddp", help="a plain DDP loop over the trainer's model and data")
    ddp.add_argument("out", type=Path)
    ddp.add_argument("steps", type=int, nargs="?", default=240)
    prep = sub.add_parser("data-prep", help="the trainer's data preparation; peak memory and time per rank")
    prep.add_argument("source")
    prep.add_argument("out", type=Path)
    return p.parse_args(argv)


if __name__ == "__main__":
    parse_args(None)  # --help and bad arguments answer here, before torch is imported (seconds)

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.nn.parallel import DistributedDataParallel  # noqa: E402

from trainer import data, token_store  # noqa: E402
from trainer.config import DataConfig, JobConfig  # noqa: E402
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


def bare_ddp(out: Path, steps: int) -> None:
    cfg = JobConfig()
    rank, world = dist.get_rank(), dist.get_world_size()
    train, _ = data.load_splits(cfg.data, Path(tempfile.gettempdir()))
    encoder = data.train_tokenizer(cfg.data.tokenizer, (t for t, _ in train), cfg.data.vocab_size)
    ds = data.encode(train, encoder, cfg.data.max_len)
    sampler = data.ResumableSampler(ds, num_replicas=world, rank=rank, shuffle=True, seed=0, drop_last=True)
    loader = torch.utils.data.DataLoader(
        ds,
        batch_size=cfg.train.batch_size,
        sampler=sampler,
        collate_fn=data.PadCollate(cfg.data.pad_to_multiple),
        drop_last=True,
    )  # what data.train_loader builds
    torch.manual_seed(0)
    max_positions = -(-cfg.data.max_len // cfg.data.pad_to_multiple) * cfg.data.pad_to_multiple
    model = DistributedDataParallel(
        build_model(cfg.model, vocab_size=encoder.vocab_size, max_positions=max_positions)
    )
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.train.lr)
    warmup, done, start = steps // 5, 0, time.perf_counter()
    epoch = 0
    while done < steps:
        sampler.set_epoch(epoch)
        for batch in loader:
            if done == warmup:
                start = time.perf_counter()
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
    samples_per_s = (steps - warmup) * cfg.train.batch_size * world / (time.perf_counter() - start)
    _gather_to_rank0({"rank": rank, "samples_per_s": samples_per_s}, out)


def data_prep(source: str, out: Path) -> None:
    cfg = DataConfig(source=source)
    before = peak_rss_mib()
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench-") as workdir:  # only an s3:// source is copied there
        prepared = token_store.prepare(
            cfg,
            num_labels=2,
            model_name="transformer",
            tokenizer_spec=None,
            workdir=Path(workdir),
            shared=token_store.node_scratch_dir("bench-data"),
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
        if args.worker == "bare-ddp":
            bare_ddp(args.out, args.steps)
        else:
            data_prep(args.source, args.out)
    finally:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
