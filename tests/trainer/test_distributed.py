"""Real 2-process gloo runs under torchrun (through trainer.launch), as a pod would start them.

Starting a run is most of its cost (the launcher and each rank import torch), so several tests judge one
run: the complete run and the run stopped by SIGTERM to its launcher. Both have a $TMPDIR of their own:
a run leaves nothing there, whichever way it ends, as pods keep /tmp (an emptyDir) across restarts."""

import json
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from ports import reserved_port
from trainer_runs import (
    REPO,
    assert_same_weights,
    cold_workers,
    launch,
    launch_cmd,
    metrics,
    python,
    run_env,
    scrape,
    start_and_wait_for_step,
)

from trainer import faults
from trainer.launch import exit_code

# DataLoader workers: torchrun signals each rank's whole process group, and workers that died with it
# made the rank fail before its checkpoint. They change nothing in the batches or the weights.
WORKERS = {"data.num_workers": 1}


def _weights(out):
    return torch.load(out / "model.pt", weights_only=True)["model"]


def _own_tmpdir(root: Path) -> dict[str, str]:
    """Variables giving a run the $TMPDIR root/tmp (empty)."""
    (root / "tmp").mkdir()
    # torch's compile cache is kept between runs on purpose (one per user, not per run): not a leftover.
    return {"TMPDIR": str(root / "tmp"), "TORCHINDUCTOR_CACHE_DIR": str(root / "torch-cache")}


def _left_in(tmpdir: Path) -> list[str]:
    return sorted(p.name for p in tmpdir.iterdir())


@dataclass
class Run:
    out: Path
    returncode: int
    log: str
    tmpdir: Path | None = None


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> Run:
    """One complete 2-process run, checkpointed every 100 steps with its metrics endpoint on (the Prometheus
    exporter's node scratch is made too). Its $TMPDIR starts with what an attempt killed by SIGKILL leaves
    (no cleanup ran): the next attempt removes it."""
    root = tmp_path_factory.mktemp("uninterrupted")
    env = _own_tmpdir(root)
    pid_of = [sys.executable, "-c", "import os; print(os.getpid())"]
    dead = subprocess.run(pid_of, capture_output=True, text=True, check=True).stdout.strip()
    (root / "tmp" / "trainer-run-killed" / "stage-step-000000010").mkdir(parents=True)
    (root / "tmp" / "trainer-run-killed.pid").write_text(dead)
    steps = {"checkpoint.every_steps": 100, "output.metrics_port": reserved_port()}
    proc = launch(root / "out", env=env, cold=True, **steps)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return Run(root / "out", proc.returncode, proc.stdout, root / "tmp")


@dataclass
class Stopped(Run):
    checkpoints: tuple[dict, ...] = ()
    latest: str = ""
    resume_point_complete: bool = False
    samples: dict | None = None  # what its Prometheus endpoint served before the SIGTERM


@pytest.fixture(scope="module")
def stopped_by_sigterm(tmp_path_factory) -> Stopped:
    """A Spot reclaim as the kubelet does it: SIGTERM to the container's main process (the launcher) once the
    run logged step 10 (and rank 0's metrics endpoint served both local ranks). What the run left is
    recorded at once: a test resumes it in place. That every rank stops at the same step when only one
    gets the signal is tested in one process (test_stop_vote.py)."""
    root = tmp_path_factory.mktemp("stopped")
    out = root / "out"
    port = reserved_port()
    env = _own_tmpdir(root)
    proc = start_and_wait_for_step(out, 10, env=env, cold=True, **WORKERS, **{"output.metrics_port": port})
    samples = _scrape_both_ranks(port)
    proc.send_signal(signal.SIGTERM)
    log = proc.communicate(timeout=120)[0]
    ckpt = out / "ckpt"
    latest = (ckpt / "latest").read_text() if (ckpt / "latest").is_file() else ""
    complete = bool(latest) and (ckpt / latest / "manifest.json").is_file()
    saved = tuple(metrics(out, "checkpoint")) if (out / "metrics.jsonl").is_file() else ()
    return Stopped(out, proc.returncode, log, root / "tmp", saved, latest, complete, samples)


def _scrape_both_ranks(port: int) -> dict:
    deadline, samples = time.monotonic() + 30, {}
    while time.monotonic() < deadline:
        try:
            samples = scrape(port)
        except OSError:
            samples = {}
        if samples.get("trainer_step", 0) >= 10 and samples.get("trainer_local_ranks") == 2:
            break
        time.sleep(0.1)
    return samples


