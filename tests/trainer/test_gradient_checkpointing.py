"""`train.grad_checkpointing` trades compute for memory: the encoder layers keep no activations in the
forward pass and run again during backward. Observed by counting how often each layer runs while
training, in the model and through a whole run from the trainer's config."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from trainer_runs import trainer_args

from trainer.config import ModelConfig, from_args
from trainer.loop import run
from trainer.model import build_model

CFG = ModelConfig(dim=16, layers=2, heads=2, ffn_dim=32)


@pytest.fixture
def layer_runs(monkeypatch) -> list[nn.Module]:
    """The encoder layers, once per forward they run (a recompute in backward counts as a run)."""
    runs: list[nn.Module] = []
    forward = nn.TransformerEncoderLayer.forward

    def counted(self, *args, **kwargs):
        runs.append(self)
        return forward(self, *args, **kwargs)

    monkeypatch.setattr(nn.TransformerEncoderLayer, "forward", counted)
    return runs


def _step(model: nn.Module) -> None:
    ids = torch.randint(1, 50, (3, 8))
    model(ids, torch.ones(3, 8, dtype=torch.bool)).sum().backward()


@pytest.mark.parametrize("checkpointing", [False, True])
def test_each_layer_runs_again_in_backward_only_when_checkpointing(layer_runs, checkpointing):
    model = build_model(CFG, vocab_size=50, max_positions=8, grad_checkpointing=checkpointing).train()
    model(torch.randint(1, 50, (3, 8)), torch.ones(3, 8, dtype=torch.bool))
    forward_only = len(layer_runs)
    assert forward_only == CFG.layers
    layer_runs.clear()
    _step(model)
    assert len(layer_runs) == CFG.layers * (2 if checkpointing else 1)


def test_evaluation_never_recomputes(layer_runs):
    """Checkpointing is for training only: an eval-mode pass, even one that is differentiated, runs each
    layer once."""
    model = build_model(CFG, vocab_size=50, max_positions=8, grad_checkpointing=True).eval()
    _step(model)
    assert len(layer_runs) == CFG.layers


def test_the_config_flag_reaches_the_model_a_run_trains(tmp_path, layer_runs, keep_sigterm_handler):
    steps, layers = 2, 1
    runs = {}
    for flag in ("false", "true"):
        layer_runs.clear()
        args = {"train.max_steps": steps, "train.warmup_steps": 1, "model.layers": layers}
        args["train.grad_checkpointing"] = flag
        assert run(from_args(trainer_args(tmp_path / flag, **args))) == 0
        runs[flag] = len(layer_runs)
    # Evaluation runs the layers as often in both; checkpointing adds one recompute per layer per step.
    assert runs["false"] >= steps * layers
    assert runs["true"] - runs["false"] == steps * layers
