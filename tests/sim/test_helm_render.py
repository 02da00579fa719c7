"""Every Helm release the platform declares (dev and prod), rendered with its real chart at the pinned
version, as `helm install` would (sim/helm_render.py), then validated: built-in objects with
kubernetes-validate (strict) at the cluster's Kubernetes version, custom resources against their CRDs
(upstream/crds, else the CRDs the charts themselves install)."""

from __future__ import annotations

import helm_python
import pytest

from sim import contracts, helm_render
from sim.helm_render import HelmRelease, MissingPackage

STACKS = ["dev", "prod"]


@pytest.mark.parametrize("stack", STACKS)
def test_the_platform_declares_the_releases_it_installs(rendered, stack):
    names = {r.name for r in rendered[stack].releases}
    assert {"kube-prometheus-stack", "kubecost", "karpenter", "nvidia-device-plugin", "dcgm-exporter"} <= (
        names
    )


@pytest.mark.parametrize("stack", STACKS)
def test_every_release_renders_with_its_real_chart_at_its_pinned_version(rendered, stack):
    assert rendered[stack].errors == {}


@pytest.mark.parametrize("stack", STACKS)
def test_rendered_builtin_objects_are_valid_at_the_clusters_kubernetes_version(rendered, stack):
    assert not rendered[stack].invalid, "\n".join(rendered[stack].invalid)
    assert rendered[stack].builtin_checked > 200, rendered[stack].builtin_checked


@pytest.mark.parametrize("stack", STACKS)
def test_rendered_custom_resources_match_their_crds(rendered, stack):
    schemas = helm_render.crd_schemas(rendered[stack].crds)
    problems = []
    for name, obj in rendered[stack].custom:
        schema = schemas.get((obj["apiVersion"], obj["kind"]))
        if schema is None:
            problems.append(f"{name}: {obj['apiVersion']} {obj['kind']}: no CRD anywhere")
            continue
        errors: list[str] = []
        for key, value in obj.items():
            if key not in ("apiVersion", "kind", "metadata", "status"):
                contracts.validate(value, schema.get("properties", {}).get(key, {}), key, errors)
        problems += [f"{name}: {obj['kind']}/{obj['metadata']['name']}: {e}" for e in errors]
    assert not problems, "\n".join(problems)
    kinds = {o["kind"] for _, o in rendered[stack].custom}
    assert {"ServiceMonitor", "PrometheusRule", "Prometheus", "Alertmanager"} <= kinds


def test_the_cluster_capabilities_reach_the_charts(rendered):
    """Karpenter renders its ServiceMonitor only when the cluster serves monitoring.coreos.com/v1
    (karpenter/templates/servicemonitor.yaml); the public Chart.render would drop it silently."""
    monitors = {name for name, _ in rendered["dev"].of_kind("ServiceMonitor")}
    assert {"dcgm-exporter", "kubecost", "karpenter", "kube-prometheus-stack"} <= monitors
    (karpenter,) = [r for r in rendered["dev"].releases if r.name == "karpenter"]
    plain = helm_python.Chart.load(karpenter.package).render(
        karpenter.values, name=karpenter.name, namespace=karpenter.namespace, is_install=True
    )
    assert "ServiceMonitor" not in {o["kind"] for o in helm_render.objects(plain)}


def test_a_release_without_a_chart_package_fails():
    release = HelmRelease(name="x", chart="kube-prometheus-stack", version="0.0.1", namespace="m", values={})
    with pytest.raises(MissingPackage, match="kube-prometheus-stack-0.0.1.tgz"):
        helm_render.render(release, "1.33")


def test_the_kubecost_release_the_platform_used_to_declare_does_not_render():
    """cost-analyzer 2.9.7 with the values the platform passed it: the chart's templates `fail`."""
    values = {
        "global": {
            "clusterId": "mlops-eks-dev",
            "prometheus": {
                "enabled": False,
                "fqdn": "http://kube-prometheus-stack-prometheus.monitoring.svc:9090",
            },
            "grafana": {"enabled": False, "proxy": False},
        },
        "serviceMonitor": {"enabled": True},
        "prometheusRule": {"enabled": True},
        "finopsagent": {"enabled": False},
        "persistentVolume": {"enabled": True, "size": "32Gi"},
    }
    release = HelmRelease("kubecost", "cost-analyzer", "2.9.7", "kubecost", values)
    with pytest.raises(helm_python.HelmRenderError, match="Cluster ID is set in two places"):
        helm_render.render(release, "1.33")


def test_a_required_value_left_unset_is_a_render_error():
    release = HelmRelease("karpenter", "karpenter", "1.14.1", "kube-system", {})
    with pytest.raises(helm_python.HelmRenderError, match="settings.clusterName"):
        helm_render.render(release, "1.33")


