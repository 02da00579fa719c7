"""The optimizer's learning rate at every step, and which parameters weight decay applies to.

LrSchedule: `train.lr` x factor(step), where `step` is the number of optimizer steps already taken (the
step about to be taken uses factor(step)): a linear warm-up over `train.warmup_steps` steps that starts
at 1/warmup (no step is wasted at 0) and reaches 1 on the last warm-up step, then a cosine decay from 1
to `train.min_lr_ratio` at `train.max_steps`, flat beyond it.

A resume with another `train.max_steps` than the checkpoint's run (extending a finished run, or
shortening one) starts a new segment at the resume step: from the factor the run had reached, a linear
warm-up back to 1 (at most `train.warmup_steps` steps, and fewer than the steps the segment adds), then
the cosine decay to the new end. The learning rate never jumps: a finished run at its final 0.1 x lr
warms up again instead of continuing at the point of a longer schedule. The segment is stored in every
checkpoint, so a resume inside it continues it exactly.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from torch import nn


@dataclass(frozen=True)
class LrSchedule:
    peak: float
    warmup_steps: int
    max_steps: int
    min_ratio: float
    start_step: int = 0  # where this segment begins (0: the run's first step)
    start_factor: float = 0.0  # the factor the run had reached there (0: a warm-up from nothing)

    def factor(self, step: int) -> float:
        """The share of `peak` for the optimizer step taken after `step` steps."""
        into = step - self.start_step
        if into < self.warmup_steps:
            return self.start_factor + (1 - self.start_factor) * (into + 1) / self.warmup_steps
        decay = max(1, self.max_steps - self.start_step - self.warmup_steps)
        progress = min(1.0, (into - self.warmup_steps) / decay)
        return self.min_ratio + (1 - self.min_ratio) * 0.5 * (1 + math.cos(math.pi * progress))

    def lr(self, step: int) -> float:
        return self.peak * self.factor(step)

    def apply(self, optimizer: Any, step: int) -> None:
        """Set every parameter group's learning rate for the step taken after `step` steps."""
        lr = self.lr(step)
        for group in optimizer.param_groups:
            group["lr"] = lr

    def state(self) -> dict[str, Any]:
        """What a checkpoint keeps, to continue this schedule after a resume (`resumed`)."""
        return asdict(self)

    def resumed(self, step: int, saved: dict[str, Any] | None, saved_max_steps: int) -> LrSchedule:
        """This schedule (the resuming run's settings) for a run resumed at `step` from a checkpoint
        whose schedule was `saved` (None: written before schedules were stored, a segment from step 0)
        and whose run had `saved_max_steps` steps."""
        earlier = LrSchedule(**saved) if saved else _replace(self, max_steps=saved_max_steps)
        if saved_max_steps == self.max_steps:  # the same run: continue the segment it was in
            segment = {"start_step": earlier.start_step, "start_factor": earlier.start_factor}
            if earlier.start_step:  # an extension's warm-up may have been shortened to fit it
                segment["warmup_steps"] = earlier.warmup_steps
            return _replace(self, **segment)
        added = self.max_steps - step
        warmup = min(self.warmup_steps, max(0, added - 1))
        return _replace(self, warmup_steps=warmup, start_step=step, start_factor=earlier.factor(step))


def _replace(schedule: LrSchedule, **changes: Any) -> LrSchedule:
    return LrSchedule(**{**asdict(schedule), **changes})


def param_groups(model: nn.Module, weight_decay: float) -> list[dict[str, Any]]:
    """The trainable parameters (LoRA: the adapters only) in two AdamW groups: matrices and embeddings
    decay; biases, norm weights and other vectors (ndim < 2) do not, as in GPT-2/nanoGPT, torchtune and
    Hugging Face's Trainer (which leaves out biases and LayerNorm weights)."""
    decay: list[nn.Parameter] = []
    keep: list[nn.Parameter] = []
    for p in (p for p in model.parameters() if p.requires_grad):
        (decay if p.ndim >= 2 else keep).append(p)
    return [
        {"params": decay, "weight_decay": weight_decay},
        {"params": keep, "weight_decay": 0.0},
    ]
