"""`python -m trainer.ray_train [options] -- PROGRAM...`: PROGRAM in every worker of Ray Train's TorchTrainer.

PROGRAM is what torchrun would run (`-m trainer --config FILE ...`, `-m MODULE ...` or `SCRIPT.py ...`).
Ray Train starts `--workers` workers, creates the process group and sets RANK, WORLD_SIZE, LOCAL_RANK,
MASTER_ADDR ... as torchrun does (ray/train/torch/config.py); the trainer trains in that group.

Exit codes are trainer/faults.py's. Ray Train restarts its workers on any error, so this driver stops it for
the permanent ones: a PROGRAM exit of 1-127 is reported to the driver (a named actor) and becomes the
driver's exit at once; an exit of 128+ or a lost worker restarts the group up to `--restart-budget`
(recognised node preemptions are not counted). Ray Train 2.60 does not restart after a worker dies during
one of its controller's calls (ControllerError): the driver exits 202, retryable, and the RayJob's
backoffLimit starts a fresh cluster. Anything else is exit 1. Under a RayJob this is the entry point on the
head (workloads/rayjob.py). Ray is optional (`pip install '.[ray]'`): without it this exits 2.
"""

from __future__ import annotations

import argparse
import logging
import os
import runpy
import sys
import tempfile
import threading
import uuid
from collections.abc import Callable, Iterator
from typing import Any, NoReturn

from trainer import faults, report_once

INSTALL_HINT = "pip install '.[ray]' (ray[train]==2.60.0), or use the image built with the ray extra"
# Ray's exceptions for a worker (actor), its process or its node gone, by class name: matched through the
# class hierarchy so that no Ray import is needed to classify them (ray/exceptions.py; Ray Train 2.60's
# ray/train/v2/_internal/exceptions.py: a dead worker reaches the driver as WorkerHealthCheckFailedError,
# a hung one as WorkerHealthCheckTimeoutError, one lost while the group starts as WorkerGroupStartup*).
_LOST_WORKER = frozenset(
    {
        "RayActorError", "ActorDiedError", "ActorUnavailableError", "WorkerCrashedError", "NodeDiedError",
        "OwnerDiedError", "ObjectLostError", "WorkerHealthCheckFailedError", "WorkerHealthCheckTimeoutError",
        "WorkerGroupStartupFailedError", "WorkerGroupStartupTimeoutError",
    }
)  # fmt: skip
_PREEMPTED = frozenset({"PreemptionError"})  # ray.train.v2.api.exceptions
_PROGRAM_EXIT = frozenset({"ProgramExit"})
PERMANENT_EXIT_ACTOR = "trainer-ray-train-permanent-exit"
POLL_SECONDS = 2.0

log = logging.getLogger("trainer.ray_train")


class ProgramExit(RuntimeError):
    """PROGRAM ended with a non-zero exit code in a Ray worker; Ray carries it to the driver pickled."""

    def __init__(self, exit_code: int):
        super().__init__(f"the program exited {exit_code} ({faults.describe(exit_code)})")
        self.exit_code = exit_code

    def __reduce__(self) -> tuple[Any, ...]:
        return (ProgramExit, (self.exit_code,))


def _system_exit_code(code: object) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr, flush=True)  # sys.exit("message"): Python prints it and exits 1
    return 1


def run_program(program: list[str]) -> int:
    """Run PROGRAM in this process as `python PROGRAM` would; its exit code."""
    if not program:
        raise ValueError("no program: pass it after `--`, e.g. -- -m trainer --config config.yaml")
    if program[0] == "-m":
        if len(program) < 2:
            raise ValueError("`-m` needs a module name")
        module, args = program[1], program[2:]
        if module == "trainer":
            from trainer.__main__ import main

            try:
                return main(args)
            except SystemExit as done:  # --help, bad flags
                return _system_exit_code(done.code)

        def target() -> object:
            return runpy.run_module(module, run_name="__main__", alter_sys=True)

        name = module
    else:
        name, args = program[0], program[1:]

        def target() -> object:
            return runpy.run_path(name, run_name="__main__")

    saved = sys.argv
    sys.argv = [name, *args]
    try:
        target()
    except SystemExit as done:
        return _system_exit_code(done.code)
    finally:
        sys.argv = saved
    return 0


