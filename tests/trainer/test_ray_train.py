"""trainer.ray_train: the Ray Train entry point. Ray itself is not installed here (an optional extra, see
docs/workloads.md "Ray jobs"); these tests run the entry point against a stand-in `ray` package with Ray
Train's call surface (TorchTrainer, ScalingConfig, RunConfig, FailureConfig) whose fit() calls the worker
function in this
process, and Ray's exception shapes (WorkerGroupError.worker_failures, RayTaskError.cause); one runs the
driver as a process of its own, how it exits."""

from __future__ import annotations

import os
import pickle
import re
import subprocess
import sys
import threading
import time
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from trainer import faults, ray_train
from trainer.ray_train import ProgramExit, exit_code_of, run_program

REPO = Path(__file__).resolve().parents[2]


class ActorDiedError(RuntimeError):  # ray.exceptions.ActorDiedError's name: a worker (pod, node) gone
    pass


class RayTaskError(RuntimeError):  # ray.exceptions.RayTaskError: a task's error, with .cause
    def __init__(self, cause: BaseException):
        super().__init__(str(cause))
        self.cause = cause


class WorkerGroupError(RuntimeError):  # ray.train.WorkerGroupError: rank -> error
    def __init__(self, failures: dict[int, BaseException]):
        super().__init__("Training failed due to worker errors")
        self.worker_failures = failures


class PreemptionError(RuntimeError):
    pass


class WorkerGroupStartupTimeoutError(RuntimeError):  # Ray Train 2.60: a group that could not start
    pass


class ControllerError(RuntimeError):  # ray.train.ControllerError: the controller's own failure
    def __init__(self, failure: BaseException):
        super().__init__(str(failure))
        self.controller_failure = failure


class WorkerHealthCheckFailedError(RuntimeError):  # Ray Train 2.60: how a dead worker reaches the driver
    def __init__(self, message: str, failure: BaseException):
        super().__init__(message)
        self.health_check_failure = failure


class UserExceptionWithTraceback(RuntimeError):  # Ray Train 2.60: a worker's own exception, wrapped
    def __init__(self, exc: BaseException, traceback_str: str):
        super().__init__(traceback_str)
        self._base_exc = exc


@dataclass
class FakeRay:
    """What main() handed to Ray Train, how often fit() ran the workers, and the permanent-exit actor."""

    trainers: list[dict[str, Any]] = field(default_factory=list)
    fits: int = 0
    inits: int = 0
    shutdowns: int = 0
    actors: dict[str, Any] = field(default_factory=dict)


@pytest.fixture
def fake_ray(monkeypatch) -> FakeRay:
    """Ray and Ray Train's surface as the driver and its workers use it. fit() runs the worker function
    here, restarting it as Ray Train's FailureConfig would (max_failures), with Ray's error shapes."""
    seen = FakeRay()

    def config(name: str):
        return type(name, (), {"__init__": lambda self, **kw: self.__dict__.update(kw)})

    class TorchTrainer:
        def __init__(self, train_loop_per_worker, **kwargs):
            self.fn = train_loop_per_worker
            seen.trainers.append(kwargs)

        def fit(self):
            failures = 0
            while True:
                seen.fits += 1
                try:
                    return self.fn(seen.trainers[-1]["train_loop_config"])
                except ProgramExit as err:  # rank 0's error, as Ray Train reports a worker's
                    failures += 1
                    if failures > seen.trainers[-1]["run_config"].failure_config.max_failures:
                        raise WorkerGroupError({0: RayTaskError(pickle.loads(pickle.dumps(err)))}) from None

    class Handle:  # an actor handle: method.remote(...) runs at once, ray.get returns the value
        def __init__(self, instance):
            self.instance = instance

        def __getattr__(self, method):
            return types.SimpleNamespace(remote=getattr(self.instance, method))

    def remote(**_options):
        def wrap(cls):
            def options(name):
                def create(*args):
                    seen.actors[name] = Handle(cls(*args))
                    return seen.actors[name]

                return types.SimpleNamespace(remote=create)

            return types.SimpleNamespace(options=options)

        return wrap

    ray = types.ModuleType("ray")
    ray.init = lambda **kw: setattr(seen, "inits", seen.inits + 1)
    ray.shutdown = lambda: setattr(seen, "shutdowns", seen.shutdowns + 1)
    ray.remote = remote
    ray.get = lambda value, timeout=None: value
    ray.get_actor = lambda name: seen.actors[name]
    train = types.ModuleType("ray.train")
    train.ScalingConfig, train.RunConfig, train.FailureConfig = (
        config(n) for n in ("ScalingConfig", "RunConfig", "FailureConfig")
    )
    torch_mod = types.ModuleType("ray.train.torch")
    torch_mod.TorchTrainer = TorchTrainer
    ray.train = train
    train.torch = torch_mod
    monkeypatch.setitem(sys.modules, "ray", ray)
    monkeypatch.setitem(sys.modules, "ray.train", train)
    monkeypatch.setitem(sys.modules, "ray.train.torch", torch_mod)
    monkeypatch.setattr(ray_train, "POLL_SECONDS", 0.01)
    return seen


