"""A bound on a PyTorchJob's restarts, kept beside its checkpoints.

Training Operator v1 recreates a pod that exits with a retryable code (restartPolicy ExitCode) and never
stops doing so: its backoffLimit sums the restart counts of running pods (pkg/core/job.go PastBackoffLimit),
which a recreated pod starts at 0, so a job that keeps failing with 137 or 202 restarts until its
activeDeadlineSeconds. So `python -m trainer.launch` counts each pod's failed attempts itself, under the job's
checkpoint location (`<checkpoint dir>/attempts/<pod>.json`, one writer per file), and once a pod has failed
more than the job's restart budget it exits 4 before training: a permanent code, so the operator fails the
job. What counts is what TrainJob's runtime counts: an attempt that ended with a retryable code other than
143 (a SIGTERM checkpoint: a Spot reclaim, a drain, the job's replacement) and 202 (its peer went away: the
peer's own attempt says why, and a node disruption must cost the gang nothing), or that never recorded
its end (its pod killed). An attempt that ends for good (0, or 1-127) marks the job ended (`_ended.json`):
a later start counts from 0. So does the first start of a new creation of the job (MLOPS_EKS_CREATION, the
pods' `mlops-eks.io/creation` annotation: a random id `pulumi up` gives each creation, kept while the job
object lives), whatever ended the one before it (a deadline, `pulumi destroy`, a replacement).

The workload renderer sets the environment for PyTorchJob pods only (workloads/jobs.py); without it the
launcher keeps no count (a local run, a TrainJob, whose JobSet counts its own restarts).
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from dataclasses import dataclass
from typing import Any

from trainer import faults
from trainer.storage import Storage, open_storage

DIR_ENV, BUDGET_ENV, CREATION_ENV = "MLOPS_EKS_ATTEMPTS", "MLOPS_EKS_RESTART_BUDGET", "MLOPS_EKS_CREATION"
ENDED = "_ended.json"


def counts(code: int) -> bool:
    """Whether an attempt that ended with `code` spends the budget."""
    return code >= 128 and code not in (faults.STOPPED, faults.PEER_LOST)


@dataclass
class Ledger:
    store: Storage
    pod: str
    budget: int
    creation: str

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> Ledger | None:
        env = dict(os.environ if env is None else env)
        if DIR_ENV not in env:
            return None
        pod = env.get("HOSTNAME") or socket.gethostname()
        return cls(open_storage(env[DIR_ENV]), pod, int(env[BUDGET_ENV]), env.get(CREATION_ENV, ""))

    def _read(self, key: str) -> dict[str, Any] | None:
        data = self.store.get_bytes(key)
        return json.loads(data) if data else None

    def _write(self, key: str, value: dict[str, Any]) -> None:
        self.store.put_bytes(key, json.dumps(value, sort_keys=True).encode())

    def begin(self, now: float | None = None) -> int | None:
        """Record a new attempt; returns faults.BUDGET_SPENT when the pod may not start another."""
        now = time.time() if now is None else now
        record = self._read(f"{self.pod}.json")
        ended = self._read(ENDED)
        fresh = (
            record is None
            or record.get("creation") != self.creation
            or (ended is not None and ended["time"] >= record["last"]["started"])
        )
        failures = 0 if fresh or record is None else int(record["failures"])
        if not fresh and record is not None and record["last"].get("ended") is None:
            failures += 1  # the last attempt never got to record its end: its pod was killed
        if failures > self.budget:
            self._record(failures, {"started": now, "ended": now, "code": faults.BUDGET_SPENT})
            self._write(ENDED, {"time": now, "pod": self.pod, "code": faults.BUDGET_SPENT})
            print(
                f"trainer.launch: {self.pod} failed {failures} times, more than the restart budget "
                f"({self.budget}); exit {faults.BUDGET_SPENT} ({faults.describe(faults.BUDGET_SPENT)}). "
                f"Failed attempts are counted in {self.store.uri}",
                file=sys.stderr,
                flush=True,
            )
            return faults.BUDGET_SPENT
        self._record(failures, {"started": now, "ended": None, "code": None})
        return None

    def _record(self, failures: int, last: dict[str, Any]) -> None:
        self._write(f"{self.pod}.json", {"creation": self.creation, "failures": failures, "last": last})

    def end(self, code: int, now: float | None = None) -> None:
        now = time.time() if now is None else now
        record = self._read(f"{self.pod}.json") or {"creation": self.creation, "failures": 0, "last": {}}
        record["failures"] = int(record["failures"]) + (1 if counts(code) else 0)
        record["last"] = {**record["last"], "ended": now, "code": code}
        self._write(f"{self.pod}.json", record)
        if code < 128:
            self._write(ENDED, {"time": now, "pod": self.pod, "code": code})
