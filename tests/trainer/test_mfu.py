"""MFU: torchtitan's FLOPs per token from a model's shape; peaks by exact CUDA device name."""

import pytest
import torch
from torch import nn

from trainer import mfu

BF16, FP16, FP32 = torch.bfloat16, torch.float16, None

# (name torch.cuda.get_device_name reports, dtype, dense peak FLOP/s or None: no MFU)
PEAKS = [
    ("NVIDIA L4", BF16, 121e12),
    ("NVIDIA L40", BF16, 181e12),  # "L4" in "NVIDIA L40": a substring match gave it the L4's peak
    ("NVIDIA L40S", BF16, 362e12),
    ("NVIDIA A10G", BF16, 70e12),
    ("NVIDIA A10", FP16, 125e12),
    ("NVIDIA A100-SXM4-40GB", BF16, 312e12),
    ("NVIDIA A100-SXM4-80GB", FP16, 312e12),
    ("NVIDIA A100-PCIE-40GB", BF16, 312e12),
    ("NVIDIA A100 80GB PCIe", BF16, 312e12),
    ("NVIDIA H100 80GB HBM3", BF16, 989e12),  # SXM5 (p5)
    ("NVIDIA H100 PCIe", BF16, 756e12),  # a substring match gave it the SXM's peak
    ("NVIDIA H100 NVL", BF16, 835e12),
    ("NVIDIA H200", BF16, 989e12),
    ("NVIDIA B200", BF16, 2250e12),  # dense: NVIDIA's 4.5 PFLOPS is with sparsity
    ("NVIDIA B200", FP16, 2250e12),
    ("Tesla T4", FP16, 65e12),
    ("Tesla T4", BF16, None),  # emulated: no tensor-core peak to compare with
    ("Tesla V100-SXM2-16GB", FP16, 125e12),
    ("Tesla V100-PCIE-16GB", FP16, 112e12),
    ("NVIDIA H100 80GB HBM3", FP32, None),
    ("NVIDIA GeForce RTX 4090", BF16, None),  # not in the table: no guess
    ("NVIDIA L4 (some future variant)", BF16, None),
]


@pytest.mark.parametrize(("name", "dtype", "peak"), PEAKS, ids=[f"{n}-{d}" for n, d, _ in PEAKS])
def test_peak_flops_by_exact_device_name(name, dtype, peak):
    assert mfu.peak_flops(name, dtype) == peak


def test_flops_per_token_is_torchtitans_formula():
    # Llama 3 8B's shape at 8k tokens: torchtitan's 6 * N + 12 * l * h * q * t with N = 7.0e9 non-embedding.
    per_token = mfu.flops_per_token(
        non_embedding_params=7_000_000_000, layers=32, heads=32, head_dim=128, seq_len=8192
    )
    assert per_token == 6 * 7_000_000_000 + 12 * 32 * 32 * 128 * 8192


def test_embedding_tables_do_not_count_and_a_shared_weight_counts_once():
    class Tied(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(100, 8)
            self.body = nn.Linear(8, 8)
            self.head = nn.Linear(8, 8, bias=False)
            self.head.weight = self.body.weight  # shared: one parameter

    assert mfu.non_embedding_params(Tied()) == 8 * 8 + 8


def test_an_output_head_tied_to_the_input_embedding_counts_as_the_matmul_it_is():
    """Qwen2.5-0.5B (dev-llm's model), built on the meta device from its config.json's shape, against a
    hand count: its LM head shares the embedding table and was left out, reading MFU x0.736."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    shape = {"hidden_size": 896, "intermediate_size": 4864, "num_hidden_layers": 24, "vocab_size": 151936,
             "num_attention_heads": 14, "num_key_value_heads": 2, "tie_word_embeddings": True}  # fmt: skip
    with torch.device("meta"):
        model = Qwen2ForCausalLM(Qwen2Config(**shape))
    d, kv, ffn = 896, 2 * 64, 4864
    layer = (d * d + d) + 2 * (d * kv + kv) + d * d + 3 * d * ffn + 2 * d  # q, k, v (biased), o, MLP, norms
    head = 151936 * d  # the embedding table, used by the head's matmul
    assert mfu.non_embedding_params(model) == 24 * layer + d + head == 494_032_768
    per_token = mfu.flops_per_token(
        non_embedding_params=mfu.non_embedding_params(model), layers=24, heads=14, head_dim=64, seq_len=512
    )
    without_head = 6 * (24 * layer + d) + 12 * 24 * 14 * 64 * 512
    assert without_head / per_token == pytest.approx(0.736, abs=5e-4)


def test_mfu_spreads_the_tokens_over_the_gpus():
    assert mfu.mfu(tokens_per_s=1000.0, flops_per_token=1e9, peak_per_gpu=1e12, gpus=4) == pytest.approx(0.25)


@pytest.mark.parametrize("key", ["l40s", "h200", "b200"])
def test_the_catalogs_newest_gpus_have_a_dense_bf16_peak_under_the_name_they_report(key):
    from infra.accelerators import CATALOG

    acc = CATALOG[key]
    assert acc.native_precision == "bf16"
    assert mfu.peak_flops(acc.gpu_model, BF16) is not None


def test_mfu_on_an_h200_node_is_measured_against_its_dense_peak():
    # 8 x H200 (p5e/p5en) running a 7B-parameter-shaped model at 24,000 tokens/s:
    per_token = mfu.flops_per_token(
        non_embedding_params=6_500_000_000, layers=32, heads=32, head_dim=128, seq_len=4096
    )
    peak = mfu.peak_flops("NVIDIA H200", BF16)
    # 4.54e10 FLOPs/token x 24,000 / (8 x 989e12) = 13.8%; the sparse 1,979 TFLOPS would halve it.
    assert mfu.mfu(24_000.0, per_token, peak, gpus=8) == pytest.approx(0.1378, abs=5e-4)
