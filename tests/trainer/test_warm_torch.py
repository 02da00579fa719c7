"""The warm torch server's stand-in ends as the rank it stands in for (warm_torch.py): torchrun reads the
rank's exit code or signal from it, signals it to stop the rank, and kills it when the rank will not stop."""

import json
import os
import select
import signal
import socket
import subprocess
import time

import pytest
from trainer_runs import run_env

from tests.trainer.warm_torch import WARM_SUPPORTED, warm_torch

pytestmark = pytest.mark.skipif(not WARM_SUPPORTED, reason="runs start cold where there is no pidfd")


def _start(tmp_path, body: str, **env: str) -> subprocess.Popen:
    """`body` as a rank program, started as torchrun starts a rank: `$PYTHON_EXEC -u program`."""
    program = tmp_path / "rank.py"
    program.write_text(body)
    run = {**run_env(cold=False), **env}
    return subprocess.Popen(
        [run["PYTHON_EXEC"], "-u", str(program)],
        cwd=tmp_path,
        env=run,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


SLEEPER = "import os, time\nprint(os.getpid(), os.getcwd(), os.environ['MARK'], flush=True)\ntime.sleep(99)\n"


def _gone(pid: int) -> bool:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


def test_the_exit_code_and_an_uncaught_exception_come_back_as_a_cold_rank_gives_them(tmp_path):
    exits = _start(tmp_path, "import sys\nprint('out')\nsys.exit(7)\n")
    assert exits.communicate(timeout=60)[0] == "out\n" and exits.returncode == 7
    raises = _start(tmp_path, "raise RuntimeError('boom')\n")
    err = raises.communicate(timeout=60)[1]
    assert raises.returncode == 1 and "RuntimeError: boom" in err


def test_a_forwarded_sigterm_ends_the_rank_and_the_stand_in_dies_of_it(tmp_path):
    proc = _start(tmp_path, SLEEPER, MARK="given")
    assert proc.stdout is not None
    pid, cwd, mark = proc.stdout.readline().split()
    assert int(pid) != proc.pid and cwd == str(tmp_path) and mark == "given"  # its own env and directory
    os.killpg(proc.pid, signal.SIGTERM)  # as torchrun stops a rank: its process group
    proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGTERM and _gone(int(pid))


def test_a_killed_stand_in_takes_the_rank_with_it(tmp_path):
    proc = _start(tmp_path, SLEEPER, MARK="x")
    assert proc.stdout is not None
    pid = int(proc.stdout.readline().split()[0])
    os.killpg(proc.pid, signal.SIGKILL)  # torchrun's last resort, which no handler sees
    proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGKILL and _gone(pid)


def test_a_stand_in_killed_before_it_read_the_ranks_pid_takes_the_rank_with_it(tmp_path):
    """The stand-in's side of the protocol, stopped where a loaded machine can stop it: the keeper has sent
    the rank's pid, the stand-in dies before reading it, and the keeper sees a reset, not an end of file."""
    (tmp_path / "rank.py").write_text(SLEEPER)
    run = {**run_env(cold=False), "MARK": "x"}
    read, write = os.pipe()
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.connect(run["WARM_FORK_SOCKET"])
        socket.send_fds(conn, [b"."], [0, write, write])
        request = {"argv": ["-u", str(tmp_path / "rank.py")], "env": run, "cwd": str(tmp_path)}
        conn.sendall(json.dumps(request).encode() + b"\n")
        os.close(write)
        with os.fdopen(read) as out:
            pid = int(out.readline().split()[0])
            assert select.select([conn], [], [], 60)[0]  # the pid line has come
            conn.close()  # unread: the keeper's pid line is still in this socket's queue
            assert _gone(pid) and out.read() == ""


def test_a_thread_count_other_than_the_servers_is_refused_not_approximated(tmp_path):
    proc = _start(tmp_path, "print('ran')\n", OMP_NUM_THREADS="3")
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 1 and out == "" and "OMP_NUM_THREADS" in err and "start cold" in err
    assert warm_torch(run_env()).env()["PYTHON_EXEC"]  # the server is still there for the next rank
