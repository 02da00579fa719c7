"""LoRA over FSDP with 2 processes under torchrun (gloo), activation checkpointing on: adapter-only sharded
checkpoints, a bit-exact resume across a SIGTERM, the 2-process checkpoint resharded into one process,
whose export peft loads, and the same adapter as one process trains with the same global batch in one
micro-batch or four. LoRA dropout is off so that the three can agree; the resume of every rank's RNG
stream is covered by the classifier's 2-process resume (dropout on, tests/trainer/test_distributed.py)."""

from __future__ import annotations

import json
import shutil
import signal

import pytest
import torch
from safetensors.torch import load_file
from torch.distributed.checkpoint.format_utils import dcp_to_torch_save
from trainer_runs import REPO, launch, metrics, start_and_wait_for_step, trainer_args

from trainer.config import build, from_args
from trainer.dist import DistEnv
from trainer.llm import data, task, tiny
from trainer.loop import run

SAMPLE = REPO / "workloads" / "examples" / "llm-chat.jsonl"
STEPS = 16
LLM = {
    "llm.model": "tiny",
    "llm.seq_len": 64,
    "llm.lora_dropout": 0.0,  # the same model from 1 and 2 ranks (each rank draws its own dropout)
    "data.source": SAMPLE,
    "train.parallelism": "fsdp",
    "train.grad_checkpointing": "true",
    "train.batch_size": 2,
    "train.max_steps": STEPS,
    "train.warmup_steps": 2,
    "train.log_every": 1,
    "train.lr": 0.003,
    "checkpoint.every_steps": 1,
    "checkpoint.keep": 100,
    "checkpoint.async_save": "false",
}


def _state(step_dir, tmp_path) -> dict:
    """A DCP checkpoint (every rank's shard) as one plain state dict."""
    target = tmp_path / f"{step_dir.parent.name}-{step_dir.name}.pt"
    dcp_to_torch_save(step_dir, target)
    return torch.load(target, weights_only=False)


def _flat(state: dict, prefix: str = "") -> dict[str, torch.Tensor]:
    out = {}
    for key, value in state.items():
        if isinstance(value, dict):
            out |= _flat(value, f"{prefix}{key}.")
        elif torch.is_tensor(value):
            out[f"{prefix}{key}"] = value
    return out


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """An uninterrupted 2-process run, checkpointed at every step."""
    out = tmp_path_factory.mktemp("reference") / "out"
    done = launch(out, **LLM)
    assert done.returncode == 0, done.stdout + done.stderr
    return out


