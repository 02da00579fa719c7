"""kube-prometheus-stack on EKS, checked on what the real chart renders (sim/helm_render.py): no rule
or scrape target for what EKS does not expose, Alertmanager routes to the configured receiver, and every
volume goes with its release, which `pulumi destroy` removes before the EBS CSI driver and the nodes."""

from __future__ import annotations

import base64
import json
import re
from typing import Any

import pytest
import yaml

from infra.__main__ import main
from infra.addons.monitoring.kube_prometheus import RECEIVER_SECRET_FILE, kube_prometheus_stack_values
from infra.config.addons import ObservabilityConfig
from sim import helm_render
from sim.helm_render import HelmRelease

STACKS = ["dev", "prod"]
RELEASE = helm_render.RELEASE_TYPE


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
    return yaml.safe_load(base64.b64decode(secret["data"]["alertmanager.yaml"]))


def _matches(matcher: str, labels: dict[str, str]) -> bool:
    name, op, value = re.fullmatch(r'\s*(\w+)\s*(=~|!~|!=|=)\s*"(.*)"\s*', matcher).groups()
    got = labels.get(name, "")
    return {
        "=": got == value,
        "!=": got != value,
        "=~": bool(re.fullmatch(value, got)),
        "!~": not re.fullmatch(value, got),
    }[op]


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
def dependencies(dev, prod) -> dict[str, dict[tuple[str, str], set[str]]]:
    """(type, name) -> the URNs each registration depends on, per stack, as the engine receives them."""
    return {"dev": dev.dependencies(), "prod": prod.dependencies()}


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


def test_synth_warns_when_alerts_go_nowhere(capsys, caplog):
    """A Pulumi warning: the engine shows it, `infra synth` prints it on stderr (test_synth_cli.py)."""
    assert main(["synth", "--stack", "dev", "--json"]) == 0
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert any("no alert receiver" in w and '"null"' in w for w in warnings), warnings
    assert json.loads(capsys.readouterr().out)  # the warning stays out of the JSON
