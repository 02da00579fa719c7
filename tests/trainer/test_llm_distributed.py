"""The LLM task with 2 processes (gloo), from a model directory saved in bf16 as the Hub serves models:
LoRA over FSDP in bf16 with activation checkpointing and LoRA dropout on, its base weights read shard by
shard, one validation sequence for two ranks: adapter-only sharded checkpoints, a bit-exact resume across
a SIGTERM, the 2-process checkpoint resharded into one process, whose export peft loads; LoRA over DDP in
bf16 exporting a merged model; and, in fp32 with LoRA dropout off, the same adapter from 2 ranks x 2 as from
one process with the global batch in one micro-batch or four (the loss is per token over the global
batch)."""

from __future__ import annotations

import json
import re
import shutil
import signal
from pathlib import Path

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
# The resumed run gets its SIGTERM once it logged step 6 and, checkpointing every step (each checkpoint
# waits for a fresh stop vote), stops at step 6 or 7: 10 steps leave it room, each step a DCP save.
STEPS = 10
# One short record: a single validation sequence, so that rank 1 has none.
VALIDATION = {"prompt": "What is 33 + 5?", "response": "33 + 5 = 38."}
CPU = DistEnv(rank=0, world_size=1, local_rank=0, device=torch.device("cpu"))


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> dict[str, Path]:
    """The tiny model (seed 0) saved with save_pretrained in bf16, as a Hub model is, with its tokenizer;
    and the one-record validation file."""
    root = tmp_path_factory.mktemp("saved")
    torch.manual_seed(0)
    tok = tiny.tokenizer()
    tiny.model(tok).bfloat16().save_pretrained(root / "model")
    tok.save_pretrained(root / "model")
    (root / "val.jsonl").write_text(json.dumps(VALIDATION) + "\n")
    return {"model": root / "model", "val": root / "val.jsonl"}


def _llm(saved: dict[str, Path]) -> dict:
    return {**LLM, "llm.model": saved["model"], "data.val_source": saved["val"]}


