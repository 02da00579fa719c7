"""The fabric check (trainer/fabric.py) on NCCL output recorded on real nodes (tests/trainer/nccl_logs,
README there for each file's source): an EFA run passes, a socket fallback exits 2 naming what is missing."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainer import fabric
from trainer.config import ConfigError

LOGS = Path(__file__).parent / "nccl_logs"


def _report(name: str) -> fabric.NcclReport:
    return fabric.read_report((LOGS / name).read_text())


def test_a_recorded_efa_run_reads_as_libfabric_over_efa_with_its_devices():
    report = _report("efa_p5en.log")
    assert (report.network, report.provider, report.devices) == ("Libfabric", "efa", 16)
    assert fabric.problem(report, expected_devices=16) is None  # p5en.48xlarge: 16 EFA devices


def test_fewer_devices_than_the_instance_has_is_refused_naming_the_request():
    message = fabric.problem(_report("efa_p5en.log"), expected_devices=32)
    assert message == (
        "NCCL uses 16 EFA devices of the instance's 32: the pod must request vpc.amazonaws.com/efa: 32"
    )


@pytest.mark.parametrize(
    ("log", "cause"),
    [
        ("socket_no_efa_device.log", "the pod must request vpc.amazonaws.com/efa and the EFA device plugin"),
        ("socket_no_plugin.log", "the aws-ofi-nccl plugin (libnccl-net.so) is not in the image"),
    ],
)
def test_a_recorded_socket_fallback_is_refused_naming_what_is_missing(log, cause):
    message = fabric.problem(_report(log), expected_devices=4)
    assert message is not None
    assert message.startswith("NCCL uses network 'Socket', not EFA: ") and cause in message


def test_the_check_reads_this_processs_file_and_exits_2_through_config_error(tmp_path, monkeypatch):
    monkeypatch.setattr(fabric.socket, "gethostname", lambda: "node-a")
    pattern = str(tmp_path / "nccl-%h-%p.log")
    path = fabric.debug_file(pattern)
    assert path.name == f"nccl-node-a-{fabric.os.getpid()}.log"
    env = {fabric.EXPECTED_DEVICES_ENV: "16", fabric.DEBUG_FILE_ENV: pattern}
    path.write_text((LOGS / "socket_no_efa_device.log").read_text())
    with pytest.raises(ConfigError, match=r"EFA check: NCCL uses network 'Socket', not EFA"):
        fabric.verify(env)
    path.write_text((LOGS / "efa_p5en.log").read_text())
    assert fabric.verify(env) == "EFA check: NCCL uses Libfabric with provider efa on 16 devices"
    # No EFA pool (no expected devices) or no debug file: nothing to check.
    assert fabric.verify({fabric.DEBUG_FILE_ENV: pattern}) is None
    assert fabric.verify({fabric.EXPECTED_DEVICES_ENV: "16"}) is None
    # NCCL's INFO output turned off by the spec's env: refused rather than trusted.
    path.write_text("")
    with pytest.raises(ConfigError, match="wrote no 'Using network' line"):
        fabric.verify(env)


@pytest.mark.parametrize(
    "line",
    [
        # NVIDIA/nccl#352
        "ds-ml-01-0:17754:17754 [0] NCCL INFO NET/Plugin : No plugin found (libnccl-net.so).",
        "VM-0-14-tencentos:162637:162637 [6] NCCL INFO NET/Plugin : dlerror=libnccl-net.so: cannot open "
        "shared object file: No such file or directory No plugin found (libnccl-net.so), using internal "
        "implementation",  # NVIDIA/nccl#1231
        "user:695833:695833 [2] NCCL INFO NET/Plugin : Plugin load (libnccl-net.so) returned 2 : "
        "libnccl-net.so: cannot open shared object file: No such file or directory",  # NVIDIA/nccl-tests#188
    ],
)
def test_every_recorded_spelling_of_a_missing_net_plugin_names_the_plugin(line):
    report = fabric.read_report(f"{line}\nh:1:1 [0] NCCL INFO Using network Socket\n")
    assert report.plugin_missing
    assert "aws-ofi-nccl plugin (libnccl-net.so)" in (fabric.problem(report, 4) or "")
    # The profiler plugin's line is not the net plugin's.
    other = fabric.read_report("h:1:1 [0] NCCL INFO PROFILER/Plugin: Could not find: libnccl-profiler.so.\n")
    assert not other.plugin_missing


def test_start_up_runs_one_collective_then_checks_only_multi_process_cuda_runs_on_efa(tmp_path, monkeypatch):
    from types import SimpleNamespace

    import trainer.dist

    calls = []
    monkeypatch.setattr(trainer.dist, "barrier", lambda env: calls.append("barrier"))
    pattern = str(tmp_path / "nccl-%h-%p.log")
    fabric.debug_file(pattern).write_text((LOGS / "socket_no_plugin.log").read_text())
    monkeypatch.setenv(fabric.DEBUG_FILE_ENV, pattern)
    monkeypatch.setenv(fabric.EXPECTED_DEVICES_ENV, "32")
    cuda = SimpleNamespace(distributed=True, device=SimpleNamespace(type="cuda"), is_main=True)
    with pytest.raises(ConfigError, match="aws-ofi-nccl plugin"):
        fabric.confirm(cuda)
    assert calls == ["barrier"]
    fabric.confirm(SimpleNamespace(distributed=True, device=SimpleNamespace(type="cpu"), is_main=True))
    fabric.confirm(SimpleNamespace(distributed=False, device=SimpleNamespace(type="cuda"), is_main=True))
    assert calls == ["barrier"]  # gloo runs and single processes have no NCCL network to check
