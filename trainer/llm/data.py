"""Chat and instruction records -> token ids in the model's chat template, with labels on the assistant's
tokens only, packed into sequences of `llm.seq_len` whose conversations do not see each other.

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

Packing places whole conversations into sequences of at most seq_len tokens, best fit decreasing (the
longest first, each into the fullest sequence it fits), so no reply is cut from its prompt. Each token
attends only to earlier tokens of its own conversation, with positions counted from its conversation's
start: the batch carries a block-diagonal causal mask and per-conversation position ids (the attention
transformers' own padding-free packing derives from position ids on SDPA), built here in the DataLoader
rather than on the device. A conversation longer than seq_len is truncated to one sequence, as without
packing, where each example is one row. A batch without packed rows carries no mask at all: with right
padding and causal attention no real token sees the padding (trainer/llm/task.py ATTENTION says why no
mask matters on a GPU).
"""

from __future__ import annotations

import bisect
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import torch
from torch.utils.data import DataLoader, Dataset, Subset

from trainer.config import DataConfig, LlmConfig
from trainer.data import DataError, ResumableSampler, held_out, leave_sigterm_to_the_trainer
from trainer.storage import fetch_to_local

IGNORE = -100  # the label of a token the loss leaves out (PyTorch's cross_entropy ignore_index)
ROLES = ("system", "user", "assistant")
Messages = list[dict[str, str]]


class Row(NamedTuple):
    """One training sequence: its token ids, labels and the lengths of the conversations it holds, in
    order (attention stays within each)."""

    ids: list[int]
    labels: list[int]
    lengths: list[int]


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


def pack(examples: list[tuple[list[int], list[int]]], seq_len: int) -> list[Row]:
    """Whole conversations into rows of at most seq_len tokens, best fit decreasing; one longer than
    seq_len is truncated to a row of its own. Deterministic: every rank packs the same rows."""
    sizes = [min(len(ids), seq_len) for ids, _ in examples]
    rows: list[list[int]] = []  # the examples of each row, in the order they were placed
    spaces: list[int] = []  # sorted free space of the rows that have some, each value once ...
    with_space: dict[int, list[int]] = {}  # ... and the rows with that much free
    for i in sorted(range(len(examples)), key=lambda i: -sizes[i]):
        k = bisect.bisect_left(spaces, sizes[i])  # the least free space that still fits
        if k == len(spaces):
            row, free = len(rows), seq_len
            rows.append([])
        else:
            free = spaces[k]
            row = with_space[free].pop()
            if not with_space[free]:
                del with_space[free], spaces[k]
        rows[row].append(i)
        free -= sizes[i]
        if free:
            if free not in with_space:
                bisect.insort(spaces, free)
            with_space.setdefault(free, []).append(row)
    return [
        Row(
            [t for i in members for t in examples[i][0][: sizes[i]]],
            [t for i in members for t in examples[i][1][: sizes[i]]],
            [sizes[i] for i in members],
        )
        for members in rows
    ]


@dataclass
class Sequences(Dataset):
    rows: list[Row]

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int) -> Row:
        return self.rows[i]

    def fingerprint(self) -> str:
        return hashlib.sha256(json.dumps(self.rows).encode()).hexdigest()

    def label_tokens(self) -> int:
        return sum(sum(t != IGNORE for t in row.labels) for row in self.rows)


class Collate:
    """A batch of rows (Row, or (ids, labels) for one conversation), right-padded to its longest row
    rounded up to a multiple of 8; padding is IGNOREd.

    `attention_mask` marks the real tokens (the loop counts them); it never reaches the model. A batch with
    a row of several conversations also has `document_mask` (batch, 1, length, length: query attends to
    key, causal within each conversation; the padding is a segment of its own, so no row of the mask is
    empty) and `position_ids` counted from each conversation's start (forward_inputs passes them on)."""

    def __init__(self, pad_id: int):
        self.pad_id = pad_id

    def __call__(self, batch: list) -> dict[str, torch.Tensor]:
        rows = [row if isinstance(row, Row) else Row(row[0], row[1], [len(row[0])]) for row in batch]
        length = -(-max(len(row.ids) for row in rows) // 8) * 8
        input_ids = torch.full((len(rows), length), self.pad_id, dtype=torch.long)
        labels = torch.full((len(rows), length), IGNORE, dtype=torch.long)
        attention_mask = torch.zeros(len(rows), length, dtype=torch.long)
        for r, row in enumerate(rows):
            input_ids[r, : len(row.ids)] = torch.tensor(row.ids)
            labels[r, : len(row.labels)] = torch.tensor(row.labels)
            attention_mask[r, : len(row.ids)] = 1
        out = {"input_ids": input_ids, "attention_mask": attention_mask, "labels": labels}
        if any(len(row.lengths) > 1 for row in rows):
            out |= _documents(rows, length)
        return out


def _documents(rows: list[Row], length: int) -> dict[str, torch.Tensor]:
    segments = torch.empty(len(rows), length, dtype=torch.long)
    positions = torch.empty(len(rows), length, dtype=torch.long)
    for r, row in enumerate(rows):
        start = 0
        for k, n in enumerate([*row.lengths, length - sum(row.lengths)]):  # the padding last
            segments[r, start : start + n] = k
            positions[r, start : start + n] = torch.arange(n)
            start += n
    causal = torch.ones(length, length, dtype=torch.bool).tril()
    same = segments[:, :, None] == segments[:, None, :]
    return {"document_mask": (same & causal).unsqueeze(1), "position_ids": positions}


def forward_inputs(batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """What the model's forward takes of a batch: the token ids and, for packed rows, the document mask
    and position ids. No padding mask: right padding is never attended to under causal attention."""
    inputs = {"input_ids": batch["input_ids"]}
    if "document_mask" in batch:
        inputs |= {"attention_mask": batch["document_mask"], "position_ids": batch["position_ids"]}
    return inputs


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

    def rows(recs: list[Messages], source: str) -> list[Row]:
        examples = [encode(tok, m, f"{source} record {i + 1}") for i, m in enumerate(recs)]
        if llm.packing:
            return pack(examples, llm.seq_len)
        return [Row(ids[: llm.seq_len], labels[: llm.seq_len], [min(len(ids), llm.seq_len)])
                for ids, labels in examples]  # fmt: skip

    train = Sequences(rows(records, data.source))
    val = Sequences(rows(val_records, data.val_source or data.source))
    for name, split, source in (("training", train, data.source), ("validation", val, data.val_source)):
        if not split.label_tokens():
            raise DataError(
                f"{source or data.source}: the {name} split has no assistant tokens within "
                f"llm.seq_len={llm.seq_len}"
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
