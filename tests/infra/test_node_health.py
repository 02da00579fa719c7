"""GPU node health: node auto repair reaches the managed groups' NodeGroup, Karpenter's repair gate
renders with its chart, the node monitoring agent's DCGM host engine runs on tainted GPU nodes, the health
alerts watch the conditions the agent sets (the startup check's only with the check), the check's namespace
comes with it, and bad settings are refused naming the key.
(On the whole platform program: test_node_health_on_the_platform.py.)"""

from __future__ import annotations

import copy

import promql_parser
import pulumi
import pytest

from infra.addons import node_health
from infra.addons.gpu import NAMESPACE as GPU_NAMESPACE
from infra.addons.gpu_node_check import STARTUP_TAINT
from infra.addons.karpenter.controller import karpenter_values
from infra.addons.monitoring.alerts import prometheus_rules
from infra.addons.monitoring.kube_prometheus import kube_prometheus_stack_values
from infra.addons.namespaces import platform_namespaces
from infra.config.addons import ObservabilityConfig
from infra.config.platform import ConfigError, PlatformConfig
from infra.platform.node_repair import NODE_GROUP_TYPE, node_repair_transform, with_node_repair
from infra.tools.synth import stack_config
from sim import helm_render
from sim.helm_render import HelmRelease

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
    without = node_health.node_health_rules(startup_taint_key=None)
    assert "GpuNodeCheckNotPassed" not in {name for name, *_ in without}


def test_the_stuck_node_alert_is_not_installed_without_the_check():
    def alerts(gpu_check: bool) -> set[str]:
        rules = prometheus_rules(gpu_check=gpu_check)["mlops-eks-node-health"]["groups"][0]["rules"]
        return {r["alert"] for r in rules}

    assert "GpuNodeCheckNotPassed" in alerts(True)
    assert alerts(False) == alerts(True) - {"GpuNodeCheckNotPassed"}
    values = kube_prometheus_stack_values(ObservabilityConfig(), storage_class="gp3", gpu_check=False)
    assert "GpuNodeCheckNotPassed" not in str(values["additionalPrometheusRulesMap"])


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_the_checks_namespace_comes_with_every_checked_nvidia_pool(stack):
    # The check installs into gpu-system, which exists while a GPU chart does: NVIDIA pools must bring one.
    config = PlatformConfig.from_mapping(stack_config(stack))
    assert config.addons.node_health.gpu_check and any(
        p.catalog_entry.vendor == "nvidia" for p in config.gpu_pools
    )
    assert GPU_NAMESPACE in platform_namespaces(config.addons)
    values = copy.deepcopy(stack_config(stack))
    values["mlops-eks:addons"]["gpu"] = {"nvidiaDevicePlugin": False, "dcgmExporter": False}
    with pytest.raises(ConfigError, match="nvidiaDevicePlugin"):
        PlatformConfig.from_mapping(values)


def test_the_agents_dcgm_host_engine_runs_on_every_nvidia_node_checked_or_not():
    from infra.accelerators import CATALOG
    from infra.contract import PoolTaint, Toleration
    from sim.kubernetes.scheduling import tolerated

    config = node_health.monitoring_agent_configuration()
    tolerations = [Toleration.model_validate(t) for t in config["dcgmAgent"]["tolerations"]]
    taints = [PoolTaint.model_validate(vars(a.taint)) for a in CATALOG.values() if a.vendor == "nvidia"]
    assert taints and all(tolerated(tolerations, t) for t in [*taints, STARTUP_TAINT])
    assert set(config) == {"dcgmAgent"} and set(config["dcgmAgent"]) == {"tolerations"}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"nodeHealth": {"gpuCheckImage": "python:latest"}},
            "addons.nodeHealth.gpuCheckImage: image 'python:latest': tag 'latest' moves",
        ),
        ({"nodeHealth": {"gpuCheckImage": "python"}}, "has no tag (means :latest)"),
        (
            {"nodeHealth": {"karpenterNodeRepair": True}, "karpenter": {"enabled": False}},
            "addons.nodeHealth.karpenterNodeRepair: it is a setting of the Karpenter controller; got True; "
            "allowed: false when karpenter.enabled is false",
        ),
        ({"nodeHealth": {"karpenterNodeRepair": "yes"}}, "true or false (a YAML boolean, unquoted)"),
        ({"nodeHealth": {"autoRepair": True}}, "nodeHealth"),
    ],
    ids=["moving-tag", "no-tag", "repair-without-karpenter", "lax-bool", "unknown-key"],
)
def test_bad_node_health_settings_are_refused_naming_the_key(change, message):
    values = copy.deepcopy(stack_config("prod"))
    addons = values["mlops-eks:addons"]
    for key, value in change.items():
        addons[key] = {**addons.get(key, {}), **value}
    if change.get("karpenter") == {"enabled": False}:
        values["mlops-eks:gpuPools"] = []
        addons.get("training", {}).pop("queues", None)
    with pytest.raises(ConfigError) as refused:
        PlatformConfig.from_mapping(values)
    assert message in str(refused.value)