def test_a_warm_run_trains_what_a_cold_run_trains(uninterrupted, tmp_path):
    """The other tests' runs start their ranks from a warm torch server (warm_torch.py): the same run started
    that way gives the cold run's weights bit for bit, its losses and evaluations, and its log lines."""
    warm = launch(tmp_path / "out", **{"checkpoint.every_steps": 100, "output.metrics_port": reserved_port()})
    assert warm.returncode == 0, warm.stdout + warm.stderr
    reference, weights = _weights(uninterrupted.out), _weights(tmp_path / "out")
    assert reference.keys() == weights.keys()
    for key in reference:
        assert torch.equal(reference[key], weights[key]), key
    for event in ("train", "eval", "checkpoint"):
        warm_rows, cold_rows = metrics(tmp_path / "out", event), metrics(uninterrupted.out, event)
        assert _without_clock(warm_rows, tmp_path / "out") == _without_clock(cold_rows, uninterrupted.out)
    cold_log = _without_clock(uninterrupted.log, uninterrupted.out)
    assert _without_clock(warm.stdout, tmp_path / "out") == cold_log


def _without_clock(found: str | list[dict], out: Path) -> list:
    """Log lines or metrics rows with the run's directory and id, and the figures that depend on the clock,
    left out."""
    if isinstance(found, list):
        rows = [{k: v for k, v in row.items() if not re.search("time|per_s|_s$|mfu", k)} for row in found]
        return _without_clock(json.dumps(rows).replace("}, {", "}\n{"), out)
    found = re.sub(r"run-\d{8}T\d{6}Z-[0-9a-f]+", "RUN", found.replace(str(out), "OUT"))
    found = re.sub(r"\b(\w*per_s|\w*seconds\w*|eta|mfu|\w+_s) \S+", r"\1 ~", found)
    return re.sub(r"\d+(\.\d+)? ?(s|ms)\b", "~", found).splitlines()


def test_two_process_run_keeps_ranks_identical_and_lowers_the_loss(uninterrupted):
    out = uninterrupted.out
    summary = json.loads((out / "summary.json").read_text())
    assert summary["ranks_identical"] is True and summary["world_size"] == 2
    losses = [row["loss"] for row in metrics(out, "train")]
    assert sum(losses[-5:]) / 5 < sum(losses[:5]) / 5
    latest = (out / "ckpt" / "latest").read_text()  # run-<id>/step-…: checkpoints belong to a run
    assert latest.startswith("run-") and latest.endswith("/step-000000300")
    assert summary["checkpoint"] == f"{out / 'ckpt'}/{latest}"
    assert "[trainer] done:" in uninterrupted.log


def test_a_completed_run_leaves_nothing_in_tmpdir(uninterrupted):
    assert [r["step"] for r in metrics(uninterrupted.out, "checkpoint")] == [100, 200, 300]
    assert _left_in(uninterrupted.tmpdir) == []


def test_a_run_stopped_by_sigterm_leaves_nothing_in_tmpdir_but_keeps_its_resume_point(stopped_by_sigterm):
    first = stopped_by_sigterm
    assert first.returncode == faults.STOPPED, first.log
    assert _left_in(first.tmpdir) == []
    (saved,) = [r["step"] for r in first.checkpoints]
    assert first.latest.endswith(f"/step-{saved:09d}") and first.resume_point_complete


def test_resume_after_sigterm_continues_from_last_step_and_matches_uninterrupted_run(
    uninterrupted, stopped_by_sigterm
):
    first, out = stopped_by_sigterm, stopped_by_sigterm.out
    assert first.returncode == 143, first.log
    saved = first.checkpoints
    assert len(saved) == 1 and 10 <= saved[0]["step"] < 300, first.log
    stopped_at = saved[0]["step"]
    assert f"SIGTERM: checkpointing at step {stopped_at}" in first.log
    assert first.latest.endswith(f"/step-{stopped_at:09d}")

    second = launch(out, **WORKERS)
    assert second.returncode == 0, second.stdout + second.stderr
    assert f"resuming from {out / 'ckpt'}/{first.latest} (step {stopped_at})" in second.stdout
    assert min(r["step"] for r in metrics(out, "train") if r["time"] > saved[0]["time"]) > stopped_at

    reference, resumed = _weights(uninterrupted.out), _weights(out)
    assert reference.keys() == resumed.keys()
    for key in reference:
        assert torch.equal(reference[key], resumed[key]), key


