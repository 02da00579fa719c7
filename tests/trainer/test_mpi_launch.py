"""The MPIJob launcher (trainer.mpi_launch): the mpirun command it builds from the operator's hostfile, and
the exit codes it gives the pod for what mpirun reports."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from trainer_runs import REPO

from trainer import faults
from trainer.mpi_launch import Host, exit_code, mpirun_argv, parse_hostfile

# What Open MPI 5.0.11's mpirun printed, and exited 0 after, when one of its daemons was killed mid-run.
PRRTE_DAEMON_LOST = "A daemon failed to report back after being spawned. This could"
# Open MPI 4 (ORTE) reports a lost worker so (Open MPI 5 mid-run: "PRTE has lost communication ...").
ORTE_DAEMON_LOST = "ORTE has lost communication with a remote daemon."


def test_the_operators_hostfile_is_read_with_its_slots():
    text = "job-worker-0 slots=4\njob-worker-1 slots=4\n\n# comment\njob-worker-2\n"
    assert parse_hostfile(text) == [Host("job-worker-0", 4), Host("job-worker-1", 4), Host("job-worker-2", 1)]


def test_mpirun_gets_the_hostfile_agent_and_rank_0s_address_as_flags():
    argv = mpirun_argv("/etc/mpi/hostfile", "/etc/mpi/kubexec.sh", 8, "10.0.3.7", ["python", "-m", "trainer"])

    def flag(name: str, value: str) -> bool:
        return any(argv[i : i + 2] == [name, value] for i in range(len(argv) - 1))

    assert argv[0] == "mpirun" and argv[-3:] == ["python", "-m", "trainer"]
    assert flag("--hostfile", "/etc/mpi/hostfile") and flag("-np", "8")
    # Open MPI 5 ignores the operator's OMPI_MCA_plm_rsh_agent variable: the agent is a flag.
    assert "plm_rsh_agent /etc/mpi/kubexec.sh" in " ".join(argv)
    assert "plm_rsh_no_tree_spawn 1" in " ".join(argv)
    assert flag("--map-by", "slot") and flag("--bind-to", "none")
    assert flag("-x", "MASTER_ADDR=10.0.3.7") and flag("-x", "MASTER_PORT=29500")


@pytest.mark.parametrize(
    ("mpirun", "lost", "expected"),
    [
        (0, False, 0),
        (2, False, faults.INVALID),  # a rank's invalid config: permanent
        (1, False, 1),  # a rank's bug, or mpirun's own usage error: permanent
        (143, False, faults.STOPPED),  # a rank's SIGTERM checkpoint: retryable
        (137, False, 137),  # a rank OOM-killed
        (200, False, faults.STORAGE_UNAVAILABLE),
        (0, True, faults.PEER_LOST),  # Open MPI 5 exits 0 after losing a daemon
        (1, True, faults.PEER_LOST),
        (-9, False, 137),  # mpirun itself SIGKILLed
    ],
)
def test_mpiruns_outcome_becomes_the_trainers_exit_code(mpirun, lost, expected):
    assert exit_code(mpirun, lost) == expected


def _fake_tools(tmp_path: Path, mpirun_body: str, phase: str = "Running") -> dict[str, str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "mpirun").write_text(f'#!/bin/sh\necho "mpirun $*" >>{tmp_path}/calls\n{mpirun_body}\n')
    (tmp_path / "kubectl").write_text(
        f'#!/bin/sh\ncase "$*" in *phase*) echo {phase} ;; *podIP*) echo 10.0.3.7 ;; esac\n'
    )
    for tool in (bin_dir / "mpirun", tmp_path / "kubectl"):
        tool.chmod(0o755)
    (tmp_path / "hostfile").write_text("job-worker-0 slots=2\njob-worker-1 slots=2\n")
    return {"PATH": f"{bin_dir}:/usr/bin:/bin", "PYTHONPATH": str(REPO)}


def _launch(tmp_path: Path, env: dict[str, str], timeout_s: str = "600") -> subprocess.CompletedProcess:
    cmd = [
        sys.executable, "-m", "trainer.mpi_launch", "--hostfile", str(tmp_path / "hostfile"),
        "--kubectl", str(tmp_path / "kubectl"), "--state-dir", str(tmp_path / "state"),
        "--workers-timeout-s", timeout_s, "--", "python", "-m", "trainer",
    ]  # fmt: skip
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)


def test_a_rank_failing_permanently_fails_every_rerun_without_running_again(tmp_path):
    env = _fake_tools(tmp_path, "exit 2")
    first = _launch(tmp_path, env)
    assert first.returncode == 2 and "exit 2 (permanent)" in first.stderr
    assert "-np 4" in (tmp_path / "calls").read_text()
    again = _launch(tmp_path, env)  # the kubelet's in-place restart: same pod, same /tmp
    assert again.returncode == 2
    assert "failed permanently with exit 2; not running again" in again.stderr
    assert len((tmp_path / "calls").read_text().splitlines()) == 1


def test_a_retryable_failure_runs_mpirun_again_on_restart(tmp_path):
    env = _fake_tools(tmp_path, "exit 143")
    assert _launch(tmp_path, env).returncode == faults.STOPPED
    assert _launch(tmp_path, env).returncode == faults.STOPPED
    assert len((tmp_path / "calls").read_text().splitlines()) == 2


@pytest.mark.parametrize("message", [PRRTE_DAEMON_LOST, ORTE_DAEMON_LOST])
def test_a_lost_worker_is_retryable_even_when_mpirun_exits_0(tmp_path, message):
    env = _fake_tools(tmp_path, f"echo '{message}' >&2\nexit 0")
    proc = _launch(tmp_path, env)
    assert proc.returncode == faults.PEER_LOST, proc.stderr
    assert message in proc.stdout  # mpirun's output is passed through


def test_workers_that_never_run_give_a_retryable_rendezvous_timeout(tmp_path):
    env = _fake_tools(tmp_path, "exit 0", phase="Pending")
    proc = _launch(tmp_path, env, timeout_s="0")
    assert proc.returncode == faults.RENDEZVOUS_TIMEOUT
    assert "job-worker-0: Pending" in proc.stderr
    assert not (tmp_path / "calls").exists()


def test_success_exits_0(tmp_path):
    env = _fake_tools(tmp_path, "exit 0")
    proc = _launch(tmp_path, env)
    assert proc.returncode == 0 and "exit 0 (done)" in proc.stderr
    assert "MASTER_ADDR=10.0.3.7" in (tmp_path / "calls").read_text()


def test_sigterm_while_waiting_for_the_workers_exits_143_at_once(tmp_path):
    """As its pod's PID 1 the launcher would ignore a SIGTERM it has no handler for: its deletion would
    then last the whole grace period."""
    env = _fake_tools(tmp_path, "exit 0", phase="Pending")
    polled = tmp_path / "polled"
    (tmp_path / "kubectl").write_text(f"#!/bin/sh\necho >>{polled}\necho Pending\n")
    cmd = [
        sys.executable, "-m", "trainer.mpi_launch", "--hostfile", str(tmp_path / "hostfile"),
        "--kubectl", str(tmp_path / "kubectl"), "--state-dir", str(tmp_path / "state"),
        "--", "python", "-m", "trainer",
    ]  # fmt: skip
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not polled.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert polled.exists(), "the launcher never polled the workers"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == faults.STOPPED
    finally:
        proc.kill()
        proc.communicate()
    assert not (tmp_path / "calls").exists()  # mpirun never started
