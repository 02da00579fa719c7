"""`make bench`: --help has no side effects, --strict decides the exit code, the 2-process workers work,
every throughput row is a median of at least 3 runs."""

import json
import subprocess

import pytest
from trainer_runs import REPO, python, run_env

from trainer import bench


def test_help_prints_usage_and_runs_nothing(tmp_path):
    env = run_env(cold=False)
    proc = subprocess.run(
        [*python(env), "-m", "trainer.bench", "--help"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0 and "--strict" in proc.stdout and "--data-mib" in proc.stdout
    assert "[bench" not in proc.stdout and "trainer benchmark" not in proc.stdout
    assert list(tmp_path.iterdir()) == []


def test_a_missed_target_fails_only_with_strict(capsys):
    rows = [bench.Row("fast", "1", "figure"), bench._target("ratio", "0.90", False, ">= 0.95")]
    assert bench.exit_code(rows, strict=False) == 0
    assert "targets missed: ratio (exit 0: no --strict)" in capsys.readouterr().out
    assert bench.exit_code(rows, strict=True) == 1
    assert bench.exit_code(rows[:1], strict=True) == 0
    assert rows[1].note == "target >= 0.95 (NOT met)"


def _launch_worker(*args: str, cold: bool = True) -> None:
    """`cold`: ranks started as fresh interpreters, as a run of the data-prep worker must be: it measures
    each rank's memory growth, which a rank forked from the warm torch server would not show the same. The
    launcher, which measures nothing, starts from the server either way (a cold one imports torch: ~3 s of
    CPU); without PYTHON_EXEC in its environment, torchrun starts cold ranks."""
    env = run_env(cold=False)
    launcher = [*python(env), "-m", "trainer.launch", "--standalone", "--nproc-per-node", "2"]
    if cold:
        env = {k: v for k, v in env.items() if k != "PYTHON_EXEC"}
    cmd = [*launcher, "-m", "trainer.bench_workers"]
    proc = subprocess.run([*cmd, *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]


def test_bare_ddp_worker_reports_throughput_of_two_ranks(tmp_path):
    out, config = tmp_path / "bare.json", tmp_path / "tiny.json"
    # The bench measures the trainer's default model and data; that the worker reports is shown on less.
    small = {"data": {"synthetic_train_size": 512, "max_len": 24}, "model": {"dim": 16, "ffn_dim": 32}}
    config.write_text(json.dumps(small))
    _launch_worker("bare", str(out), "10", str(config), cold=False)
    ranks = json.loads(out.read_text())
    assert [r["rank"] for r in ranks] == [0, 1] and all(r["samples_per_s"] > 0 for r in ranks)


def test_repeats_below_three_are_refused(capsys):
    with pytest.raises(SystemExit) as exited:
        bench.main(["--repeats", "2"])
    assert exited.value.code == 2 and "--repeats 2: allowed 3 or more" in capsys.readouterr().err


def test_data_prep_worker_shows_rank_1_mapping_instead_of_tokenizing(tmp_path):
    source, out = tmp_path / "reviews.jsonl", tmp_path / "prep.json"
    bench.write_reviews_jsonl(source, 2)  # 2,000 reviews: rank 0's growth ~45 MiB (50 at 4 MiB), rank 1's ~3
    _launch_worker("data-prep", str(source), str(out))
    lead, other = json.loads(out.read_text())
    assert lead["examples"] == other["examples"] > 1000
    assert lead["tokens_read"] == other["tokens_read"] > 0  # the same token ids on both ranks
    # rank 0 read and tokenized the file; rank 1 only mapped the token files
    assert other["rss_growth_mib"] < lead["rss_growth_mib"] / 3
