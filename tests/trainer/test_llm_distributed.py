"""LoRA over FSDP with 2 processes under torchrun (gloo), activation checkpointing and LoRA dropout on:
adapter-only sharded checkpoints, a bit-exact resume across a SIGTERM, and the 2-process checkpoint
resharded into one process, whose export peft loads."""

from __future__ import annotations

import json
import shutil
import signal

import pytest
import torch
from torch.distributed.checkpoint.format_utils import dcp_to_torch_save
from trainer_runs import REPO, launch, metrics, start_and_wait_for_step

from trainer.config import build
from trainer.dist import DistEnv
from trainer.llm import data, task, tiny
from trainer.loop import run

SAMPLE = REPO / "workloads" / "examples" / "llm-chat.jsonl"
STEPS = 16
LLM = {
    "llm.model": "tiny",
    "llm.seq_len": 64,
    "llm.lora_dropout": 0.1,  # the resume must restore each rank's RNG stream too
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
        "llm": {"model": "tiny", "seq_len": 64, "lora_dropout": 0.1},
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
    from safetensors.torch import load_file

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