def _script(tmp_path, body: str):
    path = tmp_path / "job.py"
    path.write_text(body)
    return str(path)


def _failing_then_ok(tmp_path, first_code: int) -> str:
    """A script that exits `first_code` on its first run and 0 afterwards (a marker file counts runs)."""
    marker = tmp_path / "ran"
    return _script(
        tmp_path,
        f"import pathlib, sys\nm = pathlib.Path({str(marker)!r})\n"
        f"if not m.exists():\n    m.write_text('1')\n    sys.exit({first_code})\n",
    )


def test_without_ray_it_exits_2_and_says_what_to_install(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray -> ImportError
    assert ray_train.main(["--workers", "2", "--", "-m", "trainer", "--help"]) == faults.INVALID
    err = capsys.readouterr().err
    assert "Ray Train is not installed" in err and "pip install '.[ray]'" in err


def test_workers_gpus_and_storage_reach_ray_train(fake_ray, tmp_path):
    script = _script(tmp_path, "import sys\nsys.exit(0)\n")
    argv = ["--workers", "4", "--gpus-per-worker", "1", "--storage-path", "s3://b/jobs/j/ray", "--name", "j"]
    assert ray_train.main([*argv, "--", script]) == 0
    (kwargs,) = fake_ray.trainers
    scaling, run = kwargs["scaling_config"], kwargs["run_config"]
    assert (scaling.num_workers, scaling.use_gpu, scaling.resources_per_worker) == (4, True, {"GPU": 1.0})
    assert (run.storage_path, run.name) == ("s3://b/jobs/j/ray", "j")
    assert run.failure_config.max_failures == 0  # --restart-budget (default 0)
    assert run.failure_config.controller_failure_limit == 0
    loop_config = kwargs["train_loop_config"]
    assert loop_config["program"] == [script] and set(loop_config) == {"program", "reported"}
    assert re.fullmatch(
        r"trainer-reported-[0-9a-f]{24}", loop_config["reported"]
    )  # one per run (report_once)
    assert fake_ray.inits == 1


def test_cpu_workers_reserve_no_gpu(fake_ray, tmp_path):
    assert ray_train.main(["--workers", "2", "--", _script(tmp_path, "pass\n")]) == 0
    scaling = fake_ray.trainers[0]["scaling_config"]
    assert (scaling.use_gpu, scaling.resources_per_worker) == (False, None)


def test_a_retryable_exit_is_restarted_by_ray_train_within_the_budget(fake_ray, tmp_path):
    script = _failing_then_ok(tmp_path, faults.STOPPED)
    assert ray_train.main(["--restart-budget", "1", "--", script]) == 0
    assert fake_ray.fits == 2
    assert fake_ray.trainers[0]["run_config"].failure_config.max_failures == 1


def test_a_retryable_exit_past_the_budget_is_the_exit_code(fake_ray, tmp_path, capsys):
    script = _failing_then_ok(tmp_path, faults.STORAGE_UNAVAILABLE)
    assert ray_train.main(["--restart-budget", "0", "--", script]) == faults.STORAGE_UNAVAILABLE
    assert fake_ray.fits == 1
    assert "training failed, exit 200 (retryable" in capsys.readouterr().err


def test_a_permanent_exit_reaches_the_driver_which_ends_the_run(fake_ray, tmp_path):
    for script in (_failing_then_ok(tmp_path, faults.INVALID), _script(tmp_path, "raise SystemExit(2)\n")):
        assert ray_train.main(["--restart-budget", "3", "--", script]) == faults.INVALID
        assert fake_ray.actors[ray_train.PERMANENT_EXIT_ACTOR].instance.code == faults.INVALID


def test_ray_stops_after_a_successful_run_and_not_after_a_failed_one(fake_ray, tmp_path):
    assert ray_train.main(["--", _script(tmp_path, "pass\n")]) == 0
    assert fake_ray.shutdowns == 1
    # A permanent exit ends the driver while Ray Train's fit thread may still be in a Ray call.
    assert ray_train.main(["--", _script(tmp_path, "raise SystemExit(2)\n")]) == faults.INVALID
    assert fake_ray.shutdowns == 1


# What `python -m trainer.ray_train` imports of Ray, on disk for a driver process of its own; Ray's atexit
# hook (ray/_private/worker.py registers shutdown) says when it runs.
STAND_IN_RAY = {
    "ray/__init__.py": """import atexit, sys, types
atexit.register(lambda: print("ray: atexit teardown", file=sys.stderr, flush=True))
def init(**kw): pass
def shutdown(): print("ray: shutdown", file=sys.stderr, flush=True)
def get(value, timeout=None): return value
def remote(**options):
    def actor_class(cls):
        def create(*args):
            actor = cls(*args)
            methods = {m: types.SimpleNamespace(remote=getattr(actor, m)) for m in ("get", "record")}
            return types.SimpleNamespace(**methods)
        return types.SimpleNamespace(options=lambda name: types.SimpleNamespace(remote=create))
    return actor_class
""",
    "ray/train/__init__.py": "class ScalingConfig:\n    def __init__(self, **kw): pass\n"
    "RunConfig = FailureConfig = ScalingConfig\n",
    "ray/train/torch/__init__.py": """class TorchTrainer:
    def __init__(self, fn, train_loop_config, **kw): self.fn, self.config = fn, train_loop_config
    def fit(self): self.fn(self.config)
""",
}


def test_the_driver_process_exits_after_stopping_ray_without_the_interpreters_teardown(tmp_path):
    for path, text in STAND_IN_RAY.items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join((str(tmp_path), str(REPO)))}
    for line, code in (("trained", 0), ("bad input", 2)):
        script = _script(tmp_path, f"print({line!r})\nraise SystemExit({code})\n")
        done = subprocess.run(
            [sys.executable, "-m", "trainer.ray_train", "--", script],
            cwd=REPO, env=env, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert done.returncode == code, done.stderr
        assert done.stdout.splitlines()[-1] == line  # flushed: stdout is a pipe here, not a terminal
        assert "ray: atexit teardown" not in done.stderr
        assert ("ray: shutdown" in done.stderr) == (code == 0)


def test_the_trainer_runs_in_the_worker_through_its_own_main(fake_ray, capsys):
    assert ray_train.main(["--", "-m", "trainer", "--help"]) == 0
    assert "usage" in capsys.readouterr().out.lower()
    assert ray_train.main(["--", "-m", "trainer", "--no-such-flag"]) == faults.INVALID


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (WorkerGroupError({1: ActorDiedError("node gone"), 0: RayTaskError(ProgramExit(2))}), 2),
        (WorkerGroupError({0: ActorDiedError("node gone"), 1: RayTaskError(ProgramExit(2))}), 2),
        (ControllerError(WorkerGroupStartupTimeoutError("a worker's node went away")), faults.PEER_LOST),
        (ControllerError(RuntimeError("insufficient resources")), 1),
        (WorkerGroupError({3: ActorDiedError("node gone")}), faults.PEER_LOST),
        (WorkerGroupError({0: RayTaskError(ProgramExit(201)), 1: RayTaskError(ProgramExit(202))}), 201),
        (PreemptionError("preempted"), faults.STOPPED),
        (WorkerGroupError({1: WorkerHealthCheckFailedError("dead", RuntimeError("eof"))}), faults.PEER_LOST),
        (WorkerGroupError({0: UserExceptionWithTraceback(ProgramExit(2), "Traceback ...")}), 2),
        (WorkerGroupError({0: UserExceptionWithTraceback(ValueError("a bug"), "Traceback ...")}), 1),
        (RuntimeError("a bug in the driver"), 1),
    ],
)
def test_a_failed_fit_stands_for_the_trainers_exit_code(error, code):
    assert exit_code_of(error) == code


