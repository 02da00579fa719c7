"""Which floating-point format a run computes in, chosen from the GPU's architecture, not its driver's word.

`torch.cuda.is_bf16_supported()` counts emulation, so it says True on a T4 (sm_75), where bf16 runs with
no tensor cores and no loss scaling. `precision: auto` therefore reads the architecture:

  NVIDIA sm_80+ (A100, A10G, L4, L40S, H100, H200, B200 sm_100)   bf16 (tensor cores; no loss scaling)
  NVIDIA sm_70 / sm_75 (V100, T4)                      fp16 + GradScaler (fp16 tensor cores only)
  NVIDIA older than sm_70                              fp32 (no tensor cores: half precision saves little)
  AMD CDNA gfx908/gfx90a/gfx94x/gfx95x, RDNA3/4 gfx11xx/gfx12xx   bf16 (matrix cores / WMMA with bf16)
  AMD gfx900/gfx906, RDNA1/2 gfx10xx (Radeon Pro V520 = gfx1011)  fp16 + GradScaler (double-rate packed
                                                       fp16, no bf16 units)
  AMD, any other gfx target                            fp32 (unknown: the safe choice)
  CPU                                                  fp32

On ROCm `get_device_capability` is a translation of the gfx target, so the target itself
(`gcnArchName`, e.g. "gfx90a:sramecc+:xnack-") decides there.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass

import torch

log = logging.getLogger("trainer")

DTYPES = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}

_AMD_BF16 = ("gfx908", "gfx90a", "gfx94", "gfx95", "gfx11", "gfx12")
_AMD_FP16 = ("gfx900", "gfx906", "gfx10")


@dataclass(frozen=True)
class Precision:
    dtype: torch.dtype | None  # the autocast dtype; None: fp32
    gpu: str  # what the choice was made from, for the log
    reason: str

    @property
    def name(self) -> str:
        return next(name for name, dtype in DTYPES.items() if dtype == self.dtype)

    @property
    def needs_scaler(self) -> bool:
        # fp16's 5-bit exponent underflows small gradients; bf16 has fp32's range.
        return self.dtype == torch.float16


def gpu_arch(device: torch.device) -> tuple[str, str, str]:
    """(name, architecture, native format) of the GPU: architecture 'sm_75' or 'gfx1011'; native format
    'bf16', 'fp16' or 'fp32' by the table above."""
    name = torch.cuda.get_device_name(device)
    if torch.version.hip:
        arch = torch.cuda.get_device_properties(device).gcnArchName.split(":")[0]
        if arch.startswith(_AMD_BF16):
            return name, arch, "bf16"
        if arch.startswith(_AMD_FP16):
            return name, arch, "fp16"
        return name, arch, "fp32"
    major, minor = torch.cuda.get_device_capability(device)
    arch = f"sm_{major}{minor}"
    return name, arch, "bf16" if major >= 8 else "fp16" if major == 7 else "fp32"


def choose(requested: str, device: torch.device) -> Precision:
    """The precision for `train.precision` = requested on `device`."""
    if device.type != "cuda":
        choice = "fp32" if requested == "auto" else requested
        return Precision(DTYPES[choice], "cpu", "CPU" if requested == "auto" else "requested")
    name, arch, native = gpu_arch(device)
    gpu = f"{name} ({arch})"
    if requested == "auto":
        return Precision(DTYPES[native], gpu, f"auto: {native} is native on {arch}")
    if requested == "bf16" and native != "bf16":
        log.warning(
            "train.precision='bf16' on %s: no bf16 hardware, so it is emulated and slow; "
            "'auto' picks %s there",
            gpu,
            native,
        )
    return Precision(DTYPES[requested], gpu, "requested")


def fsdp_policy(precision: Precision):
    """FSDP's mixed-precision policy for `precision`: parameters all-gathered and computed in the low
    precision (half the traffic and memory of the unsharded copies), gradients reduced in fp32 (summing
    many ranks' half-precision gradients loses bits), as torchtitan does. fp32: the default (no casts)."""
    from torch.distributed.fsdp import MixedPrecisionPolicy

    if precision.dtype is None:
        return MixedPrecisionPolicy()
    return MixedPrecisionPolicy(param_dtype=precision.dtype, reduce_dtype=torch.float32)


def autocast(device: torch.device, dtype: torch.dtype | None) -> contextlib.AbstractContextManager:
    """Autocast to `dtype`; none at all for fp32 (None): entering a disabled one still costs a little."""
    return torch.autocast(device.type, dtype=dtype) if dtype is not None else contextlib.nullcontext()
