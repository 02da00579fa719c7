"""Program runs forked from an interpreter that has already imported the Pulumi SDKs, for rehearsals that run
the program dozens of times (tests/infra/test_rehearsal.py runs it 30 times a session).

A cold start of the program spends about 2.5 s of CPU importing pulumi_aws, pulumi_kubernetes and pulumi_eks
(their thousands of generated classes) before the program's first line. `WarmInterpreter` imports, once, every
module outside this repository that importing the platform and workload programs imports, then forks one
child per run: the child starts where a fresh `python language_python_exec.py ...` would be after importing
those libraries, and runs the same exec shim with the same argv, environment and working directory. Nothing
of this repository is imported before the fork (the child imports the program itself, reading its config as
a fresh process does), and the SDKs hold no gRPC channel or event loop yet, so the child meets the engine as
a cold process would. The SDKs load most of their modules lazily, while the program runs (pulumi_aws.ec2 on
the first `aws.ec2` attribute: 2 s of a run's 2.4): each child says which library modules it ended with, and
the server imports them between runs (modules only: no program code runs in the server), so later runs start
with them. The tests hand `WarmInterpreter.run` to sim/pulumi/engine.py (`run_program(start=...)`);
`python -m infra rehearse` starts a fresh interpreter per run, as the language host does.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]  # tests/infra/ -> the repository
OURS = ("infra", "workloads", "policy", "trainer", "sim", "tests")

# The server: imports both programs (so every library is imported as they import it, lazy attributes
# included), forgets this repository's modules, then serves one fork per request line ({"argv", "env", "cwd",
# "stdout", "stderr", "modules"}) with a line {"pid"} then {"returncode"}, then imports the libraries the run
# listed in "modules".
_SERVER = r"""
import atexit, importlib, json, os, runpy, sys, threading, traceback
ours = set(sys.argv[1].split(","))
import infra.program, workloads.program  # every library in the order the programs import them
for name in [m for m in sys.modules if m.split(".")[0] in ours]:
    del sys.modules[name]  # imported again, fresh, by each run
names = list(sys.modules)
sys.path[:] = [p for p in sys.path if p not in ("", ".")]
print(json.dumps({"ready": len(names)}), flush=True)
for line in sys.stdin:
    request = json.loads(line)
    pid = os.fork()
    if pid == 0:
        try:
            os.chdir(request["cwd"])
            os.environ.clear()
            os.environ.update(request["env"])
            for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
                target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
                os.dup2(target, fd)
                os.close(target)
            sys.stdin.close()
            sys.argv = request["argv"][1:]
            sys.path.insert(0, os.path.dirname(os.path.abspath(sys.argv[0])))
            runpy.run_path(sys.argv[0], run_name="__main__")
            code = 0
        except SystemExit as done:
            code = done.code if isinstance(done.code, int) else (0 if done.code is None else 1)
        except BaseException:
            traceback.print_exc()
            code = 1
        threading._shutdown()  # as the interpreter's own exit: non-daemon threads, then atexit
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
        with open(request["modules"], "w") as listed:  # the libraries this run imported, for the next ones
            json.dump([m for m in sys.modules if m.split(".")[0] not in ours and m != "__main__"], listed)
        os._exit(code)
    print(json.dumps({"pid": pid}), flush=True)
    _, status = os.waitpid(pid, 0)
    print(json.dumps({"returncode": os.waitstatus_to_exitcode(status)}), flush=True)
    try:
        with open(request["modules"]) as listed:
            learned = [m for m in json.load(listed) if m not in sys.modules]
    except (OSError, ValueError):
        learned = []
    for name in learned:
        try:
            importlib.import_module(name)
        except Exception:
            pass  # a module only its importer's context can import (the child imported it its own way)
    assert threading.active_count() == 1, "an imported module started a thread: forking would lose it"
"""


class WarmInterpreter:
    """One server process for a session; `run` is subprocess.run's answer for one program run."""

    def __init__(self) -> None:
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        self._server = subprocess.Popen(
            [sys.executable, "-c", _SERVER, ",".join(OURS)],
            cwd=REPO,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self._lock = threading.Lock()
        ready = self._answer()
        if "ready" not in ready:
            raise RuntimeError(f"the warm interpreter did not start: {ready}")

    def _answer(self) -> dict[str, Any]:
        assert self._server.stdout is not None
        line = self._server.stdout.readline()
        if not line:
            raise RuntimeError(f"the warm interpreter exited ({self._server.poll()})")
        return json.loads(line)

    def run(
        self, argv: list[str], *, cwd: Path, env: dict[str, str], timeout: float
    ) -> subprocess.CompletedProcess[str]:
        """Run `argv` (sys.executable, a script, its arguments) in a fork; its output captured as text.
        A run past `timeout` is killed (returncode -9)."""
        with tempfile.TemporaryDirectory(prefix="program-") as scratch:
            return self._run(argv, cwd, env, Path(scratch), timeout)

    def _run(
        self, argv: list[str], cwd: Path, env: dict[str, str], scratch: Path, timeout: float
    ) -> subprocess.CompletedProcess[str]:
        stdout, stderr = scratch / "stdout", scratch / "stderr"
        request = {
            "argv": argv,
            "cwd": str(cwd),
            "env": env,
            "stdout": str(stdout),
            "stderr": str(stderr),
            "modules": str(scratch / "modules.json"),
        }
        with self._lock:
            assert self._server.stdin is not None
            self._server.stdin.write(json.dumps(request) + "\n")
            self._server.stdin.flush()
            pid = self._answer()["pid"]
            timer = threading.Timer(timeout, os.kill, (pid, 9))
            timer.start()
            try:
                code = self._answer()["returncode"]
            finally:
                timer.cancel()
        return subprocess.CompletedProcess(argv, code, stdout.read_text(), stderr.read_text())

    def close(self) -> None:
        if self._server.poll() is None:
            assert self._server.stdin is not None
            self._server.stdin.close()
            self._server.wait(timeout=30)