def test_two_process_torchrun_serves_one_endpoint_over_loopback(stopped_by_sigterm):
    samples = stopped_by_sigterm.samples or {}
    assert samples.get("trainer_local_ranks") == 2, samples  # both ranks report through rank 0's endpoint
    assert samples["trainer_total_steps"] == 300
    assert samples["trainer_step"] >= 10 and samples["trainer_loss"] > 0 and samples["trainer_grad_norm"] > 0
    assert samples["trainer_samples_per_second"] > 0 and samples["trainer_tokens_per_second"] > 0
    assert 0 < samples["trainer_learning_rate"] <= 3e-3


def test_a_run_that_fails_on_its_data_leaves_nothing_in_tmpdir(tmp_path):
    """Exit 2 while rank 0 tokenizes (scratch, staging and failure marker all exist by then)."""
    source = tmp_path / "data.jsonl"
    source.write_text("".join(json.dumps({"text": f"row {i}", "label": 7}) + "\n" for i in range(64)))
    proc = launch(tmp_path / "out", env=_own_tmpdir(tmp_path), **{"data.source": source})
    assert proc.returncode == faults.INVALID, proc.stdout + proc.stderr
    # Said once: by local rank 0, which read the data; rank 1, which waited for it, only exits 2.
    assert proc.stderr.count("trainer: invalid configuration:") == 1 and "label 7" in proc.stderr, proc.stderr
    assert _left_in(tmp_path / "tmp") == []


def test_losing_a_peer_node_exits_202_on_the_surviving_node(tmp_path):
    """Two launchers, one process each, as two pods of a multi-node job: kill node 1's worker the way a
    Spot reclaim would, and node 0 must exit retryably (202, not 1, which ExitCode policies never retry).
    The workers are cold interpreters, children of their launcher as in a pod; the launchers, which this
    test only watches, start from the warm torch server (a cold one spends ~3 s of CPU importing torch)."""
    port = reserved_port()
    warm = run_env(cold=False)
    env = {k: v for k, v in warm.items() if k != "PYTHON_EXEC"}  # torchrun's workers: sys.executable
    nodes = []
    for rank in (0, 1):
        out = tmp_path / f"node{rank}"
        rendezvous = ("--nnodes=2", f"--node-rank={rank}", "--master-addr=127.0.0.1", f"--master-port={port}")
        cmd = launch_cmd(out, nproc=1, rendezvous=rendezvous, interpreter=python(warm))
        nodes.append(
            subprocess.Popen(
                cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
            )
        )
    out0 = tmp_path / "node0"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not ((out0 / "metrics.jsonl").exists() and metrics(out0, "train")):
        time.sleep(0.05)
    workers = cold_workers(tmp_path / "node1")
    assert len(workers) == 1
    os.kill(workers[0], signal.SIGKILL)
    log = nodes[0].communicate(timeout=120)[0]
    nodes[1].communicate(timeout=120)
    assert nodes[0].returncode == faults.PEER_LOST, log
    assert "lost or hung peer rank" in log and "exit 202 (retryable" in log


def _weights_of_checkpoint(step_dir: Path) -> dict:
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    dcp_to_torch_save(step_dir, step_dir.parent / "gathered.pt")
    return torch.load(step_dir.parent / "gathered.pt", weights_only=False)["model"]


def test_a_nan_loss_on_one_rank_is_skipped_then_a_lasting_one_ends_the_run_with_exit_3(tmp_path):
    """Rank 1's loss is NaN at step 3 (skipped on both ranks, training goes on) and from step 10 on: the
    checkpoint at step 12 holds the weights of step 9, and the progress line at step 15 finds 6 bad steps
    in a row (more than 3) and ends the run with exit 3: no model.pt, `latest` names a finite checkpoint."""
    out = tmp_path / "out"
    poisoned = {"POISON_STEPS": "3,10-60", "PYTHONPATH": f"{REPO}{os.pathsep}{Path(__file__).parent}"}
    env = {**run_env(cold=False), **poisoned}
    steps = {"checkpoint.every_steps": 6, "train.max_bad_steps": 3, "train.max_steps": 60}
    cmd = launch_cmd(out, interpreter=python(env), **steps)
    cmd[cmd.index("trainer", cmd.index("-m", cmd.index("--nproc-per-node")))] = "poisoned_trainer"
    proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == faults.DIVERGED, proc.stdout[-2000:] + proc.stderr[-3000:]
    diverged = "training diverged: 6 optimizer steps in a row had a non-finite loss or gradient by step 15"
    assert diverged in proc.stderr and "exit 3 (permanent)" in proc.stderr
    rows = [(r["step"], r.get("bad_steps")) for r in metrics(out, "train")]
    assert rows == [(5, 1), (10, 2)]  # at step 15 the run stopped instead
    assert [r["step"] for r in metrics(out, "checkpoint")] == [6, 12]
    latest = (out / "ckpt" / "latest").read_text()
    assert latest.endswith("/step-000000012") and not (out / "model.pt").exists()
    weights = _weights_of_checkpoint(out / "ckpt" / latest)
    assert all(torch.isfinite(w).all() for w in weights.values())
    # Said once (by whichever rank failed first), and in summary.json, rank 0's, strict JSON.
    assert proc.stderr.count(diverged) == 1, proc.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text(), parse_constant=_refuse)
    assert summary["status"] == "diverged" and summary["steps"] == 15 and diverged in summary["reason"]
    assert summary["checkpoint"] == f"{out / 'ckpt'}/{latest}" and summary["world_size"] == 2, summary


