"""The learning-rate schedule at its boundaries, its resume and its extension; which parameters decay."""

from __future__ import annotations

import json
import math

import pytest
import torch
from torch.distributed.checkpoint.format_utils import dcp_to_torch_save
from trainer_runs import trainer_args

from trainer.config import ModelConfig, from_args
from trainer.loop import run
from trainer.model import build_model
from trainer.schedule import LrSchedule, param_groups

PEAK, WARMUP, STEPS, MIN = 1e-3, 4, 20, 0.1
SCHEDULE = LrSchedule(PEAK, WARMUP, STEPS, MIN)  # factor(step): the step taken after `step` steps


def _cosine(progress: float) -> float:
    return MIN + (1 - MIN) * 0.5 * (1 + math.cos(math.pi * progress))


def test_the_warm_up_starts_above_zero_and_reaches_the_peak_on_its_last_step():
    assert SCHEDULE.factor(0) == pytest.approx(1 / WARMUP)  # the first step learns (not lr 0)
    assert [SCHEDULE.factor(s) for s in range(WARMUP)] == pytest.approx([1 / 4, 2 / 4, 3 / 4, 1.0])
    assert SCHEDULE.lr(WARMUP - 1) == pytest.approx(PEAK)


def test_the_decay_starts_at_the_peak_after_the_warm_up_and_ends_at_the_minimum():
    assert SCHEDULE.factor(WARMUP) == pytest.approx(1.0)  # the first decay step: progress 0
    assert SCHEDULE.factor(WARMUP + 1) == pytest.approx(_cosine(1 / (STEPS - WARMUP)))
    assert SCHEDULE.factor(STEPS - 1) == pytest.approx(_cosine((STEPS - 1 - WARMUP) / (STEPS - WARMUP)))
    assert SCHEDULE.factor(STEPS) == pytest.approx(MIN)
    assert [SCHEDULE.factor(s) for s in (STEPS + 1, STEPS * 3)] == pytest.approx([MIN, MIN])  # beyond: flat
    decay = [SCHEDULE.factor(s) for s in range(WARMUP, STEPS + 1)]
    assert all(a > b for a, b in zip(decay, decay[1:], strict=False))


def test_no_warm_up_starts_at_the_peak():
    assert LrSchedule(PEAK, 0, STEPS, MIN).factor(0) == 1.0


def test_a_resume_in_the_middle_continues_the_same_schedule():
    for step in (2, WARMUP, 11):
        resumed = LrSchedule(PEAK, WARMUP, STEPS, MIN).resumed(step, SCHEDULE.state(), STEPS)
        assert resumed == SCHEDULE
        # checkpoints written before schedules were stored: the same schedule, from the run's settings
        assert LrSchedule(PEAK, WARMUP, STEPS, MIN).resumed(step, None, STEPS) == SCHEDULE


def test_extending_a_finished_run_warms_up_again_from_where_it_ended_without_a_jump():
    longer = LrSchedule(PEAK, WARMUP, 2 * STEPS, MIN).resumed(STEPS, SCHEDULE.state(), STEPS)
    factors = [longer.factor(s) for s in range(STEPS, 2 * STEPS + 1)]
    assert factors[0] == pytest.approx(MIN + (1 - MIN) / WARMUP)  # one warm-up step above the end
    assert factors[WARMUP - 1] == pytest.approx(1.0)  # back at the peak after train.warmup_steps
    assert factors[-1] == pytest.approx(MIN)  # and down again by the new end
    assert all(abs(b - a) <= (1 - MIN) / WARMUP + 1e-9 for a, b in zip(factors, factors[1:], strict=False))
    # the extension, itself interrupted and resumed, continues its own segment
    again = LrSchedule(PEAK, WARMUP, 2 * STEPS, MIN).resumed(STEPS + 7, longer.state(), 2 * STEPS)
    assert again == longer


def test_an_extension_too_short_for_the_warm_up_still_ends_at_the_minimum():
    short = LrSchedule(PEAK, WARMUP, STEPS + 2, MIN).resumed(STEPS, SCHEDULE.state(), STEPS)
    assert short.warmup_steps == 1
    assert short.factor(STEPS) == pytest.approx(1.0) and short.factor(STEPS + 2) == pytest.approx(MIN)


def test_changing_max_steps_in_the_middle_starts_from_the_factor_reached():
    shorter = LrSchedule(PEAK, WARMUP, 15, MIN).resumed(10, SCHEDULE.state(), STEPS)
    reached = SCHEDULE.factor(10)
    assert shorter.factor(10) == pytest.approx(reached + (1 - reached) / WARMUP)
    assert shorter.factor(15) == pytest.approx(MIN)


def test_biases_and_norm_weights_get_no_weight_decay():
    model = build_model(ModelConfig(dim=16, heads=2, ffn_dim=32, layers=1), vocab_size=50, max_positions=8)
    decay, keep = param_groups(model, 0.01)
    names = {id(p): n for n, p in model.named_parameters()}
    assert decay["weight_decay"] == 0.01 and keep["weight_decay"] == 0.0
    assert {names[id(p)] for p in keep["params"]} == {n for n, p in model.named_parameters() if p.ndim < 2}
    assert any(n.endswith("norm.weight") for n in (names[id(p)] for p in keep["params"]))
    assert any(n.endswith("bias") for n in (names[id(p)] for p in keep["params"]))
    assert {names[id(p)] for p in decay["params"]} >= {"embed.weight", "head.weight"}
    frozen = torch.nn.Linear(2, 2)
    frozen.weight.requires_grad_(False)
    assert [len(g["params"]) for g in param_groups(frozen, 0.01)] == [0, 1]  # LoRA: trainable ones only


def _lrs(out) -> list[float]:
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return [r["lr"] for r in rows if r["event"] == "train"]


def test_a_finished_run_extended_by_raising_max_steps_warms_up_again(tmp_path, keep_sigterm_handler, capsys):
    """The docs' "train on to step 600": the first run's last step ran at 0.1 x lr; the extension does not
    jump to where a longer cosine would be at that step (0.64 x lr here), it warms up again."""
    common = {"train.log_every": 1, "train.warmup_steps": 4, "train.lr": PEAK}
    assert run(from_args(trainer_args(tmp_path, **common, **{"train.max_steps": 10}))) == 0
    first = _lrs(tmp_path)  # each row: the learning rate of the next step
    assert len(first) == 10 and first[-1] == pytest.approx(MIN * PEAK)
    assert run(from_args(trainer_args(tmp_path, **common, **{"train.max_steps": 20}))) == 0
    second = _lrs(tmp_path)[10:]
    assert second[0] == pytest.approx(PEAK * (MIN + (1 - MIN) * 2 / 4))  # step 12: the 2nd warm-up step
    said = "train.max_steps 10 -> 20: the learning rate goes from 0.0001 back up to 0.001 over 4 steps"
    assert said in capsys.readouterr().out
    assert max(second) == pytest.approx(PEAK) and second[-1] == pytest.approx(MIN * PEAK)

    # The run's optimizer (in its checkpoint): no weight decay on biases and norm weights.
    latest = tmp_path / "ckpt" / (tmp_path / "ckpt" / "latest").read_text()
    dcp_to_torch_save(latest, tmp_path / "state.pt")
    groups = torch.load(tmp_path / "state.pt", weights_only=False)["optim"]["param_groups"]
    decay = {name: group["weight_decay"] for group in groups for name in group["params"]}
    assert decay["head.weight"] == decay["embed.weight"] == 0.01
    assert decay["head.bias"] == decay["norm.weight"] == decay["layers.0.norm1.bias"] == 0.0
