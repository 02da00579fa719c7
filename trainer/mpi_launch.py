"""`python -m trainer.mpi_launch -- PROGRAM...`: the MPIJob launcher: `mpirun` over the worker pods, with the
trainer's exit codes.

Training Operator v1 (mpijob_controller.go, v1.9.2) gives the launcher a hostfile, kubexec.sh (`kubectl
exec` as the remote shell) and kubectl; its OMPI_MCA_* variables are Open MPI 4 names that Open MPI 5
ignores, so both are passed as flags. This launcher waits for every worker pod and takes worker 0's pod IP
as MASTER_ADDR (no Service resolves the hostfile's names); runs `mpirun` without tree spawn (only this pod
has kubectl) and with `--bind-to none` (the pod's CPUs are a cgroup quota); maps the outcome to
trainer/faults.py's codes (mpirun exits 0 when it loses a daemon: that message becomes 202, peer lost);
on SIGTERM asks the ranks for their checkpoint through `trainer.mpi_worker --stop`, since mpirun SIGKILLs
them right after forwarding it. It runs with `restartPolicy: OnFailure` (the operator never recreates a
finished launcher); a permanent failure is remembered in /tmp and repeated at once after a restart.
"""

from __future__ import annotations

import argparse
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from trainer import faults

HOSTFILE = "/etc/mpi/hostfile"
RSH_AGENT = "/etc/mpi/kubexec.sh"
KUBECTL = "/opt/kube/kubectl"
STATE_DIR = "/tmp/mpi-launch"
MASTER_PORT = "29500"
# What mpirun prints when it loses (or never hears from) a daemon: PRRTE (Open MPI 5) and ORTE (Open MPI 4).
DAEMON_LOST = (
    "A daemon failed to report back",
    "has lost communication with a remote daemon",
    "was unable to reliably start one or more daemons",
    "daemon has unexpectedly failed",
)
# The worker container's Python (the same image as this launcher's) for the --stop relay.
WORKER_STOP = ["python", "-m", "trainer.mpi_worker", "--stop"]


@dataclass(frozen=True)
class Host:
    name: str
    slots: int


def parse_hostfile(text: str) -> list[Host]:
    """`<name> slots=<n>` lines (Open MPI's hostfile syntax, as the operator writes it)."""
    hosts = []
    for line in text.splitlines():
        fields = line.split("#", 1)[0].split()
        if not fields:
            continue
        slots = 1
        for field in fields[1:]:
            key, _, value = field.partition("=")
            if key == "slots" and value.isdigit():
                slots = int(value)
        hosts.append(Host(fields[0], slots))
    return hosts


def mpirun_argv(hostfile: str, agent: str, processes: int, master_addr: str, program: list[str]) -> list[str]:
    return [
        "mpirun",
        "--hostfile", hostfile,
        "--mca", "plm_rsh_agent", agent,
        # Only the launcher has kubectl and a token: it starts every daemon itself.
        "--mca", "plm_rsh_no_tree_spawn", "1",
        "-np", str(processes),
        "--map-by", "slot",
        "--bind-to", "none",
        "-x", f"MASTER_ADDR={master_addr}",
        "-x", f"MASTER_PORT={MASTER_PORT}",
        *program,
    ]  # fmt: skip


def exit_code(mpirun_code: int, daemon_lost: bool) -> int:
    """The launcher's exit code for mpirun's, in the trainer's terms (trainer/faults.py)."""
    if daemon_lost:
        return faults.PEER_LOST
    if mpirun_code < 0:  # mpirun itself killed by a signal
        return 128 - mpirun_code
    return mpirun_code


class Kubectl:
    def __init__(self, path: str):
        self.path = path

    def pod_field(self, pod: str, jsonpath: str) -> str:
        out = subprocess.run(
            [self.path, "get", "pod", pod, "-o", f"jsonpath={jsonpath}"], capture_output=True, text=True
        )
        return out.stdout.strip() if out.returncode == 0 else ""

    def exec(self, pod: str, container: str, command: list[str]) -> subprocess.Popen:
        return subprocess.Popen([self.path, "exec", pod, "-c", container, "--", *command])


