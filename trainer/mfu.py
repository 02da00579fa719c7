"""Model FLOPs utilisation: the FLOPs a training step needs by the model's shape, over the GPUs' peak.

FLOPs per token, forward and backward, as torchtitan counts them (v0.1.0,
torchtitan/models/llama3/model/args.py `get_nparams_and_flops`, the successor of torchtitan/utils.py
`get_num_flop_per_token`; v0.2.x torchtitan/models/utils.py writes the same attention term as
6 * l * h * (qk + v head dims) * t):

    6 * N + 12 * l * h * q * t

N: parameters without the embedding tables (a lookup is not a matmul; a table tied to the output head
counts, since the head is one), l layers, h attention heads of
q dimensions each, t tokens attended over (the training sequence length). 6 * N is one multiply-add per
parameter forward and two backward; the attention term counts the two matmuls of q with K and of the
scores with V in the same way (causal sparsity and flash attention's recomputation not counted).

Peaks are dense (no 2:4 sparsity) tensor-core FLOP/s per GPU for 16-bit inputs, looked up by the exact
name CUDA reports (`torch.cuda.get_device_name`): a substring would give an L40S the L4's peak and an H100
PCIe the SXM's. A GPU not in the table gets no MFU (the log says so) rather than a guess.
"""

from __future__ import annotations

import torch
from torch import nn

BF16, FP16 = torch.bfloat16, torch.float16
# Device name -> dense FLOP/s for bf16 and fp16. Sources: NVIDIA's datasheets (the dense figures, half of
# the "with sparsity" ones) and torchtitan/tools/utils.py get_peak_flops (H100 SXM 989, PCIe 756, NVL
# 835, H200 989). The A10G is AWS's own variant, without an NVIDIA datasheet: 70 TFLOP/s bf16 as
# baseten.co's "NVIDIA A10 vs A10G" lists it (the A10: 125). H200 (p5e, p5en): its datasheet's BF16 Tensor
# Core 1,979 TFLOPS is with sparsity, 989 dense. B200 (p6-b200): NVIDIA's HGX B200 specifications give
# FP16/BF16 Tensor Core 4.5 PFLOPS per GPU with sparsity, 2.25 dense (torchtitan's 4.5e15 for B200 is the
# sparse figure). L40S (g6e): its datasheet's BF16 362.05 TFLOPS dense (733 with sparsity).
_AMPERE_PLUS: list[tuple[tuple[str, ...], float]] = [
    (("NVIDIA H100 80GB HBM3",), 989e12),  # H100 SXM5: p5
    (("NVIDIA H100 PCIe",), 756e12),
    (("NVIDIA H100 NVL",), 835e12),
    (("NVIDIA H200",), 989e12),  # p5e, p5en
    (("NVIDIA H200 NVL",), 835e12),
    (("NVIDIA B200",), 2250e12),  # p6-b200
    (("NVIDIA A100-SXM4-40GB", "NVIDIA A100-SXM4-80GB"), 312e12),  # p4d, p4de
    (("NVIDIA A100-PCIE-40GB", "NVIDIA A100 80GB PCIe"), 312e12),
    (("NVIDIA A10G",), 70e12),  # g5
    (("NVIDIA A10",), 125e12),
    (("NVIDIA L4",), 121e12),  # g6
    (("NVIDIA L40",), 181e12),
    (("NVIDIA L40S",), 362e12),  # g6e
]
PEAK_FLOPS: dict[str, dict[torch.dtype, float]] = {
    name: {BF16: flops, FP16: flops} for names, flops in _AMPERE_PLUS for name in names
}
# Turing and Volta: fp16 tensor cores only (bf16 is emulated there, so it has no peak to compare with).
PEAK_FLOPS.update(
    {
        "Tesla T4": {FP16: 65e12},  # g4dn
        "Tesla V100-SXM2-16GB": {FP16: 125e12},  # p3
        "Tesla V100-SXM2-32GB": {FP16: 125e12},  # p3dn
        "Tesla V100-PCIE-16GB": {FP16: 112e12},
        "Tesla V100-PCIE-32GB": {FP16: 112e12},
    }
)


def flops_per_token(
    *, non_embedding_params: int, layers: int, heads: int, head_dim: int, seq_len: int
) -> float:
    """Training FLOPs per token (forward + backward) of a transformer of this shape."""
    return 6.0 * non_embedding_params + 12.0 * layers * heads * head_dim * seq_len


def non_embedding_params(model: nn.Module) -> int:
    """Parameters of `model` that a matmul uses: all but those only an `nn.Embedding` looks up, each
    shared parameter counted once. An input embedding tied to the output head (Qwen2.5-0.5B and -1.5B,
    Gemma, Llama 3.2 1B) counts: the head multiplies every token by it, vocabulary x width per token."""
    lookup = {id(p) for m in model.modules() if isinstance(m, nn.Embedding) for p in m.parameters(False)}
    other = {id(p) for m in model.modules() if not isinstance(m, nn.Embedding) for p in m.parameters(False)}
    return sum(p.numel() for p in model.parameters() if id(p) not in lookup or id(p) in other)


def peak_flops(device_name: str, dtype: torch.dtype | None) -> float | None:
    """Dense peak FLOP/s of one GPU called `device_name` for `dtype`; None when not known (fp32, an
    unlisted GPU, bf16 on a GPU without bf16 tensor cores)."""
    return PEAK_FLOPS.get(device_name.strip(), {}).get(dtype) if dtype is not None else None


def mfu(tokens_per_s: float, flops_per_token: float, peak_per_gpu: float, gpus: int) -> float:
    """Share of the GPUs' peak that `tokens_per_s` (all GPUs together) of useful model FLOPs is."""
    return tokens_per_s * flops_per_token / (peak_per_gpu * gpus)
