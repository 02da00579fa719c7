"""Rank 0's progress lines (stdout), metrics JSON lines (metrics.jsonl) and optional TensorBoard events."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any


class Metrics:
    def __init__(self, jsonl_path: Path, *, enabled: bool, tensorboard_dir: Path | None = None):
        self.enabled = enabled
        self.path = jsonl_path
        self._tb = None
        if enabled:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            if tensorboard_dir is not None:
                from torch.utils.tensorboard import SummaryWriter  # checked by OutputConfig

                self._tb = SummaryWriter(str(tensorboard_dir))

    def record(self, event: str, step: int, **values: Any) -> None:
        """Append one JSON line and print a short human-readable progress line."""
        if not self.enabled:
            return
        row = {"event": event, "step": step, "time": round(time.time(), 3), **values}
        with open(self.path, "a") as f:
            f.write(json.dumps(row) + "\n")
        shown = " ".join(f"{k} {_fmt(v)}" for k, v in values.items())
        print(f"[trainer] {event} step {step} {shown}", file=sys.stdout, flush=True)
        if self._tb is not None:
            for key, value in values.items():
                if isinstance(value, int | float):
                    self._tb.add_scalar(f"{event}/{key}", value, step)

    def say(self, message: str) -> None:
        if self.enabled:
            print(f"[trainer] {message}", file=sys.stdout, flush=True)

    def close(self) -> None:
        if self._tb is not None:
            self._tb.close()


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)
