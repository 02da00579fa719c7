"""Bad trainer settings (flags, a --config file, a job's trainerConfig): paths that cannot be created, URL
schemes the trainer does not speak, settings that contradict each other, units and YAML numbers. Each is
refused when the configuration is built, before any process group, data or checkpoint exists, with exit
code 2 and a message naming the key, the value and what is allowed. Recorded in the fault ledger
("bad input: trainer")."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from trainer.config import ConfigError, build

HERE = Path(__file__)
# (case, {section: {field: value}} with FILE for an existing file and UNDER_FILE for a path below it,
#  key the message names, what it shows of the value, what else it says)
FILE, UNDER_FILE = "<file>", "<under-file>"
CASES = [
    ("checkpoint-dir-in-proc", {"checkpoint": {"dir": "/proc/self/ckpt"}}, "checkpoint.dir",
     "'/proc/self/ckpt'", "not under /proc"),
    ("checkpoint-dir-in-sys", {"checkpoint": {"dir": "/sys/ckpt"}}, "checkpoint.dir", "'/sys/ckpt'",
     "a real filesystem"),
    ("checkpoint-dir-below-a-file", {"checkpoint": {"dir": UNDER_FILE}}, "checkpoint.dir", "ckpt",
     "is a file"),
    ("checkpoint-dir-is-a-file", {"checkpoint": {"dir": FILE}}, "checkpoint.dir",
     "test_bad_input_trainer.py", "a directory (this is a file)"),
    ("output-dir-below-a-file", {"output": {"dir": UNDER_FILE}}, "output.dir", "ckpt", "is a file"),
    ("output-dir-in-dev", {"output": {"dir": "/dev/out"}}, "output.dir", "'/dev/out'", "not under"),
    ("checkpoint-dir-s3-one-slash", {"checkpoint": {"dir": "s3:/bucket/x"}}, "checkpoint.dir",
     "'s3:/bucket/x'", "s3://bucket/prefix or a local directory"),
    ("checkpoint-dir-s3-upper-case", {"checkpoint": {"dir": "S3://bucket/x"}}, "checkpoint.dir",
     "'S3://bucket/x'", "no other URL"),
    ("output-dir-gcs", {"output": {"dir": "gs://bucket/x"}}, "output.dir", "'gs://bucket/x'", "no other URL"),
    ("checkpoint-dir-bucketless", {"checkpoint": {"dir": "s3:///x"}}, "checkpoint.dir", "'s3:///x'",
     "s3://bucket[/prefix]"),
    ("data-source-gcs", {"data": {"source": "gs://bucket/x.jsonl"}}, "data.source",
     "'gs://bucket/x.jsonl'", "no other URL scheme"),
    ("val-source-http", {"data": {"val_source": "https://host/x.jsonl"}}, "data.val_source",
     "'https://host/x.jsonl'", "no other URL scheme"),
    ("val-source-is-the-source", {"data": {"source": "s3://b/x.jsonl", "val_source": "s3://b/x.jsonl"}},
     "data.val_source", "'s3://b/x.jsonl'", "a file other than data.source"),
    ("text-field-empty", {"data": {"text_field": ""}}, "data.text_field", "''", "a column name"),
    ("label-field-empty", {"data": {"label_field": ""}}, "data.label_field", "''", "a column name"),
    ("label-field-is-the-text", {"data": {"text_field": "review", "label_field": "review"}},
     "data.label_field", "'review'", "a column other than data.text_field"),
    ("source-unquoted-number", {"data": {"source": 123}}, "data.source", "123", "quote it"),
    ("source-plain-text-file", {"data": {"source": "train.txt"}}, "data.source", "'train.txt'", ".jsonl"),
    ("retry-backoff-with-unit", {"checkpoint": {"retry_backoff_s": "1s"}}, "checkpoint.retry_backoff_s",
     "'1s'", "a number"),
    ("dist-timeout-with-unit", {"train": {"dist_timeout_s": "10m"}}, "train.dist_timeout_s", "'10m'",
     "an integer"),
    ("max-steps-scientific", {"train": {"max_steps": "1e3"}}, "train.max_steps", "'1e3'", "an integer"),
    ("max-steps-fraction", {"train": {"max_steps": 300.5}}, "train.max_steps", "300.5", "an integer"),
    ("lr-negative", {"train": {"lr": -1}}, "train.lr", "-1", "> 0"),
    ("resume-from-latest", {"checkpoint": {"resume_from": "latest"}}, "checkpoint.resume_from", "'latest'",
     "run-<id>/step-<N>"),
    ("resume-from-step-number", {"checkpoint": {"resume_from": "run-x/step-200"}}, "checkpoint.resume_from",
     "'run-x/step-200'", "run-<id>/step-<N>"),
    ("resume-from-without-resume", {"checkpoint": {"resume_from": "run-x/step-000000200", "resume": False}},
     "checkpoint.resume", "False", "true when checkpoint.resume_from is set"),
    ("device-gpu", {"train": {"device": "gpu"}}, "train.device", "'gpu'", "auto | cpu | cuda"),
    ("precision-bfloat16", {"train": {"precision": "bfloat16"}}, "train.precision", "'bfloat16'", "bf16"),
    ("tokenizer-upper-case", {"data": {"tokenizer": "BPE"}}, "data.tokenizer", "'BPE'", "bpe"),
    ("val-fraction-as-percent", {"data": {"val_fraction": 10}}, "data.val_fraction", "10", "0 < x < 1"),
    ("keep-one-checkpoint", {"checkpoint": {"keep": 1}}, "checkpoint.keep", "1", ">= 2"),
    ("metrics-port-out-of-range", {"output": {"metrics_port": 70000}}, "output.metrics_port", "70000",
     "0..65535"),
    ("metrics-port-a-name", {"output": {"metrics_port": "http"}}, "output.metrics_port", "'http'",
     "an integer"),
    ("parallelism-upper-case", {"train": {"parallelism": "FSDP"}}, "train.parallelism", "'FSDP'", "fsdp"),
    ("compile-yes", {"train": {"compile": "yes"}}, "train.compile", "'yes'", "true | false"),
    ("warmup-not-below-max-steps", {"train": {"max_steps": 10, "warmup_steps": 10}}, "train.warmup_steps",
     "10", "0 <= x < train.max_steps=10"),
    ("heads-not-dividing-dim", {"model": {"dim": 64, "heads": 5}}, "model.heads", "5",
     "a divisor of model.dim=64"),
    ("hf-model-without-prefix", {"model": {"name": "bert-base-uncased"}}, "model.name",
     "'bert-base-uncased'", "'hf:<model>'"),
    ("llm-model-hub-name-without-prefix", {"llm": {"model": "Qwen/Qwen2.5-0.5B"}}, "llm.model",
     "'Qwen/Qwen2.5-0.5B'", "hf:<repo>"),
    ("llm-method-qlora", {"llm": {"model": "tiny", "method": "qlora"}}, "llm.method", "'qlora'",
     "full | lora"),
    ("llm-lora-rank-zero", {"llm": {"model": "tiny", "lora_rank": 0}}, "llm.lora_rank", "0", ">= 1"),
    ("llm-lora-dropout-as-percent", {"llm": {"model": "tiny", "lora_dropout": 5}}, "llm.lora_dropout", "5",
     "0 <= x < 1"),
    ("llm-lora-targets-with-spaces", {"llm": {"model": "tiny", "lora_targets": "q proj"}}, "llm.lora_targets",
     "'q proj'", "comma-separated"),
    ("llm-cache-without-hub-model", {"llm": {"model": "tiny", "model_cache": "s3://b/cache"}},
     "llm.model_cache", "'s3://b/cache'", "empty unless llm.model is hf:<repo>"),
    ("llm-on-synthetic-data", {"llm": {"model": "tiny"}}, "data.source", "'synthetic'",
     "chat or instruction records"),
    ("llm-with-classifier-model-name", {"llm": {"model": "tiny"}, "data": {"source": "x.jsonl"},
     "model": {"name": "transformer"}}, "model.name", "'transformer'", "unset when llm.model is set"),
    ("llm-with-classifier-tokenizer",
     {"llm": {"model": "tiny"}, "data": {"source": "x.jsonl", "tokenizer": "bpe"}}, "data.tokenizer",
     "'bpe'", "brings its own tokenizer"),
    ("mlflow-sql-backend-uri", {"mlflow": {"tracking_uri": "sqlite:///mlflow.db"}}, "mlflow.tracking_uri",
     "'sqlite:///mlflow.db'", "file:/path (a local file store)"),
    ("mlflow-uri-a-plain-directory", {"mlflow": {"tracking_uri": "./mlruns"}}, "mlflow.tracking_uri",
     "'./mlruns'", "for this directory: file:/"),
    ("mlflow-uri-without-host", {"mlflow": {"tracking_uri": "http:///api"}}, "mlflow.tracking_uri",
     "'http:///api'", "http(s)://host[:port]"),
    ("mlflow-uri-with-a-password", {"mlflow": {"tracking_uri": "https://me:s3cret@mlflow.example.com"}},
     "mlflow.tracking_uri", "'https://me:***@mlflow.example.com'", "MLFLOW_TRACKING_TOKEN"),
    ("mlflow-file-store-below-a-file", {"mlflow": {"tracking_uri": f"file:{HERE}/mlruns"}},
     "mlflow.tracking_uri", "mlruns", "is a file"),
    ("mlflow-experiment-blank", {"mlflow": {"experiment": " "}}, "mlflow.experiment", "' '",
     "a non-empty name"),
]  # fmt: skip


def _resolve(values: dict[str, Any], tmp_path: Path) -> dict[str, Any]:
    def one(v: Any) -> Any:
        return str(HERE) if v == FILE else str(HERE / "ckpt") if v == UNDER_FILE else v

    defaults = {"checkpoint": {"dir": str(tmp_path / "ckpt")}, "output": {"dir": str(tmp_path / "out")}}
    sections = {s: {**defaults.get(s, {}), **{k: one(v) for k, v in f.items()}} for s, f in values.items()}
    return {**defaults, **sections}


@pytest.mark.parametrize(("case", "values", "key", "shows", "says"), CASES, ids=[c[0] for c in CASES])
def test_bad_trainer_setting_is_refused_naming_key_value_and_what_is_allowed(
    ledger, tmp_path, case, values, key, shows, says
):
    try:
        build(_resolve(values, tmp_path))
        error = None
    except ConfigError as err:
        error = str(err)
    entry = ledger("bad input: trainer", case, error=error, names=f"{key}=")
    assert error is not None, f"{case}: accepted"
    assert entry.clear and shows in error and "allowed" in error and says in error, error
    assert "s3cret" not in error  # a credential in a value is not repeated into the log
    assert not (tmp_path / "ckpt").exists() and not (tmp_path / "out").exists()  # nothing created


def test_the_default_directories_are_accepted_where_they_can_be_created(tmp_path):
    config = build(_resolve({}, tmp_path))
    assert config.checkpoint.dir == str(tmp_path / "ckpt")


@pytest.mark.parametrize(
    ("case", "argv", "says"),
    [
        ("config-file-not-yaml", ["--config", "<tmp>/job.txt"], "allowed a .yaml, .yml or .json file"),
        ("config-file-a-list", ["--config", "<tmp>/job.yaml"], "must hold a mapping of sections, got list"),
        ("flag-unquoted-path-below-a-file", ["--checkpoint.dir", str(HERE / "x")], "is a file"),
        # argparse would match a prefix: --train.step 30 set the hung-peer kill switch step_timeout_s
        ("flag-prefix-of-step-timeout", ["--train.step", "30"], "unknown key train.step"),
        ("flag-prefix-of-max-steps", ["--train.max_step", "30"], "did you mean train.max_steps?"),
        ("flag-prefix-with-equals", ["--train.l=0.1"], "unknown key train.l (did you mean train.lr?)"),
    ],
)
def test_the_trainer_command_exits_2_before_it_trains(
    ledger, tmp_path, capsys, monkeypatch, case, argv, says
):
    from trainer.__main__ import main

    monkeypatch.delenv("RANK", raising=False)
    (tmp_path / "job.txt").write_text("train: {}\n")
    (tmp_path / "job.yaml").write_text("- train\n")
    code = main([a.replace("<tmp>", str(tmp_path)) for a in argv])
    error = capsys.readouterr().err
    names = argv[0] if argv[0] == "--config" else argv[0].removeprefix("--").split("=")[0]
    entry = ledger("bad input: trainer", case, error=error if code == 2 else None, names=names)
    assert code == 2 and entry.clear and says in error and "allowed" in error, error


def test_a_mistyped_key_gets_the_same_refusal_as_a_flag_and_in_a_file(tmp_path):
    from trainer.config import from_args

    (tmp_path / "job.yaml").write_text("train: {max_step: 30}\n")
    refusals = []
    for argv in (["--train.max_step", "30"], ["--config", str(tmp_path / "job.yaml")]):
        with pytest.raises(ConfigError) as err:
            from_args(argv)
        refusals.append(str(err.value))
    assert refusals[0] == refusals[1] and "did you mean train.max_steps?" in refusals[0], refusals
