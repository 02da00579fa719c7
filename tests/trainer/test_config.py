import importlib.util
import json

import pytest

from trainer import config
from trainer.__main__ import main
from trainer.config import ConfigError, from_args


def test_defaults_are_the_zimdb_job_on_synthetic_data():
    cfg = from_args([])
    assert cfg.data.source == "synthetic"
    assert cfg.checkpoint.keep >= 2
    assert cfg.train.parallelism == "ddp"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--train.batch_size", "0"], "train.batch_size=0 is invalid: allowed >= 1"),
        (["--train.batch_size", "many"], "train.batch_size='many' is invalid: allowed an integer"),
        (["--train.precision", "fp8"], "train.precision='fp8' is invalid: allowed auto | bf16 | fp16 | fp32"),
        (["--train.compile", "yes"], "train.compile='yes' is invalid: allowed true | false"),
        (["--model.heads", "3"], "model.heads=3 is invalid: allowed a divisor of model.dim=64"),
        (["--checkpoint.keep", "1"], "checkpoint.keep=1 is invalid: allowed >= 2"),
        (["--data.tokenizer", "sentencepiece"], "allowed bpe | bytes | wordlevel"),
        (["--data.source", "/no/such/file.jsonl"], "data.source='/no/such/file.jsonl' is invalid"),
        (["--data.source", "reviews.txt"], "allowed a file ending in .jsonl, .json, .csv, .parquet"),
        (["--checkpoint.dir", "s3://"], "checkpoint.dir='s3://' is invalid: allowed s3://bucket[/prefix]"),
        (
            ["--train.max_steps", "10", "--train.warmup_steps", "10"],
            "train.warmup_steps=10 is invalid: allowed 0 <= x < train.max_steps=10",
        ),
    ],
)
def test_bad_value_names_the_key_the_value_and_what_is_allowed(argv, message):
    with pytest.raises(ConfigError) as err:
        from_args(argv)
    assert message in str(err.value)


@pytest.mark.parametrize(
    ("argv", "package"),
    [
        (["--data.source", "hf:imdb"], "pip install datasets"),
        (["--model.name", "hf:distilbert-base-uncased"], "pip install transformers"),
        (["--output.tensorboard", "true"], "pip install tensorboard"),
    ],
)
def test_option_needing_a_missing_package_fails_with_the_option_and_pip_hint(argv, package, monkeypatch):
    missing = {"datasets", "transformers", "tensorboard"}
    find_spec = importlib.util.find_spec
    hide = lambda name: None if name in missing else find_spec(name)  # noqa: E731
    monkeypatch.setattr(importlib.util, "find_spec", hide)
    with pytest.raises(ConfigError) as err:
        from_args(argv)
    assert argv[0][2:] in str(err.value) and package in str(err.value)


def test_file_values_are_overridden_by_flags(tmp_path):
    f = tmp_path / "job.yaml"
    f.write_text("train:\n  batch_size: 8\n  lr: 0.01\nmodel:\n  dim: 32\n")
    cfg = from_args(["--config", str(f), "--train.batch_size", "16"])
    assert (cfg.train.batch_size, cfg.train.lr, cfg.model.dim) == (16, 0.01, 32)


def test_json_config_file_is_accepted(tmp_path):
    f = tmp_path / "job.json"
    f.write_text(json.dumps({"checkpoint": {"dir": "s3://bucket/ckpt", "resume": False}}))
    cfg = from_args(["--config", str(f)])
    assert cfg.checkpoint.dir == "s3://bucket/ckpt" and cfg.checkpoint.resume is False


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"trainer": {}}, "unknown config section 'trainer': allowed data, model, train, checkpoint, output"),
        ({"train": {"batchsize": 8}}, "(did you mean train.batch_size?): allowed"),
        ({"train": {"lr": "fast"}}, "train.lr='fast' is invalid: allowed a number"),
        ({"train": {"max_steps": 1.5}}, "train.max_steps=1.5 is invalid: allowed an integer"),
        ({"train": {"compile": 1}}, "train.compile=1 is invalid: allowed true | false"),
        ({"model": "big"}, "config section 'model' must be a mapping"),
    ],
)
def test_bad_config_file_content_is_refused(values, message):
    with pytest.raises(ConfigError) as err:
        config.build(values)
    assert message in str(err.value)


def test_a_type_error_inside_a_section_check_is_a_bug_not_a_config_error(monkeypatch):
    def broken_check(self):
        raise TypeError("unsupported operand type(s) for +: 'int' and 'NoneType'")

    monkeypatch.setattr(config.TrainConfig, "__post_init__", broken_check)
    with pytest.raises(TypeError, match="unsupported operand") as err:
        config.build({"train": {"lr": 0.01}})
    assert not isinstance(err.value, ConfigError)


def test_invalid_yaml_file_is_a_config_error(tmp_path):
    f = tmp_path / "job.yaml"
    f.write_text("train: [unclosed\n")
    with pytest.raises(ConfigError, match="is not valid YAML"):
        from_args(["--config", str(f)])


def test_main_exits_2_on_invalid_config_without_starting_anything(capsys, tmp_path):
    assert main(["--train.lr", "-1", "--output.dir", str(tmp_path / "out")]) == 2
    assert "invalid configuration: train.lr=-1.0 is invalid: allowed > 0" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_help_documents_every_field(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    for section, cls in config.SECTIONS.items():
        for f in config.dataclasses.fields(cls):
            assert f"--{section}.{f.name}" in out
    assert "143" in out and "2 invalid config" in out


def test_an_llm_job_without_a_learning_rate_gets_the_fine_tuning_one(tmp_path):
    records = tmp_path / "chat.jsonl"
    records.write_text("{}\n")
    llm = {"llm": {"model": "tiny"}, "data": {"source": str(records)}}
    assert config.build(llm).train.lr == 2e-4  # LoRA
    assert config.build({**llm, "llm": {"model": "tiny", "method": "full"}}).train.lr == 2e-5
    assert config.build({**llm, "train": {"lr": 1e-3}}).train.lr == 1e-3  # set: kept
    assert config.build({}).train.lr == 3e-3  # the classifier's
    assert "0.0002 for LoRA, 2e-05 for full fine-tuning" in " ".join(config.parser().format_help().split())