def test_an_error_chained_under_another_is_found():
    try:
        try:
            raise RayTaskError(ProgramExit(2))
        except RayTaskError as inner:
            raise RuntimeError("wrapped") from inner
    except RuntimeError as outer:
        assert exit_code_of(outer) == 2


def test_the_exit_code_survives_ray_pickling_it():
    assert pickle.loads(pickle.dumps(ProgramExit(203))).exit_code == 203


def test_supervise_returns_at_once_on_a_permanent_exit_while_ray_train_would_go_on(monkeypatch):
    monkeypatch.setattr(ray_train, "POLL_SECONDS", 0.01)
    forever = threading.Event()
    reported: list[int] = []
    fit_thread_running = threading.Event()

    def fit():  # Ray Train restarting a group whose rank 0 failed for good, again and again
        fit_thread_running.set()
        forever.wait(30)

    def permanent_exit():
        if fit_thread_running.is_set():
            reported.append(2)
        return reported[0] if reported else None

    started = time.monotonic()
    assert ray_train.supervise(fit, permanent_exit) == 2
    assert time.monotonic() - started < 5
    forever.set()


def test_supervise_gives_the_code_of_the_error_ray_train_ends_with():
    def fit():
        raise WorkerGroupError({2: ActorDiedError("node gone")})

    assert ray_train.supervise(fit, lambda: None) == faults.PEER_LOST
    assert ray_train.supervise(lambda: None, lambda: None) == 0


