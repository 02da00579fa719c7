"""The capacity the platform installs, checked against the real charts: the device plugins the exports
promise run on the pools' nodes, Kueue blocks nothing but the job kinds it manages and comes last, and
its ClusterQueues cover every resource a job asks for (EFA included)."""

from __future__ import annotations

import pytest
import yaml

from infra.addons.training import KUEUE_FRAMEWORKS
from infra.contract import (
    EFA_RESOURCE,
    KUEUE_NAMESPACE_LABEL,
    AcceleratorPool,
    DevicePlugin,
    PoolTaint,
    Toleration,
)
from sim import helm_render
from sim.kubernetes.netpol import selects
from sim.kubernetes.scheduling import serves

RELEASE = "kubernetes:helm.sh/v3:Release"
STACKS = ["dev", "prod"]


@pytest.fixture(scope="module")
def platforms(dev, prod) -> dict[str, dict]:
    """Per stack: the exports, the Helm releases, and (type, name) -> the URNs it depends on."""
    found = {}
    for stack, platform in (("dev", dev), ("prod", prod)):
        releases = {r.name: r for r in helm_render.releases(platform.resources)}
        found[stack] = {"config": platform.config, "exports": platform.exports, "releases": releases}
        found[stack]["graph"] = platform.dependencies()
    return found


def _render(platform: dict, release: str) -> list[dict]:
    rel = platform["releases"][release]
    return helm_render.objects(helm_render.render(rel, platform["config"].kubernetes_version))


def _serves(plugin: DevicePlugin, pool: AcceleratorPool) -> bool:
    return any(
        serves(plugin, pool.node_labels_for(t, c), pool.taints)
        for t in pool.instance_types
        for c in pool.capacity_types
    )


@pytest.mark.parametrize("stack", STACKS)
def test_every_pools_extended_resources_have_a_device_plugin_on_its_nodes(platforms, stack):
    exports = platforms[stack]["exports"]
    plugins = [DevicePlugin.model_validate(p) for p in exports["device_plugins"]]
    for name, raw in exports["accelerator_pools"].items():
        pool = AcceleratorPool.model_validate(raw)
        wanted = [pool.resource_name, *([EFA_RESOURCE] if pool.efa else [])]
        for resource in wanted:
            assert any(p.resource == resource and _serves(p, pool) for p in plugins), (name, resource)


def test_the_efa_device_plugin_daemonset_runs_on_the_a100_nodes_as_exported(platforms):
    """Rendered from aws-efa-k8s-device-plugin 0.5.30: its required node affinity (instance types) and
    tolerations decide where vpc.amazonaws.com/efa becomes allocatable."""
    prod = platforms["prod"]
    (daemonset,) = [o for o in _render(prod, "aws-efa-k8s-device-plugin") if o["kind"] == "DaemonSet"]
    spec = daemonset["spec"]["template"]["spec"]
    (term,) = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    affinity = {e["key"]: tuple(e["values"]) for e in term["matchExpressions"] if e["operator"] == "In"}
    rendered = DevicePlugin(
        name="rendered",
        resource=EFA_RESOURCE,
        node_selector=spec.get("nodeSelector", {}),
        node_affinity=affinity,
        tolerations=[Toleration(**t) for t in spec["tolerations"]],
    )
    a100 = AcceleratorPool.model_validate(prod["exports"]["accelerator_pools"]["a100"])
    assert a100.efa_interfaces == 4 and _serves(rendered, a100)
    exported = next(p for p in prod["exports"]["device_plugins"] if p["resource"] == EFA_RESOURCE)
    assert DevicePlugin.model_validate(exported).model_copy(update={"name": "rendered"}) == rendered
    # Not on CPU nodes: the chart's affinity lists EFA instance types only.
    assert "m6i.xlarge" not in affinity["node.kubernetes.io/instance-type"]


def _excluded(selector: dict, namespace: str, labels: dict | None = None) -> bool:
    """Whether a webhook's namespaceSelector leaves `namespace` (with its `labels`) out."""
    return not selects(selector, {"kubernetes.io/metadata.name": namespace, **(labels or {})})


