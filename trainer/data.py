"""Text classification data: the synthetic zIMDB corpus, JSONL/CSV/Parquet files (local or S3), HF data sets.

Files are streamed into Arrow string chunks plus a label array (never a Python object per record), token
ids come from an offline tokenizer trained on the training split, and batches are padded by a DataLoader
with a DistributedSampler that can resume in the middle of an epoch. `trainer.token_store` tokenizes once
per node and shares the token ids with the other ranks through memory-mapped files.
"""

from __future__ import annotations

import contextlib
import csv
import itertools
import json
import logging
import os
import signal
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import torch
from torch.utils.data import DataLoader, Dataset, DistributedSampler

from trainer import zimdb
from trainer.config import ConfigError, DataConfig
from trainer.storage import fetch_to_local

log = logging.getLogger(__name__)
Example = tuple[str, int]
synthetic_corpus = zimdb.corpus


class DataError(ConfigError):
    """Input data that cannot be used as given (permanent: exit code 2)."""


CHUNK_ROWS = 8192  # rows read, and tokenized, at a time: memory stays flat whatever the file size


@dataclass
class Columns:
    """Texts (Arrow string chunks, a fraction of the memory of Python strings) and integer labels."""

    texts: list[pa.Array]
    labels: np.ndarray

    def __len__(self) -> int:
        return len(self.labels)

    def text_chunks(self, keep: np.ndarray | None = None) -> Iterator[list[str]]:
        """The texts chunk by chunk as Python strings; `keep` (a boolean per row) filters them."""
        start = 0
        for chunk in self.texts:
            texts = ["" if t is None else str(t) for t in chunk.to_pylist()]
            if keep is not None:
                texts = [t for t, k in zip(texts, keep[start : start + len(texts)], strict=True) if k]
            start += len(chunk)
            yield texts

    def examples(self, rows: np.ndarray | None = None) -> list[Example]:
        texts = [t for chunk in self.text_chunks() for t in chunk]
        order = range(len(texts)) if rows is None else rows.tolist()
        return [(texts[i], int(self.labels[i])) for i in order]


def _large_strings(values: list[Any]) -> pa.Array:
    """`pa.array(values, type=pa.large_string())`, built from its buffers: converting a Python list makes
    pyarrow import pandas (half a second and tens of MB in every rank) to ask whether it is a Series."""
    encoded = [b"" if v is None else str(v).encode() for v in values]
    offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
    np.cumsum([len(e) for e in encoded], out=offsets[1:])
    valid = np.array([v is not None for v in values], dtype=bool)
    return pa.LargeStringArray.from_buffers(
        len(encoded),
        pa.py_buffer(offsets),
        pa.py_buffer(b"".join(encoded)),
        pa.py_buffer(np.packbits(valid, bitorder="little")),
        null_count=len(values) - int(valid.sum()),
    )


def _columns(chunks: Iterable[tuple[list[Any], list[Any]]], path: Path | str) -> Columns:
    texts, labels, row, nulls, empty = [], [], 0, 0, 0
    for text_chunk, label_chunk in chunks:
        nulls += sum(t is None for t in text_chunk)
        empty += sum(t is None or t == "" for t in text_chunk)
        ints = np.empty(len(label_chunk), dtype=np.int64)
        for i, label in enumerate(label_chunk):
            try:
                ints[i] = int(label)
            except (TypeError, ValueError, OverflowError):
                raise DataError(
                    f"{path} row {row + i + 1}: label {label!r} is not an integer class id"
                ) from None
        row += len(label_chunk)
        texts.append(_large_strings(text_chunk))
        labels.append(ints)
    if not row:
        raise DataError(f"{path}: no rows")
    columns = Columns(texts, np.concatenate(labels))
    for warning in degenerate(columns, path, nulls, empty):
        if os.environ.get("RANK", "0") == "0":  # every rank reads the same file: one says so
            log.warning(warning)
    return columns


def degenerate(columns: Columns, path: Path | str, nulls: int, empty: int) -> list[str]:
    """What makes data train without learning, though every row is valid: null texts (trained as empty
    text), a text column with no text at all (`empty` counts the nulls too), one class only."""
    found = []
    if empty == len(columns):
        found.append(
            f"{path}: every text is empty or null ({len(columns)} rows): nothing to learn from; expected "
            "text in most rows"
        )
    elif nulls:
        found.append(
            f"{path}: {nulls} of {len(columns)} texts are null (trained as empty text); expected a text in "
            "every row"
        )
    classes = np.unique(columns.labels)
    if len(classes) == 1:
        found.append(
            f"{path}: every label is {int(classes[0])}: one class only, the model learns nothing; expected "
            "two or more classes"
        )
    return found


