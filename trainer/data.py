"""Text classification data: the synthetic zIMDB corpus, JSONL/CSV/Parquet files (local or S3), HF data sets.

Everything becomes a list of (text, label) pairs, then token ids from an offline tokenizer, then padded
batches from a DataLoader with a DistributedSampler that can resume in the middle of an epoch.
"""

from __future__ import annotations

import csv
import json
import random
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import torch
from torch.utils.data import DataLoader, Dataset, DistributedSampler

from trainer.config import ConfigError, DataConfig
from trainer.storage import fetch_to_local

Example = tuple[str, int]


class DataError(ConfigError):
    """Input data that cannot be used as given (permanent: exit code 2)."""


# The synthetic "zIMDB" corpus: movie-review-like sentences whose label follows from sentiment words,
# with negations ("not great") that flip the next one, so a model must look at word order to do well.
POSITIVE = "great wonderful brilliant moving superb charming delightful gripping funny beautiful".split()  # noqa: SIM905
NEGATIVE = "awful boring dull terrible clumsy tedious bland weak predictable messy".split()  # noqa: SIM905
NEGATIONS = "not never hardly".split()  # noqa: SIM905
SUBJECTS = "movie film plot acting cast script ending score sequel".split()  # noqa: SIM905
FILLER = "and with a very quite rather really in its of to honestly overall scenes story director".split()  # noqa: SIM905


def synthetic_corpus(size: int, seed: int) -> list[Example]:
    """Deterministic synthetic reviews (label 1 positive, 0 negative); same (size, seed), same corpus."""
    rng = random.Random(seed)
    examples: list[Example] = []
    while len(examples) < size:
        words, score = [], 0
        for _ in range(rng.randint(2, 4)):
            words += ["the", rng.choice(SUBJECTS), "was"]
            negated = rng.random() < 0.3
            if negated:
                words.append(rng.choice(NEGATIONS))
            positive = rng.random() < 0.5
            words.append(rng.choice(POSITIVE if positive else NEGATIVE))
            score += (1 if positive else -1) * (-1 if negated else 1)
            words += rng.sample(FILLER, rng.randint(1, 4))
        if score != 0:  # a tie has no label
            examples.append((" ".join(words), int(score > 0)))
    return examples


def _read_rows(path: Path, text_field: str, label_field: str) -> list[Example]:
    suffix = path.suffix.lower()
    if suffix == ".parquet":
        import pyarrow.parquet as pq

        table = pq.read_table(path)
        missing = [c for c in (text_field, label_field) if c not in table.column_names]
        if missing:
            raise DataError(f"{path}: no column {missing[0]!r}; columns are {table.column_names}")
        rows = list(
            zip(table.column(text_field).to_pylist(), table.column(label_field).to_pylist(), strict=True)
        )
    elif suffix == ".csv":
        with open(path, newline="") as f:
            reader = csv.DictReader(f)
            for col in (text_field, label_field):
                if col not in (reader.fieldnames or []):
                    raise DataError(f"{path}: no column {col!r}; columns are {reader.fieldnames}")
            rows = [(r[text_field], r[label_field]) for r in reader]
    else:  # .jsonl, or .json holding either JSON lines or one list of objects
        raw = path.read_text()
        try:
            records = (
                json.loads(raw)
                if raw.lstrip().startswith("[")
                else [json.loads(line) for line in raw.splitlines() if line.strip()]
            )
        except json.JSONDecodeError as err:
            raise DataError(f"{path}: not valid JSON lines ({err})") from None
        try:
            rows = [(r[text_field], r[label_field]) for r in records]
        except (KeyError, TypeError) as err:
            raise DataError(
                f"{path}: every record needs {text_field!r} and {label_field!r} ({err!r})"
            ) from None
    examples = []
    for i, (text, label) in enumerate(rows, start=1):
        try:
            examples.append((str(text), int(label)))
        except (TypeError, ValueError):
            raise DataError(f"{path} row {i}: label {label!r} is not an integer class id") from None
    if not examples:
        raise DataError(f"{path}: no rows")
    return examples


