"""`run-local` for a RayJob stack: the RayJob's entry point (trainer.ray_train) with the same program and
trainer config, on a local Ray; without Ray it stops before anything runs and says what to install.
Ray is an optional extra the test environment does not install (docs/workloads.md "Ray jobs"): the real run
below runs where it is installed."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import sys
from types import SimpleNamespace

import pytest

from tests.workloads.local_runs import FEW_STEPS
from workloads import local
from workloads.__main__ import main
from workloads.stacks import load_stack

STACK = "dev-zimdb-ray"


def _without_ray(monkeypatch):
    real = importlib.util.find_spec

    def find_spec(name, *args):
        return None if name == "ray" else real(name, *args)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)


def test_without_ray_it_exits_2_says_what_to_install_and_runs_nothing(monkeypatch, tmp_path, capsys):
    _without_ray(monkeypatch)
    assert main(["run-local", "--stack", STACK, "--out", str(tmp_path), *FEW_STEPS]) == 2
    err = capsys.readouterr().err
    assert f"run-local {STACK}: operator rayjob runs under Ray Train" in err
    assert "pip install -e '.[train,ray]'" in err
    assert list(tmp_path.iterdir()) == []


def test_a_torchrun_stack_runs_without_ray(monkeypatch, tmp_path):
    _without_ray(monkeypatch)
    ran = []

    @contextlib.contextmanager
    def popen(argv, **kw):  # the launcher started, nothing run: it exits 0 at once with nothing printed
        ran.append(argv)
        yield SimpleNamespace(stderr=iter(()), returncode=0)

    monkeypatch.setattr(local.subprocess, "Popen", popen)
    assert main(["run-local", "--stack", "dev-zimdb", "--nproc", "1", "--out", str(tmp_path)]) == 0
    ((_, _, launcher, *_),) = ran
    assert launcher == "trainer.launch"


def test_a_local_ray_runs_without_the_preemption_watcher_unless_the_environment_asks(monkeypatch, tmp_path):
    envs = []

    @contextlib.contextmanager
    def popen(argv, env, **kw):
        envs.append(env)
        yield SimpleNamespace(stderr=iter(()), returncode=0)

    monkeypatch.setattr(local.subprocess, "Popen", popen)
    monkeypatch.setattr(local, "ray_missing", lambda stack_name: None)
    monkeypatch.delenv("RAY_TRAIN_ENABLE_PREEMPTION_WATCHER", raising=False)
    run = ["run-local", "--nproc", "1", "--out", str(tmp_path), "--stack"]
    assert main([*run, STACK]) == 0
    assert main([*run, "dev-zimdb"]) == 0  # torchrun: no Ray to tell
    monkeypatch.setenv("RAY_TRAIN_ENABLE_PREEMPTION_WATCHER", "1")
    assert main([*run, STACK]) == 0
    assert [env.get("RAY_TRAIN_ENABLE_PREEMPTION_WATCHER") for env in envs] == ["0", None, "1"]


def test_the_local_command_is_the_rayjobs_entry_point_with_the_torchrun_program(tmp_path):
    ray_stack = load_stack(STACK)
    torchrun_stack = ray_stack.__class__(
        name=ray_stack.name,
        platform_stack=ray_stack.platform_stack,
        spec=ray_stack.spec.model_copy(update={"operator": "trainjob"}),
    )
    ray_argv = local.command(ray_stack, 3, tmp_path, [])
    torchrun_argv = local.command(torchrun_stack, 3, tmp_path, [])
    assert ray_argv[:3] == [sys.executable, "-m", "trainer.ray_train"]
    split = ray_argv.index("--")
    assert ray_argv[split + 1 :] == torchrun_argv[torchrun_argv.index("-m", 2) :]  # same program, config
    from trainer.ray_train import parse_args

    args = parse_args(ray_argv[3:])
    assert (args.workers, args.gpus_per_worker, args.storage_path) == (3, 0, str(tmp_path / "ray"))


def test_run_local_trains_the_rayjob_stack_on_a_local_ray(tmp_path, capsys, monkeypatch):
    pytest.importorskip("ray", reason='the `ray` extra is not installed here (docs/workloads.md "Ray jobs")')
    # Ray Train's controller sees the workers done at its next poll, every 2 s by default (Ray 2.60's
    # ray/train/v2/_internal/constants.py RAY_TRAIN_HEALTH_CHECK_INTERVAL_S, passed on to the controller;
    # execution/controller/controller.py _poll_workers). Polling more often only costs a few calls: a poll
    # that takes longer is awaited at the next one, and only one hanging for RAY_TRAIN_WORKER_HEALTH_CHECK_
    # TIMEOUT_S (600 s) fails a worker (worker_group.py _poll_workers_and_collect_errors).
    monkeypatch.setenv("RAY_TRAIN_HEALTH_CHECK_INTERVAL_S", "0.25")
    code = main(["run-local", "--stack", STACK, "--nproc", "2", "--out", str(tmp_path), *FEW_STEPS])
    assert code == 0
    summary = json.loads((tmp_path / STACK / "output" / "summary.json").read_text())
    assert summary["steps"] == 4 and summary["world_size"] == 2
    assert (tmp_path / STACK / "checkpoints" / "latest").exists()
