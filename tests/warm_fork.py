"""Processes forked from an interpreter that has already imported their libraries, for tests that start dozens
of the same heavy process (trainer ranks: tests/trainer/warm_torch.py; the policy pack's analyzer:
tests/infra/test_rehearsal.py).

`WarmServer(preload)` imports `preload`'s libraries, forgets this repository's modules, and listens. A process
started as `stub -u ...` (the server's interpreter path) hands its argv, environment, working directory and
standard streams to the server and stands in for the process it gets until that ends. Per process the server
forks a keeper, which forks the child, which:
- starts a session of its own, as torchrun's start_new_session does, so a signal reaches its whole process
  group (a rank's DataLoader workers included): the stub forwards every signal it gets (SIGTERM, SIGINT, ...)
  to that group, and when the stub is killed (SIGKILL, which no handler sees) the keeper kills the group;
- has the stub's stdin, stdout and stderr, environment and working directory, sys.path built from its own
  $PYTHONPATH, a fresh __main__ module, and tempfile's directory unset (the server's would survive the fork);
- ends as a cold process ends (SystemExit's code, 1 on an uncaught exception, non-daemon threads joined,
  atexit run); the stub then exits with the same code or dies of the same signal.
What a fork cannot give a process is refused rather than approximated: a thread-count variable (OpenMP reads
it when torch loads) that differs from the server's. Every child of one server shares its hash seed, where
cold processes each draw one: the users of this module keep cold runs and compare a warm run with a cold one.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
OURS = ("infra", "workloads", "policy", "trainer", "sim", "tests")
# The keeper watches its child through a pidfd (Linux 5.3+); elsewhere (macOS) every run starts cold.
WARM_SUPPORTED = hasattr(os, "pidfd_open")
# OpenMP (libgomp) reads these when torch loads: a process that asks for other values needs a cold start.
FIXED_AT_IMPORT = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "PYTHONHASHSEED")

_STUB = r"""import json, os, signal, socket, sys
pending, child = [], [0]
def forward(signum, frame):
    if child[0]:
        try:
            os.killpg(child[0], signum)
        except ProcessLookupError:
            pass
    else:
        pending.append(signum)
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)
for s in FORWARDED:
    signal.signal(s, forward)
conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
conn.connect(os.environ["WARM_FORK_SOCKET"])
socket.send_fds(conn, [b"."], [0, 1, 2])
conn.sendall(json.dumps({"argv": sys.argv[1:], "env": dict(os.environ), "cwd": os.getcwd()}).encode() + b"\n")
replies = conn.makefile("r")
first = json.loads(replies.readline())
if "error" in first:
    sys.stderr.write("warm fork server: " + first["error"] + "\n")
    os._exit(1)
child[0] = first["pid"]
for s in pending:
    forward(s, None)
line = replies.readline()
if not line:
    sys.stderr.write("warm fork server: the keeper ended without the process's status\n")
    os._exit(1)
status = json.loads(line)["status"]
if os.WIFSIGNALED(status):
    signal.signal(os.WTERMSIG(status), signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, [os.WTERMSIG(status)])
    os.kill(os.getpid(), os.WTERMSIG(status))
os._exit(os.waitstatus_to_exitcode(status))
"""


_SERVER = r"""
import atexit, json, os, runpy, select, signal, socket, sys, tempfile, threading, traceback, types
sock_path, ours, fixed = sys.argv[1], tuple(sys.argv[2].split(",")), sys.argv[3].split(",")
exec(sys.argv[4])  # the preload: what every process of this server would import before its own code
for name in [m for m in sys.modules if m.split(".")[0] in ours]:
    del sys.modules[name]
given = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
# The interpreter's own and site's: all but `-c`'s "" (a site .pth may name this directory: it stays).
base = [p for p in sys.path[1:] if p not in given]
pinned = {k: os.environ.get(k) for k in fixed}
listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
listener.bind(sock_path)
listener.listen(64)
print(json.dumps({"ready": len(sys.modules)}), flush=True)


