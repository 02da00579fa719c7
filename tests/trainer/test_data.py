import json
import re
import subprocess
import sys
import types

import boto3
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from moto import mock_aws

from trainer import data, zimdb
from trainer.config import DataConfig
from trainer.loop import _micro_batches

ROWS = [("a wonderful film", 1), ("dull and messy", 0), ("not great at all", 0), ("superb cast", 1)] * 5


def _write(path, rows, fmt):
    if fmt == "jsonl":
        path.write_text("".join(json.dumps({"text": t, "label": y}) + "\n" for t, y in rows))
    elif fmt == "csv":
        path.write_text("text,label\n" + "".join(f'"{t}",{y}\n' for t, y in rows))
    else:
        pq.write_table(pa.table({"text": [t for t, _ in rows], "label": [y for _, y in rows]}), path)


def test_synthetic_corpus_is_deterministic_and_has_both_labels():
    a, b = data.synthetic_corpus(200, seed=3), data.synthetic_corpus(200, seed=3)
    assert a == b
    assert data.synthetic_corpus(200, seed=4) != a
    share = sum(y for _, y in a) / len(a)
    assert 0.3 < share < 0.7


def test_synthetic_true_label_follows_negated_sentiment_words_in_the_opening():
    for text, _, truth in zimdb.reviews(300, seed=0):
        words, score = text.split()[: zimdb.VERDICT_WORDS], 0
        for i, w in enumerate(words):
            sign = 1 if w in zimdb.POSITIVE else -1 if w in zimdb.NEGATIVE else 0
            score += -sign if i and words[i - 1] in zimdb.NEGATIONS else sign
        assert truth == int(score > 0)
        assert not set(text.split()[zimdb.VERDICT_WORDS :]) & set(zimdb.POSITIVE + zimdb.NEGATIVE)


def test_synthetic_labels_carry_the_stated_noise_so_the_ceiling_is_below_one():
    rows = zimdb.reviews(4000, seed=0)
    flipped = sum(label != truth for _, label, truth in rows) / len(rows)
    assert abs(flipped - zimdb.LABEL_NOISE) < 0.015
    assert zimdb.ceiling(4000, seed=0) == pytest.approx(1 - flipped)
    assert 0.87 < zimdb.ceiling(1000, seed=1_000_003) < 0.93  # the demo's validation split


def test_synthetic_corpus_has_thousands_of_words_and_runs_past_max_len():
    texts = [t for t, _ in data.synthetic_corpus(2000, seed=0)]
    enc = data.train_tokenizer("wordlevel", texts, vocab_size=8000)
    assert 2000 < enc.vocab_size <= 8000
    max_len = DataConfig().max_len
    lengths = [len(ids) for ids in enc.encode(texts, max_len=10_000)]
    assert min(lengths) > max_len  # every review is truncated at the default max_len


@pytest.mark.parametrize("fmt", ["jsonl", "csv", "parquet"])
def test_file_loader_reads_text_and_label_and_holds_out_validation(tmp_path, fmt):
    f = tmp_path / f"reviews.{fmt}"
    _write(f, ROWS, fmt)
    train, val = data.load_splits(DataConfig(source=str(f), val_fraction=0.25), tmp_path)
    assert len(val) == 5 and len(train) == 15
    assert sorted(train + val) == sorted(ROWS)


def test_separate_validation_file_is_used_as_is(tmp_path):
    _write(tmp_path / "train.jsonl", ROWS, "jsonl")
    _write(tmp_path / "val.csv", ROWS[:3], "csv")
    cfg = DataConfig(source=str(tmp_path / "train.jsonl"), val_source=str(tmp_path / "val.csv"))
    train, val = data.load_splits(cfg, tmp_path)
    assert (train, val) == (ROWS, ROWS[:3])


def test_s3_source_is_downloaded_and_read(tmp_path):
    _write(tmp_path / "r.parquet", ROWS, "parquet")
    with mock_aws():
        s3 = boto3.client("s3", region_name="us-east-1")
        s3.create_bucket(Bucket="data")
        s3.upload_file(str(tmp_path / "r.parquet"), "data", "imdb/train.parquet")
        path = data.fetch_to_local("s3://data/imdb/train.parquet", tmp_path, client=s3)
        assert data.read_columns(path, "text", "label").examples() == ROWS


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"text": "ok", "label": "positive"}\n', "row 1: label 'positive' is not an integer class id"),
        ('{"review": "ok", "label": 1}\n', "every record needs 'text' and 'label'"),
        ('{"text": "ok", "label": 1}\n{not json\n', "line 2: not valid JSON"),
    ],
)
def test_bad_rows_name_the_file_and_the_problem(tmp_path, content, message):
    f = tmp_path / "bad.jsonl"
    f.write_text(content)
    with pytest.raises(data.DataError) as err:
        data.read_columns(f, "text", "label").examples()
    assert str(f) in str(err.value) and message in str(err.value)