def test_a_worker_reports_only_a_permanent_exit(fake_ray, tmp_path):
    box = types.SimpleNamespace(codes=[])
    fake_ray.actors[ray_train.PERMANENT_EXIT_ACTOR] = types.SimpleNamespace(
        record=types.SimpleNamespace(remote=box.codes.append)
    )
    for code in (faults.INVALID, faults.STOPPED):
        with pytest.raises(ProgramExit):
            ray_train.train_worker({"program": [_script(tmp_path, f"raise SystemExit({code})\n")]})
    ray_train.train_worker({"program": [_script(tmp_path, "pass\n")]})
    assert box.codes == [faults.INVALID]


def test_a_script_exit_message_is_exit_1(tmp_path, capsys):
    assert run_program([_script(tmp_path, "import sys\nsys.exit('bad input')\n")]) == 1
    assert "bad input" in capsys.readouterr().err


def test_a_module_gets_its_arguments(tmp_path, monkeypatch):
    (tmp_path / "job_module.py").write_text("import sys\nsys.exit(int(sys.argv[1]))\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert run_program(["-m", "job_module", "7"]) == 7


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--workers", "0", "--", "x.py"], "--workers 0: allowed 1 or more"),
        (["--restart-budget", "-1", "--", "x.py"], "--restart-budget -1: allowed 0 or more"),
        (["--workers", "2"], "PROGRAM: missing"),
    ],
)
def test_bad_arguments_exit_2_naming_the_flag(argv, message, capsys):
    with pytest.raises(SystemExit) as done:
        ray_train.main(argv)
    assert done.value.code == 2
    assert message in capsys.readouterr().err


def test_the_trainer_trains_in_the_process_group_ray_train_made(monkeypatch):
    """Ray Train initialises torch.distributed before the program runs; the trainer joins it instead of
    initialising a second one (which torch refuses), and initialises its own under torchrun."""
    import torch.distributed as torch_dist

    from trainer import dist
    from trainer.config import build

    cfg = build({"train": {"device": "cpu"}}).train
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_RANK", "0")
    made: list[dict] = []
    monkeypatch.setattr(torch_dist, "init_process_group", lambda **kw: made.append(kw))
    monkeypatch.setattr(torch_dist, "is_initialized", lambda: True)
    env = dist.setup(cfg)
    assert (env.rank, env.world_size, made) == (1, 2, [])
    monkeypatch.setattr(torch_dist, "is_initialized", lambda: False)
    dist.setup(cfg)
    assert [(m["rank"], m["world_size"], m["backend"]) for m in made] == [(1, 2, "gloo")]


def test_the_sigterm_flag_works_in_ray_trains_worker_thread():
    """Ray Train runs the program in a thread, where Python refuses signal handlers."""
    import signal

    from trainer.dist import StopFlag

    before = signal.getsignal(signal.SIGTERM)
    made: list[StopFlag] = []
    worker = threading.Thread(target=lambda: made.append(StopFlag()))
    worker.start()
    worker.join()
    assert len(made) == 1 and made[0].requested is False
    assert signal.getsignal(signal.SIGTERM) is before  # a worker thread leaves the process's handler alone
    try:
        flag = StopFlag()
        assert signal.getsignal(signal.SIGTERM) == flag._on_signal  # the main thread (torchrun) sets it
    finally:
        signal.signal(signal.SIGTERM, before)