def _hf_splits(name: str, text_field: str, label_field: str) -> tuple[list[Example], list[Example]]:
    import datasets  # checked by DataConfig: the option fails early with a pip hint when missing

    ds = datasets.load_dataset(name)
    val_split = "validation" if "validation" in ds else "test"
    return tuple(  # type: ignore[return-value]
        [(str(r[text_field]), int(r[label_field])) for r in ds[split]] for split in ("train", val_split)
    )


def load_splits(cfg: DataConfig, workdir: Path) -> tuple[list[Example], list[Example]]:
    """(train, val) examples for the configured source."""
    if cfg.source == "synthetic":
        return (
            synthetic_corpus(cfg.synthetic_train_size, cfg.seed),
            synthetic_corpus(cfg.synthetic_val_size, cfg.seed + 1_000_003),
        )
    if cfg.source.startswith("hf:"):
        return _hf_splits(cfg.source[3:], cfg.text_field, cfg.label_field)
    train = _read_rows(fetch_to_local(cfg.source, workdir), cfg.text_field, cfg.label_field)
    if cfg.val_source:
        return train, _read_rows(fetch_to_local(cfg.val_source, workdir), cfg.text_field, cfg.label_field)
    shuffled = train[:]
    random.Random(cfg.seed).shuffle(shuffled)
    n_val = max(1, int(len(shuffled) * cfg.val_fraction))
    if n_val >= len(shuffled):
        raise DataError(
            f"{cfg.source}: {len(shuffled)} rows are too few to hold out data.val_fraction={cfg.val_fraction}"
        )
    return shuffled[n_val:], shuffled[:n_val]


def check_labels(examples: list[Example], num_labels: int, where: str) -> None:
    bad = next((label for _, label in examples if not 0 <= label < num_labels), None)
    if bad is not None:
        raise DataError(
            f"{where}: label {bad} is outside 0..{num_labels - 1} (model.num_labels={num_labels})"
        )


PAD, UNK = "[PAD]", "[UNK]"
UNK_ID = 1  # trained tokenizers list the special tokens first: [PAD] = 0, [UNK] = 1


class TextEncoder:
    """Text -> token ids. Id 0 is padding. Serialises to a JSON string stored in checkpoints and outputs."""

    def __init__(self, spec: str):
        self.spec = spec
        meta = json.loads(spec)
        self._tok = None
        self.pad_id = 0
        self.kind = meta.get("type", "tokenizers")  # a tokenizers JSON has no top-level "type"
        if self.kind == "bytes":
            self.vocab_size = 258  # 0 pad, 1 unknown, bytes shifted by 2
        elif self.kind == "hf":
            from transformers import AutoTokenizer  # checked by ModelConfig

            self._hf = AutoTokenizer.from_pretrained(meta["name"])
            self.vocab_size, self.pad_id = len(self._hf), self._hf.pad_token_id
        else:
            from tokenizers import Tokenizer

            self._tok = Tokenizer.from_str(spec)
            self.vocab_size = self._tok.get_vocab_size()

    def encode(self, texts: list[str], max_len: int) -> list[list[int]]:
        if self.kind == "hf":
            return self._hf(texts, truncation=True, max_length=max_len)["input_ids"]
        if self._tok is None:
            return [[b + 2 for b in t.encode()[:max_len]] or [1] for t in texts]
        return [e.ids[:max_len] or [UNK_ID] for e in self._tok.encode_batch(texts)]


def train_tokenizer(kind: str, texts: list[str], vocab_size: int, model_name: str = "") -> TextEncoder:
    """Build a tokenizer from the training split only, offline and deterministically.

    A Hugging Face model brings its own tokenizer (model.name hf:<model>), which wins over `kind`.
    """
    if model_name.startswith("hf:"):
        return TextEncoder(json.dumps({"type": "hf", "name": model_name[3:]}))
    if kind == "bytes":
        return TextEncoder(json.dumps({"type": "bytes"}))
    from tokenizers import Tokenizer, normalizers, pre_tokenizers
    from tokenizers.models import BPE, WordLevel
    from tokenizers.trainers import BpeTrainer

    normalizer = normalizers.Sequence(
        [normalizers.NFD(), normalizers.Lowercase(), normalizers.StripAccents()]
    )
    pre = pre_tokenizers.Whitespace()
    if kind == "wordlevel":
        # Counted here rather than by the Rust trainer so ties are broken by the word itself: the same
        # texts give the same ids in every process and every run.
        counts: Counter[str] = Counter()
        for text in texts:
            counts.update(w for w, _ in pre.pre_tokenize_str(normalizer.normalize_str(text)))
        words = sorted(counts, key=lambda w: (-counts[w], w))[: vocab_size - 2]
        tok = Tokenizer(WordLevel({PAD: 0, UNK: 1, **{w: i + 2 for i, w in enumerate(words)}}, unk_token=UNK))
    else:
        tok = Tokenizer(BPE(unk_token=UNK))
        tok.normalizer, tok.pre_tokenizer = normalizer, pre
        tok.train_from_iterator(
            texts, BpeTrainer(vocab_size=vocab_size, special_tokens=[PAD, UNK], show_progress=False)
        )
    tok.normalizer, tok.pre_tokenizer = normalizer, pre
    return TextEncoder(tok.to_str())


