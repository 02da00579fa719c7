"""Session fixtures computed once per test run, not once per pytest-xdist worker."""

from __future__ import annotations

import fcntl
import pickle
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def once_per_run(tmp_path_factory, worker_id: str, name: str, compute: Callable[[], T]) -> T:
    """`compute()`, once per test run: under pytest-xdist each worker would compute a session fixture again;
    the first worker that asks computes it and leaves it pickled where every worker's temporary directory
    lives (new for each run), and the others load their own copy. Without xdist: `compute()`."""
    if worker_id == "master":
        return compute()
    path = tmp_path_factory.getbasetemp().parent / f"once-per-run-{name}.pickle"
    with open(f"{path}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # a worker asking meanwhile waits for the pickle, not computes it
        if path.is_file():
            return pickle.loads(path.read_bytes())
        value = compute()
        path.write_bytes(pickle.dumps(value))
        return value