def _batched(rows: Iterable[tuple[Any, Any]]) -> Iterator[tuple[list[Any], list[Any]]]:
    it = iter(rows)
    while batch := list(itertools.islice(it, CHUNK_ROWS)):
        yield [t for t, _ in batch], [y for _, y in batch]


def _parquet_chunks(path: Path, text_field: str, label_field: str):
    import pyarrow.parquet as pq

    try:
        pf = pq.ParquetFile(path, memory_map=True)
    except (pa.ArrowInvalid, OSError) as err:
        raise DataError(
            f"{path}: not a Parquet file ({err}); expected Parquet for the .parquet suffix"
        ) from None
    names = pf.schema_arrow.names
    for col in (text_field, label_field):
        if col not in names:
            raise DataError(f"{path}: no column {col!r}; columns are {names}")
    for batch in pf.iter_batches(batch_size=CHUNK_ROWS, columns=[text_field, label_field]):
        yield batch.column(text_field).to_pylist(), batch.column(label_field).to_pylist()


def _csv_rows(path: Path, text_field: str, label_field: str):
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        for col in (text_field, label_field):
            if col not in (reader.fieldnames or []):
                raise DataError(f"{path}: no column {col!r}; columns are {reader.fieldnames}")
        for r in reader:
            yield r[text_field], r[label_field]


def _json_rows(path: Path, text_field: str, label_field: str):
    """JSON lines read one line at a time; a .json holding one list of objects is read whole."""

    def fields(record: Any, where: str = "") -> tuple[Any, Any]:
        try:
            return record[text_field], record[label_field]
        except (KeyError, TypeError) as err:
            raise DataError(
                f"{path}{where}: every record needs {text_field!r} and {label_field!r} ({err!r} missing)"
            ) from None

    with open(path) as f:
        head = f.read(4096).lstrip()
        f.seek(0)
        try:
            if head.startswith("["):
                yield from (fields(r) for r in json.load(f))
                return
        except json.JSONDecodeError as err:
            raise DataError(f"{path}: not valid JSON ({err})") from None
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as err:  # its own line and column are those within the line
                raise DataError(
                    f"{path} line {number}: not valid JSON ({err.msg}, column {err.colno}); expected "
                    "one JSON object per line"
                ) from None
            yield fields(record, f" line {number}")


def read_columns(path: Path, text_field: str, label_field: str) -> Columns:
    """A JSONL/JSON/CSV/Parquet file, streamed: memory holds the texts once, never the file's records."""
    suffix = path.suffix.lower()
    if suffix == ".parquet":
        chunks = _parquet_chunks(path, text_field, label_field)
    elif suffix == ".csv":
        chunks = _batched(_csv_rows(path, text_field, label_field))
    else:  # .jsonl, or .json holding either JSON lines or one list of objects
        chunks = _batched(_json_rows(path, text_field, label_field))
    return _columns(chunks, path)


def _hf_columns(name: str, text_field: str, label_field: str) -> tuple[Columns, Columns]:
    import datasets  # checked by DataConfig: the option fails early with a pip hint when missing

    ds = datasets.load_dataset(name)
    splits = list(ds)
    val_split = next((s for s in ("validation", "test") if s in ds), None)
    if "train" not in ds or val_split is None:
        raise DataError(
            f"hf:{name} has splits {splits}: the trainer needs a 'train' split and a 'validation' or "
            "'test' split; convert the dataset to files and use data.source / data.val_source"
        )

    def columns(split: str) -> Columns:
        table = ds[split].data  # datasets.table.Table: a memory-mapped pyarrow.Table in `.table`
        table = getattr(table, "table", table)
        where = f"hf:{name}[{split}]"
        for col in (text_field, label_field):
            if col not in table.column_names:
                raise DataError(f"{where}: no column {col!r}; columns are {table.column_names}")
        # Record batches keep text and label aligned (the two columns may be chunked differently).
        batches = table.select([text_field, label_field]).to_batches(max_chunksize=CHUNK_ROWS)
        return _columns(((b.column(0).to_pylist(), b.column(1).to_pylist()) for b in batches), where)

    return columns("train"), columns(val_split)


