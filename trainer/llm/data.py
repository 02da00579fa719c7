"""Chat and instruction records -> token ids in the model's chat template, with labels on the assistant's
tokens only, packed into sequences of `llm.seq_len`.

A record (one JSON object per line) is either a chat, {"messages": [{"role": "system"|"user"|"assistant",
"content": "..."}, ...]}, or an instruction, {"prompt": "...", "response": "...", "system": "..."
(optional)}, which becomes a user turn and an assistant turn. The loss counts the tokens of each assistant
turn, including the template's end-of-turn token (so the model learns to stop), and nothing of the system
and user turns nor of the template's own markup. Which tokens those are is found by rendering the
conversation up to each assistant turn with the generation prompt (where the reply starts) and up to its
end, which works for any template that renders a conversation's beginning the same whatever follows (a
template that does not is refused, naming the record); the reply's labels stop at the last special token
of that span, its end-of-turn token (`<|im_end|>`, `<|eot_id|>`, `</s>`), so markup a template writes
after it (ChatML's newline) is not trained.

Packing concatenates the examples and cuts the stream every seq_len tokens: no padding, every token of
every sequence trains. Attention is causal over the whole sequence, across example boundaries (as
concatenate-and-chunk packing does); without packing each example is one row, truncated to seq_len.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset, Subset

from trainer.config import DataConfig, LlmConfig
from trainer.data import DataError, ResumableSampler, held_out, leave_sigterm_to_the_trainer
from trainer.storage import fetch_to_local

IGNORE = -100  # the label of a token the loss leaves out (PyTorch's cross_entropy ignore_index)
ROLES = ("system", "user", "assistant")
Messages = list[dict[str, str]]


def read_records(path: Path) -> list[Messages]:
    """Every record of a JSONL file (or a .json list) as chat messages; DataError names the line."""
    text = path.read_text()
    try:
        if text.lstrip().startswith("["):
            rows = [(i + 1, r) for i, r in enumerate(json.loads(text))]
        else:
            rows = [(n, json.loads(line)) for n, line in enumerate(text.splitlines(), 1) if line.strip()]
    except json.JSONDecodeError as err:
        raise DataError(f"{path}: not valid JSON lines ({err})") from None
    if not rows:
        raise DataError(f"{path}: no records")
    return [_messages(record, f"{path} line {n}") for n, record in rows]


def _messages(record: Any, where: str) -> Messages:
    if isinstance(record, dict) and "messages" in record:
        messages = record["messages"]
    elif isinstance(record, dict) and {"prompt", "response"} <= set(record):
        messages = [{"role": "user", "content": record["prompt"]}]
        messages.append({"role": "assistant", "content": record["response"]})
        if "system" in record:
            messages.insert(0, {"role": "system", "content": record["system"]})
    else:
        raise DataError(
            f'{where}: expected {{"messages": [{{"role", "content"}}, ...]}} or '
            f'{{"prompt", "response"}}, got {str(record)[:80]!r}'
        )
    ok = isinstance(messages, list) and all(
        isinstance(m, dict) and m.get("role") in ROLES and isinstance(m.get("content"), str) for m in messages
    )
    if not ok:
        raise DataError(f"{where}: every message needs a role ({' | '.join(ROLES)}) and a text content")
    if not any(m["role"] == "assistant" for m in messages):
        raise DataError(f"{where}: no assistant message, so nothing to learn")
    return [{"role": m["role"], "content": m["content"]} for m in messages]


def _ids(tok: Any, messages: Messages, generation_prompt: bool) -> list[int]:
    text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=generation_prompt)
    return list(tok(text, add_special_tokens=False)["input_ids"])


def _special_ids(tok: Any) -> set[int]:
    """The tokenizer's special tokens: its named ones and every added token marked special (ChatML's
    <|im_start|> and <|im_end|> are added tokens, not named ones)."""
    added = {i for i, token in tok.added_tokens_decoder.items() if token.special}
    return added | set(tok.all_special_ids)


def encode(tok: Any, messages: Messages, where: str) -> tuple[list[int], list[int]]:
    """(token ids, labels) of one conversation: labels are the ids of each assistant reply up to its
    end-of-turn token, IGNORE elsewhere."""
    ids = _ids(tok, messages, False)
    labels = [IGNORE] * len(ids)
    special = _special_ids(tok)
    for k, message in enumerate(messages):
        if message["role"] != "assistant":
            continue
        start = len(_ids(tok, messages[:k], True))
        upto = _ids(tok, messages[: k + 1], False)
        if ids[: len(upto)] != upto or start > len(upto):
            raise DataError(
                f"{where}: the chat template renders this conversation's first {k + 1} turns differently "
                "when more follow, so the reply's tokens cannot be told apart; use a template that does "
                "not rewrite earlier turns, or one assistant turn per record"
            )
        ends = [i for i in range(start, len(upto)) if ids[i] in special]
        end = ends[-1] + 1 if ends else len(upto)  # no end-of-turn token: the turn as rendered
        labels[start:end] = ids[start:end]
    return ids, labels


def pack(examples: list[tuple[list[int], list[int]]], seq_len: int) -> list[tuple[list, list]]:
    """Concatenate and cut every seq_len tokens; the last sequence may be shorter (Collate pads it)."""
    ids = [t for e, _ in examples for t in e]
    labels = [t for _, lab in examples for t in lab]
    blocks = []
    for start in range(0, len(ids), seq_len):
        block_ids, block_labels = ids[start : start + seq_len], labels[start : start + seq_len]
        blocks.append((block_ids, block_labels))
    return blocks


@dataclass
class Sequences(Dataset):
    rows: list[tuple[list[int], list[int]]]

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int) -> tuple[list[int], list[int]]:
        return self.rows[i]

    def fingerprint(self) -> str:
        return hashlib.sha256(json.dumps(self.rows).encode()).hexdigest()

    def label_tokens(self) -> int:
        return sum(sum(t != IGNORE for t in labels) for _, labels in self.rows)


class Collate:
    """Pad a batch to its longest row (rounded up to a multiple of 8); padding is masked and IGNOREd."""

    def __init__(self, pad_id: int):
        self.pad_id = pad_id

    def __call__(self, batch: list[tuple[list[int], list[int]]]) -> dict[str, torch.Tensor]:
        length = -(-max(len(ids) for ids, _ in batch) // 8) * 8
        input_ids = torch.full((len(batch), length), self.pad_id, dtype=torch.long)
        labels = torch.full((len(batch), length), IGNORE, dtype=torch.long)
        attention_mask = torch.zeros(len(batch), length, dtype=torch.long)
        for row, (ids, labs) in enumerate(batch):
            input_ids[row, : len(ids)] = torch.tensor(ids)
            labels[row, : len(labs)] = torch.tensor(labs)
            attention_mask[row, : len(ids)] = 1
        return {"input_ids": input_ids, "attention_mask": attention_mask, "labels": labels}


def sequences(
    data: DataConfig, llm: LlmConfig, tok: Any, workdir: Path, *, s3_client: Any = None
) -> tuple[Sequences, Sequences]:
    """(train, validation) sequences: data.val_source, or data.val_fraction of the records held out."""
    records = read_records(fetch_to_local(data.source, workdir, client=s3_client))
    if data.val_source:
        val_records = read_records(fetch_to_local(data.val_source, workdir, client=s3_client))
    else:
        train_rows, val_rows = held_out(len(records), data, "records")
        val_records = [records[i] for i in val_rows]
        records = [records[i] for i in train_rows]

    def rows(recs: list[Messages], source: str) -> list[tuple[list[int], list[int]]]:
        examples = [encode(tok, m, f"{source} record {i + 1}") for i, m in enumerate(recs)]
        if llm.packing:
            return pack(examples, llm.seq_len)
        return [(ids[: llm.seq_len], labels[: llm.seq_len]) for ids, labels in examples]

    train = Sequences(rows(records, data.source))
    val = Sequences(rows(val_records, data.val_source or data.source))
    for name, split in (("training", train), ("validation", val)):
        if not split.label_tokens():
            raise DataError(
                f"{data.source}: the {name} split has no assistant tokens within llm.seq_len={llm.seq_len}"
            )
    return train, val


def loaders(
    train: Sequences, val: Sequences, data: DataConfig, *, batch_size: int, seed: int, rank: int, world: int,
    pad_id: int, pin_memory: bool,
) -> tuple[DataLoader, DataLoader]:  # fmt: skip
    sampler = ResumableSampler(train, num_replicas=world, rank=rank, shuffle=True, seed=seed, drop_last=True)
    if len(sampler) < batch_size:
        raise DataError(
            f"{len(train)} training sequences give {len(sampler)} per rank, fewer than train.batch_size="
            f"{batch_size}; lower llm.seq_len or train.batch_size, or add records"
        )
    collate = Collate(pad_id)
    loader = DataLoader(
        train, batch_size=batch_size, sampler=sampler, collate_fn=collate, num_workers=data.num_workers,
        pin_memory=pin_memory, drop_last=True, persistent_workers=data.num_workers > 0,
        generator=torch.Generator().manual_seed(seed),
        worker_init_fn=leave_sigterm_to_the_trainer if data.num_workers > 0 else None,
    )  # fmt: skip
    # Each rank takes every world-th sequence: no duplicates, so the summed token counts are exact.
    val_loader = DataLoader(
        Subset(val, range(rank, len(val), world)), batch_size=batch_size, collate_fn=collate
    )
    return loader, val_loader