def test_a_values_schema_violation_fails(tmp_path):
    """None of the pinned charts ships a values.schema.json today; a chart that does is checked."""
    chart = tmp_path / "probe"
    (chart / "templates").mkdir(parents=True)
    (chart / "Chart.yaml").write_text("apiVersion: v2\nname: probe\nversion: 0.1.0\n")
    (chart / "values.yaml").write_text("replicas: 1\n")
    (chart / "values.schema.json").write_text(
        '{"type": "object", "properties": {"replicas": {"type": "integer"}}}'
    )
    (chart / "templates" / "cm.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: probe}\n"
        "data: {n: {{ .Values.replicas | quote }}}\n"
    )
    release = HelmRelease("probe", "probe", "0.1.0", "default", {"replicas": "two"})
    with pytest.raises(helm_python.HelmValuesError, match="replicas"):
        helm_render.render(release, "1.33", package=chart)
    ok = HelmRelease("probe", "probe", "0.1.0", "default", {"replicas": 2})
    assert helm_render.objects(helm_render.render(ok, "1.33", package=chart))[0]["data"] == {"n": "2"}


def test_kubecost_refuses_a_prometheus_retention_shorter_than_its_etl_window():
    """The chart's own prometheusRetentionCheck, fed our Prometheus's retention (infra/addons/cost.py)."""
    from infra.addons.cost import cost_analyzer_values

    values = cost_analyzer_values(cluster_name="c", prometheus_retention="2d")
    release = HelmRelease("kubecost", "cost-analyzer", "2.8.7", "kubecost", values)
    with pytest.raises(helm_python.HelmRenderError, match="retention must be set >= 3 days"):
        helm_render.render(release, "1.33")


@pytest.mark.parametrize("stack", STACKS)
def test_kubecost_reads_our_prometheus_where_gpu_metrics_keep_workload_labels(rendered, dev, prod, stack):
    """GPU cost allocation: GPU counts from the NVIDIA device plugin, utilisation from DCGM series that
    keep the workload's namespace/pod labels (honorLabels), all read from the platform's Prometheus."""
    from infra.addons.monitoring.kube_prometheus import PROMETHEUS_URL

    kubecost = rendered[stack].objects["kubecost"]
    config_values = [v for o in kubecost if o["kind"] == "ConfigMap" for v in (o.get("data") or {}).values()]
    assert PROMETHEUS_URL in config_values
    assert not [o for o in kubecost if "prometheus-server" in o["metadata"]["name"]]  # no second one
    (model,) = [
        c
        for o in kubecost
        if o["kind"] == "Deployment"
        for c in o["spec"]["template"]["spec"]["containers"]
        if c["name"] == "cost-model"
    ]
    cluster = {"dev": dev, "prod": prod}[stack].one("eks:index:Cluster").inputs["name"]
    assert {"name": "CLUSTER_ID", "value": cluster} in model["env"]
    monitors = dict(rendered[stack].of_kind("ServiceMonitor"))
    assert monitors["dcgm-exporter"]["spec"]["endpoints"][0]["honorLabels"] is True
    assert "kubecost" in monitors and "nvidia-device-plugin" in rendered[stack].objects


def test_charts_see_the_clusters_kubernetes_version_not_the_librarys(tmp_path):
    chart = tmp_path / "probe"
    (chart / "templates").mkdir(parents=True)
    (chart / "Chart.yaml").write_text("apiVersion: v2\nname: probe\nversion: 0.1.0\n")
    (chart / "templates" / "cm.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: probe}\n"
        "data: {kube: {{ .Capabilities.KubeVersion.Version | quote }}}\n"
    )
    release = HelmRelease("probe", "probe", "0.1.0", "default", {})
    (cm,) = helm_render.objects(helm_render.render(release, "1.34", package=chart))
    assert cm["data"] == {"kube": "v1.34.0"}


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_one_dcgm_host_engine_per_gpu_node_the_exporter_uses_the_agents(rendered, stack, dev, prod):
    """The node monitoring agent's dcgm-server (hostPort 5555) runs on every GPU node of a stack with GPU
    pools; the exporter, as its chart renders it, connects to that engine on its own node instead of starting
    a second one that would contend for the profiling module (infra/addons/gpu.py)."""
    from infra.addons.gpu import NODE_HOST_ENGINE_PORT

    agent = {"dev": dev, "prod": prod}[stack].one("aws:eks/addon:Addon", "addons-eks-node-monitoring-agent")
    assert agent.inputs["addonName"] == "eks-node-monitoring-agent"
    (daemonset,) = [o for name, o in rendered[stack].of_kind("DaemonSet") if name == "dcgm-exporter"]
    (exporter,) = daemonset["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e for e in exporter["env"]}
    names = [e["name"] for e in exporter["env"]]
    assert env["NODE_IP"]["valueFrom"] == {"fieldRef": {"fieldPath": "status.hostIP"}}
    assert env["DCGM_REMOTE_HOSTENGINE_INFO"]["value"] == f"$(NODE_IP):{NODE_HOST_ENGINE_PORT}"
    assert names.index("NODE_IP") < names.index("DCGM_REMOTE_HOSTENGINE_INFO")  # expanded in order
    # Profiling stays on: the counters file the chart passes collects the field Kubecost reads.
    assert exporter["args"][:2] == ["-f", "/etc/dcgm-exporter/default-counters.csv"]


def test_without_the_agent_the_exporter_keeps_its_own_engine():
    from infra.addons.gpu import dcgm_exporter_values

    assert "extraEnv" not in dcgm_exporter_values(service_monitor=True, node_host_engine=False)