@dataclass
class Splits:
    """Training and validation rows: which rows of which Columns (the same ones when split off one file)."""

    train: Columns
    train_rows: np.ndarray
    val: Columns
    val_rows: np.ndarray


def load_columns(cfg: DataConfig, workdir: Path) -> Splits:
    if cfg.source == "synthetic":
        sizes = ((cfg.synthetic_train_size, cfg.seed), (cfg.synthetic_val_size, cfg.seed + 1_000_003))
        train, val = (_columns(_batched(zimdb.corpus(n, seed)), "synthetic") for n, seed in sizes)
    elif cfg.source.startswith("hf:"):
        train, val = _hf_columns(cfg.source[3:], cfg.text_field, cfg.label_field)
    else:
        train = read_columns(fetch_to_local(cfg.source, workdir), cfg.text_field, cfg.label_field)
        if cfg.val_source:
            val = read_columns(fetch_to_local(cfg.val_source, workdir), cfg.text_field, cfg.label_field)
        else:
            train_rows, val_rows = held_out(len(train), cfg, "rows")
            return Splits(train, train_rows, train, val_rows)
    return Splits(train, np.arange(len(train)), val, np.arange(len(val)))


def held_out(n: int, cfg: DataConfig, unit: str) -> tuple[np.ndarray, np.ndarray]:
    """(training rows, validation rows) of n: data.val_fraction held out, in an order data.seed fixes."""
    order = np.random.default_rng(cfg.seed).permutation(n)
    n_val = max(1, int(n * cfg.val_fraction))
    if n_val >= n:
        fraction = f"data.val_fraction={cfg.val_fraction}"
        raise DataError(f"{cfg.source}: {n} {unit} are too few to hold out {fraction}")
    return order[n_val:], order[:n_val]


def load_splits(cfg: DataConfig, workdir: Path) -> tuple[list[Example], list[Example]]:
    """(train, val) examples as Python lists: for small data (tests, the bench's bare loop)."""
    splits = load_columns(cfg, workdir)
    return splits.train.examples(splits.train_rows), splits.val.examples(splits.val_rows)


def check_labels(examples: list[Example] | np.ndarray, num_labels: int, where: str) -> None:
    """Every label a class of the model: (text, label) examples or an array of labels."""
    labels = np.asarray([y for _, y in examples] if isinstance(examples, list) else examples, dtype=np.int64)
    outside = labels[(labels < 0) | (labels >= num_labels)]
    if len(outside):
        bad = int(outside[0])
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


def train_tokenizer(kind: str, texts: Iterable[str], vocab_size: int, model_name: str = "") -> TextEncoder:
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
        counts = _word_counts(texts, normalizer, pre)
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


def _word_counts(texts: Iterable[str], normalizer: Any, pre: Any) -> Counter[str]:
    """How often each word occurs in `texts`, as the tokenizer splits them. Each distinct space-separated
    piece is normalized and split once, then counted as often as it occurs: the same counts as splitting
    every text (words repeat, so this is ~10x faster). Exact because the Whitespace pre-tokenizer's
    pattern (\\w+|[^\\w\\s]+) never matches across a space, and NFD, Lowercase and StripAccents map each
    character on its own (a space is a starter: canonical reordering stops at it)."""
    pieces: Counter[str] = Counter()
    for text in texts:
        pieces.update(text.split(" "))
    counts: Counter[str] = Counter()
    for piece, n in pieces.items():
        for word, _ in pre.pre_tokenize_str(normalizer.normalize_str(piece)):
            counts[word] += n
    return counts


@dataclass
class EncodedDataset(Dataset):
    ids: list[list[int]]
    labels: list[int]

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int) -> tuple[list[int], int]:
        return self.ids[i], self.labels[i]


class TokenDataset(Dataset):
    """Rows of a token file: `tokens[offsets[r]:offsets[r + 1]]` and `labels[r]` for r in `rows`.

    The arrays are usually memory-mapped (trainer.token_store), so every rank on a node shares one copy
    in the page cache."""

    def __init__(self, tokens: np.ndarray, offsets: np.ndarray, labels: np.ndarray, rows: np.ndarray):
        self.tokens, self.offsets, self.labels, self.rows = tokens, offsets, labels, rows

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int) -> tuple[list[int], int]:
        r = int(self.rows[i])
        return self.tokens[self.offsets[r] : self.offsets[r + 1]].tolist(), int(self.labels[r])


