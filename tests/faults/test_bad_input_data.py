"""Data that a run cannot learn from, or that it would misreport: a file that is not what its name says, a
broken JSON line (reported by its line in the file), degenerate columns (null or empty texts, one class
only: warned, once), and a run whose weights go non-finite while each step's loss stayed finite (exit 3,
and every JSON file it wrote is strict JSON). Recorded in the fault ledger ("bad input: data")."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from tests.trainer.trainer_runs import trainer_args
from trainer import data, faults


def _rows(*rows: object) -> str:
    return "".join(json.dumps(r) + "\n" for r in rows)


GOOD = [{"text": f"review {i}", "label": i % 2} for i in range(150)]
# (case, file name, content, what the refusal says)
REFUSED = [
    ("jsonl-error-on-line-151", "train.jsonl", _rows(*GOOD) + '{"text": "x", "label": 1,}\n',
     "train.jsonl line 151: not valid JSON"),
    ("jsonl-record-missing-label-on-line-3", "train.jsonl", _rows(*GOOD[:2], {"text": "x"}),
     "train.jsonl line 3: every record needs 'text' and 'label'"),
    ("parquet-name-on-a-csv", "train.parquet", "text,label\nfine,1\n", "train.parquet: not a Parquet file"),
]  # fmt: skip


@pytest.mark.parametrize(("case", "name", "content", "says"), REFUSED, ids=[c[0] for c in REFUSED])
def test_a_file_that_is_not_what_it_says_is_refused_naming_where(ledger, tmp_path, case, name, content, says):
    path = tmp_path / name
    path.write_text(content)
    try:
        data.read_columns(path, "text", "label")
        error = None
    except data.DataError as err:  # exit 2 in the trainer: a ConfigError
        error = str(err)
    entry = ledger("bad input: data", case, error=error, names=name)
    assert error is not None and entry.clear and says in error, error


WARNED = [
    ("null-texts", [{"text": None, "label": 0}, {"text": "good", "label": 1}], "1 of 2 texts are null"),
    ("all-empty-text-column", [{"text": "", "label": 0}, {"text": None, "label": 1}],
     "every text is empty or null (2 rows)"),
    ("single-class-labels", [{"text": "a", "label": 1}, {"text": "b", "label": 1}],
     "every label is 1: one class only"),
]  # fmt: skip


@pytest.mark.parametrize(("case", "rows", "says"), WARNED, ids=[c[0] for c in WARNED])
def test_degenerate_data_trains_with_a_warning_once(ledger, tmp_path, caplog, monkeypatch, case, rows, says):
    path = tmp_path / "train.jsonl"
    path.write_text(_rows(*rows))
    monkeypatch.setenv("RANK", "0")
    with caplog.at_level(logging.WARNING, logger="trainer.data"):
        columns = data.read_columns(path, "text", "label")
    warned = [r.getMessage() for r in caplog.records if says in r.getMessage()]
    entry = ledger("bad input: data", case, error=warned[0] if warned else None, names="train.jsonl")
    assert len(warned) == 1 and entry.rejected and entry.clear, caplog.text
    assert "None" not in [t for chunk in columns.text_chunks() for t in chunk]  # null is empty, not "None"
    caplog.clear()
    monkeypatch.setenv("RANK", "1")  # the other ranks read the same file and say nothing
    with caplog.at_level(logging.WARNING, logger="trainer.data"):
        data.read_columns(path, "text", "label")
    assert not caplog.records


def test_a_run_whose_weights_go_non_finite_exits_3_and_writes_only_strict_json(ledger, tmp_path, capsys):
    from trainer.__main__ import main

    # Five steps at lr 1e9: fewer non-finite steps in a row than train.max_bad_steps, so only the final
    # evaluation sees the NaN.
    code = main(trainer_args(tmp_path, **{"train.lr": "1e9", "train.max_steps": 5, "train.warmup_steps": 0}))
    error = capsys.readouterr().err
    entry = ledger("bad input: data", "lr-1e9", error=error if code == faults.DIVERGED else None,
                   names="train.lr")  # fmt: skip
    assert code == faults.DIVERGED and entry.clear and "evaluation at step 5 got val_loss nan" in error, error

    def bare(constant: str) -> None:
        raise AssertionError(f"bare {constant} in a JSON file")

    written = list(Path(tmp_path).rglob("*.json*"))
    assert any(p.name == "metrics.jsonl" for p in written), written  # the NaN losses were logged
    for path in written:
        for line in path.read_text().splitlines() if path.suffix == ".jsonl" else [path.read_text()]:
            json.loads(line, parse_constant=bare)
    # The run says how it ended where a finished one says so, without a model.
    summary = json.loads((tmp_path / "summary.json").read_text(), parse_constant=bare)
    assert summary["status"] == "diverged" and summary["steps"] == 5 and summary["val_loss"] is None, summary
    assert "evaluation at step 5 got val_loss nan" in summary["reason"], summary
    assert not (tmp_path / "model.pt").exists()
