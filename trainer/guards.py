"""What keeps a run from ending "successful" with a broken model, or from waiting on a dead peer for ever.

NonFiniteGuard: an optimizer step whose gradients are not finite is skipped on the device, without a
host sync: the fused AdamW kernel takes a `found_inf` tensor and leaves weights, moments and its step
count untouched when it is non-zero (torch/optim/adam.py `_fused_adam`, the same hook GradScaler uses
for fp16). The decision rests on the global gradient norm, which is the same on every rank after the
gradient all-reduce (DDP) or the norm's own all-reduce (FSDP), so every replica skips the same steps.
Steps in a row with a non-finite loss or gradient are counted on the device too; the loop reads the
count where it syncs anyway (progress lines, checkpoints, the end) and stops with exit 3 beyond
`train.max_bad_steps`. Under fp16 the GradScaler skips overflowing steps itself (that is how it finds its
scale), so only a non-finite loss counts there.

StepWatchdog: a hung peer blocks the other ranks inside a collective until its timeout
(`train.dist_timeout_s`, 600 s by default; torchrun then waits 30 s more before it SIGKILLs a worker that
ignores SIGTERM: LocalElasticAgent._stop_workers -> _shutdown(timeout=30), torch 2.13): ~10.5 min. The
watchdog thread ends the process with exit 202 when no training step has finished for
`train.step_timeout_s`; evaluations, checkpoints and the first step (compilation, warm-up) are not timed.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from collections.abc import Iterable, Iterator

import torch
from torch import nn
from torch.utils._foreach_utils import _get_fused_kernels_supported_devices

from trainer import faults


def _full(norm: torch.Tensor) -> torch.Tensor:
    """The norm as a plain tensor: under FSDP it is a DTensor (each rank holds a partial sum)."""
    full_tensor = getattr(norm, "full_tensor", None)
    return full_tensor() if full_tensor is not None else norm


class NonFiniteGuard:
    """Per rank; every rank calls `step` once per optimizer step and `worst_streak` at the same steps."""

    def __init__(self, device: torch.device, *, scaler_skips: bool) -> None:
        self.scaler_skips = scaler_skips  # fp16: the GradScaler owns gradient overflows
        self._streak = torch.zeros((), dtype=torch.int64, device=device)
        self.worst = torch.zeros((), dtype=torch.int64, device=device)
        self.skipped = torch.zeros((), dtype=torch.int64, device=device)
        self.last_bad = torch.zeros((), dtype=torch.bool, device=device)
        self.grad_norm = torch.zeros((), device=device)  # of the last step, before clipping

    def step(
        self,
        optimizer: torch.optim.Optimizer,
        params: Iterable[nn.Parameter],
        loss: torch.Tensor,
        max_norm: float,
    ) -> None:
        """Clip the gradients to `max_norm` (0: no clipping) and take the optimizer step unless they are
        not finite. With a GradScaler (`scaler_skips`) the caller steps through it instead: this clips
        only (after the caller's unscale_) and counts a non-finite loss. Either way `grad_norm` is the
        gradient norm before clipping and `last_bad` whether the step counted as bad."""
        params = [p for p in params if p.grad is not None]
        bad_loss = ~torch.isfinite(loss)
        if max_norm:  # the norm before clipping
            norm = nn.utils.clip_grad_norm_(params, max_norm)
        else:
            norm = nn.utils.get_total_norm([p.grad for p in params if p.grad is not None])
        self.grad_norm = _full(norm)  # on the device; progress lines report it
        if self.scaler_skips:
            self._count(bad_loss)
            return
        bad = ~torch.isfinite(self.grad_norm)
        if not optimizer.defaults.get("fused"):
            if not bad.item():  # a host sync per step: only where no fused kernel exists
                optimizer.step()
        else:
            optimizer.found_inf = bad.float()  # type: ignore[attr-defined]  # read by the fused kernel
            optimizer.grad_scale = None  # type: ignore[attr-defined]
            try:
                optimizer.step()
            finally:
                del optimizer.found_inf, optimizer.grad_scale  # type: ignore[attr-defined]
        self._count(bad | bad_loss)

    def _count(self, bad: torch.Tensor) -> None:
        self.last_bad = bad  # whether the step just taken was skipped (or its loss not finite)
        bad = bad.to(torch.int64)
        self._streak.add_(1).mul_(bad)  # +1 on a bad step, 0 on a good one
        torch.maximum(self.worst, self._streak, out=self.worst)
        self.skipped.add_(bad)

    def worst_streak(self) -> int:
        """The longest run of bad steps so far on this rank (a host sync: call it where one happens)."""
        return int(self.worst.item())


def fused_kernel(device: torch.device) -> bool | None:
    """AdamW's `fused` argument: its fused kernel (CPU and CUDA in torch 2.13) is the one that can skip a
    step on the device; torchtitan makes it its default too (torchtitan/config/job_config.py
    Optimizer.implementation). None (torch's choice) where there is none."""
    return True if device.type in _get_fused_kernels_supported_devices() else None


class StepWatchdog:
    """Every rank: exit 202 when no training step finished for `timeout_s` while armed."""

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self._last = time.monotonic()
        self._armed = False
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="step-watchdog", daemon=True)
        self._thread.start()

    def beat(self) -> None:
        """A training step finished: the next one is timed from now."""
        self._last = time.monotonic()
        self._armed = True

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """Evaluation and checkpoints are not timed (their collectives wait `dist_timeout_s`)."""
        armed, self._armed = self._armed, False
        try:
            yield
        finally:
            self._last, self._armed = time.monotonic(), armed

    def close(self) -> None:
        self._stopped.set()

    def _watch(self) -> None:
        while not self._stopped.wait(min(1.0, self.timeout_s / 4)):
            waited = time.monotonic() - self._last
            if self._armed and waited > self.timeout_s:
                self._expire(waited)

    def _expire(self, waited: float) -> None:
        # The main thread is inside a collective that will not return: only leaving the process ends it.
        # What this attempt leaves in $TMPDIR is removed when the next one starts (token_store.claim_scratch).
        code = faults.PEER_LOST
        print(
            f"trainer: no training step finished in {waited:.0f} s, expected within train.step_timeout_s="
            f"{self.timeout_s:g}: a peer rank hung or was lost; exit {code} ({faults.describe(code)})",
            file=sys.stderr,
            flush=True,
        )
        sys.stdout.flush()
        os._exit(code)
