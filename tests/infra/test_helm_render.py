"""Every Helm release the platform declares (dev and prod), rendered with its real chart at the pinned
version, as `helm install` would (policy/helm_render.py), then validated: built-in objects with
kubernetes-validate (strict) at the cluster's Kubernetes version, custom resources against their CRDs
(../shared/upstream/crds, else the CRDs the charts themselves install)."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import subprocess
import sys
from dataclasses import dataclass, field
from typing import Any

import helm_python
import kubernetes_validate
import pytest
import yaml

from infra.addons_config import ObservabilityConfig
from infra.observability import RECEIVER_SECRET_FILE, kube_prometheus_stack_values
from infra.synth import RecordingMonitor, stack_config, synth
from policy import helm_render
from policy.helm_render import HelmRelease, MissingPackage

UPSTREAM_CHECK = helm_render.SHARED / "tools" / "upstream_check.py"


def _upstream_check():
    """../shared/tools/upstream_check.py as a module: its CRD schema walker (unknown fields are errors),
    applied to the upstream CRDs and to those the charts ship (Prometheus Operator's, Kueue's, ...)."""
    spec = importlib.util.spec_from_file_location("upstream_check", UPSTREAM_CHECK)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@dataclass
class Rendered:
    kube_version: str
    releases: list[HelmRelease]
    objects: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # release name -> objects
    errors: dict[str, str] = field(default_factory=dict)  # release name -> why it did not render
    crds: list[dict[str, Any]] = field(default_factory=list)
    invalid: list[str] = field(default_factory=list)  # built-in objects kubernetes-validate rejects
    builtin_checked: int = 0
    custom: list[tuple[str, dict[str, Any]]] = field(default_factory=list)  # kinds it has no schema for

    def of_kind(self, kind: str) -> list[tuple[str, dict[str, Any]]]:
        return [(name, o) for name, objs in self.objects.items() for o in objs if o["kind"] == kind]


def _render_stack(synth) -> Rendered:
    result = Rendered(synth.config.kubernetes_version, helm_render.releases(synth.resources))
    for release in result.releases:
        try:
            result.objects[release.name] = helm_render.objects(
                helm_render.render(release, result.kube_version)
            )
            result.crds += helm_render.crds(release)
        except (helm_python.HelmError, MissingPackage) as e:
            result.errors[release.name] = f"{release.chart} {release.version}: {type(e).__name__}: {e}"
    for objs in result.objects.values():
        result.crds += [o for o in objs if o["kind"] == "CustomResourceDefinition"]
    cluster_kinds = helm_render.cluster_scoped_kinds(result.crds)
    for release in result.releases:
        if release.name in result.objects:
            result.objects[release.name] = helm_render.installed(
                release, result.objects[release.name], cluster_kinds
            )
    # kubernetes-validate ships schemas up to some 1.3x: the newest it knows, not above the cluster's.
    version = helm_render.validation_version(result.kube_version)
    for name, objs in result.objects.items():
        for obj in objs:
            try:
                kubernetes_validate.validate(obj, version, strict=True)
                result.builtin_checked += 1
            except kubernetes_validate.SchemaNotFoundError:
                result.custom.append((name, obj))
            except kubernetes_validate.ValidationError as e:
                result.invalid.append(f"{name}: {obj['kind']}/{obj['metadata'].get('name')}: {e.message}")
    return result


@pytest.fixture(scope="module")
def rendered(dev, prod) -> dict[str, Rendered]:
    """Both stacks rendered and validated once for the module."""
    return {"dev": _render_stack(dev), "prod": _render_stack(prod)}


STACKS = ["dev", "prod"]
RELEASE = helm_render.RELEASE_TYPE


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
    check = _upstream_check()
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
                check.validate(value, schema.get("properties", {}).get(key, {}), key, errors)
        problems += [f"{name}: {obj['kind']}/{obj['metadata']['name']}: {e}" for e in errors]
    assert not problems, "\n".join(problems)
    kinds = {o["kind"] for _, o in rendered[stack].custom}
    assert {"ServiceMonitor", "PrometheusRule", "Prometheus", "Alertmanager"} <= kinds


def test_the_cluster_capabilities_reach_the_charts(rendered):
    """dcgm-exporter renders its ServiceMonitor only when the cluster serves monitoring.coreos.com/v1."""
    monitors = {name for name, _ in rendered["dev"].of_kind("ServiceMonitor")}
    assert {"dcgm-exporter", "kubecost", "karpenter", "kube-prometheus-stack"} <= monitors


def test_a_release_without_a_chart_package_fails():
    release = HelmRelease(name="x", chart="kube-prometheus-stack", version="0.0.1", namespace="m", values={})
    with pytest.raises(MissingPackage, match="kube-prometheus-stack-0.0.1.tgz"):
        helm_render.render(release, "1.33")


def test_the_kubecost_release_the_platform_used_to_declare_does_not_render():
    """cost-analyzer 2.9.7 with the values the platform passed it: the chart's templates `fail`."""
    values = {
        "global": {
            "clusterId": "mlops-eks-dev",
            "prometheus": {"enabled": False, "fqdn": "http://kube-prometheus-stack-prometheus.monitoring.svc:9090"},
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
    """The chart's own prometheusRetentionCheck, fed our Prometheus's retention (infra/cost.py)."""
    from infra.cost import cost_analyzer_values

    values = cost_analyzer_values(cluster_name="c", prometheus_retention="2d")
    release = HelmRelease("kubecost", "cost-analyzer", "2.8.7", "kubecost", values)
    with pytest.raises(helm_python.HelmRenderError, match="retention must be set >= 3 days"):
        helm_render.render(release, "1.33")


# kube-prometheus-stack on EKS ------------------------------------------------------------------------

CONTROL_PLANE_JOBS = ("kube-controller-manager", "kube-scheduler", "kube-etcd", "kube-proxy")


@pytest.mark.parametrize("stack", STACKS)
def test_no_rule_or_scrape_targets_a_component_eks_does_not_expose(rendered, stack):
    rules = [
        (r.get("alert") or r.get("record"), r["expr"])
        for _, obj in rendered[stack].of_kind("PrometheusRule")
        for group in obj["spec"]["groups"]
        for r in group["rules"]
    ]
    bad = [(n, e) for n, e in rules for job in CONTROL_PLANE_JOBS if f'job="{job}"' in e or "etcd_" in e]
    assert not bad and len(rules) > 100, bad
    names = {n for n, _ in rules}
    assert not names & {"KubeControllerManagerDown", "KubeSchedulerDown", "KubeProxyDown", "etcdMembersDown"}
    monitors = [o["metadata"]["name"] for _, o in rendered[stack].of_kind("ServiceMonitor")]
    components = ("kube-controller-manager", "kube-scheduler", "kube-etcd", "kube-proxy")
    assert not [m for m in monitors if any(c in m for c in components)]


def _alertmanager_config(objects: list[dict[str, Any]]) -> dict[str, Any]:
    secret = next(o for o in objects if o["kind"] == "Secret" and "alertmanager.yaml" in o.get("data", {}))
    import base64

    return yaml.safe_load(base64.b64decode(secret["data"]["alertmanager.yaml"]))


def _matches(matcher: str, labels: dict[str, str]) -> bool:
    import re

    name, op, value = re.fullmatch(r'\s*(\w+)\s*(=~|!~|!=|=)\s*"(.*)"\s*', matcher).groups()
    got = labels.get(name, "")
    return {"=": got == value, "!=": got != value, "=~": bool(re.fullmatch(value, got)),
            "!~": not re.fullmatch(value, got)}[op]  # fmt: skip


def _receiver(route: dict[str, Any], labels: dict[str, str]) -> str:
    """Alertmanager's routing: the first child route that matches (no `continue` used here), else the
    parent's receiver."""
    for child in route.get("routes", []):
        if all(_matches(m, labels) for m in child.get("matchers", [])):
            return _receiver({"receiver": route["receiver"], **child}, labels)
    return route["receiver"]


def _render_kps(receiver: str) -> list[dict[str, Any]]:
    values = kube_prometheus_stack_values(ObservabilityConfig(alert_receiver=receiver), storage_class="gp3")
    release = HelmRelease("kube-prometheus-stack", "kube-prometheus-stack", "88.5.3", "monitoring", values)
    return helm_render.objects(helm_render.render(release, "1.33"))


@pytest.mark.parametrize("kind", ["webhook", "slack", "pagerduty"])
def test_alertmanager_routes_platform_and_critical_alerts_to_the_configured_receiver(kind):
    objects = _render_kps(kind)
    config = _alertmanager_config(objects)
    platform = next(r for r in config["receivers"] if r["name"] == "platform")
    block = {"webhook": "webhook_configs", "slack": "slack_configs", "pagerduty": "pagerduty_configs"}[kind]
    assert RECEIVER_SECRET_FILE in yaml.safe_dump(platform[block])
    route = config["route"]
    for labels in (
        {"alertname": "GpuXidError", "severity": "warning", "platform": "mlops-eks"},
        {"alertname": "TrainingPodRestarting", "severity": "warning", "platform": "mlops-eks"},
        {"alertname": "KubeAPIDown", "severity": "critical"},
    ):
        assert _receiver(route, labels) == "platform", labels
    assert _receiver(route, {"alertname": "Watchdog", "severity": "none"}) == "null"
    assert _receiver(route, {"alertname": "KubePodCrashLooping", "severity": "warning"}) == "null"
    # The receiver's URL/key file exists in the pods: the Secret is mounted where the config reads it.
    (am,) = [o for o in objects if o["kind"] == "Alertmanager"]
    assert am["spec"]["secrets"] == [RECEIVER_SECRET_FILE.split("/")[-2]]


def test_without_a_receiver_every_alert_goes_to_null(rendered):
    config = _alertmanager_config(rendered["dev"].objects["kube-prometheus-stack"])
    assert [r["name"] for r in config["receivers"]] == ["null"]
    assert _receiver(config["route"], {"alertname": "GpuNodeNotReady", "severity": "critical"}) == "null"


def test_the_platforms_alert_rules_carry_the_routing_label(rendered):
    rules = [
        r
        for name, obj in rendered["dev"].of_kind("PrometheusRule")
        if obj["metadata"]["name"].endswith(("mlops-eks-gpu", "mlops-eks-training"))
        for g in obj["spec"]["groups"]
        for r in g["rules"]
    ]
    assert len(rules) == 5 and all(r["labels"]["platform"] == "mlops-eks" for r in rules)


# Volumes on `pulumi destroy` --------------------------------------------------------------------------


def _claims(obj: dict[str, Any]) -> bool:
    """Whether the object makes PersistentVolumeClaims (an EBS volume each on the gp3 StorageClass)."""
    spec = obj.get("spec") or {}
    operated = obj["kind"] in ("Prometheus", "Alertmanager")  # the operator makes their StatefulSets
    return bool(
        obj["kind"] == "PersistentVolumeClaim"
        or (obj["kind"] == "StatefulSet" and spec.get("volumeClaimTemplates"))
        or (operated and "volumeClaimTemplate" in (spec.get("storage") or {}))
    )


@pytest.mark.parametrize("stack", STACKS)
def test_every_volume_a_release_claims_is_deleted_with_it(rendered, stack):
    owners = [(name, o) for name, objs in rendered[stack].objects.items() for o in objs if _claims(o)]
    kept = []
    for name, obj in owners:
        annotations = obj["metadata"].get("annotations") or {}
        if obj["kind"] == "PersistentVolumeClaim":  # Helm deletes what it templated, unless told to keep it
            if annotations.get("helm.sh/resource-policy") == "keep":
                kept.append(f"{name}: PVC {obj['metadata']['name']} has resource-policy keep")
        elif (obj["spec"].get("persistentVolumeClaimRetentionPolicy") or {}).get("whenDeleted") != "Delete":
            kept.append(f"{name}: {obj['kind']} {obj['metadata']['name']} retains its claims")
    assert not kept, "\n".join(kept)
    kinds = {(name, o["kind"]) for name, o in owners}
    kps = "kube-prometheus-stack"
    assert {(kps, "Prometheus"), (kps, "Alertmanager"), (kps, "StatefulSet")} <= kinds  # Grafana's
    assert ("kubecost", "PersistentVolumeClaim") in kinds


@pytest.fixture(scope="module")
def dependencies() -> dict[str, dict[tuple[str, str], set[str]]]:
    """(type, name) -> the URNs each registration depends on, per stack, as the engine receives them."""
    graphs: dict[str, dict[tuple[str, str], set[str]]] = {}

    for stack in STACKS:
        graph = graphs.setdefault(stack, {})

        class GraphMonitor(RecordingMonitor):
            def RegisterResource(self, request, graph=graph):  # noqa: N802 (gRPC method name)
                graph[(request.type, request.name)] = set(request.dependencies)
                return super().RegisterResource(request)

        try:
            synth(stack, stack_config(stack), GraphMonitor)
        finally:
            asyncio.set_event_loop(asyncio.new_event_loop())
    return graphs


@pytest.mark.parametrize("stack", STACKS)
def test_releases_with_volumes_are_destroyed_before_the_ebs_csi_driver_and_the_nodes(
    rendered, dependencies, stack
):
    """Pulumi destroys in reverse dependency order: a release that depends on the EBS CSI add-on and the
    system nodes is uninstalled (its claims deleted) while the driver that deletes the volumes runs."""
    graph = dependencies[stack]
    owners = {name for name, objs in rendered[stack].objects.items() for o in objs if _claims(o)}
    assert owners >= {"kube-prometheus-stack", "kubecost"}
    ebs = [k for k in graph if k[0] == "aws:eks/addon:Addon" and k[1].endswith("aws-ebs-csi-driver")]
    nodes = [k for k in graph if k == ("eks:index:ManagedNodeGroup", "system")]
    assert len(ebs) == 1 and len(nodes) == 1
    for owner in owners:
        deps = {f"{u.split('::')[-1]}|{u.split('::')[-2].split('$')[-1]}" for u in graph[(RELEASE, owner)]}
        assert f"{ebs[0][1]}|{ebs[0][0]}" in deps, (owner, sorted(deps))
        assert f"{nodes[0][1]}|{nodes[0][0]}" in deps, (owner, sorted(deps))


@pytest.mark.parametrize("stack", STACKS)
def test_data_buckets_still_follow_force_destroy(stack, dev, prod):
    platform = {"dev": dev, "prod": prod}[stack]
    buckets = platform.of_type("aws:s3/bucket:Bucket")
    assert buckets
    assert all(b.inputs.get("forceDestroy", False) is platform.config.force_destroy for b in buckets)
    assert platform.config.force_destroy is (stack == "dev")


def test_synth_warns_when_alerts_go_nowhere():
    p = subprocess.run(
        [sys.executable, "-m", "infra", "synth", "--stack", "dev", "--json"], capture_output=True, text=True
    )
    assert p.returncode == 0, p.stderr[-2000:]
    assert "no alert receiver" in p.stderr and '"null"' in p.stderr
    assert json.loads(p.stdout)  # the warning stays out of the JSON
