"""GPU node health: node auto repair reaches the managed groups' NodeGroup, Karpenter's repair gate
renders with its chart, and the health alerts watch the conditions the node monitoring agent sets."""

from __future__ import annotations

import copy
import json

import promql_parser
import pulumi
import pytest

from infra.addons import node_health
from infra.addons.gpu_node_check import STARTUP_TAINT
from infra.addons.karpenter.controller import karpenter_values
from infra.addons.monitoring.alerts import _alert as alert
from infra.addons.monitoring.alerts import prometheus_rules
from infra.contract import taint_spec
from infra.platform.node_repair import NODE_GROUP_TYPE, node_repair_transform, with_node_repair
from infra.tools.synth import RecordingMonitor, stack_config, synth
from policy import helm_render
from policy.helm_render import HelmRelease

# A NodeGroup's inputs as pulumi-eks registers them (wire names), the way the engine hands them to a
# transform.
NODE_GROUP_PROPS = {
    "clusterName": "mlops-eks-dev",
    "nodeRoleArn": "arn:aws:iam::123456789012:role/node",
    "scalingConfig": {"desiredSize": 1, "minSize": 1, "maxSize": 1},
    "taints": [{"key": "nvidia.com/gpu", "value": "true", "effect": "NO_SCHEDULE"}],
}


def _transform(type_: str, props: dict) -> pulumi.ResourceTransformResult | None:
    args = pulumi.ResourceTransformArgs(
        custom=True, type_=type_, name="gpu-a100", props=props, opts=pulumi.ResourceOptions()
    )
    return node_repair_transform(args)


def test_the_transform_turns_on_repair_on_the_node_group_and_keeps_its_inputs():
    result = _transform(NODE_GROUP_TYPE, NODE_GROUP_PROPS)
    assert result is not None
    assert result.props == {**NODE_GROUP_PROPS, "nodeRepairConfig": {"enabled": True}}


@pytest.mark.parametrize(
    "type_", ["aws:ec2/launchTemplate:LaunchTemplate", "aws:iam/role:Role", "eks:index:ManagedNodeGroup"]
)
def test_the_transform_leaves_every_other_resource_alone(type_):
    assert _transform(type_, dict(NODE_GROUP_PROPS)) is None


def test_an_explicit_repair_config_wins():
    props = {**NODE_GROUP_PROPS, "nodeRepairConfig": {"enabled": False}}
    assert with_node_repair(props)["nodeRepairConfig"] == {"enabled": False}


def test_the_added_input_is_the_wire_name_of_the_aws_providers_repair_config(pulumi_mocks):
    """pulumi-aws 7.51.1 registers `node_repair_config` as `nodeRepairConfig`: the name the transform sets."""
    import pulumi_aws as aws

    mocks = pulumi_mocks()

    @pulumi.runtime.test
    def register():
        group = aws.eks.NodeGroup(
            "gpu",
            cluster_name="c",
            node_role_arn="arn:aws:iam::123456789012:role/node",
            subnet_ids=["subnet-1"],
            scaling_config=aws.eks.NodeGroupScalingConfigArgs(desired_size=1, min_size=1, max_size=1),
            node_repair_config=aws.eks.NodeGroupNodeRepairConfigArgs(enabled=True),
        )
        return group.urn

    register()
    (registered,) = mocks.of_type(NODE_GROUP_TYPE)
    assert registered.inputs["nodeRepairConfig"] == with_node_repair({})["nodeRepairConfig"]


def _karpenter_env(repair_values: dict) -> dict[str, str]:
    base = karpenter_values(cluster_name="mlops-eks-dev", queue_name="mlops-eks-dev", service_monitor=False)
    values = {**base, "settings": {**base["settings"], **repair_values["settings"]}}
    release = HelmRelease("karpenter", "karpenter", "1.14.1", "karpenter", values)
    objects = helm_render.objects(helm_render.render(release, "1.35"))
    (deployment,) = [o for o in objects if o["kind"] == "Deployment"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return {e["name"]: e.get("value") for e in container["env"]}


@pytest.mark.parametrize("on", [True, False])
def test_the_repair_gate_reaches_the_controller_and_keeps_the_other_gates(on):
    gates = dict(
        g.split("=")
        for g in _karpenter_env(node_health.karpenter_values(node_repair=on))["FEATURE_GATES"].split(",")
    )
    assert gates["NodeRepair"] == str(on).lower()
    assert gates["ReservedCapacity"] == "true"  # the chart's default survives the merge


def test_the_repair_gate_is_a_key_of_the_chart(values_check):
    code, out = values_check("karpenter", "1.14.1", node_health.karpenter_values(node_repair=True))
    assert code == 0, out


def _rules(startup_taint_key: str | None) -> list[dict]:
    return [alert(*rule) for rule in node_health.node_health_rules(startup_taint_key=startup_taint_key)]


# As kube-prometheus-stack gets them (additionalPrometheusRulesMap).
RULES = prometheus_rules()["mlops-eks-node-health"]["groups"][0]["rules"]


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r["alert"])
def test_health_alerts_are_valid_promql_and_routed(rule):
    promql_parser.parse(rule["expr"])
    assert rule["labels"]["platform"] == "mlops-eks"
    assert rule["labels"]["severity"] in {"info", "warning", "critical"}


