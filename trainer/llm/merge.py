"""`llm.export: merged`: the base model with the LoRA adapter merged into its weights (W + B A alpha/r),
written as a plain transformers model that `AutoModelForCausalLM.from_pretrained` loads without peft.

The training model is left as it is (the loop still compares the replicas after the export): the gathered
state dict (every weight, whole, on rank 0's CPU) is assigned into a skeleton built on the meta device
(no second copy but of the adapted layers' weights), peft's `merge_and_unload` merges it, and
`save_pretrained` writes it in the dtype the source model was published in (its config.json's, bf16 for
most Hub models; fp32 for `tiny`), with the KV cache (off for training) back on for generation.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import torch


def save_merged(pretrained: Any, weights: dict[str, Any], target: Path) -> None:
    """Rank 0: `pretrained` (the training PeftModel, unwrapped from DDP) with `weights` (its full state
    dict) merged and saved into `target`."""
    from peft import get_peft_model
    from transformers import AutoModelForCausalLM

    config = copy.deepcopy(pretrained.get_base_model().config)
    config.use_cache = True
    with torch.device("meta"):
        base = AutoModelForCausalLM.from_config(config)
    skeleton = get_peft_model(base, copy.deepcopy(pretrained.peft_config["default"]))
    # The merge adds to the adapted layers' weights in place, and on a CPU the gathered state dict holds
    # the training model's own tensors: those are copied, the others assigned as they are.
    adapted = {k: v.clone() if ".base_layer." in k else v for k, v in weights.items()}
    skeleton.load_state_dict(adapted, strict=True, assign=True)
    skeleton.get_base_model().tie_weights()
    merged = skeleton.merge_and_unload()
    merged.to(getattr(pretrained, "published_dtype", torch.float32))
    merged.save_pretrained(target)