@dataclass
class EncodedDataset(Dataset):
    ids: list[list[int]]
    labels: list[int]

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int) -> tuple[list[int], int]:
        return self.ids[i], self.labels[i]


def encode(examples: list[Example], encoder: TextEncoder, max_len: int) -> EncodedDataset:
    return EncodedDataset(encoder.encode([t for t, _ in examples], max_len), [label for _, label in examples])


class PadCollate:
    """Pad a batch to its longest example rounded up to a multiple (fewer distinct shapes for kernels)."""

    def __init__(self, multiple: int, pad_id: int = 0):
        self.multiple = multiple
        self.pad_id = pad_id

    def __call__(self, batch: list[tuple[list[int], int]]) -> dict[str, torch.Tensor]:
        longest = max(len(ids) for ids, _ in batch)
        length = -(-longest // self.multiple) * self.multiple
        input_ids = torch.full((len(batch), length), self.pad_id, dtype=torch.long)
        attention_mask = torch.zeros(len(batch), length, dtype=torch.bool)
        for row, (ids, _) in enumerate(batch):
            input_ids[row, : len(ids)] = torch.tensor(ids)
            attention_mask[row, : len(ids)] = True
        return {
            "input_ids": input_ids,
            "attention_mask": attention_mask,
            "labels": torch.tensor([label for _, label in batch]),
        }


class ResumableSampler(DistributedSampler):
    """DistributedSampler that can skip the batches of an epoch already trained before a restart."""

    skip = 0

    def __iter__(self):
        return iter(list(super().__iter__())[self.skip :])

    def __len__(self) -> int:
        return super().__len__() - self.skip


def train_loader(
    ds: EncodedDataset,
    cfg: DataConfig,
    *,
    batch_size: int,
    rank: int,
    world: int,
    seed: int,
    pin_memory: bool,
    pad_id: int = 0,
) -> DataLoader:
    sampler = ResumableSampler(ds, num_replicas=world, rank=rank, shuffle=True, seed=seed, drop_last=True)
    if len(sampler) < batch_size:
        raise DataError(
            f"{len(ds)} training examples give {len(sampler)} per rank, "
            f"fewer than train.batch_size={batch_size}"
        )
    return DataLoader(
        ds,
        batch_size=batch_size,
        sampler=sampler,
        collate_fn=PadCollate(cfg.pad_to_multiple, pad_id),
        num_workers=cfg.num_workers,
        pin_memory=pin_memory,
        drop_last=True,
        persistent_workers=cfg.num_workers > 0,
        generator=_own_generator(seed),
    )


def val_loader(
    ds: EncodedDataset, cfg: DataConfig, *, batch_size: int, rank: int, world: int, pad_id: int = 0
) -> DataLoader:
    # Each rank takes every world-th example: no padding duplicates, so summed counts are exact.
    shard = torch.utils.data.Subset(ds, range(rank, len(ds), world))
    return DataLoader(
        shard,
        batch_size=batch_size,
        collate_fn=PadCollate(cfg.pad_to_multiple, pad_id),
        generator=_own_generator(0),
    )


def _own_generator(seed: int) -> torch.Generator:
    # Each new DataLoader iterator draws a seed from its generator; from the global one, a resume (which
    # starts a fresh iterator mid-epoch) would shift every later dropout mask.
    return torch.Generator().manual_seed(seed)