def encode(examples: list[Example], encoder: TextEncoder, max_len: int) -> EncodedDataset:
    return EncodedDataset(encoder.encode([t for t, _ in examples], max_len), [label for _, label in examples])


class PadCollate:
    """Pad a batch to its longest example rounded up to a multiple (fewer distinct shapes for kernels)."""

    def __init__(self, multiple: int, pad_id: int = 0):
        self.multiple = multiple
        self.pad_id = pad_id

    def __call__(self, batch: list[tuple[list[int], int]]) -> dict[str, torch.Tensor]:
        # Padded as lists and made into tensors at once: three tensor writes per example took 0.45 ms of a
        # batch of 8 (0.11 ms now), on CPU beside a small model's ~10 ms step.
        lengths = [len(ids) for ids, _ in batch]
        length = -(-max(lengths) // self.multiple) * self.multiple
        rows = [[*ids, *[self.pad_id] * (length - len(ids))] for ids, _ in batch]
        return {
            "input_ids": torch.tensor(rows, dtype=torch.long),
            "attention_mask": torch.arange(length) < torch.tensor(lengths).unsqueeze(1),
            "labels": torch.tensor([label for _, label in batch]),
        }


class ResumableSampler(DistributedSampler):
    """DistributedSampler (drop_last) that can start an epoch part-way, after a restart at any world size.

    `start` is how many samples of the epoch all ranks together have trained on. DistributedSampler
    deals the epoch's permutation out round-robin (rank r takes positions r, r + W, r + 2W, ...), so after
    b batches of B per rank on W ranks exactly its first b * B * W positions are done, whatever W was.
    The rest is dealt out again over the ranks of this run: a world-size change neither repeats nor
    skips a sample of the epoch (beyond the last few that do not fill a round, dropped as drop_last
    does). At an unchanged world size the order is DistributedSampler's own.
    """

    start = 0

    def __iter__(self):
        if self.shuffle:
            g = torch.Generator()
            g.manual_seed(self.seed + self.epoch)  # DistributedSampler's epoch order
            order = torch.randperm(len(self.dataset), generator=g).tolist()  # type: ignore[arg-type]
        else:
            order = list(range(len(self.dataset)))  # type: ignore[arg-type]
        rest = order[self.start :]
        return iter(rest[self.rank : len(rest) - len(rest) % self.num_replicas : self.num_replicas])

    def __len__(self) -> int:
        rest = max(0, len(self.dataset) - self.start)  # type: ignore[arg-type]
        return rest // self.num_replicas


def train_loader(
    ds: EncodedDataset | TokenDataset,
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
        worker_init_fn=leave_sigterm_to_the_trainer if cfg.num_workers > 0 else None,
    )


def leave_sigterm_to_the_trainer(worker_id: int) -> None:
    """DataLoader workers must outlive a SIGTERM until the trainer has checkpointed. torchrun stops a rank
    by signalling its process group (torch 2.13 elastic/multiprocessing/subprocess_handler: the rank is
    started with start_new_session, then os.killpg), which holds the rank's DataLoader workers too: they
    died at once, and the rank failed in its next step ("DataLoader worker ... is killed by signal:
    Terminated") instead of writing its checkpoint. A group of its own keeps a worker out of that signal
    (and of a terminal's Ctrl-C). The worker starts with SIGTERM blocked (`sigterm_held`); ignoring it
    before unblocking drops one that arrived before the move. The trainer still ends its workers: the
    DataLoader tells them to stop when it goes, and each one exits when it finds its parent gone."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    os.setpgid(0, 0)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})


@contextlib.contextmanager
def sigterm_held() -> Iterator[None]:
    """Around `iter(loader)`, where the DataLoader forks its workers: they inherit SIGTERM blocked, and
    a SIGTERM for the trainer meanwhile is delivered (and honoured) when the block ends."""
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)


def val_loader(
    ds: EncodedDataset | TokenDataset,
    cfg: DataConfig,
    *,
    batch_size: int,
    rank: int,
    world: int,
    pad_id: int = 0,
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