# karpenter-provider-aws pkg/cloudprovider/cloudprovider.go RepairPolicies (the node monitoring agent's
# conditions; the EKS user guide gives managed node groups the same waits).
UPSTREAM_REPAIR_MINUTES = {
    "AcceleratedHardwareReady": 10,
    "KernelReady": 30,
    "NetworkingReady": 30,
    "StorageReady": 30,
    "ContainerRuntimeReady": 30,
}


def test_alerts_watch_every_condition_repair_acts_on():
    assert node_health.REPAIR_AFTER_MINUTES == UPSTREAM_REPAIR_MINUTES
    watched = " ".join(r["expr"] for r in RULES if "kube_node_status_condition" in r["expr"])
    assert all(condition in watched for condition in UPSTREAM_REPAIR_MINUTES)


def test_the_unrepaired_alert_waits_past_the_repair_and_a_replacement():
    rule = next(r for r in RULES if r["alert"] == "GpuHardwareUnhealthyNotRepaired")
    assert int(rule["for"].removesuffix("m")) > node_health.REPAIR_AFTER_MINUTES["AcceleratedHardwareReady"]


def test_a_node_stuck_behind_the_startup_taint_is_an_alert_only_with_the_check():
    stuck = next(r for r in RULES if r["alert"] == "GpuNodeCheckNotPassed")
    assert f'key="{STARTUP_TAINT.key}"' in stuck["expr"]
    without = _rules(None)
    assert "GpuNodeCheckNotPassed" not in {r["alert"] for r in without}


def test_the_agents_dcgm_host_engine_runs_on_every_nvidia_node_checked_or_not():
    from infra.accelerators import CATALOG
    from infra.contract import PoolTaint, Toleration, tolerated

    config = node_health.monitoring_agent_configuration()
    tolerations = [Toleration.model_validate(t) for t in config["dcgmAgent"]["tolerations"]]
    taints = [PoolTaint.model_validate(vars(a.taint)) for a in CATALOG.values() if a.vendor == "nvidia"]
    assert taints and all(tolerated(tolerations, t) for t in [*taints, STARTUP_TAINT])
    assert set(config) == {"dcgmAgent"} and set(config["dcgmAgent"]) == {"tolerations"}


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


def test_karpenter_nvidia_pools_start_tainted_and_validate_against_the_crd(reserved, crd_check):
    resources, exports, _ = reserved
    pools = {r.name: r.inputs for r in resources if r.type == "kubernetes:karpenter.sh/v1:NodePool"}
    assert pools["karpenter-pool-gpu-t4"]["spec"]["template"]["spec"]["startupTaints"] == [
        taint_spec(STARTUP_TAINT)
    ]
    assert "startupTaints" not in pools["karpenter-pool-gpu-amd"]["spec"]["template"]["spec"]
    assert exports["accelerator_pools"]["amd"]["startup_taints"] == []
    code, out = crd_check(list(pools.values()))
    assert code == 0, out


def test_the_agent_add_on_and_the_check_come_with_gpu_pools(reserved):
    resources, _, _ = reserved
    agent = _one(resources, "aws:eks/addon:Addon", "addons-eks-node-monitoring-agent")
    assert json.loads(agent.inputs["configurationValues"]) == node_health.monitoring_agent_configuration()
    daemon_sets = {
        r.name for r in resources if r.type == "kubernetes:apps/v1:DaemonSet" and "check" in r.name
    }
    assert daemon_sets == {"gpu-check-daemonset-gpu-node-check-4gpu"}
    without, _, _ = _synth(pools=[])
    assert not [r for r in without if r.type == "aws:eks/addon:Addon" and "monitoring-agent" in r.name]
    assert not [r for r in without if "gpu-node-check" in r.name]


def test_without_the_check_no_pool_is_tainted_and_nothing_is_deployed():
    resources, exports, _ = _synth(health={"gpuCheck": False})
    assert all(p["startup_taints"] == [] for p in exports["accelerator_pools"].values())
    assert not [r for r in resources if "gpu-node-check" in r.name]
    assert STARTUP_TAINT.key not in json.dumps([r.inputs for r in resources if "NodeGroup" in r.type])


@pytest.mark.parametrize(("stack", "on"), [("dev", "true"), ("prod", "false")])
def test_karpenter_repair_is_on_in_dev_and_off_in_prod(stack, on, request):
    synthesized = request.getfixturevalue(stack)
    karpenter = synthesized.one("kubernetes:helm.sh/v3:Release", "karpenter")
    assert karpenter.inputs["values"]["settings"]["featureGates"] == {"nodeRepair": on == "true"}
