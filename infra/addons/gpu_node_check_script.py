"""The startup GPU check, run on every new GPU node by the gpu-node-check DaemonSets (shipped in a
ConfigMap: the standard library only, so any image with Python runs it).

1. NVIDIA (GPU_VENDOR unset or `nvidia`): `nvidia-smi` must list exactly EXPECTED_GPUS GPUs with no
   uncorrected volatile ECC errors, pending page retirements or row remappings. AMD (GPU_VENDOR=amd): the
   kernel's sysfs must show EXPECTED_GPUS AMD display controllers bound to amdgpu and as many KFD topology
   nodes, as the ROCm device plugin finds them (ROCm/k8s-device-plugin internal/pkg/amdgpu/amdgpu.go).
2. It removes STARTUP_TAINT_KEY from its own node (NODE_NAME) and idles.
After ATTEMPTS failures RETRY_SECONDS apart it gives the node up: a Karpenter node's NodeClaim is deleted
(gpu_node_check.py says why); a managed node keeps the taint and the script exits 1 (GpuNodeCheckNotPassed).

With only `patch` on nodes it reads the node through a JSON patch whose only operation is a `test`, and
removes the taint after a `test` of it at its index, so a concurrent change fails with 422 (read again,
retry) instead of removing another taint. A 403 from the admission policies is printed and not retried.
"""

from __future__ import annotations

import argparse
import json
import os
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

QUERY = (
    "index,uuid,name,ecc.errors.uncorrected.volatile.total,retired_pages.pending,"
    "remapped_rows.pending,remapped_rows.failure"
)
SERVICE_ACCOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"
ATTEMPTS = 3
RETRY_SECONDS = 30
# Values nvidia-smi prints for a field a GPU does not have (a T4 has no row remapping, an A100 no page
# retirement).
_NOT_AVAILABLE = {"n/a", "[n/a]", "[not supported]", "not supported"}


class CheckFailed(Exception):
    pass


class ApiError(Exception):
    """The API server refused a request; the message carries its answer (a Status naming the reason)."""

    def __init__(self, method: str, path: str, code: int, body: str):
        super().__init__(f"{method} {path}: HTTP {code}: {body}")
        self.code = code


def gpu_problems(csv_text: str, expected: int) -> list[str]:
    """What is wrong with the GPUs `nvidia-smi --query-gpu=QUERY --format=csv,noheader,nounits` listed;
    empty when they pass."""
    rows = [[v.strip() for v in line.split(",")] for line in csv_text.strip().splitlines() if line.strip()]
    problems = []
    if len(rows) != expected:
        problems.append(f"{len(rows)} GPUs visible, the instance type has {expected}")
    for row in rows:
        if len(row) != len(QUERY.split(",")):
            problems.append(f"unexpected nvidia-smi line: {','.join(row)}")
            continue
        index, uuid, name, ecc, retired, remap_pending, remap_failure = row
        gpu = f"GPU {index} ({name}, {uuid})"
        if ecc.lower() not in _NOT_AVAILABLE and ecc != "0":
            problems.append(f"{gpu}: {ecc} uncorrected ECC errors since the driver loaded")
        for what, value in (
            ("a page retirement is pending", retired),
            ("a row remapping is pending", remap_pending),
            ("a row remapping failed", remap_failure),
        ):
            if value.lower() == "yes":
                problems.append(f"{gpu}: {what}")
    return problems


