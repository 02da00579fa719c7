"""Every platform namespace enforces the strictest Pod Security level that all the pods the pinned charts
render into it pass (workloads/pod_security.py), and says why when that is not `restricted`."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import pytest

from infra.addons.namespaces import POD_SECURITY, VOLCANO_NAMESPACE, pod_security_labels
from infra.addons.training import volcano_values
from sim.helm_render import HelmRelease, objects, render
from workloads.pod_security import (
    LEVELS,
    baseline_violations,
    pod_spec,
    restricted_violations,
)

NAMESPACE = "kubernetes:core/v1:Namespace"
ENFORCE = "pod-security.kubernetes.io/enforce"


def strictest_level(specs: list[dict[str, Any]], *, version: str = "latest") -> str:
    """The strictest Pod Security level every one of `specs` passes."""
    if not any(restricted_violations(s, version=version) for s in specs):
        return "restricted"
    if not any(baseline_violations(s, version=version) for s in specs):
        return "baseline"
    return "privileged"


def _pods_by_namespace(objs) -> dict[str, list[dict]]:
    found = defaultdict(list)
    for obj in objs:
        spec = pod_spec(obj)
        if spec is not None:
            found[obj["metadata"]["namespace"]].append(spec)
    return found


@pytest.mark.parametrize("name", ["dev", "prod"])
def test_each_platform_namespace_enforces_the_strictest_level_its_pods_pass(name, dev, prod, rendered):
    synth = {"dev": dev, "prod": prod}[name]
    labels = {r.inputs["metadata"]["name"]: r.inputs["metadata"]["labels"] for r in synth.of_type(NAMESPACE)}
    pods = _pods_by_namespace(rendered[name].all_objects)
    assert set(pods) - {"kube-system"} <= set(labels), "a release installs into a namespace nobody labels"
    for ns, specs in pods.items():
        if ns == "kube-system":
            continue  # EKS's own namespace (Karpenter, metrics-server): not the platform's to label
        assert labels[ns][ENFORCE] == strictest_level(specs), ns
        assert labels[ns] == {"name": ns, **pod_security_labels(ns, synth.config.kubernetes_version)}
    assert {labels[ns][ENFORCE] for ns in pods if ns != "kube-system"} >= {"restricted", "privileged"}


def test_volcanos_namespace_level_matches_its_rendered_pods():
    """Neither committed stack picks volcano; render it on its own at the pinned version."""
    release = HelmRelease("volcano", "volcano", "1.15.1", VOLCANO_NAMESPACE, volcano_values())
    specs = _pods_by_namespace(objects(render(release, "1.35")))[VOLCANO_NAMESPACE]
    assert specs and POD_SECURITY[VOLCANO_NAMESPACE][0] == strictest_level(specs)


def test_every_level_below_restricted_says_why():
    for ns, (level, why) in POD_SECURITY.items():
        assert level in LEVELS
        assert (level == "restricted") == (why == ""), ns


def test_the_checker_refuses_what_each_level_refuses():
    base = {
        "containers": [
            {
                "name": "c",
                "securityContext": {
                    "allowPrivilegeEscalation": False,
                    "runAsNonRoot": True,
                    "seccompProfile": {"type": "RuntimeDefault"},
                    "capabilities": {"drop": ["ALL"]},
                },
            }
        ]
    }
    assert restricted_violations(base) == []
    privileged = {"containers": [{"name": "c", "securityContext": {"privileged": True}}]}
    host = {"hostNetwork": True, "containers": [{"name": "c"}]}
    path = {"volumes": [{"name": "root", "hostPath": {"path": "/"}}], "containers": [{"name": "c"}]}
    sys_admin = {"containers": [{"name": "c", "securityContext": {"capabilities": {"add": ["SYS_ADMIN"]}}}]}
    for spec in (privileged, host, path, sys_admin):
        assert baseline_violations(spec) and strictest_level([base, spec]) == "privileged"
    root = {"containers": [{"name": "c", "securityContext": {"runAsUser": 0}}]}
    assert not baseline_violations(root) and strictest_level([base, root]) == "baseline"
