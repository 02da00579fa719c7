"""checkov over the rendered Kubernetes objects (platform CustomResources, every workload stack, and the
pod templates inside training CRDs) and over docker/, in one checkov run. (hadolint over docker/ runs in
tests/docker with the hadolint config (docker/.hadolint.yaml); `make lint` runs both through
`python -m policy.scan`.)"""

from __future__ import annotations

import re

import pytest
import yaml

from policy.k8s import image_problem
from policy.scan import (
    checkov_kinds,
    dockerfiles,
    load_skips,
    platform_objects,
    run_checkov,
    unexplained,
    unused_skips,
    write_scan_tree,
)

# A deliberately bad pod scanned in the same run: proves checkov really evaluated the tree.
CANARY = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "canary", "namespace": "canary"},
    "spec": {"containers": [{"name": "c", "image": "busybox:1.36", "securityContext": {"privileged": True}}]},
}


@pytest.fixture(scope="module")
def checkov(platform_resources, chart_objects, workload_objects, tmp_path_factory):
    objects = {f"platform-{s}": platform_objects(r) for s, r in platform_resources.items()}
    objects.update({f"helm-{s}": objs for s, objs in chart_objects.items()})
    objects.update({f"workload-{s}": objs for s, objs in workload_objects.items()})
    root = tmp_path_factory.mktemp("scan")
    write_scan_tree(root, {**objects, "canary": [CANARY]})
    failures, summary = run_checkov(root)
    return root, failures, summary


def test_checkov_fails_nothing_outside_the_explained_skips(checkov):
    _, failures, _ = checkov
    real = [f for f in failures if "canary" not in f.resource]
    bad = [str(f) for f in unexplained(real, load_skips())]
    assert bad == [], "\n".join(bad)


def test_checkov_really_scanned_manifests_training_pods_and_dockerfiles(checkov):
    root, failures, summary = checkov
    charts = {p.name for p in root.glob("k8s/helm-*/*.yaml")}
    assert any("-daemonset-dcgm-exporter" in n for n in charts) and any("-prometheus-" in n for n in charts)
    assert "Pod.canary.canary" in {f.resource for f in failures if f.check == "CKV_K8S_16"}
    assert summary["kubernetes"]["resource_count"] > 0 and summary["kubernetes"]["failed"] > 0
    scanned = {p.name for p in root.glob("k8s/workload-*/*-pod-*.yaml")}
    assert any("-pod-trainjob-" in n for n in scanned) and any("-pod-pytorchjob-" in n for n in scanned), (
        scanned
    )
    assert summary["dockerfile"]["resource_count"] == len(dockerfiles()) > 0


def test_the_scan_leaves_out_only_kinds_checkov_has_no_check_for(checkov, chart_objects):
    """The tree holds every object of a kind checkov checks, and of the others (CustomResourceDefinitions,
    webhook configurations, the operators' own custom resources) nothing: checkov would parse them and report
    no result on them, passed or failed."""
    root, _, _ = checkov
    kinds = checkov_kinds()
    assert {"Pod", "Deployment", "ClusterRole", "NetworkPolicy"} <= kinds
    assert "CustomResourceDefinition" not in kinds
    written = {
        _key(yaml.load(p.read_text(), Loader=yaml.CSafeLoader)) for p in root.glob("k8s/helm-dev/*.yaml")
    }
    assert {kind for kind, _, _ in written} <= kinds
    wanted = {_key(o) for o in chart_objects["dev"] if o["kind"] in kinds}
    assert wanted <= written and {kind for kind, _, _ in written - wanted} <= {"Pod"}  # + template pods
    assert any(o["kind"] == "CustomResourceDefinition" for o in chart_objects["dev"])


def _key(obj: dict) -> tuple[str, str, str]:
    return obj["kind"], obj["metadata"].get("namespace", ""), obj["metadata"]["name"]


def test_every_skip_has_a_reason_and_is_still_needed(checkov):
    _, failures, _ = checkov
    skips = load_skips()
    assert all(len(s["reason"].split()) >= 8 for s in skips), "each skip explains itself in a sentence"
    real = [f for f in failures if "canary" not in f.resource]
    assert unused_skips(real, skips) == []


def test_base_image_defaults_are_versioned():
    """What the CKV_DOCKER_7 skip claims: checkov cannot read FROM ${BASE_IMAGE}, so check the defaults."""
    files = dockerfiles()
    assert files, "docker/ has no Dockerfile"
    for path in files:
        defaults = re.findall(r"^ARG BASE_IMAGE=(\S+)$", path.read_text(), flags=re.M)
        assert defaults, f"{path}: no ARG BASE_IMAGE default"
        assert all(image_problem(d) is None for d in defaults), (path, defaults)


def test_skip_scopes_do_not_cover_services():
    """Pattern skips are scoped to training pods, never to long-running services (Deployments,
    DaemonSets); a chart's services are skipped only object by object, by exact id."""
    for s in load_skips():
        if "resources" in s:
            assert "applies_to" not in s and all(re.fullmatch(r"[\w./-]+", r) for r in s["resources"]), s
            continue
        for resource in ("Deployment.monitoring.grafana", "DaemonSet.kube-system.nvidia-device-plugin"):
            assert not re.match(s["applies_to"], resource), (s["check"], resource)


def test_helm_objects_fails_on_objects_the_kubernetes_schema_rejects(monkeypatch):
    from policy import scan
    from sim import helm_render

    bad = "kube-prometheus-stack: Deployment/grafana: 'replicas' is not of type 'integer'"
    rendered = helm_render.Rendered(kube_version="1.35", releases=[], invalid=[bad])
    monkeypatch.setattr(helm_render, "render_platform", lambda resources, version: rendered)
    cluster = {"type": "eks:index:Cluster", "name": "c", "inputs": {"version": "1.35"}}
    with pytest.raises(RuntimeError, match="the Kubernetes schema rejects") as e:
        scan.helm_objects([cluster])
    assert bad in str(e.value)


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_the_scan_renders_the_releases_the_session_renders(rendered, platform_resources, monkeypatch, stack):
    """`chart_objects` reuses the session's `rendered`; policy.scan.helm_objects, given `infra synth --json`,
    renders the same releases at the same Kubernetes version."""
    from policy import scan
    from sim import helm_render

    asked = []
    monkeypatch.setattr(
        helm_render,
        "render_platform",
        lambda resources, version: (
            asked.append((helm_render.releases(resources), version)) or rendered[stack]
        ),
    )
    assert scan.helm_objects(platform_resources[stack]) == rendered[stack].all_objects
    assert asked == [(rendered[stack].releases, rendered[stack].kube_version)]
