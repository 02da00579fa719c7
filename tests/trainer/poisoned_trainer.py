"""`python -m trainer`, with the training loss of one rank turned NaN at chosen optimizer steps (a bad batch,
an overflow): POISON_RANK (default 1) and POISON_STEPS ("5,12-40"). Run under torchrun by the tests."""

from __future__ import annotations

import os
import sys

import torch


def _steps(spec: str) -> set[int]:
    steps: set[int] = set()
    for part in filter(None, spec.split(",")):
        first, _, last = part.partition("-")
        steps.update(range(int(first), int(last or first) + 1))
    return steps


POISONED = (
    _steps(os.environ["POISON_STEPS"]) if os.environ["RANK"] == os.environ.get("POISON_RANK", "1") else set()
)
_cross_entropy = torch.nn.functional.cross_entropy
_calls = 0


def _poisoned(*args, **kwargs):
    global _calls
    loss = _cross_entropy(*args, **kwargs)
    if torch.is_grad_enabled():  # a training step (evaluation runs under no_grad)
        _calls += 1  # one call per optimizer step without gradient accumulation
        if _calls in POISONED:
            return loss * float("nan")
    return loss


if __name__ == "__main__":
    torch.nn.functional.cross_entropy = _poisoned
    from trainer.__main__ import main

    sys.exit(main())
