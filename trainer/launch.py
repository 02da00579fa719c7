"""`python -m trainer.launch [torchrun options] -m trainer [...]`: torchrun, with exit codes a pod can use.

torchrun (torch 2.13) exits 1 whatever happened to its workers: when they exit 143 after a Spot
checkpoint, when they exit 2 for a bad config, and when torchrun itself gets SIGTERM (it forwards the
signal, waits --shutdown-timeout seconds, then raises). In a pod the container's exit code is torchrun's,
so PyTorchJob's `restartPolicy: ExitCode` would treat a reclaim as a permanent failure. This wrapper runs
the same launcher (same flags, same PET_* environment defaults) and maps the outcome:

  torchrun received signal N            -> 128 + N   (SIGTERM: 143, retryable)
  first failing worker exited with code -> that code (2 stays permanent, 143 stays retryable)
  first failing worker killed by signal -> 128 + N   (e.g. OOM kill: 137)
  rendezvous not complete in time       -> 203       (retryable: the replacement pod may come later)

A rendezvous that times out (static: "Timed out after N seconds waiting for clients", c10d:
RendezvousTimeoutError) is the launcher's own failure, before any worker starts; torchrun lets it
escape as a traceback and exit 1, which would fail a 4-pod job for good when one Spot replacement is
slower than the rendezvous timeout. The codes are listed in trainer/faults.py.

In a PyTorchJob pod it also keeps the job's restart budget (trainer/attempts.py) beside the checkpoints;
past the budget it exits 4 before torchrun starts. A failure of that bookkeeping never changes the code.
As PID 1 in a pod, whose unhandled signals the kernel drops, it ends at once with 143 on a SIGTERM that
comes before torchrun's workers (and torchrun's own handler, which forwards it to them) exist: from its
first line, and while the rendezvous waits in C code, where a thread reads the signal from CPython's
wakeup fd. Otherwise a reclaim in the rendezvous would wait out the grace period and end killed (137).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import os
import shutil
import signal
import socket
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

# torchrun's --help as its parser prints it (torch.distributed.run.get_args_parser), kept beside this file so
# that --help answers without importing torch (seconds); tests/test_cli_help.py keeps it current.
TORCHRUN_HELP = Path(__file__).with_name("torchrun_help.txt")
IMPORTING = (
    "trainer.launch: importing torch, then starting torchrun (the first run after an install also compiles "
    "torch's bytecode: up to a minute)"
)


def asks_for_help(argv: list[str]) -> bool:
    """-h/--help among the launcher's own options (before the program and its arguments)."""
    for arg in argv:
        if arg in ("-h", "--help"):
            return True
        if not arg.startswith("-") or arg in ("-m", "--module", "--no-python", "--no_python"):
            return False  # a value or the program: what follows may be the program's own --help
    return False


# What a SIGTERM before the workers exist must close: the attempt begun in the restart ledger.
_BEFORE_WORKERS: dict[str, Any] = {}


def _no_op(signum: int, frame: Any) -> None:
    """The launcher's own SIGTERM handler until torchrun replaces it: its presence makes CPython's C-level
    handler write the signal to the wakeup fd, which `_watch` reads; the watcher acts."""


def stop_on_sigterm_until_workers_start() -> None:
    """Exit 143 on SIGTERM until torchrun installs its handler (module docstring)."""
    reader, writer = socket.socketpair()
    writer.setblocking(False)
    signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)
    signal.signal(signal.SIGTERM, _no_op)
    threading.Thread(target=_watch, args=(reader, writer), name="launch-sigterm", daemon=True).start()


def _watch(reader: socket.socket, writer: socket.socket) -> None:
    while signal.SIGTERM not in reader.recv(64) or signal.getsignal(signal.SIGTERM) is not _no_op:
        pass
    print("trainer.launch: SIGTERM before the workers started; exit 143", file=sys.stderr, flush=True)
    ledger = _BEFORE_WORKERS.get("ledger")
    if ledger is not None:
        end_attempt(ledger, 143)
    os._exit(143)


def end_attempt(ledger: Any, code: int) -> None:
    """Record how the attempt ended; a failure to record never changes `code`."""
    try:
        ledger.end(code)
    except Exception as err:
        print(
            f"trainer.launch: restart ledger: could not record the end of this attempt "
            f"({type(err).__name__}: {str(err)[:200]}); exit {code} stands",
            file=sys.stderr,
            flush=True,
        )


if __name__ == "__main__" and asks_for_help(sys.argv[1:]):
    print(TORCHRUN_HELP.read_text() + "\n" + __doc__, end="")
    sys.exit(0)
if __name__ == "__main__":  # importing torch takes seconds, the first time after an install much longer
    stop_on_sigterm_until_workers_start()
    print(IMPORTING, file=sys.stderr, flush=True)