def test_csv_without_the_label_column_is_refused(tmp_path):
    f = tmp_path / "bad.csv"
    f.write_text("text,stars\nfine,5\n")
    with pytest.raises(data.DataError, match="no column 'label'"):
        data.read_columns(f, "text", "label").examples()


def test_label_outside_the_model_classes_is_refused():
    with pytest.raises(data.DataError, match="label 3 is outside 0..1"):
        data.check_labels([("x", 3)], 2, "training data")


@pytest.mark.parametrize("kind", ["wordlevel", "bpe", "bytes"])
def test_tokenizer_is_offline_reproducible_and_survives_serialisation(kind):
    texts = [t for t, _ in data.synthetic_corpus(300, seed=1)]
    a = data.train_tokenizer(kind, texts, vocab_size=200)
    b = data.train_tokenizer(kind, texts, vocab_size=200)
    assert a.spec == b.spec
    ids = a.encode(texts[:5], max_len=6)
    assert ids == data.TextEncoder(a.spec).encode(texts[:5], max_len=6)
    assert all(0 < len(row) <= 6 and all(0 < i < a.vocab_size for i in row) for row in ids)


def test_wordlevel_counts_each_piece_once_and_gets_what_splitting_every_text_gets():
    """The word counts come from each distinct space-separated piece; they must be what normalizing and
    pre-tokenizing every text whole gives, around spaces next to accents, combining marks, Greek sigmas,
    other Unicode spaces and separators the pre-tokenizer does not split on (\\x1c), and runs of spaces."""
    from tokenizers import normalizers, pre_tokenizers

    normalizer = normalizers.Sequence(
        [normalizers.NFD(), normalizers.Lowercase(), normalizers.StripAccents()]
    )
    pre = pre_tokenizers.Whitespace()
    odd = (
        "É \u0301a ΣΑΣ Σ. a.\x1cb c\x1d d\u00a0e\u2003f\u3000g \u0915\u093e\u094d x__y 1,5 ﬁn Ǆ\u0327 \t ..."
    )
    texts = [odd, "  two  spaces  ", "", " ", *(t for t, _ in data.synthetic_corpus(50, seed=3))]
    texts += [" ".join(odd.split(" ")[i:] + odd.split(" ")[:i]) for i in range(len(odd.split(" ")))]
    whole: dict[str, int] = {}
    for text in texts:
        for word, _ in pre.pre_tokenize_str(normalizer.normalize_str(text)):
            whole[word] = whole.get(word, 0) + 1
    assert data._word_counts(texts, normalizer, pre) == whole
    assert ".\x1c" in whole  # a word of the tokenizer's, where str.split() would have split the piece


def test_wordlevel_maps_unseen_words_to_unknown_not_padding():
    enc = data.train_tokenizer("wordlevel", ["good film"], vocab_size=64)
    assert enc.encode(["good zebra"], max_len=8) == [[enc.encode(["good"], 8)[0][0], 1]]


def test_batches_are_padded_to_a_multiple_with_a_matching_mask():
    batch = data.PadCollate(8, pad_id=4)([([5, 6, 7], 1), ([9] * 10, 0)])
    assert batch["input_ids"].dtype == torch.long and batch["input_ids"].tolist() == [
        [5, 6, 7] + [4] * 13,
        [9] * 10 + [4] * 6,
    ]
    assert batch["attention_mask"].dtype == torch.bool
    assert batch["attention_mask"].tolist() == [[True] * 3 + [False] * 13, [True] * 10 + [False] * 6]
    assert batch["labels"].dtype == torch.long and batch["labels"].tolist() == [1, 0]


def test_resumed_sampler_continues_the_same_epoch_order():
    ds = data.EncodedDataset([[1]] * 40, [0] * 40)
    full = data.ResumableSampler(ds, num_replicas=2, rank=1, shuffle=True, seed=7, drop_last=True)
    full.set_epoch(3)
    resumed = data.ResumableSampler(ds, num_replicas=2, rank=1, shuffle=True, seed=7, drop_last=True)
    resumed.set_epoch(3)
    resumed.start = 16  # 8 samples per rank done
    assert list(resumed) == list(full)[8:] and len(resumed) == 12


