"""`python -m trainer.mpi_worker`: the main process of an MPIJob worker pod, and `--stop`, its SIGTERM relay.

In an MPIJob the trainer does not run as the worker container's main process: the launcher's `mpirun`
starts Open MPI's daemon (prted, orted in 4.x) in the running container through `kubectl exec`, and the
daemon starts the ranks. The main process only keeps the container alive. A plain `sleep` would exit at
once on the kubelet's SIGTERM (Spot notice, drain), and with it the container and the ranks, before their
SIGTERM checkpoint. This process instead passes SIGTERM to the ranks (the daemon's children: not the daemon,
which would kill them), waits until they are gone, then exits 128 + SIGTERM.

`--stop` does the same from outside, once: the launcher runs it in each worker (`kubectl exec`) when its own
pod is stopped, so the ranks checkpoint before `mpirun` goes away.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import time
from pathlib import Path

DAEMONS = frozenset({"prted", "orted"})
STOPPED = 128 + signal.SIGTERM
# What the ranks may take for their checkpoint: below the pod's terminationGracePeriodSeconds (180 s in
# workloads/pod.py), so the kubelet's SIGKILL comes after them.
DEFAULT_WAIT_S = 160.0


def _parent_and_name(pid: int, proc: Path) -> tuple[int, str] | None:
    try:
        stat = (proc / str(pid) / "stat").read_text()
    except OSError:  # gone meanwhile, or not ours to read
        return None
    # "pid (comm) state ppid ...": comm may hold spaces and parentheses; it ends at the last ')'.
    name = stat[stat.index("(") + 1 : stat.rindex(")")]
    return int(stat[stat.rindex(")") + 2 :].split()[1]), name


def ranks(proc: Path = Path("/proc")) -> list[int]:
    """The pids of the MPI ranks in this container: the children of an Open MPI daemon."""
    table = {}
    for entry in proc.iterdir():
        if entry.name.isdigit() and (info := _parent_and_name(int(entry.name), proc)) is not None:
            table[int(entry.name)] = info
    daemons = {pid for pid, (_, name) in table.items() if name in DAEMONS}
    return sorted(pid for pid, (parent, _) in table.items() if parent in daemons)


def stop_ranks(wait_s: float, proc: Path = Path("/proc")) -> list[int]:
    """SIGTERM to every rank, then wait until they have exited or `wait_s` is over; the ranks still
    running then (empty: all exited)."""
    targets = ranks(proc)
    for pid in targets:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + wait_s
    alive = targets
    while alive and time.monotonic() < deadline:
        time.sleep(0.5)
        alive = [pid for pid in alive if (proc / str(pid)).exists()]
    return alive


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m trainer.mpi_worker", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--stop", action="store_true", help="SIGTERM this container's ranks, wait, exit")
    parser.add_argument("--wait-s", type=float, default=DEFAULT_WAIT_S, help="how long ranks may take")
    args = parser.parse_args(argv)
    if args.stop:
        left = stop_ranks(args.wait_s)
        if left:
            print(f"trainer.mpi_worker: ranks {left} still running after {args.wait_s:g} s", file=sys.stderr)
        return 0
    stopping: list[int] = []
    signal.signal(signal.SIGTERM, lambda signum, frame: stopping.append(signum))
    while not stopping:
        time.sleep(1)  # a signal ends the sleep early; its handler has run by then
    stop_ranks(args.wait_s)
    return STOPPED


if __name__ == "__main__":
    sys.exit(main())
