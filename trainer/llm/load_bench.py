"""`python -m trainer.llm.load_bench`: memory per rank of loading a causal LM for 2-process FSDP (gloo, CPU),
whole (every rank loads all of it, then fully_shard cuts it: what the trainer did before) against sharded
(trainer/llm/load.py), and a check that the sharded model holds exactly the saved weights.

A Llama-shaped model (`--width`, `--layers`, `--vocab`) with random weights is saved in bf16, as Hub models
are, then loaded as a LoRA FSDP run loads it (fp32 master weights). Per rank it reports the peak of the
parameters' own storage over the load's stages (built, sharded, filled) and, measured, the peak growth of
the process's anonymous resident memory (RssAnon, sampled every millisecond: tensors, not the safetensors
file's page cache) during the load; with `--device cuda`, torch.cuda.max_memory_allocated instead.
"""

from __future__ import annotations

import argparse
import tempfile
import threading
import time
from pathlib import Path
from typing import Any


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m trainer.llm.load_bench",
        description="Peak memory per rank of loading a causal LM for 2-process FSDP (gloo): whole against "
        "sharded, and whether the sharded weights equal the saved ones. About a minute on 2 CPU cores.",
    )
    p.add_argument("--width", type=int, default=1024, help="hidden size (default 1024)")
    p.add_argument("--layers", type=int, default=8, help="decoder layers (default 8)")
    p.add_argument("--vocab", type=int, default=32000, help="vocabulary (default 32000)")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"], help="where the shards go")
    return p


if __name__ == "__main__":
    parser().parse_args()  # --help answers here, before torch is imported (seconds)

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402
from torch import nn  # noqa: E402


def save_model(directory: Path, *, width: int, layers: int, vocab: int, tied: bool = False) -> int:
    """A random Llama of this shape saved in bf16 with the tiny tokenizer; returns its parameter count."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from trainer.llm import tiny

    tok = tiny.tokenizer()
    config = LlamaConfig(
        vocab_size=max(vocab, len(tok)), hidden_size=width, intermediate_size=width * 11 // 4,
        num_hidden_layers=layers, num_attention_heads=max(1, width // 64),
        num_key_value_heads=max(1, width // 256), tie_word_embeddings=tied, dtype=torch.bfloat16,
        pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id, bos_token_id=None,
    )  # fmt: skip
    torch.manual_seed(1)
    with torch.device("meta"):
        shape = LlamaForCausalLM(config)
    model = LlamaForCausalLM(config).bfloat16()
    model.save_pretrained(directory)
    tok.save_pretrained(directory)
    return sum(p.numel() for p in shape.parameters())


class _AnonPeak:
    """The peak of RssAnon above its value at start, sampled every millisecond in a thread."""

    def __init__(self) -> None:
        self.start = self.peak = _rss_anon()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        while not self._done.wait(0.001):
            self.peak = max(self.peak, _rss_anon())

    def stop(self) -> int:
        self._done.set()
        self._thread.join()
        return max(self.peak, _rss_anon()) - self.start


def _rss_anon() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("RssAnon:"):
            return int(line.split()[1]) * 1024
    return 0


def _param_bytes(model: nn.Module, extra: dict[str, torch.Tensor] | None = None) -> int:
    """Bytes the parameters' (and `extra`'s) storage holds on this rank: meta and zero-stride placeholders
    hold none; a sharded parameter counts its local shard."""
    from torch.distributed.tensor import DTensor

    seen, total = set(), 0
    tensors = [p.to_local() if isinstance(p, DTensor) else p for p in model.parameters()]
    for t in [*tensors, *(extra or {}).values()]:
        if t.is_meta or t.data_ptr() in seen:
            continue
        seen.add(t.data_ptr())
        total += t.untyped_storage().nbytes()
    return total


def _worker(rank: int, world: int, store: str, directory: str, mode: str, device: str, out: Any) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    from torch.distributed.fsdp import fully_shard

    from trainer.config import LlmConfig
    from trainer.llm import load, task
    from trainer.model import transformer_blocks

    where = torch.device(device, rank) if device == "cuda" else torch.device("cpu")
    if where.type == "cuda":
        torch.cuda.set_device(where)
        torch.cuda.reset_peak_memory_stats()
    cfg, path = LlmConfig(model=directory, lora_dropout=0.0), Path(directory)
    task.register_attention()
    torch.manual_seed(0)
    dist.barrier()
    anon, stages = _AnonPeak(), []
    if mode == "sharded":
        model, deferred = task.build_sharded(cfg, path, load_dtype=torch.float32, grad_checkpointing=False)
        stages.append(_param_bytes(model, deferred.kept))
    else:
        model = task.build(cfg, path, None, load_dtype=torch.float32, grad_checkpointing=False).to(where)
        stages.append(_param_bytes(model))
    for block in reversed(transformer_blocks(model)):
        fully_shard(block)
    fully_shard(model)
    stages.append(_param_bytes(model, deferred.kept if mode == "sharded" else None))
    if mode == "sharded":
        load.materialize(model, deferred, where)
        stages.append(_param_bytes(model, deferred.kept))
    rss = anon.stop()
    result = {"rank": rank, "stages": stages, "anon_peak": rss, "mismatched": _mismatched(model, cfg, path)}
    if where.type == "cuda":
        result["cuda_peak"] = torch.cuda.max_memory_allocated(where)
    gathered: list[Any] = [None] * world
    dist.all_gather_object(gathered, result)
    if rank == 0:
        out.put(gathered)
    dist.destroy_process_group()


def _mismatched(model: nn.Module, cfg: Any, directory: Path) -> list[str]:
    """The names of the parameters whose whole value (gathered) differs from what the trainer loads
    unsharded: the saved weights, fp32, with adapters initialised from the same seed."""
    from trainer.llm import task

    torch.manual_seed(0)
    reference = task.build(cfg, directory, None, load_dtype=torch.float32, grad_checkpointing=False)
    expected = dict(reference.named_parameters())
    bad = []
    for name, param in model.named_parameters():
        whole = param.full_tensor() if hasattr(param, "full_tensor") else param
        if not torch.equal(whole.cpu(), expected[name].detach()):
            bad.append(name)
    return bad


def measure(directory: Path, mode: str, *, device: str = "cpu", world: int = 2) -> list[dict[str, Any]]:
    """Each rank's figures for loading `directory` in `mode` (whole | sharded)."""
    out = mp.get_context("spawn").SimpleQueue()
    with tempfile.TemporaryDirectory() as tmp:  # the ranks meet through a file: no port to pick
        args = (world, f"{tmp}/store", str(directory), mode, device, out)
        mp.start_processes(_worker, args=args, nprocs=world, start_method="spawn")
    return out.get()


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        params = save_model(Path(tmp), width=args.width, layers=args.layers, vocab=args.vocab)
        full = params * 4  # fp32
        print(f"model: {params:,} parameters, {full / 2**20:.0f} MiB in fp32; 2 ranks, {args.device}")
        for mode in ("whole", "sharded"):
            start = time.perf_counter()
            for r in measure(Path(tmp), mode, device=args.device):
                peak = r.get("cuda_peak", r["anon_peak"])
                weights = "exact" if not r["mismatched"] else f"differ: {r['mismatched'][:3]}"
                print(
                    f"{mode:8} rank {r['rank']}: parameters peak {max(r['stages']) / full:.2f} x the model, "
                    f"{'GPU' if 'cuda_peak' in r else 'RssAnon'} peak {peak / 2**20:.0f} MiB "
                    f"({peak / full:.2f} x), weights {weights}"
                )
            print(f"{mode:8} {time.perf_counter() - start:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
