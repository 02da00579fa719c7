"""The pack's Kubernetes rules over every object the platform's Helm releases install, rendered from the
pinned chart packages: only the findings policy/chart_exceptions.yaml accepts, one rule, one object and
one reason each, and no entry there that nothing needs."""

from __future__ import annotations

import copy
import dataclasses

import pytest

from infra.addons.monitoring.kube_prometheus import GRAFANA_SIDECAR_ROLE, GRAFANA_SIDECAR_RULES
from infra.tools.synth import ACCOUNT_ID
from policy.chart_exceptions import findings, load_exceptions, object_id, stale, unexplained
from policy.k8s import from_manifests
from policy.k8s_rbac import accepted as rbac_accepted
from policy.k8s_rbac import effective_grants
from policy.pack import RULES
from sim import helm_render

# The offline synth deploys as the AWS documentation's example account (infra/tools/synth.py ACCOUNT_ID), so
# the images of its ECR registry name that account; a deploy's name yours (the rehearsal's do, and pass).
OFFLINE_REGISTRY = f"{ACCOUNT_ID}.dkr.ecr."


def as_deployed(found: set[tuple[str, str, str]]) -> set[tuple[str, str, str]]:
    return {f for f in found if not (f[0] == "no-documentation-placeholders" and OFFLINE_REGISTRY in f[2])}


@pytest.fixture(scope="module")
def found(chart_objects) -> set[tuple[str, str, str]]:
    return as_deployed(set().union(*(findings(objects, RULES) for objects in chart_objects.values())))


def test_chart_objects_break_no_rule_outside_the_exceptions(found):
    assert unexplained(found, load_exceptions()) == []


def test_every_exception_is_still_needed(found):
    assert stale(found, load_exceptions()) == []


def test_exceptions_are_one_rule_one_object_with_a_reason():
    exceptions = load_exceptions()
    keys = [(e["rule"], e["object"]) for e in exceptions]
    assert len(keys) == len(set(keys))
    rules = {r.name for r in RULES}
    for e in exceptions:
        assert e["rule"] in rules and len(e["reason"].split()) >= 15 and e["accepts"], e
        assert "*" not in e["object"] and e["object"].count("/") == 2, e


def test_the_rule_really_judges_the_rendered_charts(chart_objects, found):
    # The privileged node agents are found (so the rule reads what the charts render) ...
    daemonsets = {object_id(o) for objs in chart_objects.values() for o in objs if o["kind"] == "DaemonSet"}
    assert {o for _, o, _ in found} <= daemonsets | {"RoleBinding/kubeflow-system/kubeflow-trainer-public"}
    assert "DaemonSet/monitoring/kube-prometheus-stack-prometheus-node-exporter" in {o for _, o, _ in found}
    # ... and a controller made privileged is not accepted by any exception.
    deployment = next(o for o in chart_objects["dev"] if o["kind"] == "Deployment")
    spec = deployment["spec"]["template"]["spec"]
    broken = {**deployment, "spec": {**deployment["spec"], "template": {"spec": {**spec, "hostPID": True}}}}
    assert unexplained(findings([broken], RULES), load_exceptions())


def test_the_access_rules_judge_the_rendered_charts_too(chart_objects):
    """The RBAC and webhook rules read what the charts render: a chart's webhook pointed at a URL, or a
    chart's binding turned into cluster-admin for its service account, is caught, and no exception
    covers it."""
    objects = chart_objects["dev"]
    webhook = next(o for o in objects if o["kind"] == "ValidatingWebhookConfiguration")
    outside = copy.deepcopy(webhook)
    for hook in outside["webhooks"]:
        hook["clientConfig"] = {"url": "https://collector.example.net/admit"}
        hook["rules"] = [{"apiGroups": ["*"], "apiVersions": ["*"], "resources": ["*"], "operations": ["*"]}]
    binding = copy.deepcopy(next(o for o in objects if o["kind"] == "ClusterRoleBinding"))
    binding["roleRef"]["name"] = "cluster-admin"
    found = unexplained(findings([outside, binding], RULES), load_exceptions())
    assert any("k8s-webhooks-stay-in-cluster" in f for f in found), found
    assert any("k8s-rbac-no-cluster-admin-grants" in f for f in found), found