def report_permanent_exit(code: int) -> None:
    """Tell the driver (its named actor) that a worker's PROGRAM failed for good; best effort: if the
    driver cannot be told, Ray Train's retries end the run with the same code, later."""
    try:
        import ray

        ray.get(ray.get_actor(PERMANENT_EXIT_ACTOR).record.remote(code), timeout=30)
    except Exception as err:  # no actor (run outside this driver), Ray unavailable
        print(f"ray_train: could not report exit {code} to the driver: {err}", file=sys.stderr, flush=True)


def train_worker(config: dict[str, Any]) -> None:
    """Ray Train's train_loop_per_worker: PROGRAM, with its non-zero exit as an error Ray reports."""
    # The workers of one run on one node share where they note the errors already said (report_once).
    if "reported" in config:
        os.environ[report_once.REPORTED_DIR] = os.path.join(tempfile.gettempdir(), config["reported"])
    code = run_program(list(config["program"]))
    if 0 < code < 128:
        report_permanent_exit(code)
    if code != 0:
        raise ProgramExit(code)


def _causes(err: BaseException) -> Iterator[BaseException]:
    """`err` and everything it wraps: Python's chaining, Ray's and Ray Train's wrappers, and
    WorkerGroupError.worker_failures (rank -> error)."""
    seen: set[int] = set()
    stack: list[Any] = [err]
    while stack:
        found = stack.pop()
        if not isinstance(found, BaseException) or id(found) in seen:
            continue
        seen.add(id(found))
        yield found
        failures = getattr(found, "worker_failures", None)
        if isinstance(failures, dict):
            stack += [failures[rank] for rank in sorted(failures, reverse=True)]
        # Ray's wrappers: RayTaskError.cause, Ray Train's UserExceptionWithTraceback._base_exc (a worker's
        # own exception) and ControllerError.controller_failure.
        wrapped = ("cause", "_base_exc", "controller_failure")
        stack += [found.__context__, found.__cause__, *(getattr(found, name, None) for name in wrapped)]


def _named(err: BaseException, names: frozenset[str]) -> bool:
    return any(cls.__name__ in names for cls in type(err).__mro__)


def exit_code_of(err: BaseException) -> int:
    """The exit code a failed fit() stands for. A permanent code on any worker wins (a bad config fails
    rank 0, and its peers then lose it: 2, not 202); otherwise the first retryable one; 1 if none is
    known (a bug, permanent)."""
    codes: list[int] = []
    for cause in _causes(err):
        code = getattr(cause, "exit_code", None)
        if isinstance(code, int) and _named(cause, _PROGRAM_EXIT):  # also Ray's RayTaskError(ProgramExit)
            codes.append(code)
        elif _named(cause, _PREEMPTED):
            codes.append(faults.STOPPED)
        elif _named(cause, _LOST_WORKER):
            codes.append(faults.PEER_LOST)
    permanent = [c for c in codes if 0 < c < 128]
    if permanent:
        return permanent[0]
    return codes[0] if codes else 1


def supervise(fit: Callable[[], object], permanent_exit: Callable[[], int | None]) -> int:
    """fit() in a thread: 0 when it returns; the exit code its error stands for when it raises (Ray Train
    has spent its retries); at once, a permanent exit a worker reported (which Ray Train would retry)."""
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            fit()
            outcome["code"] = 0
        except Exception as err:  # TrainingFailedError, or whatever Ray raised
            outcome["code"], outcome["error"] = exit_code_of(err), err

    thread = threading.Thread(target=run, name="ray-train-fit", daemon=True)
    thread.start()
    reported = None
    while thread.is_alive() and reported is None:
        thread.join(POLL_SECONDS)
        # Also once the run has ended: Ray Train may have given up, or raced on to another attempt.
        reported = permanent_exit()
    if reported is not None:
        print(f"ray_train: a worker exited {reported} ({faults.describe(reported)}): run ends, no restart",
              file=sys.stderr, flush=True)  # fmt: skip
        return reported
    code = int(outcome["code"])
    if code:
        print(f"ray_train: training failed, exit {code} ({faults.describe(code)}): {outcome['error']}",
              file=sys.stderr, flush=True)  # fmt: skip
    return code