@pytest.mark.parametrize("world_after", [1, 3, 5])
def test_a_world_size_change_mid_epoch_neither_repeats_nor_skips_samples(world_after):
    """3 batches of 4 on 2 ranks, then the run resumes on `world_after` ranks at the checkpoint's data
    position and finishes the epoch: every sample of the epoch once (bar the few that cannot fill a
    round of the new ranks)."""
    ds = data.EncodedDataset([[i + 1] for i in range(50)], [0] * 50)
    cfg = DataConfig()

    def loaders(world):
        return [data.train_loader(ds, cfg, batch_size=4, rank=r, world=world, seed=3, pin_memory=False)
                for r in range(world)]  # fmt: skip

    seen: list[int] = []
    before = [_micro_batches(loader, 0, 0) for loader in loaders(2)]
    for _ in range(3):
        for rank_batches in before:
            _, done, batch = next(rank_batches)
            seen += batch["input_ids"][:, 0].tolist()
    assert done == 24
    after = [_micro_batches(loader, 0, done) for loader in loaders(world_after)]
    while True:
        batches = [next(rank_batches) for rank_batches in after]
        if batches[0][0] == 1:  # the next epoch began
            break
        seen += [i for _, _, batch in batches for i in batch["input_ids"][:, 0].tolist()]
    assert len(seen) == len(set(seen))  # nothing trained twice
    per_rank = (50 - 24) // world_after  # nothing skipped but what does not fill a batch on every rank
    assert len(seen) == 24 + world_after * 4 * (per_rank // 4)


def test_validation_shards_cover_every_example_exactly_once():
    ds = data.EncodedDataset([[i + 1] for i in range(11)], [0] * 11)
    seen = []
    for rank in range(3):
        for batch in data.val_loader(ds, DataConfig(), batch_size=4, rank=rank, world=3):
            seen += batch["input_ids"][:, 0].tolist()
    assert sorted(seen) == list(range(1, 12))


def test_too_few_examples_for_one_batch_per_rank_is_a_data_error():
    ds = data.EncodedDataset([[1]] * 10, [0] * 10)
    with pytest.raises(data.DataError, match="fewer than train.batch_size=8"):
        data.train_loader(ds, DataConfig(), batch_size=8, rank=0, world=2, seed=0, pin_memory=False)


def test_hf_dataset_is_read_from_its_arrow_table_in_aligned_batches(tmp_path, monkeypatch):
    # datasets keeps each split as a pyarrow Table in `Dataset.data.table`; its columns may be chunked
    # differently, so texts and labels are read as record batches, never zipped chunk by chunk.
    texts = pa.chunked_array([["a great film", "dull"], ["not boring", "superb", "weak"]])
    labels = pa.chunked_array([[1], [0, 1, 1], [0]])
    table = pa.table({"text": texts, "label": labels})
    split = types.SimpleNamespace(data=types.SimpleNamespace(table=table))
    fake = types.ModuleType("datasets")
    fake.load_dataset = lambda name: {"train": split, "test": split}
    monkeypatch.setitem(sys.modules, "datasets", fake)
    train, val = data._hf_columns("imdb", "text", "label")
    expected = [("a great film", 1), ("dull", 0), ("not boring", 1), ("superb", 1), ("weak", 0)]
    assert train.examples() == expected and val.examples() == expected
    with pytest.raises(data.DataError, match=r"hf:imdb\[train\]: no column 'review'"):
        data._hf_columns("imdb", "review", "label")


@pytest.mark.parametrize("names", [["validation", "test"], ["train", "unsupervised"]])
def test_hf_dataset_without_train_or_validation_split_is_a_data_error_listing_splits(monkeypatch, names):
    split = types.SimpleNamespace(data=types.SimpleNamespace(table=pa.table({"text": ["a"], "label": [0]})))
    fake = types.ModuleType("datasets")
    fake.load_dataset = lambda name: dict.fromkeys(names, split)
    monkeypatch.setitem(sys.modules, "datasets", fake)
    expected = f"hf:imdb has splits {names}: the trainer needs a 'train' split"
    with pytest.raises(data.DataError, match=re.escape(expected)):
        data._hf_columns("imdb", "text", "label")


def test_text_columns_are_what_pyarrow_makes_of_the_list_without_importing_pandas(tmp_path):
    values = ["a wonderful film", None, "", "héllo ✓", "x" * 1000]
    built = data._large_strings(values)
    built.validate(full=True)
    assert built.equals(pa.array(values, type=pa.large_string())) and built.null_count == 1
    # Converting a list with pa.array imports pandas; a rank loading its data never needs it.
    src = tmp_path / "rows.jsonl"
    _write(src, ROWS, "jsonl")
    probe = (
        "import sys; from pathlib import Path; from trainer import data; "
        f"data.read_columns(Path({str(src)!r}), 'text', 'label'); "
        "data.load_columns(data.DataConfig(synthetic_train_size=20, synthetic_val_size=8), None); "
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'pandas'))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]", done.stdout + done.stderr
