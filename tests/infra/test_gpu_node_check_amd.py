"""The startup GPU check on AMD nodes: its DaemonSets run on exactly the AMD GPU nodes the catalog
describes, and its sysfs reader passes a healthy node and fails a missing GPU or an unbound driver."""

from __future__ import annotations

from pathlib import Path

import pytest

from infra.accelerators import CATALOG
from infra.addons import gpu_node_check as check
from infra.addons import gpu_node_check_script as script
from infra.contract import PoolTaint, Toleration, taint_spec
from sim.kubernetes.scheduling import tolerated

AMD = CATALOG["amd-v520"]
OBJECTS = check.objects("gpu-system", ["g4dn.xlarge", "g4ad.xlarge", "g4ad.2xlarge", "g4ad.16xlarge"])


def _daemon_sets() -> dict[str, dict]:
    return {o["metadata"]["name"]: o for o in OBJECTS if o["kind"] == "DaemonSet"}


def _spec(name: str) -> dict:
    return _daemon_sets()[name]["spec"]["template"]["spec"]


def _env(name: str) -> dict[str, str]:
    return {e["name"]: e.get("value") for e in _spec(name)["containers"][0]["env"]}


def test_one_amd_daemon_set_per_gpu_count_of_the_catalog():
    assert {n for n in _daemon_sets() if "amd" in n} == {"gpu-node-check-amd-1gpu", "gpu-node-check-amd-4gpu"}
    gpus = {t.name: t.gpus for t in AMD.instance_types}
    for name, expected in (("gpu-node-check-amd-1gpu", 1), ("gpu-node-check-amd-4gpu", 4)):
        term = _spec(name)["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        types = term["nodeSelectorTerms"][0]["matchExpressions"][0]["values"]
        assert types and {gpus[t] for t in types} == {expected}
        assert _env(name)["EXPECTED_GPUS"] == str(expected)


def test_the_amd_check_reads_sysfs_and_asks_the_nvidia_runtime_for_nothing():
    env = _env("gpu-node-check-amd-1gpu")
    assert env["GPU_VENDOR"] == "amd"
    assert not [k for k in env if k.startswith("NVIDIA_")]
    assert "GPU_VENDOR" not in _env("gpu-node-check-1gpu")


def test_the_amd_check_runs_on_tainted_amd_nodes_only():
    spec = _spec("gpu-node-check-amd-1gpu")
    assert spec["nodeSelector"].items() <= AMD.node_labels.items()
    assert "amd.com/gpu.present" in spec["nodeSelector"]
    tolerations = [Toleration.model_validate(t) for t in spec["tolerations"]]
    for taint in (check.STARTUP_TAINT, AMD.taint):
        assert tolerated(tolerations, PoolTaint.model_validate(taint_spec(taint))), taint
    nvidia = next(a for a in CATALOG.values() if a.vendor == "nvidia")
    assert not tolerated(tolerations, PoolTaint.model_validate(taint_spec(nvidia.taint)))
    assert "amd.com/gpu" not in str(spec["containers"][0]["resources"])


def test_no_daemon_set_selects_another_ones_pods():
    daemon_sets = _daemon_sets().values()
    for ds in daemon_sets:
        selector = ds["spec"]["selector"]["matchLabels"].items()
        matched = [d for d in daemon_sets if selector <= d["spec"]["template"]["metadata"]["labels"].items()]
        assert matched == [ds], ds["metadata"]["name"]


# A fake /sys: PCI devices with vendor, class and driver link, and the KFD topology (node 0 is the CPU).
def _pci(sysfs: Path, address: str, vendor: str, pci_class: str, driver: str | None) -> None:
    device = sysfs / "bus/pci/devices" / address
    device.mkdir(parents=True)
    (device / "vendor").write_text(f"{vendor}\n")
    (device / "class").write_text(f"{pci_class}\n")
    if driver:
        target = sysfs / "bus/pci/drivers" / driver
        target.mkdir(parents=True, exist_ok=True)
        (device / "driver").symlink_to(target)


def _kfd(sysfs: Path, gpu_ids: list[int]) -> None:
    for i, gpu_id in enumerate([0, *gpu_ids]):
        node = sysfs / script.KFD_NODES / str(i)
        node.mkdir(parents=True)
        (node / "gpu_id").write_text(f"{gpu_id}\n")


def _node(sysfs: Path, gpus: int, driver: str | None = "amdgpu", kfd_gpus: int | None = None) -> Path:
    _pci(sysfs, "0000:00:1f.0", "0x8086", "0x060100", "lpc_ich")  # not a GPU
    _pci(sysfs, "0000:00:1e.0", "0x1d0f", "0x030000", None)  # the instance's own display, not AMD
    for i in range(gpus):
        _pci(sysfs, f"0000:00:{i + 0x1A:02x}.0", "0x1002", "0x030000", driver)
        # the GPU's HDMI audio function: AMD's too, but no GPU
        _pci(sysfs, f"0000:00:{i + 0x1A:02x}.1", "0x1002", "0x040300", "snd_hda_intel")
    _kfd(sysfs, [1000 + i for i in range(gpus if kfd_gpus is None else kfd_gpus)])
    return sysfs


@pytest.mark.parametrize("gpus", [1, 4])
def test_a_healthy_amd_node_passes(tmp_path, gpus):
    assert script.amd_gpu_problems(_node(tmp_path, gpus), gpus) == []
    assert "AMD GPUs" in script.check_amd_gpus(gpus, _node(tmp_path / "again", gpus))


def test_a_missing_gpu_fails(tmp_path):
    problems = script.amd_gpu_problems(_node(tmp_path, 3), 4)
    assert "3 AMD GPUs on the PCI bus, the instance type has 4" in problems
    assert "3 GPUs in the KFD topology, the instance type has 4" in problems
    with pytest.raises(script.CheckFailed, match="3 AMD GPUs"):
        script.check_amd_gpus(4, tmp_path)


@pytest.mark.parametrize("driver", [None, "vfio-pci"])
def test_a_gpu_the_amdgpu_driver_did_not_bind_fails(tmp_path, driver):
    problems = script.amd_gpu_problems(_node(tmp_path, 1, driver=driver, kfd_gpus=0), 1)
    assert problems == [
        f"GPU 0000:00:1a.0: bound to {driver or 'no driver'}, not amdgpu",
        "0 GPUs in the KFD topology, the instance type has 1",
    ]


def test_a_gpu_missing_from_the_kfd_topology_fails(tmp_path):
    problems = script.amd_gpu_problems(_node(tmp_path, 2, kfd_gpus=1), 2)
    assert problems == ["1 GPUs in the KFD topology, the instance type has 2"]


def test_a_node_without_sysfs_entries_fails(tmp_path):
    assert len(script.amd_gpu_problems(tmp_path, 1)) == 2


class _Idle(Exception):
    pass


@pytest.mark.parametrize(("vendor", "checked"), [("amd", "amd"), (None, "nvidia")])
def test_the_script_checks_the_vendor_its_daemon_set_names(monkeypatch, vendor, checked):
    for name, value in {"NODE_NAME": "n", "STARTUP_TAINT_KEY": "k", "EXPECTED_GPUS": "2"}.items():
        monkeypatch.setenv(name, value)
    if vendor:
        monkeypatch.setenv("GPU_VENDOR", vendor)
    else:
        monkeypatch.delenv("GPU_VENDOR", raising=False)
    ran: list[tuple[str, int]] = []
    monkeypatch.setattr(script, "check_amd_gpus", lambda n: ran.append(("amd", n)) or "ok")
    monkeypatch.setattr(script, "check_gpus", lambda n: ran.append(("nvidia", n)) or "ok")
    monkeypatch.setattr(script, "remove_taint", lambda node, key: True)

    def idle() -> None:
        raise _Idle

    monkeypatch.setattr(script, "idle", idle)
    with pytest.raises(_Idle):
        script.main()
    assert ran == [(checked, 2)]
