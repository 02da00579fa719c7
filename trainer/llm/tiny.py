"""`llm.model: tiny`: a small Llama-shaped causal LM and a byte-level tokenizer with a ChatML chat
template, both built in code, offline, with no download. Local runs (`workloads run-local`) and the tests
exercise the same code path a Hub model takes (transformers' model classes, peft, the chat template), at a
size a CPU trains in seconds. Its weights are random (seeded): what it shows is the pipeline, not quality.
"""

from __future__ import annotations

from typing import Any

# ChatML, the format of Qwen's chat models: every turn is <|im_start|>role\n...<|im_end|>\n.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
# Transformer shape: two decoder layers of width 64, as small as a real Llama config goes.
SHAPE: dict[str, Any] = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 2048,
}


def tokenizer() -> Any:
    """A byte-level BPE tokenizer with no merges: 256 byte tokens plus the ChatML specials. Any text
    encodes (no unknown token) and it needs no training data, so every process builds the same one."""
    from tokenizers import Tokenizer, decoders, pre_tokenizers
    from tokenizers.models import BPE
    from transformers import PreTrainedTokenizerFast

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    vocab = {ch: i for i, ch in enumerate(sorted(alphabet))}
    tok = Tokenizer(BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(list(SPECIAL_TOKENS))
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        bos_token=None,
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast


def model(tok: Any, attention: str = "sdpa") -> Any:
    """A LlamaForCausalLM of SHAPE for `tok`'s vocabulary, initialised from the current torch seed, with
    the attention implementation `attention` (a name transformers' AttentionInterface knows)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=len(tok),
        pad_token_id=tok.pad_token_id,
        eos_token_id=tok.eos_token_id,
        bos_token_id=None,
        tie_word_embeddings=False,
        **SHAPE,
    )
    model = LlamaForCausalLM(config)
    model.set_attn_implementation(attention)
    return model
