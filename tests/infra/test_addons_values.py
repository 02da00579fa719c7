"""Every Helm values dict and every custom resource the add-ons render, checked against the upstream
chart defaults and CRDs at the pinned versions (upstream/)."""

from __future__ import annotations

import helm_python
import pytest
import yaml

from infra.accelerators import CATALOG
from infra.addons.chart_images import image_values, merged
from infra.addons.cost import cost_analyzer_values
from infra.addons.gpu import dcgm_exporter_values
from infra.addons.karpenter.controller import karpenter_values
from infra.addons.karpenter.node_pools import NodeClassFacts, cpu_node_pool, ec2_node_class, gpu_node_pool
from infra.addons.kuberay import kuberay_values
from infra.addons.monitoring.kube_prometheus import kube_prometheus_stack_values, metrics_server_values
from infra.addons.training import kueue_values, torch_distributed_runtime, trainer_values, volcano_values
from infra.config.addons import AddonsConfig
from infra.config.platform import GpuPoolConfig
from infra.exports import (
    amd_device_plugin_values,
    efa_device_plugin_values,
    kueue_objects,
    nvidia_device_plugin_values,
    volcano_queues,
)
from infra.pins import CHARTS, IMAGES
from infra.platform.registries import ImagePath
from sim.contracts import HELM_PACKAGES, UPSTREAM, values_file

GPU_POOLS = [
    GpuPoolConfig.model_validate(p)
    for p in (
        {"name": "t4", "accelerator": "t4", "capacityTypes": ["spot", "on-demand"], "gpuLimit": 8},
        {"name": "a100", "accelerator": "a100", "gpuLimit": 16, "consolidateAfter": "30m", "efa": True},
        {"name": "amd", "accelerator": "amd-v520", "amiId": "ami-0123456789abcdef0", "gpuLimit": 2},
        {"name": "l40s", "accelerator": "l40s", "capacityTypes": ["spot", "on-demand"], "gpuLimit": 8},
        {"name": "h200", "accelerator": "h200", "gpuLimit": 16, "efa": True},
        {"name": "b200", "accelerator": "b200", "gpuLimit": 16, "efa": True},
    )
]
FULL = AddonsConfig.model_validate(
    {
        "gpu": {"amdDevicePlugin": True, "efaDevicePlugin": True},
        "training": {
            "gangScheduler": "kueue",
            "queues": [
                {"name": "team-a", "gpus": {"t4": 8, "a100": 8, "amd-v520": 2}, "efaInterfaces": 8},
                {"name": "team-b"},
            ],
        },
    }
)
FACTS = NodeClassFacts(
    cluster_name="mlops-eks-dev",
    node_role_name="karpenter-node",
    subnet_tags={"karpenter.sh/discovery": "mlops-eks-dev"},
    security_group_id="sg-0123456789abcdef0",
    ami_alias="al2023@latest",
    root_volume_gib=200,
    tags={"managed-by": "pulumi"},
)

RENDERED = {
    "karpenter": karpenter_values(cluster_name="mlops-eks-dev", queue_name="q", service_monitor=True),
    "nvidia-device-plugin": nvidia_device_plugin_values(),
    "dcgm-exporter": dcgm_exporter_values(service_monitor=True),
    "amd-gpu": amd_device_plugin_values(),
    "aws-efa-k8s-device-plugin": efa_device_plugin_values(),
    "kube-prometheus-stack": kube_prometheus_stack_values(FULL.observability, storage_class="gp3"),
    "cost-analyzer": cost_analyzer_values(cluster_name="mlops-eks-dev", prometheus_retention="15d"),
    "kubeflow-trainer": trainer_values(),
    "kueue": kueue_values(service_monitor=True),
    "volcano": volcano_values(),
    "kuberay-operator": kuberay_values(service_monitor=True),
    "metrics-server": metrics_server_values(service_monitor=True),
}
# As infra/charts.py installs them: every image pointed at the stack's ECR (infra/addons/chart_images.py).
VALUES = {
    k: merged(v, image_values(k, ImagePath("123456789012", "us-east-1", "dev"))) for k, v in RENDERED.items()
}


def test_every_pinned_chart_has_a_values_renderer():
    assert set(VALUES) == set(CHARTS)


# Value blocks a chart documents only as a commented example in its values.yaml (subchart values):
# (chart key, parent key, block key). Checked against that example instead of the parsed defaults.
COMMENTED_EXAMPLES = {"kube-prometheus-stack": ("grafana", "persistence")}


