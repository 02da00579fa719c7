"""run-local's view of its launcher's stderr: torchrun's ChildFailedError block, as Python prints the
uncaught exception torch 2.13 raises (a real one, formatted here), is left out and its root cause named in
the last line; everything else, a worker's own traceback included, passes as it came."""

from __future__ import annotations

import sys
import traceback

from torch.distributed.elastic.multiprocessing.errors import ChildFailedError, ProcessFailure

from workloads import local
from workloads.launcher_output import ChildFailedFilter, RootCause
from workloads.stacks import load_stack

WORKER_CRASH = """Traceback (most recent call last):
  File "/app/check.py", line 3, in <module>
    main()
ValueError: a worker's own bug
"""


def torchrun_exits_with_child_failed() -> str:
    """What torchrun's stderr ends with when rank 1 exited 2 first, then rank 0 was killed by SIGTERM."""
    failures = {
        0: ProcessFailure(local_rank=0, pid=11, exitcode=-15, error_file="/nonexistent"),
        1: ProcessFailure(local_rank=1, pid=12, exitcode=2, error_file="/nonexistent"),
    }
    failures[1].timestamp = failures[0].timestamp - 1  # rank 1 first: the root cause
    try:
        raise ChildFailedError(name="check.py", failures=failures)
    except ChildFailedError as err:
        return "".join(traceback.format_exception(err))


def test_the_child_failed_block_is_left_out_and_its_root_cause_kept():
    block = torchrun_exits_with_child_failed()
    assert "Root Cause (first observed failure):" in block  # the block torch formats, not a copy
    before = "check.py: error: --sizes: bad\nE1128 failed (exitcode: 2) local_rank: 1 (pid: 12)\n"
    shown = ChildFailedFilter()
    out = "".join(shown.lines((before + WORKER_CRASH + block + "after\n").splitlines(keepends=True)))
    assert out == before + WORKER_CRASH + "after\n"
    assert shown.root_cause == RootCause(rank=1, exit_code=2)


def test_a_block_cut_short_is_shown_as_it_came():
    block = torchrun_exits_with_child_failed()
    cut = block[: block.index("Root Cause")]
    shown = ChildFailedFilter()
    assert "".join(shown.lines(cut.splitlines(keepends=True))) == cut and shown.root_cause is None


def test_run_local_ends_with_the_exit_code_of_the_first_failed_worker(tmp_path, monkeypatch, capfd):
    """The launcher replaced by a process that prints what torchrun prints and exits 1, as torchrun does."""
    script = f"import sys; sys.stderr.write({torchrun_exits_with_child_failed()!r}); sys.exit(1)"
    monkeypatch.setattr(local, "command", lambda *args: [sys.executable, "-c", script])
    stack = load_stack("dev-gpu-check")
    assert local.run_local(stack, nproc=2, out=tmp_path, overrides=[]) == 1
    err = capfd.readouterr().err
    assert "ChildFailedError" not in err and "Traceback" not in err, err
    assert err.splitlines()[-1] == (
        "run-local dev-gpu-check: exit 1, torchrun's code for any failed worker; rank 1 failed first with "
        "exit 2 (permanent): invalid configuration or data: permanent, the same pod would fail the same way"
    )
