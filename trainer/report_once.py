"""The error that ends a rank, said once per node: every rank of a launch finds the same bad flag, data
file or divergence, and N identical lines (one per rank) bury it.

`python -m trainer.launch` (what pods and `run-local` start) makes a directory for its workers and names
it in TRAINER_REPORTED_DIR; the first rank to report a message creates a file named by the message's hash
(O_CREAT | O_EXCL: exactly one rank wins, whichever fails first, so a message is never lost to torchrun
stopping the ranks that have not printed yet) and prints it; a rank with the same message stays silent,
while a message only one rank has (its GPU, its peer) is printed by that rank. The launcher removes the
directory when torchrun returns. Ranks that no trainer.launch started share one the same way: under
`mpirun` (an MPIJob) the ranks on a node find it from Open MPI's job id, PMIX_NAMESPACE, the same for every
rank of a run; under Ray Train (a RayJob) trainer/ray_train.py names one per run for its workers. Those are
made only when a message is reported, so a run that ends well leaves nothing behind. Without any of them
(torchrun run directly, one process) every rank prints.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

REPORTED_DIR = "TRAINER_REPORTED_DIR"


@contextlib.contextmanager
def once_per_node() -> Iterator[None]:
    """The launcher, around its workers: they share a fresh directory, removed afterwards."""
    where = tempfile.mkdtemp(prefix="trainer-reported-")
    previous = os.environ.get(REPORTED_DIR)
    os.environ[REPORTED_DIR] = where  # the workers inherit the launcher's environment
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop(REPORTED_DIR, None)
        else:
            os.environ[REPORTED_DIR] = previous
        shutil.rmtree(where, ignore_errors=True)


MPI_JOB_ID = "PMIX_NAMESPACE"  # Open MPI 4 and 5 (PMIx) give every process of one mpirun the same value


def shared_dir_name(launch_id: str) -> str:
    """The directory, under the node's temporary directory, of the ranks of launch `launch_id`."""
    return "trainer-reported-" + hashlib.sha256(launch_id.encode()).hexdigest()[:24]


def _shared_dir() -> Path | None:
    where = os.environ.get(REPORTED_DIR)
    if where:
        return Path(where)
    if launch_id := os.environ.get(MPI_JOB_ID):
        return Path(tempfile.gettempdir()) / shared_dir_name(launch_id)
    return None


def report(message: str) -> None:
    """Print `message` to stderr unless another rank of this launch already printed the same one."""
    where = _shared_dir()
    if where is not None:
        marker = where / hashlib.sha256(message.encode()).hexdigest()[:32]
        try:
            where.mkdir(mode=0o700, exist_ok=True)
            os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            return
        except OSError:
            pass  # the directory is gone or not writable: said twice rather than not at all
    print(message, file=sys.stderr, flush=True)