def run_program(request):
    argv = request["argv"]
    if argv[:1] != ["-u"]:
        raise SystemExit(f"warm fork server: programs start as `python -u ...`, got {argv[:3]}")
    args = argv[1:]
    sys.modules["__main__"] = types.ModuleType("__main__")
    # sys.path as a fresh interpreter builds it: the program's place, $PYTHONPATH, then the interpreter's own
    first = os.getcwd() if args[:1] == ["-m"] else os.path.dirname(os.path.abspath(args[0]))
    given = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    sys.path[:] = [first, *given, *base]
    if args[:1] == ["-m"]:
        sys.argv = ["-m", *args[2:]]
        runpy._run_module_as_main(args[1], alter_argv=True)
    else:
        sys.argv = args
        runpy.run_path(args[0], run_name="__main__")


def child(conn, fds, request):
    os.setsid()
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    conn.close()
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    tempfile.tempdir = None
    code = 0
    try:
        run_program(request)
    except SystemExit as done:
        code = done.code if isinstance(done.code, int) else (0 if done.code is None else 1)
        if not isinstance(done.code, (int, type(None))):
            print(done.code, file=sys.stderr)
    except KeyboardInterrupt:
        traceback.print_exc()
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    except BaseException:
        traceback.print_exc()
        code = 1
    threading._shutdown()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    os._exit(code)


def keep(conn):
    _, fds, _, _ = socket.recv_fds(conn, 1, 3)
    request = json.loads(conn.makefile("r").readline())
    differs = [k for k in pinned if request["env"].get(k) != pinned[k]]
    if differs:
        error = f"{differs} differ from the server's {pinned}: start cold"
        conn.sendall(json.dumps({"error": error}).encode() + b"\n")
        os._exit(0)
    pid = os.fork()
    if pid == 0:
        child(conn, fds, request)
    for fd in fds:
        os.close(fd)
    conn.sendall(json.dumps({"pid": pid}).encode() + b"\n")
    watch = os.pidfd_open(pid)
    while True:
        ready, _, _ = select.select([conn, watch], [], [])
        if watch in ready:
            break
        try:
            gone = not conn.recv(1)  # the stub is gone (killed): its process goes with it, as its group would
        except ConnectionResetError:  # killed before it read the pid line: a reset, not an end of file
            gone = True
        if gone:
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:  # not yet a group of its own (before its setsid)
                os.kill(pid, signal.SIGKILL)
            break
    _, status = os.waitpid(pid, 0)
    try:
        conn.sendall(json.dumps({"status": status}).encode() + b"\n")
    except OSError:
        pass
    os._exit(0)


while True:
    ready, _, _ = select.select([listener, sys.stdin], [], [], 1.0)
    try:
        while os.waitpid(-1, os.WNOHANG)[0]:  # ended keepers: their children's CPU counts as the server's
            pass
    except ChildProcessError:
        pass
    if sys.stdin in ready and not sys.stdin.readline():
        break
    if listener in ready:
        conn, _ = listener.accept()
        if os.fork() == 0:
            listener.close()
            try:
                keep(conn)
            finally:
                os._exit(1)
        conn.close()
"""


class WarmServer:
    """One server (see the module docstring): `preload` is what it imports first; `stub` is the interpreter
    path that starts a process from it."""

    def __init__(self, preload: str, env: dict[str, str]) -> None:
        self._dir = tempfile.TemporaryDirectory(prefix="warm-fork-")
        self.socket = os.path.join(self._dir.name, "server")
        self.stub = os.path.join(self._dir.name, "python")
        Path(self.stub).write_text(f"#!{sys.executable} -IS\n{_STUB}")
        os.chmod(self.stub, 0o755)
        lists = [",".join(OURS), ",".join(FIXED_AT_IMPORT)]
        self._server = subprocess.Popen(
            [sys.executable, "-u", "-c", _SERVER, self.socket, *lists, preload],
            cwd=REPO,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self._server.stdout is not None
        ready = self._server.stdout.readline()
        if '"ready"' not in ready:
            raise RuntimeError(f"the warm fork server did not start ({self._server.poll()}): {ready}")

    def env(self) -> dict[str, str]:
        """What a process started as `stub ...` needs in its environment: where the server listens."""
        return {"WARM_FORK_SOCKET": self.socket}

    def close(self) -> None:
        if self._server.poll() is None:
            assert self._server.stdin is not None
            self._server.stdin.close()
            self._server.wait(timeout=30)
        self._dir.cleanup()