def test_pod_fields_set_through_release_values_are_caught_before_and_after_rendering(platform_resources):
    """A release's values reach its pods: the values rule reports them on the release the engine sees,
    and the rendered pod breaks the pod rules outside every exception (the real chart, the real values)."""
    release = next(r for r in helm_render.releases(platform_resources["dev"]) if r.chart == "metrics-server")
    values = {**release.values, "securityContext": {"privileged": True, "runAsUser": 0}}
    inputs = {"chart": release.chart, "version": release.version, "values": values}
    rule = next(r for r in RULES if r.name == "k8s-helm-values-no-privilege")
    assert rule.violations(helm_render.RELEASE_TYPE, inputs) == [
        "values securityContext.privileged: privileged: true",
        "values securityContext.runAsUser: runAsUser: 0",
    ]
    assert rule.violations(helm_render.RELEASE_TYPE, {"values": release.values}) == []
    rendered = helm_render.objects(helm_render.render(dataclasses.replace(release, values=values), "1.35"))
    found = unexplained(as_deployed(findings(rendered, RULES)), load_exceptions())
    assert {f.split(" ", 1)[0] for f in found} == {
        "k8s-no-privileged-containers",
        "k8s-training-run-as-non-root",
    }


def _cluster_wide_secret_readers(objects) -> set[str]:
    """Subjects that a ClusterRoleBinding lets read Secrets in every namespace."""
    reading = {
        o["metadata"]["name"]
        for o in objects
        if o["kind"] == "ClusterRole"
        and any(
            {"", "*"} & set(r.get("apiGroups") or [])
            and {"secrets", "*"} & set(r.get("resources") or [])
            and {"get", "list", "watch", "*"} & set(r.get("verbs") or [])
            and not r.get("resourceNames")
            for r in o.get("rules") or []
        )
    }
    return {
        f"{s['kind']}/{s.get('namespace', '')}/{s['name']}"
        for o in objects
        if o["kind"] == "ClusterRoleBinding" and o["roleRef"]["name"] in reading
        for s in o.get("subjects") or []
    }


def test_grafana_reads_no_secret_and_only_listed_controllers_read_every_secret(chart_objects):
    """Grafana's sidecars watch the monitoring namespace's ConfigMaps through the platform's Role
    (infra/addons/monitoring/kube_prometheus.py); the chart renders no ClusterRole for Grafana at all."""
    for objects in chart_objects.values():
        grafana = [o for o in objects if "grafana" in o["metadata"]["name"] and o["kind"].endswith("Role")]
        assert [o["kind"] for o in grafana] == [], grafana  # useExistingRole: the chart makes none
        binding = next(
            o for o in objects if o["kind"] == "RoleBinding" and o["metadata"]["name"].endswith("grafana")
        )
        assert binding["roleRef"] == {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "Role",
            "name": GRAFANA_SIDECAR_ROLE,
        }
        assert not any("grafana" in s for s in _cluster_wide_secret_readers(objects))
    assert GRAFANA_SIDECAR_RULES == [
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "watch"]}
    ]


def test_rendered_rbac_grants_nothing_that_escalates_outside_the_accepted_risks(chart_objects):
    """Every binding the charts render, judged with the role it names where it holds it: the escalating
    grants are exactly the ones policy/rbac_accepted.yaml accepts with a reason (kube-state-metrics no
    longer among them: its secrets collector is off), and every entry there is still needed. Training
    Operator v1's entry is judged against its manifests in tests/policy/test_rbac.py."""
    found = {
        (binding, subject, what)
        for objects in chart_objects.values()
        for _, binding, subject, what, _ in effective_grants(from_manifests(objects))
    }
    accepted = {(e["binding"], e["subject"], g) for e in rbac_accepted() for g in e["grants"]}
    assert found - accepted == set()
    kustomize = {a for a in accepted if a[0] == "ClusterRoleBinding//training-operator"}
    assert accepted - kustomize - found == set(), "entries nothing rendered needs"
    assert not any("kube-state-metrics" in binding for binding, _, _ in found)
    for e in rbac_accepted():
        assert len(e["reason"].split()) >= 15, e
