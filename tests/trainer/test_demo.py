"""The demo's configuration: what `make demo` and the run-local examples of docs/trainer.md hand the
trainer."""

import os
import subprocess
import sys
from pathlib import Path

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


FAKE_TORCH = 'import sys\nsys.stderr.write("torch imported\\n")\nsys.stderr.flush()\nsys.exit(7)\n'


def _until_torch(tmp_path, argv: list[str], env: dict[str, str]) -> str:
    """Output of a command up to its first torch import (a stand-in torch that says so and exits)."""
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "__init__.py").write_text(FAKE_TORCH)
    repo = Path(__file__).resolve().parents[2]
    proc = subprocess.run(
        [sys.executable, *argv], cwd=repo, capture_output=True, text=True, timeout=60,
        env={**os.environ, **env, "PYTHONPATH": f"{tmp_path}{os.pathsep}{repo}"},
    )  # fmt: skip
    assert proc.returncode == 7, proc.stdout + proc.stderr
    return proc.stdout + proc.stderr


def test_the_launcher_says_what_it_does_before_importing_torch(tmp_path):
    """The seconds (a minute after a fresh install) torch's import takes are not silent."""
    err = _until_torch(tmp_path, ["-m", "trainer.launch", "--standalone", "-m", "trainer"], {})
    assert err.index("trainer.launch: importing torch") < err.index("torch imported")


@pytest.mark.parametrize(("rank", "says"), [("0", True), ("1", False)])
def test_rank_0_says_the_config_is_valid_before_importing_torch(tmp_path, rank, says):
    out = _until_torch(tmp_path, ["-m", "trainer", "--train.max_steps", "5"], {"RANK": rank})
    line = "[trainer] configuration valid; importing torch"
    assert (line in out) is says
    assert not says or out.index(line) < out.index("torch imported")