# Values of a subchart the parent's values.yaml does not repeat: (chart key, subchart) -> the dotted paths
# set, each checked against what the subchart's own templates read (in the real package's charts/); subchart
# "": values the chart's own templates read that its values.yaml leaves out (or shows commented out).
_IMAGE = ("image.registry", "image.repository", "image.tag")
SUBCHART_VALUES = {
    ("kube-prometheus-stack", "grafana"): (
        "initChownData.enabled",
        "rbac.namespaced",
        "rbac.useExistingRole",
        "sidecar.dashboards.resource",
        "sidecar.datasources.resource",
        *_IMAGE,
        *(f"sidecar.{p}" for p in _IMAGE),
        *(f"initChownData.{p}" for p in _IMAGE),
    ),
    ("kube-prometheus-stack", "kube-state-metrics"): (*_IMAGE, "collectorsExclude"),
    ("kube-prometheus-stack", "prometheus-node-exporter"): (*_IMAGE, "image.distroless"),
    ("kubeflow-trainer", "jobset"): ("image.repository", "image.tag", "image.pullPolicy"),
    ("cost-analyzer", ""): ("kubecostModel.fullImageName", "kubecostFrontend.fullImageName"),
}


def _drop(values: dict, path: list[str]) -> dict:
    if len(path) == 1:
        return {k: v for k, v in values.items() if k != path[0]}
    inner = _drop(values.get(path[0]) or {}, path[1:])
    return {k: v for k, v in values.items() if k != path[0]} | ({path[0]: inner} if inner else {})


def _without_commented_example(chart_key: str, values: dict) -> dict:
    for (key, subchart), paths in SUBCHART_VALUES.items():
        if key == chart_key:
            for path in paths:
                values = _drop(values, [*([subchart] if subchart else []), *path.split(".")])
    if chart_key not in COMMENTED_EXAMPLES:
        return values
    parent, block = COMMENTED_EXAMPLES[chart_key]
    return {**values, parent: {k: v for k, v in values[parent].items() if k != block}}


@pytest.mark.parametrize(("chart_key", "subchart"), sorted(SUBCHART_VALUES))
def test_subchart_values_are_read_by_the_subcharts_templates(chart_key, subchart):
    import tarfile

    chart = CHARTS[chart_key]
    with tarfile.open(HELM_PACKAGES / f"{chart.short_name}-{chart.version}.tgz") as package:
        templates = "".join(
            package.extractfile(m).read().decode()  # type: ignore[union-attr]
            for m in package.getmembers()
            if m.isfile()
            and (
                f"/charts/{subchart}/templates/" in m.name
                if subchart
                else m.name.startswith(f"{chart.short_name}/templates/")
            )
        )
    for path in SUBCHART_VALUES[(chart_key, subchart)]:
        assert f".Values.{path}" in templates, path
        value = VALUES[chart_key][subchart] if subchart else VALUES[chart_key]
        for key in path.split("."):
            value = value[key]


def _commented_example(chart_key: str) -> dict:
    """The `# block:` example under `parent:` in the chart's upstream values.yaml, uncommented."""
    chart = CHARTS[chart_key]
    parent, block = COMMENTED_EXAMPLES[chart_key]
    lines = values_file(chart.short_name, chart.version).read_text()
    lines = lines.splitlines()
    start = lines.index(f"{parent}:")
    head = next(i for i in range(start, len(lines)) if lines[i].strip() == f"# {block}:")
    body = [lines[head].replace("# ", "", 1)]
    for line in lines[head + 1 :]:
        if not line.startswith("  #   "):
            break
        body.append(line.replace("# ", "", 1))
    return yaml.safe_load("\n".join(body))[block]


@pytest.mark.parametrize("chart_key", sorted(VALUES))
def test_values_keys_exist_in_the_chart_at_its_pinned_version(chart_key, values_check):
    chart = CHARTS[chart_key]
    values = _without_commented_example(chart_key, VALUES[chart_key])
    code, output = values_check(chart.short_name, chart.version, values)
    assert code == 0, output


@pytest.mark.parametrize("chart_key", sorted(COMMENTED_EXAMPLES))
def test_values_set_from_a_commented_chart_example_use_only_its_keys(chart_key):
    parent, block = COMMENTED_EXAMPLES[chart_key]
    example = set(_commented_example(chart_key))
    # Plus the keys the subchart itself defaults (coalesced by Helm from the real package's charts/).
    chart = CHARTS[chart_key]
    package = helm_python.Chart.load(HELM_PACKAGES / f"{chart.short_name}-{chart.version}.tgz")
    example |= set(package.merge_values({})[parent][block])
    assert set(VALUES[chart_key][parent][block]) <= example, sorted(example)


def test_grafana_keeps_its_state_on_a_gp3_volume():
    persistence = VALUES["kube-prometheus-stack"]["grafana"]["persistence"]
    assert persistence["enabled"] is True
    assert persistence["storageClassName"] == "gp3"