def check_gpus(expected: int) -> str:
    """One line about the node's GPUs, or CheckFailed."""
    try:
        result = subprocess.run(
            ["nvidia-smi", f"--query-gpu={QUERY}", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    except FileNotFoundError:
        raise CheckFailed("nvidia-smi not found: the NVIDIA container runtime did not inject it") from None
    except subprocess.TimeoutExpired:
        raise CheckFailed("nvidia-smi hung for 120 s (a GPU that stopped answering)") from None
    if result.returncode != 0:
        output = (result.stderr or result.stdout).strip()
        raise CheckFailed(f"nvidia-smi failed ({result.returncode}): {output}")
    problems = gpu_problems(result.stdout, expected)
    if problems:
        raise CheckFailed("; ".join(problems))
    return f"{expected} GPUs healthy"


AMD_VENDOR = "0x1002"
DISPLAY_CLASS = "0x03"  # PCI base class 03, display controller (an MI-series accelerator is 0x0380)
# The KFD topology lists CPU and GPU nodes alike; a GPU's `gpu_id` is not 0, a CPU's is (the kernel's
# drivers/gpu/drm/amd/amdkfd/kfd_topology.c).
KFD_NODES = "class/kfd/kfd/topology/nodes"


def _read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return ""


def amd_gpu_problems(sysfs: Path, expected: int) -> list[str]:
    """What is wrong with the AMD GPUs the kernel sees under `sysfs` (/sys); empty when they pass."""
    gpus = sorted(
        d
        for d in (sysfs / "bus/pci/devices").glob("*")
        if _read(d / "vendor") == AMD_VENDOR and _read(d / "class").startswith(DISPLAY_CLASS)
    )
    problems = []
    if len(gpus) != expected:
        problems.append(f"{len(gpus)} AMD GPUs on the PCI bus, the instance type has {expected}")
    for gpu in gpus:
        driver = os.path.basename(os.readlink(gpu / "driver")) if (gpu / "driver").is_symlink() else None
        if driver != "amdgpu":
            problems.append(f"GPU {gpu.name}: bound to {driver or 'no driver'}, not amdgpu")
    kfd_gpus = [n for n in (sysfs / KFD_NODES).glob("*") if _read(n / "gpu_id") not in ("", "0")]
    if len(kfd_gpus) != expected:
        problems.append(f"{len(kfd_gpus)} GPUs in the KFD topology, the instance type has {expected}")
    return problems


def check_amd_gpus(expected: int, sysfs: Path = Path("/sys")) -> str:
    """One line about the node's AMD GPUs, or CheckFailed."""
    problems = amd_gpu_problems(sysfs, expected)
    if problems:
        raise CheckFailed("; ".join(problems))
    return f"{expected} AMD GPUs bound to amdgpu and in the KFD topology"


def read_patch(node: str) -> list[dict[str, Any]]:
    """A JSON patch that changes nothing: the API server answers with the node."""
    return [{"op": "test", "path": "/metadata/name", "value": node}]


def taint_removal_patch(node: dict[str, Any], key: str) -> list[dict[str, Any]] | None:
    """The JSON patch removing the taint `key` from `node`, guarded by a test of that very taint at its
    index; None when the node does not carry it."""
    for i, taint in enumerate(node.get("spec", {}).get("taints") or []):
        if taint.get("key") == key:
            path = f"/spec/taints/{i}"
            return [{"op": "test", "path": path, "value": taint}, {"op": "remove", "path": path}]
    return None


def node_claim(node: dict[str, Any]) -> str | None:
    """The name of the Karpenter NodeClaim that owns `node` (Karpenter adds the owner reference when the
    node registers); None for a node Karpenter did not launch."""
    for owner in node.get("metadata", {}).get("ownerReferences") or []:
        if owner.get("kind") == "NodeClaim" and owner.get("apiVersion", "").startswith("karpenter.sh/"):
            return str(owner["name"])
    return None


def _send(request: urllib.request.Request) -> bytes:
    """Sends `request` to the API server, trusting the cluster's CA; the answer's body, or HTTPError."""
    context = ssl.create_default_context(cafile=f"{SERVICE_ACCOUNT}/ca.crt")
    with urllib.request.urlopen(request, context=context, timeout=30) as response:
        return response.read()


def _api(method: str, path: str, body: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    host, port = os.environ["KUBERNETES_SERVICE_HOST"], os.environ["KUBERNETES_SERVICE_PORT"]
    with open(f"{SERVICE_ACCOUNT}/token") as f:
        token = f.read().strip()
    headers = {"Authorization": f"Bearer {token}"}
    if body is not None:
        headers["Content-Type"] = "application/json-patch+json"
    data = None if body is None else json.dumps(body).encode()
    url = f"https://{host}:{port}{path}"
    request = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        return json.loads(_send(request) or b"{}")
    except urllib.error.HTTPError as err:
        raise ApiError(method, path, err.code, err.read().decode(errors="replace")) from None


def _patch(node: str, patch: list[dict[str, Any]]) -> dict[str, Any]:
    return _api("PATCH", f"/api/v1/nodes/{node}", patch)


def remove_taint(node: str, key: str, attempts: int = 5) -> bool:
    """Removes the taint `key` from `node`; False when it was not there. ApiError on a refusal."""
    for attempt in range(attempts):
        current = _patch(node, read_patch(node))
        patch = taint_removal_patch(current, key)
        if patch is None:
            return False
        try:
            _patch(node, patch)
            return True
        except ApiError as err:
            # 422: the patch's `test` failed, the taints changed under us. The admission policies refuse
            # with 403, which no retry changes.
            if err.code != 422 or attempt == attempts - 1:
                raise
            time.sleep(1)
    return False


def give_up(node: str) -> bool:
    """Deletes the NodeClaim of `node` so that Karpenter replaces it; False when it has none."""
    claim = node_claim(_patch(node, read_patch(node)))
    if claim is None:
        return False
    _api("DELETE", f"/apis/karpenter.sh/v1/nodeclaims/{claim}")
    return True


def idle() -> None:
    while True:
        time.sleep(3600)


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def main() -> int:
    node, key = os.environ["NODE_NAME"], os.environ["STARTUP_TAINT_KEY"]
    for attempt in range(1, ATTEMPTS + 1):
        try:
            check = check_amd_gpus if os.environ.get("GPU_VENDOR") == "amd" else check_gpus
            print(f"{node}: {check(int(os.environ['EXPECTED_GPUS']))}", flush=True)
            break
        except CheckFailed as err:
            _log(f"{node}: GPU check failed ({attempt} of {ATTEMPTS}): {err}")
            if attempt < ATTEMPTS:
                time.sleep(RETRY_SECONDS)
    else:
        try:
            replaced = give_up(node)
        except ApiError as err:
            _log(f"{node}: could not delete its NodeClaim: {err}")
            return 1
        if not replaced:
            _log(f"{node}: not a Karpenter node: it keeps its taint {key}; replace it (docs/node-health.md)")
            return 1
        _log(f"{node}: its NodeClaim is deleted: Karpenter drains it and launches a replacement")
        idle()
    try:
        removed = remove_taint(node, key)
    except ApiError as err:
        _log(f"{node}: the taint {key} stays: {err}")
        return 1
    print(f"{node}: taint {key} {'removed' if removed else 'already gone'}", flush=True)
    idle()
    return 0


if __name__ == "__main__":
    argparse.ArgumentParser(
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Configured by its environment: NODE_NAME, STARTUP_TAINT_KEY, EXPECTED_GPUS, GPU_VENDOR.",
    ).parse_args()  # no options: --help answers and exits
    sys.exit(main())
