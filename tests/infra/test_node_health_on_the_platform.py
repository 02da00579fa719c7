"""Node health on the platform program: every managed group asks the engine for the repair transform,
NVIDIA node sources start with the startup GPU check's taint (managed groups and Karpenter NodePools,
checked against the NodePool CRD), the node monitoring agent and the check come with GPU pools, and
Karpenter's repair gate is on in dev and off in prod."""

from __future__ import annotations

import copy
import json

import pytest

from infra.addons import node_health
from infra.addons.gpu_node_check import STARTUP_TAINT
from infra.contract import taint_spec
from infra.pins import DCGM_VERSION, NODE_MONITORING_AGENT_VERSION
from infra.tools.synth import RecordingMonitor, stack_config, synth

# The platform program with a reserved (managed) T4 pool beside dev's Karpenter pools.
RESERVED = {
    "name": "t4-reserved",
    "accelerator": "t4",
    "source": "managed",
    "size": 1,
    "instanceTypes": ["g4dn.12xlarge"],
    "capacityTypes": ["on-demand"],
}


class TransformsMonitor(RecordingMonitor):
    """Also keeps how many transforms each registration asks the engine to run on it and its children."""

    def __init__(self, mocks):
        super().__init__(mocks)
        self.transforms: dict[tuple[str, str], int] = {}

    def RegisterResource(self, request):  # noqa: N802 (gRPC method name)
        self.transforms[(request.type, request.name)] = len(request.transforms)
        return super().RegisterResource(request)


def _synth(stack: str = "dev", *, health: dict | None = None, pools: list | None = None):
    values = copy.deepcopy(stack_config(stack))
    values["mlops-eks:gpuPools"] = [
        *values["mlops-eks:gpuPools"],
        *(pools if pools is not None else [RESERVED]),
    ]
    if pools == []:
        values["mlops-eks:gpuPools"] = []
        values["mlops-eks:addons"]["training"]["queues"] = []
        values["mlops-eks:addons"]["training"]["gangScheduler"] = None
    if health is not None:
        values["mlops-eks:addons"]["nodeHealth"] = health
    monitors: list[TransformsMonitor] = []

    class Monitor(TransformsMonitor):
        def __init__(self, mocks):
            super().__init__(mocks)
            monitors.append(self)

    config, resources, exports = synth(stack, values, Monitor)
    return resources, exports, monitors[0].transforms


@pytest.fixture(scope="module")
def reserved():
    return _synth()


def _one(resources, type_: str, name: str):
    (found,) = [r for r in resources if r.type == type_ and r.name == name]
    return found


def test_every_managed_group_asks_for_the_repair_transform(reserved):
    _, _, transforms = reserved
    groups = {name: n for (type_, name), n in transforms.items() if type_ == "eks:index:ManagedNodeGroup"}
    assert groups == {"system": 1, "gpu-t4-reserved": 1}
    _, _, without = _synth(health={"managedNodeRepair": False})
    assert {n for (t, _), n in without.items() if t == "eks:index:ManagedNodeGroup"} == {0}


def test_a_reserved_nvidia_group_starts_with_the_startup_taint(reserved):
    resources, exports, _ = reserved
    group = _one(resources, "eks:index:ManagedNodeGroup", "gpu-t4-reserved")
    assert {"key": STARTUP_TAINT.key, "value": STARTUP_TAINT.value, "effect": "NO_SCHEDULE"} in group.inputs[
        "taints"
    ]
    exported = exports["accelerator_pools"]["t4-reserved"]
    assert exported["startup_taints"] == [
        {"key": STARTUP_TAINT.key, "value": "pending", "effect": "NoSchedule"}
    ]
    assert STARTUP_TAINT.key not in str(exported["taints"])


def test_karpenter_gpu_pools_start_tainted_and_validate_against_the_crd(reserved, crd_check):
    resources, exports, _ = reserved
    pools = {r.name: r.inputs for r in resources if r.type == "kubernetes:karpenter.sh/v1:NodePool"}
    assert pools["karpenter-pool-gpu-t4"]["spec"]["template"]["spec"]["startupTaints"] == [
        taint_spec(STARTUP_TAINT)
    ]
    assert pools["karpenter-pool-gpu-amd"]["spec"]["template"]["spec"]["startupTaints"] == [
        taint_spec(STARTUP_TAINT)
    ]
    assert exports["accelerator_pools"]["amd"]["startup_taints"] == [taint_spec(STARTUP_TAINT)]
    code, out = crd_check(list(pools.values()))
    assert code == 0, out


def test_the_agent_add_on_and_the_check_come_with_gpu_pools(reserved):
    resources, _, _ = reserved
    agent = _one(resources, "aws:eks/addon:Addon", "addons-eks-node-monitoring-agent")
    assert json.loads(agent.inputs["configurationValues"]) == node_health.monitoring_agent_configuration()
    # Pinned, with the dcgm-exporter whose DCGM client is the agent's host engine's release (infra/pins.py).
    assert agent.inputs["addonVersion"] == NODE_MONITORING_AGENT_VERSION == "v1.6.7-eksbuild.1"
    exporter = _one(resources, "kubernetes:helm.sh/v3:Release", "dcgm-exporter").inputs["values"]["image"]
    assert exporter["tag"].split("-")[0] == DCGM_VERSION == "4.5.2"
    daemon_sets = {
        r.name for r in resources if r.type == "kubernetes:apps/v1:DaemonSet" and "check" in r.name
    }
    assert daemon_sets == {
        "gpu-check-daemonset-gpu-node-check-4gpu",
        "gpu-check-daemonset-gpu-node-check-amd-1gpu",
    }
    without, _, _ = _synth(pools=[])
    assert not [r for r in without if r.type == "aws:eks/addon:Addon" and "monitoring-agent" in r.name]
    assert not [r for r in without if "gpu-node-check" in r.name]


def _alerts(resources) -> set[str]:
    rules = _one(resources, "kubernetes:helm.sh/v3:Release", "kube-prometheus-stack").inputs["values"]
    groups = [g for spec in rules["additionalPrometheusRulesMap"].values() for g in spec["groups"]]
    return {rule["alert"] for group in groups for rule in group["rules"]}


def test_without_the_check_no_pool_is_tainted_and_nothing_is_deployed(reserved):
    resources, exports, _ = _synth(health={"gpuCheck": False})
    assert all(p["startup_taints"] == [] for p in exports["accelerator_pools"].values())
    assert not [r for r in resources if "gpu-node-check" in r.name]
    assert STARTUP_TAINT.key not in json.dumps([r.inputs for r in resources if "NodeGroup" in r.type])
    assert "GpuNodeCheckNotPassed" in _alerts(reserved[0])
    assert "GpuNodeCheckNotPassed" not in _alerts(resources)


@pytest.mark.parametrize(("stack", "on"), [("dev", "true"), ("prod", "false")])
def test_karpenter_repair_is_on_in_dev_and_off_in_prod(stack, on, request):
    synthesized = request.getfixturevalue(stack)
    karpenter = synthesized.one("kubernetes:helm.sh/v3:Release", "karpenter")
    gates = karpenter.inputs["values"]["settings"]["featureGates"]
    assert gates == {"nodeRepair": on == "true", "reservedCapacity": True}
