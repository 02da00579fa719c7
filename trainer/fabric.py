"""The fabric check: on an EFA pool, confirm from NCCL's own report that it carries the job over EFA.

A job that requests EFA and still trains over TCP sockets runs at a fraction of its bandwidth and says
nothing. NCCL says which network it chose, once per communicator, in its INIT debug output:
`NCCL INFO Using network <name>` (NVIDIA/nccl src/init.cc, `INFO(NCCL_INIT, "Using network %s", ...)`):
"Libfabric" or "AWS Libfabric" for the aws-ofi-nccl plugin, "Socket" for the TCP fallback, "IB" for verbs.
The plugin reports its libfabric provider and devices: `NET/OFI Selected Provider is efa (found 16 nics)`
(aws-ofi-nccl; the line as recorded on p5en in NVIDIA/nccl#1597). When NCCL falls back, the file says why:
`NET/Plugin: No plugin found (libnccl-net.so)` (no plugin in the image; each release spells it its own
way), libfabric's `fi_getinfo: provider efa output empty list` or the plugin's `fi_getinfo() call failed`
(no EFA device in the container: aws/aws-ofi-nccl#889, #1020).

The job's pods on an EFA pool get NCCL_DEBUG=INFO, NCCL_DEBUG_SUBSYS=INIT,NET and NCCL_DEBUG_FILE (one file
per process: NCCL expands %h and %p) from the renderer, and MLOPS_EKS_EFA_DEVICES, the EFA interfaces of the
pool's instance type. After the process group's first collective, each rank reads its file: sockets, a
libfabric provider other than efa or fewer devices than the instance has exit 2 (permanent: a missing device
request, plugin or library is configuration, not weather), naming what is missing.
"""

from __future__ import annotations

import os
import re
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from trainer.config import ConfigError

if TYPE_CHECKING:
    from trainer.dist import DistEnv

EXPECTED_DEVICES_ENV = "MLOPS_EKS_EFA_DEVICES"
DEBUG_FILE_ENV = "NCCL_DEBUG_FILE"

_NETWORK = re.compile(r"NCCL INFO Using network (.+?)\s*$", re.MULTILINE)
_PROVIDER = re.compile(r"NET/OFI Selected [Pp]rovider is (\S+?),? .*?\(found (\d+) nics\)")
# Every NCCL release spells a missing net plugin its own way (tests/trainer/nccl_logs/README.md).
_PLUGIN_MISSING = re.compile(
    r"NET/Plugin ?:.*(No plugin found|cannot open shared object|Could not find).*libnccl-net"
    r"|NET/Plugin ?:.*libnccl-net.*(No plugin found|cannot open shared object)"
)
_NO_EFA_DEVICE = re.compile(r"fi_getinfo: provider efa output empty list|fi_getinfo\(\) call failed")


@dataclass(frozen=True)
class NcclReport:
    """What NCCL's INIT/NET debug output says of the network it chose."""

    network: str | None  # the last "Using network" (None: NCCL wrote none)
    provider: str | None  # aws-ofi-nccl's libfabric provider
    devices: int | None  # the devices it found
    plugin_missing: bool
    no_efa_device: bool


def read_report(text: str) -> NcclReport:
    networks = _NETWORK.findall(text)
    providers = _PROVIDER.findall(text)
    provider, devices = providers[-1] if providers else (None, None)
    return NcclReport(
        network=networks[-1] if networks else None,
        provider=provider,
        devices=int(devices) if devices is not None else None,
        plugin_missing=bool(_PLUGIN_MISSING.search(text)),
        no_efa_device=bool(_NO_EFA_DEVICE.search(text)),
    )


def problem(report: NcclReport, expected_devices: int) -> str | None:
    """Why this run does not use EFA with `expected_devices` devices, or None when it does."""
    if report.network is None:
        return (
            "NCCL wrote no 'Using network' line: NCCL_DEBUG=INFO with NCCL_DEBUG_SUBSYS including INIT is "
            "needed for the EFA check (the spec's env overrides them?)"
        )
    if "Libfabric" not in report.network:
        if report.plugin_missing:
            cause = "the aws-ofi-nccl plugin (libnccl-net.so) is not in the image or not on LD_LIBRARY_PATH"
        elif report.no_efa_device:
            cause = (
                "the container has no EFA device: the pod must request vpc.amazonaws.com/efa and the EFA "
                "device plugin must run on the node"
            )
        else:
            cause = "the aws-ofi-nccl plugin did not initialize (its NET/OFI WARN lines say why)"
        return f"NCCL uses network {report.network!r}, not EFA: {cause}"
    if report.provider != "efa":
        return (
            f"NCCL's OFI plugin chose libfabric provider {report.provider!r}, not efa: FI_PROVIDER=efa and "
            "the EFA libfabric (the EFA installer's /opt/amazon/efa) are needed"
        )
    if report.devices is None or report.devices < expected_devices:
        return (
            f"NCCL uses {report.devices} EFA devices of the instance's {expected_devices}: the pod must "
            f"request vpc.amazonaws.com/efa: {expected_devices}"
        )
    return None


def debug_file(pattern: str, pid: int | None = None, host: str | None = None) -> Path:
    """NCCL_DEBUG_FILE as NCCL names it for this process: %h the hostname, %p the pid."""
    host = host or socket.gethostname()
    pid = os.getpid() if pid is None else pid
    return Path(pattern.replace("%h", host).replace("%p", str(pid)))


def verify(environ: dict[str, str] | None = None) -> str | None:
    """Run after the process group's first collective. ConfigError (exit 2) when an EFA job's NCCL does not
    use its EFA devices; a one-line confirmation when it does; None where there is nothing to check."""
    environ = dict(os.environ) if environ is None else environ
    expected = int(environ.get(EXPECTED_DEVICES_ENV, "0") or 0)
    pattern = environ.get(DEBUG_FILE_ENV)
    if expected <= 0 or not pattern:
        return None
    path = debug_file(pattern)
    try:
        text = path.read_text(errors="replace")
    except OSError as err:
        raise ConfigError(
            f"EFA check: NCCL's debug file {path} cannot be read ({err}); set {DEBUG_FILE_ENV}"
        ) from None
    report = read_report(text)
    found = problem(report, expected)
    if found:
        raise ConfigError(f"EFA check: {found} (NCCL's report: {path})")
    return f"EFA check: NCCL uses {report.network} with provider efa on {report.devices} devices"


def confirm(env: DistEnv) -> None:
    """The check at start-up, for a multi-process CUDA run on an EFA pool: one collective first (NCCL
    writes its network choice when it creates the communicator), then this rank's report."""
    if not env.distributed or env.device.type != "cuda" or not os.environ.get(EXPECTED_DEVICES_ENV):
        return
    from trainer.dist import barrier  # torch: only where there is a process group to check

    barrier(env)
    message = verify()
    if message and env.is_main:
        print(message, flush=True)