from trainer.startup import imports_without_gc  # noqa: E402

with imports_without_gc():
    from torch.distributed import DistError
    from torch.distributed import run as torchrun
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.elastic.rendezvous import dynamic_rendezvous
    from torch.distributed.elastic.rendezvous.api import RendezvousError, RendezvousGracefulExitError

from trainer import attempts, faults  # noqa: E402
from trainer.report_once import once_per_node  # noqa: E402


def torchrun_help() -> str:
    """What TORCHRUN_HELP holds: torchrun's parser's help, as this module's (100 columns)."""
    parser = torchrun.get_args_parser()
    parser.prog = "python -m trainer.launch"
    parser.formatter_class = functools.partial(argparse.HelpFormatter, width=100)
    return parser.format_help()


def exit_code(failure_code: int) -> int:
    """A worker's exit code as a shell would report it (a process killed by signal N reports -N)."""
    return 128 - failure_code if failure_code < 0 else failure_code


@contextlib.contextmanager
def _default_log_dir(args: argparse.Namespace) -> Iterator[None]:
    """torchrun without --log-dir makes a torchelastic_* directory in $TMPDIR and leaves it there, empty
    unless --redirects or --tee wrote logs into it. The launcher makes it instead and removes it at the end
    when it holds no file."""
    if args.log_dir is not None:
        yield
        return
    args.log_dir = tempfile.mkdtemp(prefix="torchelastic_")
    try:
        yield
    finally:
        root = Path(args.log_dir)
        if not any(p.is_file() for p in root.rglob("*")):
            shutil.rmtree(root, ignore_errors=True)


# torch's own, kept for the test that compares the two; None if a torch release drops it (nothing to replace)
TORCH_GET_METHOD_NAME = getattr(dynamic_rendezvous, "get_method_name", None)


def frame_function(depth: int = 2) -> str:
    """What torch's dynamic_rendezvous.get_method_name returns (the function `depth` calls above it, which
    names each rendezvous event), without inspect.stack(): that builds a source context for every frame of
    the stack, twice per event, and finds each frame's module by walking all loaded modules, 20 ms per
    event with torch alone loaded (torch 2.13, torch/distributed/elastic/rendezvous/dynamic_rendezvous.py).
    stack()[depth] is the frame `depth` calls above get_method_name's own, as sys._getframe(depth) is
    above this one's."""
    try:
        return sys._getframe(depth).f_code.co_name
    except ValueError:  # a stack not that deep
        return "no_method_name"


def main(argv: list[str] | None = None) -> int:
    if TORCH_GET_METHOD_NAME is not None:  # read at each event: the same names, cheaply
        dynamic_rendezvous.get_method_name = frame_function
    args = torchrun.parse_args(argv if argv is not None else sys.argv[1:])
    try:
        ledger = attempts.Ledger.from_env()
        spent = ledger.begin() if ledger else None
    except Exception as err:
        found = faults.verdict(err)
        if found is None:
            raise
        code, reason = found
        print(f"trainer.launch: restart ledger: {reason}; exit {code}", file=sys.stderr, flush=True)
        return code
    if spent is not None:
        return spent
    _BEFORE_WORKERS["ledger"] = ledger
    with _default_log_dir(args), once_per_node():  # an error every rank finds: said once (report_once)
        code = _launch(args)
    if ledger:
        end_attempt(ledger, code)
    return code


def _launch(args: argparse.Namespace) -> int:
    try:
        torchrun.run(args)
    except SignalException as err:
        print(
            f"trainer.launch: torchrun stopped by signal {int(err.sigval)}; exit {128 + int(err.sigval)}",
            file=sys.stderr,
            flush=True,
        )
        return 128 + int(err.sigval)
    except ChildFailedError as err:
        rank, failure = err.get_first_failure()  # the root cause; later failures are the teardown
        code = exit_code(failure.exitcode)
        print(
            f"trainer.launch: rank {rank} failed first with exit code {code}; exit {code}",
            file=sys.stderr,
            flush=True,
        )
        return code
    except RendezvousGracefulExitError:
        return 0
    except (RendezvousError, DistError) as err:
        # DistError: the static rendezvous's TCPStore (DistStoreError: clients did not join in time;
        # DistNetworkError: the master's address does not answer yet).
        reason = str(err).splitlines()[0][:200] if str(err) else "not every node joined in time"
        code = faults.RENDEZVOUS_TIMEOUT
        print(
            f"trainer.launch: rendezvous failed ({type(err).__name__}: {reason}); exit {code} "
            f"({faults.describe(code)})",
            file=sys.stderr,
            flush=True,
        )
        return code
    return 0


if __name__ == "__main__":
    sys.exit(main())
