"""The KubeRay operator release (infra/addons/kuberay.py) rendered with its real chart at the pinned version
(sim/helm_render.py) and checked: values keys the chart has, built-in objects valid at the cluster's
Kubernetes version, the ServiceMonitor against its CRD, Pod Security `restricted`, and the operator's
scope."""

from __future__ import annotations

import kubernetes_validate
import pytest

from infra.addons import kuberay
from infra.pins import CHARTS
from sim import contracts, helm_render
from sim.helm_render import HelmRelease
from workloads.pod_security import pod_spec, restricted_violations

KUBE_VERSION = "1.35"
PROMETHEUS_STACK = HelmRelease(
    "kube-prometheus-stack",
    "kube-prometheus-stack",
    CHARTS["kube-prometheus-stack"].version,
    "monitoring",
    {},
)


def _release(service_monitor: bool = True) -> HelmRelease:
    values = kuberay.kuberay_values(service_monitor=service_monitor)
    return HelmRelease(
        kuberay.RELEASE, kuberay.CHART_KEY, CHARTS[kuberay.CHART_KEY].version, kuberay.NAMESPACE, values
    )


def _objects(service_monitor: bool = True) -> list[dict]:
    release = _release(service_monitor)
    return helm_render.objects(helm_render.render(release, KUBE_VERSION))


def _one(objects: list[dict], kind: str) -> dict:
    (found,) = [o for o in objects if o["kind"] == kind]
    return found


def test_the_pinned_chart_is_the_upstream_package():
    assert CHARTS[kuberay.CHART_KEY].version == "1.7.0"
    assert _release().package.exists()


def test_every_values_key_exists_in_the_chart_at_its_version(values_check):
    code, out = values_check(kuberay.CHART_KEY, CHARTS[kuberay.CHART_KEY].version, _release().values)
    assert code == 0, out


def test_rendered_builtin_objects_are_valid_at_the_clusters_version():
    objects = [o for o in _objects() if helm_render.is_builtin(o)]
    assert {"Deployment", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Service"} <= {
        o["kind"] for o in objects
    }
    version = helm_render.validation_version(KUBE_VERSION)
    for obj in objects:
        kubernetes_validate.validate(obj, version, strict=True)


def test_the_operator_pod_passes_restricted_pod_security():
    deployment = _one(_objects(), "Deployment")
    spec = pod_spec(deployment)
    assert restricted_violations(spec) == []
    assert spec["securityContext"]["runAsNonRoot"] is True


def test_the_operator_has_limits_that_kubernetes_also_takes_as_its_requests():
    (container,) = pod_spec(_one(_objects(), "Deployment"))["containers"]
    assert container["resources"] == {"limits": {"cpu": "100m", "memory": "512Mi"}}


def test_the_service_monitor_follows_prometheus_and_matches_its_crd():
    assert "ServiceMonitor" not in {o["kind"] for o in _objects(service_monitor=False)}
    monitor = _one(_objects(service_monitor=True), "ServiceMonitor")
    service = _one(_objects(service_monitor=True), "Service")
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    schema = helm_render.crd_schemas(helm_render.crds(PROMETHEUS_STACK))[
        ("monitoring.coreos.com/v1", "ServiceMonitor")
    ]
    errors: list[str] = []
    contracts.validate(monitor["spec"], schema["properties"]["spec"], "spec", errors)
    assert errors == []


def test_the_operator_watches_every_namespace_and_turns_on_no_secret_making_feature():
    (container,) = pod_spec(_one(_objects(), "Deployment"))["containers"]
    args = container["args"]
    assert "--watch-namespace" not in args  # job namespaces come and go with workload stacks
    gates = dict(
        g.split("=")
        for a in args
        if a.startswith("--feature-gates=")
        for g in a.removeprefix("--feature-gates=").split(",")
    )
    assert gates["RayClusterMTLS"] == "false"
    assert gates["RayJobDeletionPolicy"] == "true"
    assert "--enable-batch-scheduler" not in args and not any(a.startswith("--batch-scheduler") for a in args)


def test_the_operator_pods_are_what_job_namespaces_admit():
    deployment = _one(_objects(), "Deployment")
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert kuberay.OPERATOR_POD.items() <= labels.items()


@pytest.mark.parametrize("bad", [{"reconcileConcurrency": 0}, {"kubeClient": {"burst": -1}}])
def test_the_chart_refuses_what_its_own_checks_refuse(bad):
    """The render is the chart's own template engine: its `fail` checks run (validateConfig)."""
    import helm_python

    release = _release()
    broken = HelmRelease(
        release.name, release.chart, release.version, release.namespace, release.values | bad
    )
    with pytest.raises(helm_python.HelmRenderError, match="must be"):
        helm_render.render(broken, KUBE_VERSION)