@pytest.mark.parametrize("stack", STACKS)
def test_kueue_webhooks_never_refuse_another_releases_objects(platforms, stack):
    """kueue 0.19.2 templates/webhook/manifests.yaml: the pod, deployment and statefulset webhooks are
    Fail only when their framework is enabled (the chart default enables them), and every job-kind
    webhook (batch Jobs: Helm hooks) is Fail wherever managedJobsNamespaceSelector selects. While Kueue
    is not serving, such a webhook refuses the object."""
    objects = _render(platforms[stack], "kueue")
    config = next(o for o in objects if o["kind"] == "ConfigMap" and o["metadata"]["name"].endswith("config"))
    frameworks = yaml.safe_load(config["data"]["controller_manager_config.yaml"])["integrations"]
    assert frameworks == {"frameworks": list(KUEUE_FRAMEWORKS)}
    namespaces = {r.namespace for r in platforms[stack]["releases"].values()}
    assert {"gpu-system", "monitoring", "kube-system", "kubeflow-system"} <= namespaces
    blocking: set[tuple[str, str]] = set()
    for webhook_config in (o for o in objects if o["kind"].endswith("WebhookConfiguration")):
        for hook in webhook_config["webhooks"]:
            if hook.get("failurePolicy", "Fail") != "Fail":
                continue
            resources = {r for rule in hook.get("rules", []) for r in rule["resources"]}
            assert not resources & {"pods", "deployments", "statefulsets"}, hook["name"]
            selector = hook.get("namespaceSelector")  # the job kinds; Kueue's CRDs are its own objects
            if selector is not None:
                blocking |= {(hook["name"], ns) for ns in namespaces if not _excluded(selector, ns)}
                # Job namespaces too: only one whose job names a queue (workloads/render.py labels it).
                assert _excluded(selector, "a-job-without-a-queue"), hook["name"]
                assert not _excluded(selector, "a-queued-job", {KUEUE_NAMESPACE_LABEL: "true"}), hook["name"]
    assert blocking == set()


@pytest.mark.parametrize("stack", STACKS)
def test_kueue_runs_two_replicas_on_two_nodes_and_keeps_one_through_a_drain(platforms, stack):
    objects = _render(platforms[stack], "kueue")
    (deployment,) = [
        o for o in objects if o["kind"] == "Deployment" and "controller-manager" in o["metadata"]["name"]
    ]
    assert deployment["spec"]["replicas"] == 2
    (spread,) = deployment["spec"]["template"]["spec"]["topologySpreadConstraints"]
    assert (
        spread["topologyKey"] == "kubernetes.io/hostname" and spread["whenUnsatisfiable"] == "DoNotSchedule"
    )
    assert (
        spread["labelSelector"]["matchLabels"].items()
        <= deployment["spec"]["template"]["metadata"]["labels"].items()
    )
    (pdb,) = [o for o in objects if o["kind"] == "PodDisruptionBudget"]
    assert pdb["spec"]["minAvailable"] == 1


@pytest.mark.parametrize("stack", STACKS)
def test_kueue_is_installed_after_every_other_release(platforms, stack):
    graph = platforms[stack]["graph"]
    kueue = {u.split("::")[-1] for u in graph[(RELEASE, "kueue")]}
    others = {name for (typ, name) in graph if typ == RELEASE and name != "kueue"}
    assert others and others <= kueue, others - kueue


def test_prod_research_queue_covers_efa_and_holds_the_a100_gang(platforms):
    quotas = {q["name"]: q for q in platforms["prod"]["exports"]["queue_quotas"]}
    research = quotas["research"]
    assert research["nominal"][EFA_RESOURCE] == "8" and research["gpus"]["a100"] == 16
    assert research["nominal"]["memory"] == "2048Gi"  # 2 pods x 864Gi of 2 x p4d.24xlarge fit


def test_device_plugins_ignore_prefer_no_schedule_taints_and_need_the_rest_tolerated():
    plugin = DevicePlugin(name="p", resource="nvidia.com/gpu", tolerations=())
    soft = PoolTaint(key="nvidia.com/gpu", value="true", effect="PreferNoSchedule")
    hard = PoolTaint(key="nvidia.com/gpu", value="true", effect="NoSchedule")
    assert serves(plugin, {}, [soft]) and not serves(plugin, {}, [hard])