def test_resume_after_sigterm_is_bit_exact_and_the_checkpoint_reshards_into_one_process(reference, tmp_path):
    run_dir = (reference / "ckpt" / (reference / "ckpt" / "latest").read_text()).parent
    step3 = _state(run_dir / "step-000000003", tmp_path)
    model_keys = list(step3["model"])
    assert model_keys and all(".lora_A." in k or ".lora_B." in k for k in model_keys), model_keys[:4]

    # Resume the reference's run from its step 3 elsewhere, and stop it with SIGTERM (a Spot reclaim).
    out = tmp_path / "out"
    ckpt = tmp_path / "ckpt"
    shutil.copytree(run_dir / "step-000000003", ckpt / run_dir.name / "step-000000003")
    (ckpt / "latest").write_text(f"{run_dir.name}/step-000000003")
    resumed = start_and_wait_for_step(out, 6, **{**LLM, "checkpoint.dir": ckpt})
    resumed.send_signal(signal.SIGTERM)
    log = resumed.communicate(timeout=120)[0]
    assert resumed.returncode == 143, log
    assert f"resuming from {ckpt / run_dir.name}/step-000000003 (step 3)" in log
    stopped = (ckpt / "latest").read_text()
    step = int(stopped.rsplit("-", 1)[1])
    assert 6 <= step < STEPS, log

    # Every adapter weight and optimizer moment equals the uninterrupted run's at that step, bit for bit.
    ours, theirs = (
        _flat(_state(ckpt / stopped, tmp_path)),
        _flat(_state(run_dir / f"step-{step:09d}", tmp_path)),
    )
    assert ours.keys() == theirs.keys() and any(k.startswith("optim.") for k in ours)
    different = [k for k in ours if not torch.equal(ours[k], theirs[k])]
    assert not different, different[:5]

    # The 2-process (FSDP) checkpoint in one process: resharded on load, evaluated and exported.
    single = tmp_path / "single"
    cfg = build({
        "llm": {"model": "tiny", "seq_len": 64, "lora_dropout": 0.0},
        "data": {"source": str(SAMPLE)},
        "train": {"max_steps": step, "batch_size": 2, "warmup_steps": 2, "device": "cpu"},
        "checkpoint": {"dir": str(ckpt)},
        "output": {"dir": str(single), "metrics_port": 0},
    })  # fmt: skip
    assert run(cfg) == 0
    summary = json.loads((single / "summary.json").read_text())
    assert summary["steps"] == step and summary["world_size"] == 1
    assert summary["val_perplexity"] == pytest.approx(torch.tensor(summary["val_loss"]).exp().item())

    # The export is what peft loads onto the base model (built from the same seed), and it holds exactly
    # the checkpoint's adapters: the same validation loss the run reported, from a fresh process's view.
    from peft import PeftModel

    exported = load_file(single / "adapter" / "adapter_model.safetensors")
    saved = {k.replace(".default.", "."): v for k, v in ours.items() if k.startswith("model.")}
    assert {f"model.{k}" for k in exported} == set(saved)
    assert all(torch.equal(v, saved[f"model.{k}"]) for k, v in exported.items())
    torch.manual_seed(0)
    tok = tiny.tokenizer()
    loaded = PeftModel.from_pretrained(tiny.model(tok), single / "adapter")
    _, val = data.sequences(cfg.data, cfg.llm, tok, tmp_path)
    loader = torch.utils.data.DataLoader(val, batch_size=4, collate_fn=data.Collate(tok.pad_token_id))
    cpu = DistEnv(rank=0, world_size=1, local_rank=0, device=torch.device("cpu"))
    assert task.evaluate(loaded, loader, cpu, None)["val_loss"] == pytest.approx(
        summary["val_loss"], rel=1e-6
    )
    assert metrics(single, "eval")[-1]["val_loss"] == summary["val_loss"]


def _adapter(out) -> torch.Tensor:
    weights = load_file(out / "adapter" / "adapter_model.safetensors")
    return torch.cat([weights[k].flatten() for k in sorted(weights)])


def test_one_rank_with_four_or_one_by_four_micro_batches_trains_the_two_rank_adapter(
    reference, tmp_path, keep_sigterm_handler
):
    """The loss is the sum of the token losses over the labelled tokens of the whole global batch (every
    micro-batch on every rank): packed sequences hold different numbers of labelled tokens, so a mean of
    per-micro-batch means (the loss before) trained three different adapters here."""
    # The same run in one process (no recomputation: the same arithmetic, in less time).
    once = {**LLM, "checkpoint.every_steps": 1000, "train.device": "cpu", "train.grad_checkpointing": "false"}
    for name, split in {
        "batch-4": {"train.batch_size": 4},
        "batch-1x4": {"train.batch_size": 1, "train.grad_accum_steps": 4},
    }.items():
        assert run(from_args(trainer_args(tmp_path / name, **{**once, **split}))) == 0, name
    two_ranks = _adapter(reference)  # 2 ranks x batch 2, FSDP
    for name in ("batch-4", "batch-1x4"):
        difference = (_adapter(tmp_path / name) - two_ranks).norm() / two_ranks.norm()
        assert difference <= 1e-5, f"{name}: relative difference {difference:.2e}"
    losses = {name: metrics(tmp_path / name, "train")[-1]["loss"] for name in ("batch-4", "batch-1x4")}
    assert losses["batch-4"] == pytest.approx(metrics(reference, "train")[-1]["loss"], rel=1e-4)
    assert losses["batch-1x4"] == pytest.approx(losses["batch-4"], rel=1e-4)  # per token, however split