def test_values_check_rejects_a_key_the_chart_does_not_have(values_check):
    code, output = values_check("kube-prometheus-stack", "88.5.3", {"grafana": {"adminPasswordd": "x"}})
    assert code == 1 and "grafana.adminPasswordd" in output


def test_every_rendered_custom_resource_matches_its_upstream_crd(crd_check):
    objects = [
        ec2_node_class("nvidia", FACTS),
        ec2_node_class("amd-amd", FACTS, ami_id="ami-0123456789abcdef0"),
        *(gpu_node_pool(p) for p in GPU_POOLS),
        cpu_node_pool(FULL.karpenter.cpu_pool),
        torch_distributed_runtime(),
        *kueue_objects(FULL.training.queues),
        *volcano_queues(FULL.training.queues),
    ]
    code, output = crd_check(objects)
    assert code == 0, output
    assert f"{len(objects)} checked against upstream CRDs, 0 invalid, 0 without a CRD" in output


def test_prometheus_selects_monitors_and_rules_of_other_releases():
    spec = VALUES["kube-prometheus-stack"]["prometheus"]["prometheusSpec"]
    assert spec["serviceMonitorSelectorNilUsesHelmValues"] is False
    assert spec["podMonitorSelectorNilUsesHelmValues"] is False
    assert spec["ruleSelectorNilUsesHelmValues"] is False
    assert VALUES["dcgm-exporter"]["serviceMonitor"]["enabled"] is True


def test_grafana_password_comes_from_a_secret_not_the_values():
    grafana = VALUES["kube-prometheus-stack"]["grafana"]
    assert grafana["admin"]["existingSecret"] == "grafana-admin"
    assert "adminPassword" not in grafana


def test_prometheus_keeps_data_on_gp3_for_the_configured_retention():
    spec = VALUES["kube-prometheus-stack"]["prometheus"]["prometheusSpec"]
    claim = spec["storageSpec"]["volumeClaimTemplate"]["spec"]
    assert (spec["retention"], claim["storageClassName"]) == ("15d", "gp3")
    assert claim["resources"]["requests"]["storage"] == "50Gi"


def test_kubecost_reads_our_prometheus_instead_of_bundling_one():
    values = VALUES["cost-analyzer"]
    assert values["global"]["prometheus"] == {
        "enabled": False,
        "fqdn": "http://kube-prometheus-stack-prometheus.monitoring.svc:9090",
    }
    assert values["serviceMonitor"]["enabled"] and values["prometheusRule"]["enabled"]
    # The cost model's CLUSTER_ID; the bundled server it belongs to is not deployed.
    assert values["prometheus"]["server"]["global"]["external_labels"] == {"cluster_id": "mlops-eks-dev"}
    # 2.9.x `fail`s without the agent (infra/addons/cost.py)
    assert CHARTS["cost-analyzer"].version == "2.8.7"


def test_trainer_chart_installs_no_runtimes_of_its_own_and_bundles_jobset():
    values = VALUES["kubeflow-trainer"]
    assert values["runtimes"]["torchDistributed"]["enabled"] is False
    assert values["jobset"]["install"] is True
    assert torch_distributed_runtime()["metadata"]["name"] == "torch-distributed"


def test_torch_runtime_keeps_the_image_of_the_pinned_trainers_runtime():
    version = CHARTS["kubeflow-trainer"].version
    runtime = f"kubeflow-trainer-{version}-torch-distributed-runtime.yaml"
    upstream = (UPSTREAM / runtime).read_text()
    (image,) = {line.split("image:", 1)[1].strip() for line in upstream.splitlines() if "image:" in line}
    containers = torch_distributed_runtime()["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]
    node = containers["spec"]["template"]["spec"]["containers"][0]
    assert node["image"] == IMAGES["torch-runtime"].ref == image


def test_kueue_flavors_pin_pods_to_the_accelerators_nodes():
    flavors = {
        o["metadata"]["name"]: o for o in kueue_objects(FULL.training.queues) if o["kind"] == "ResourceFlavor"
    }
    t4 = CATALOG["t4"]
    assert flavors["gpu-t4"]["spec"]["nodeLabels"] == t4.node_labels
    assert flavors["gpu-t4"]["spec"]["tolerations"][0]["key"] == t4.taint.key
    queue = next(o for o in kueue_objects(FULL.training.queues) if o["metadata"]["name"] == "team-a")
    covered = [g["coveredResources"] for g in queue["spec"]["resourceGroups"]]
    # EFA in a group of its own (flavor "efa", no node labels): Kueue refuses uncovered resources.
    assert covered == [["cpu", "memory"], ["amd.com/gpu"], ["nvidia.com/gpu"], ["vpc.amazonaws.com/efa"]]
    assert flavors["efa"]["spec"] == {}