LLM = {
    "llm.seq_len": 64,
    "llm.lora_dropout": 0.1,  # the resume must restore each rank's RNG stream too
    "data.source": SAMPLE,
    "train.parallelism": "fsdp",
    "train.precision": "bf16",
    "train.grad_checkpointing": "true",
    "train.batch_size": 2,
    "train.max_steps": STEPS,
    "train.warmup_steps": 2,
    "train.log_every": 1,
    "train.eval_every": 1,
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
def reference(tmp_path_factory, saved):
    """An uninterrupted 2-process FSDP run, checkpointed and evaluated at every step."""
    out = tmp_path_factory.mktemp("reference") / "out"
    done = launch(out, **_llm(saved))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "warning: 1 validation sequence(s) for 2 ranks: 1 rank(s) hold none" in done.stdout
    share = re.search(r"MiB of parameters on this rank, ([0-9.]+) of the model's", done.stdout)
    assert share and float(share[1]) <= 0.6, done.stdout  # rank 0 read only its shard of the weights
    return out


def test_a_rank_without_validation_data_takes_part_in_every_evaluation(reference, saved):
    tok = tiny.tokenizer()
    _, labels = data.encode(tok, data.read_records(saved["val"])[0], "val")
    evals = metrics(reference, "eval")
    assert [r["step"] for r in evals] == list(range(1, STEPS + 1))  # each a collective of both ranks
    assert {r["val_tokens"] for r in evals} == {sum(t != data.IGNORE for t in labels)}  # rank 1 adds none


def test_resume_after_sigterm_is_bit_exact_and_the_checkpoint_reshards_into_one_process(
    reference, saved, tmp_path
):
    LLM = _llm(saved)
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

    # The 2-process (FSDP) checkpoint in one process: resharded on load, evaluated (fp32, the base loaded
    # whole) and exported.
    single = tmp_path / "single"
    cfg = build({
        "llm": {"model": str(saved["model"]), "seq_len": 64, "lora_dropout": 0.1},
        "data": {"source": str(SAMPLE), "val_source": str(saved["val"])},
        "train": {"max_steps": step, "batch_size": 2, "warmup_steps": 2, "device": "cpu"},
        "checkpoint": {"dir": str(ckpt)},
        "output": {"dir": str(single), "metrics_port": 0},
    })  # fmt: skip
    assert run(cfg) == 0
    summary = json.loads((single / "summary.json").read_text())
    assert summary["steps"] == step and summary["world_size"] == 1
    assert summary["val_perplexity"] == pytest.approx(torch.tensor(summary["val_loss"]).exp().item())
    # The FSDP run's evaluation of that step (bf16, its base read shard by shard) is the same model's.
    fsdp = next(r for r in metrics(reference, "eval") if r["step"] == step)
    assert fsdp["val_loss"] == pytest.approx(summary["val_loss"], rel=2e-2)

    # The export is what peft loads onto the base model (the saved directory), and it holds exactly
    # the checkpoint's adapters: the same validation loss the run reported, from a fresh process's view.
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    exported = load_file(single / "adapter" / "adapter_model.safetensors")
    in_checkpoint = {k.replace(".default.", "."): v for k, v in ours.items() if k.startswith("model.")}
    assert {f"model.{k}" for k in exported} == set(in_checkpoint)
    assert all(torch.equal(v, in_checkpoint[f"model.{k}"]) for k, v in exported.items())
    tok = tiny.tokenizer()
    base = AutoModelForCausalLM.from_pretrained(saved["model"], dtype=torch.float32)
    loaded = PeftModel.from_pretrained(base, single / "adapter")
    _, val = data.sequences(cfg.data, cfg.llm, tok, tmp_path)
    loader = torch.utils.data.DataLoader(val, batch_size=4, collate_fn=data.Collate(tok.pad_token_id))
    assert task.evaluate(loaded, loader, CPU, None)["val_loss"] == pytest.approx(
        summary["val_loss"], rel=1e-6
    )
    assert metrics(single, "eval")[-1]["val_loss"] == summary["val_loss"]


def test_lora_over_ddp_in_bf16_from_a_saved_model_exports_a_merged_model(saved, tmp_path):
    from transformers import AutoModelForCausalLM

    out = tmp_path / "out"
    steps = {
        "train.max_steps": 2,
        "train.warmup_steps": 1,
        "train.eval_every": 2,
        "checkpoint.every_steps": 2,
    }
    done = launch(out, **{**_llm(saved), **steps, "train.parallelism": "ddp", "llm.export": "merged"})
    assert done.returncode == 0, done.stdout + done.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["ranks_identical"] and summary["model"] == f"{out}/model"
    merged = AutoModelForCausalLM.from_pretrained(out / "model")
    assert merged.dtype == torch.bfloat16  # as the model was published
    assert not any("lora" in k for k in merged.state_dict())
    tok = tiny.tokenizer()
    loader = [data.Collate(tok.pad_token_id)([data.encode(tok, data.read_records(saved["val"])[0], "val")])]
    assert task.evaluate(merged, loader, CPU, torch.bfloat16)["val_loss"] == pytest.approx(
        summary["val_loss"], rel=2e-2
    )


# The per-token check: fp32 (bf16 rounds each split differently), dropout off (each rank draws its own),
# the bundled tiny model, a few steps.
PER_TOKEN = {
    **{k: v for k, v in LLM.items() if not k.startswith(("checkpoint.", "train.precision", "train.eval"))},
    "llm.model": "tiny",
    "llm.lora_dropout": 0.0,
    "train.max_steps": 6,
    "train.grad_checkpointing": "false",
}


def _adapter(out) -> torch.Tensor:
    weights = load_file(out / "adapter" / "adapter_model.safetensors")
    return torch.cat([weights[k].flatten() for k in sorted(weights)])


def test_one_rank_with_four_or_one_by_four_micro_batches_trains_the_two_rank_adapter(
    tmp_path, keep_sigterm_handler
):
    """The loss is the sum of the token losses over the labelled tokens of the whole global batch (every
    micro-batch on every rank): packed sequences hold different numbers of labelled tokens, so a mean of
    per-micro-batch means (the loss before) trained three different adapters here."""
    done = launch(tmp_path / "two-ranks", **PER_TOKEN)  # 2 ranks x batch 2, FSDP
    assert done.returncode == 0, done.stdout + done.stderr
    once = {**PER_TOKEN, "train.device": "cpu"}
    for name, split in {
        "batch-4": {"train.batch_size": 4},
        "batch-1x4": {"train.batch_size": 1, "train.grad_accum_steps": 4},
    }.items():
        assert run(from_args(trainer_args(tmp_path / name, **{**once, **split}))) == 0, name
    two_ranks = _adapter(tmp_path / "two-ranks")
    for name in ("batch-4", "batch-1x4"):
        difference = (_adapter(tmp_path / name) - two_ranks).norm() / two_ranks.norm()
        assert difference <= 1e-5, f"{name}: relative difference {difference:.2e}"
    losses = {name: metrics(tmp_path / name, "train")[-1]["loss"] for name in ("batch-4", "batch-1x4")}
    assert losses["batch-4"] == pytest.approx(metrics(tmp_path / "two-ranks", "train")[-1]["loss"], rel=1e-4)
    assert losses["batch-1x4"] == pytest.approx(losses["batch-4"], rel=1e-4)  # per token, however split
