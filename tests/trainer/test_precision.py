"""`precision: auto` by the GPU's architecture, with the device simulated: CI has no GPU, so the
torch.cuda queries the choice reads are replaced by what the real GPUs answer."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest
import torch

from trainer import precision

CUDA = torch.device("cuda", 0)


@pytest.fixture
def nvidia(monkeypatch):
    """Pretend to be an NVIDIA GPU with the given name and compute capability."""

    def install(name: str, capability: tuple[int, int]) -> None:
        monkeypatch.setattr(torch.version, "hip", None)
        monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: name)
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
        # What misled the old choice: the driver counts emulated bf16 as supported (it does on a T4).
        monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda including_emulation=True: True)

    return install


@pytest.fixture
def amd(monkeypatch):
    """Pretend to be a ROCm build on an AMD GPU with the given gfx target."""

    def install(name: str, arch: str) -> None:
        monkeypatch.setattr(torch.version, "hip", "6.4.43482")
        monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: name)
        monkeypatch.setattr(
            torch.cuda, "get_device_properties", lambda device=None: SimpleNamespace(gcnArchName=arch)
        )
        # ROCm reports a made-up capability; the choice must not read it.
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
        monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda including_emulation=True: True)

    return install


@pytest.mark.parametrize(
    ("name", "capability", "expected", "scaler"),
    [
        ("Tesla T4", (7, 5), "fp16", True),
        ("Tesla V100-SXM2-16GB", (7, 0), "fp16", True),
        ("NVIDIA A100-SXM4-40GB", (8, 0), "bf16", False),
        ("NVIDIA A10G", (8, 6), "bf16", False),
        ("NVIDIA L4", (8, 9), "bf16", False),
        ("NVIDIA H100 80GB HBM3", (9, 0), "bf16", False),
        ("NVIDIA B200", (10, 0), "bf16", False),  # sm_100: a two-digit major
        ("Tesla P100-PCIE-16GB", (6, 0), "fp32", False),
    ],
)
def test_auto_picks_by_compute_capability_not_by_emulated_bf16_support(
    nvidia, name, capability, expected, scaler
):
    nvidia(name, capability)
    chosen = precision.choose("auto", CUDA)
    assert (chosen.name, chosen.needs_scaler) == (expected, scaler)
    assert chosen.gpu == f"{name} (sm_{capability[0]}{capability[1]})"


@pytest.mark.parametrize(
    ("arch", "expected"),
    [
        ("gfx90a:sramecc+:xnack-", "bf16"),  # MI210/MI250
        ("gfx942:sramecc+:xnack-", "bf16"),  # MI300X
        ("gfx908:sramecc+:xnack-", "bf16"),  # MI100
        ("gfx1100", "bf16"),  # RDNA3 (WMMA)
        ("gfx1011", "fp16"),  # Radeon Pro V520 (g4ad)
        ("gfx1030", "fp16"),  # RDNA2 (V620)
        ("gfx906:sramecc+:xnack-", "fp16"),  # MI50
        ("gfx803", "fp32"),  # unknown to the table: the safe choice
    ],
)
def test_rocm_auto_picks_by_gfx_target(amd, arch, expected):
    amd("AMD Radeon Graphics", arch)
    chosen = precision.choose("auto", CUDA)
    assert chosen.name == expected
    assert chosen.needs_scaler == (expected == "fp16")
    assert chosen.gpu == f"AMD Radeon Graphics ({arch.split(':')[0]})"


def test_cpu_auto_is_fp32_and_an_explicit_choice_is_kept():
    assert precision.choose("auto", torch.device("cpu")).dtype is None
    assert precision.choose("bf16", torch.device("cpu")).dtype is torch.bfloat16


def test_explicit_bf16_on_a_gpu_without_bf16_hardware_warns(nvidia, caplog):
    nvidia("Tesla T4", (7, 5))
    with caplog.at_level(logging.WARNING, logger="trainer"):
        chosen = precision.choose("bf16", CUDA)
    assert chosen.dtype is torch.bfloat16
    assert "Tesla T4 (sm_75): no bf16 hardware, so it is emulated and slow; 'auto' picks fp16" in caplog.text


def test_fsdp_policy_gathers_in_the_low_precision_and_reduces_in_fp32(nvidia):
    nvidia("NVIDIA A100-SXM4-40GB", (8, 0))
    policy = precision.fsdp_policy(precision.choose("auto", CUDA))
    assert (policy.param_dtype, policy.reduce_dtype) == (torch.bfloat16, torch.float32)
    fp32 = precision.fsdp_policy(precision.choose("auto", torch.device("cpu")))
    assert (fp32.param_dtype, fp32.reduce_dtype) == (None, None)
