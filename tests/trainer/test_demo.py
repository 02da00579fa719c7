"""The demo's configuration: what `make demo` and the run-local examples of docs/trainer.md hand the
trainer."""

import pytest

from trainer.config import ConfigError, from_args
from workloads.local import command
from workloads.stacks import load_stack


def _trainer_argv(tmp_path, overrides: list[str]) -> list[str]:
    """The trainer's arguments exactly as run-local builds them (config file, then the flags after --)."""
    argv = command(load_stack("dev-zimdb"), 2, tmp_path, overrides)
    return argv[argv.index("trainer") + 1 :]


@pytest.mark.parametrize("steps", [20, 300, 600])
def test_readme_max_steps_examples_are_valid_trainer_configs(tmp_path, steps):
    cfg = from_args(_trainer_argv(tmp_path, ["--train.max_steps", str(steps)]))
    assert cfg.train.max_steps == steps
    assert cfg.train.warmup_steps == steps // 10  # the default warmup follows the run's length


def test_an_explicit_warmup_longer_than_the_run_is_still_refused():
    with pytest.raises(ConfigError, match="train.warmup_steps=30 is invalid"):
        from_args(["--train.max_steps", "20", "--train.warmup_steps", "30"])


def test_demo_trains_on_the_synthetic_corpus_with_truncation_and_a_metrics_port(tmp_path):
    cfg = from_args(_trainer_argv(tmp_path, []))
    assert cfg.data.source == "synthetic" and cfg.data.max_len == 64
    assert cfg.output.metrics_port == 9464