def _permanent_exit_actor(ray: Any) -> Callable[[], int | None]:
    """The named actor workers report a permanent exit to; returns how the driver reads it."""

    @ray.remote(num_cpus=0)
    class PermanentExit:  # ray.remote makes it an actor class (with .options)
        def __init__(self) -> None:
            self.code: int | None = None

        def record(self, code: int) -> None:
            self.code = self.code or code

        def get(self) -> int | None:
            return self.code

    actor = PermanentExit.options(name=PERMANENT_EXIT_ACTOR).remote()  # type: ignore[attr-defined]
    return lambda: ray.get(actor.get.remote())


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m trainer.ray_train",
        description="Run PROGRAM (after --) in every worker of Ray Train's TorchTrainer.",
        epilog="Exit codes: trainer/faults.py. Needs ray[train]: " + INSTALL_HINT,
    )
    parser.add_argument("--workers", type=int, default=1, help="Ray Train workers (processes); default 1")
    parser.add_argument(
        "--gpus-per-worker", type=float, default=0.0, help="GPUs each worker reserves; 0 (default): CPU, gloo"
    )
    parser.add_argument(
        "--restart-budget",
        type=int,
        default=0,
        help="restarts after retryable failures (exit >= 128, lost workers); default 0",
    )
    parser.add_argument(
        "--storage-path",
        default=None,
        help="Ray Train's run directory (s3://... on a cluster); default: Ray's",
    )
    parser.add_argument("--name", default=None, help="the run's name under --storage-path")
    parser.add_argument(
        "program", nargs=argparse.REMAINDER, help="-- -m trainer --config FILE ... | SCRIPT ..."
    )
    args = parser.parse_args(argv)
    args.program = args.program[1:] if args.program[:1] == ["--"] else args.program
    problems = [
        f"--{key.replace('_', '-')} {value}: allowed {allowed}"
        for key, value, ok, allowed in (
            ("workers", args.workers, args.workers >= 1, "1 or more"),
            ("gpus_per_worker", args.gpus_per_worker, args.gpus_per_worker >= 0, "0 or more"),
            ("restart_budget", args.restart_budget, args.restart_budget >= 0, "0 or more"),
        )
        if not ok
    ]
    if not args.program:
        problems.append(
            "PROGRAM: missing; allowed: -- -m trainer --config FILE ..., -- -m MODULE ..., -- SCRIPT ..."
        )
    if problems:
        parser.error("; ".join(problems))
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s ray_train %(levelname)s %(message)s")
    try:
        import ray
        from ray.train import FailureConfig, RunConfig, ScalingConfig
        from ray.train.torch import TorchTrainer
    except ImportError as err:
        print(
            f"ray_train: Ray Train is not installed ({err}); install it: {INSTALL_HINT}",
            file=sys.stderr,
            flush=True,
        )
        return faults.INVALID
    # In a Ray job (a RayJob's entry point) this joins the job's cluster; elsewhere it starts a local Ray.
    ray.init()
    gpus = args.gpus_per_worker
    trainer = TorchTrainer(
        train_worker,
        train_loop_config={
            "program": args.program,
            "reported": report_once.shared_dir_name(uuid.uuid4().hex),
        },
        scaling_config=ScalingConfig(
            num_workers=args.workers, use_gpu=gpus > 0, resources_per_worker={"GPU": gpus} if gpus else None
        ),
        run_config=RunConfig(
            name=args.name,
            storage_path=args.storage_path,
            # ray.train exports Ray Train V2's FailureConfig at run time (the default in 2.60); mypy reads
            # the V1 class that ray/train/__init__.py names statically, which has no controller limit.
            failure_config=FailureConfig(  # type: ignore[call-arg]
                max_failures=args.restart_budget, controller_failure_limit=args.restart_budget
            ),
        ),
    )
    code = supervise(trainer.fit, _permanent_exit_actor(ray))
    if code == 0:  # the run is over: a local Ray's processes stop now, a cluster's driver leaves it
        ray.shutdown()
    return code


def end_process(code: int) -> NoReturn:
    """Exit `code` now, without the interpreter's teardown: after a run that imported torch and Ray that is
    a second or more, and it would run Ray's atexit hook, which sleeps 0.5 s for the workers' last lines
    (Ray 2.60's ray/_private/worker.py shutdown), lines that are in by now: main() returns after Ray Train
    has stopped the workers and its controller, while Ray's log monitor forwards their output every 0.1 s
    (ray/_private/log_monitor.py). After a success main() has stopped Ray itself (ray.shutdown(): without it
    a local Ray's raylet would die with this process, PR_SET_PDEATHSIG, and leave its dashboard and runtime
    env agents waiting on a dead GCS for a minute or more); after a failure Ray Train's fit thread may still
    be in a call, and its actors end with this job."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    end_process(main())