def _refuse(constant: str) -> None:
    raise AssertionError(f"bare {constant} in summary.json")


def test_worker_exit_codes_map_to_what_a_shell_reports():
    assert [exit_code(c) for c in (0, 1, 2, 143, -15, -9)] == [0, 1, 2, 143, 143, 137]


def _event_name(get_method_name, depth: int | None) -> str:
    """What `get_method_name` answers where the rendezvous handler calls it: in a helper (_record) of the
    method whose event it names."""

    def next_rendezvous() -> str:
        return _record()

    def _record() -> str:
        return get_method_name() if depth is None else get_method_name(depth)

    return next_rendezvous()


def test_the_launcher_names_rendezvous_events_as_torch_does_without_inspecting_the_stack(monkeypatch, capsys):
    from torch.distributed.elastic.rendezvous import dynamic_rendezvous

    from trainer import launch

    assert launch.TORCH_GET_METHOD_NAME is not None  # the pinned torch names its events with it
    for depth in (None, 1, 2, 3, 4, 10_000):
        torchs = _event_name(launch.TORCH_GET_METHOD_NAME, depth)
        assert _event_name(launch.frame_function, depth) == torchs, depth
    assert _event_name(launch.frame_function, None) == "next_rendezvous"
    assert _event_name(launch.frame_function, 10_000) == "no_method_name"
    monkeypatch.setattr(dynamic_rendezvous, "get_method_name", launch.TORCH_GET_METHOD_NAME)
    with pytest.raises(SystemExit):
        launch.main(["--help"])  # the launcher's run starts by installing it
    assert dynamic_rendezvous.get_method_name is launch.frame_function and "usage" in capsys.readouterr().out


def test_fsdp_and_ddp_with_gradient_accumulation_train_the_same_weights(tmp_path):
    same = {"model.dropout": 0.0, "train.batch_size": 4, "train.grad_accum_steps": 2, "train.max_steps": 30}
    ddp = launch(tmp_path / "ddp", **same)
    fsdp = launch(tmp_path / "fsdp", **same, **{"train.parallelism": "fsdp"})
    assert ddp.returncode == 0, ddp.stdout + ddp.stderr
    assert fsdp.returncode == 0, fsdp.stdout + fsdp.stderr
    assert "fsdp; steps 0..30" in fsdp.stdout
    assert_same_weights(_weights(tmp_path / "ddp"), _weights(tmp_path / "fsdp"))


def test_fsdp_evaluates_uneven_validation_shards_in_bf16_without_waiting_for_the_timeout(tmp_path):
    """33 validation examples over 2 ranks at 16 per batch: rank 0 has 2 batches, rank 1 has 1. Under
    FSDP every forward all-gathers, so the rank with fewer batches must still take part. A rank left
    waiting in a collective fails the run when train.dist_timeout_s runs out, so exit 0 says none did."""
    out = tmp_path / "out"
    uneven = {
        "data.synthetic_val_size": 33,
        "train.parallelism": "fsdp",
        "train.precision": "bf16",
        "train.max_steps": 10,
        "train.eval_every": 5,
        "train.dist_timeout_s": 30,
    }
    proc = launch(out, **uneven)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "33 val examples" in proc.stdout and "device cpu: precision bf16 (requested)" in proc.stdout
    assert "precision bf16, fsdp" in proc.stdout
    for row in metrics(out, "eval"):  # every example counted once: accuracy is a multiple of 1/33
        assert abs(row["val_accuracy"] * 33 - round(row["val_accuracy"] * 33)) < 1e-6