def wait_for_workers(
    kubectl: Kubectl, hosts: list[Host], timeout_s: float, poll_s: float = 5.0
) -> str | None:
    """Worker 0's pod IP once every worker pod runs, or None after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while True:
        phases = [kubectl.pod_field(h.name, "{.status.phase}") for h in hosts]
        ip = kubectl.pod_field(hosts[0].name, "{.status.podIP}")
        if ip and all(p == "Running" for p in phases):
            return ip
        if time.monotonic() >= deadline:
            waiting = [
                f"{h.name}: {p or 'not found'}" for h, p in zip(hosts, phases, strict=True) if p != "Running"
            ]
            print(f"trainer.mpi_launch: workers not running after {timeout_s:g} s ({', '.join(waiting)})",
                  file=sys.stderr, flush=True)  # fmt: skip
            return None
        time.sleep(poll_s)


def run_mpirun(argv: list[str]) -> tuple[int, bool]:
    """mpirun's exit code and whether it lost a daemon; its output passes through."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
    lost = False
    assert proc.stdout is not None
    for line in proc.stdout:
        sys.stdout.write(line)
        lost = lost or any(marker in line for marker in DAEMON_LOST)
    return proc.wait(), lost


def _stop_before_mpirun(signum: int, frame: object) -> None:
    # As PID 1 the launcher would ignore a SIGTERM it has no handler for, and its pod's deletion would
    # last the whole grace period while it waits for the workers: no rank runs yet, so it just stops.
    raise SystemExit(faults.STOPPED)


def main(argv: list[str] | None = None) -> int:
    signal.signal(signal.SIGTERM, _stop_before_mpirun)
    parser = argparse.ArgumentParser(
        prog="python -m trainer.mpi_launch", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--hostfile", default=HOSTFILE)
    parser.add_argument("--rsh-agent", default=RSH_AGENT)
    parser.add_argument("--kubectl", default=KUBECTL)
    parser.add_argument("--container", default="mpi", help="the workers' container (for --stop)")
    parser.add_argument("--state-dir", default=STATE_DIR, help="kept across in-place restarts (emptyDir)")
    parser.add_argument("--workers-timeout-s", type=float, default=600.0)
    parser.add_argument("program", nargs=argparse.REMAINDER, help="-- PROGRAM [ARGS...]")
    args = parser.parse_args(argv)
    program = args.program[1:] if args.program[:1] == ["--"] else args.program
    if not program:
        parser.error("no program: pass `-- PROGRAM [ARGS...]`")
    verdict = Path(args.state_dir) / "permanent-exit"
    if verdict.exists():
        code = int(verdict.read_text())
        print(f"trainer.mpi_launch: an earlier run failed permanently with exit {code}; not running again",
              file=sys.stderr, flush=True)  # fmt: skip
        return code
    hosts = parse_hostfile(Path(args.hostfile).read_text())
    if not hosts:
        print(f"trainer.mpi_launch: {args.hostfile} lists no hosts", file=sys.stderr)
        return faults.INVALID
    kubectl = Kubectl(args.kubectl)
    master = wait_for_workers(kubectl, hosts, args.workers_timeout_s)
    if master is None:
        return faults.RENDEZVOUS_TIMEOUT

    def relay_sigterm(signum: int, frame: object) -> None:
        # The ranks checkpoint on SIGTERM; mpirun would SIGKILL them right after forwarding one.
        for host in hosts:
            kubectl.exec(host.name, args.container, WORKER_STOP)

    signal.signal(signal.SIGTERM, relay_sigterm)
    processes = sum(h.slots for h in hosts)
    command = mpirun_argv(args.hostfile, args.rsh_agent, processes, master, program)
    print(f"trainer.mpi_launch: {shlex.join(command)}", flush=True)
    code = exit_code(*run_mpirun(command))
    if 0 < code < 128:
        Path(args.state_dir).mkdir(parents=True, exist_ok=True)
        verdict.write_text(str(code))
    print(f"trainer.mpi_launch: exit {code} ({faults.describe(code) if code else 'done'})",
          file=sys.stderr, flush=True)  # fmt: skip
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
