"""Kubernetes' own test tables run on sim/kubernetes/pod_resources.py; each case keeps upstream's name.

Transcribed, not vendored (the index holds no release-1.35 text of these files; where they were read is
in sim/models.yaml): k8s.io/component-helpers resource/helpers_test.go TestPodResourceRequests (release-1.35,
kubernetes/component-helpers v0.35.7) and kubernetes pkg/quota/v1/evaluator/core/pods_test.go
TestPodConstraintsFunc and TestPodEvaluatorUsage (kubernetes/kubernetes@008b365, the index's copy).
"""

from __future__ import annotations

from decimal import Decimal

import pytest

from infra.contract import quantity
from sim.kubernetes.pod_resources import missing_quota_resources, pod_requests, quota_usage
from tests.sim.upstream_tables import assert_covered

STATUS = "in-place resize: the model judges pods before they run, so no container status exists"
SKIPPED_REQUESTS = {
    "resized, infeasible": STATUS,
    "resized, infeasible & in-progress": STATUS,
    "resized, no resize status": STATUS,
    "resized: per-resource 3-way maximum": STATUS,
    "resized, infeasible, but don't use status": STATUS,
    "resized, restartable init container, infeasible": STATUS,
    "resized, restartable init container, no resize status": STATUS,
    "resized, restartable init container, infeasible, but don't use status": STATUS,
}
DELETION = "a pod being deleted: the model counts the pods a job creates, none of them deleted"
SKIPPED_USAGE = {"pod deletion timestamp exceeded": DELETION, "pod deletion timestamp not exceeded": DELETION}


def _c(requests: dict | None = None, limits: dict | None = None, name: str = "", **more) -> dict:
    return {"name": name, "resources": {"requests": requests or {}, "limits": limits or {}}, **more}


def _sidecar(name: str, cpu: str) -> dict:
    return _c({"cpu": cpu}, name=name, restartPolicy="Always")


# TestPodResourceRequests: description -> (pod spec, PodResourcesOptions.ExcludeOverhead, expected requests)
REQUESTS = {
    "nil options, larger init container": (
        {"initContainers": [_c({"cpu": "4"})], "containers": [_c({"cpu": "1"})]},
        False,
        {"cpu": "4"},
    ),
    "nil options, larger containers": (
        {"initContainers": [_c({"cpu": "2"})], "containers": [_c({"cpu": "2"}), _c({"cpu": "3"})]},
        False,
        {"cpu": "5"},
    ),
    "pod overhead excluded": (
        {
            "overhead": {"cpu": "1"},
            "initContainers": [_c({"cpu": "2"})],
            "containers": [_c({"cpu": "2"}), _c({"cpu": "3"})],
        },
        True,
        {"cpu": "5"},
    ),
    "pod overhead included": (
        {
            "overhead": {"cpu": "1", "memory": "1Gi"},
            "initContainers": [_c({"cpu": "2"}, {"cpu": "2"})],
            "containers": [_c({"cpu": "2"}), _c({"cpu": "3"})],
        },
        False,
        {"cpu": "6", "memory": "1Gi"},
    ),
    "restartable init container": (
        {"initContainers": [_sidecar("restartable-init-1", "1")], "containers": [_c({"cpu": "1"})]},
        False,
        {"cpu": "2"},  # restartable init + regular container
    ),
    "multiple restartable init containers": (
        {
            "initContainers": [
                _c({"cpu": "5"}, name="init-1"),
                _sidecar("restartable-init-1", "1"),
                _sidecar("restartable-init-2", "2"),
                _sidecar("restartable-init-3", "3"),
            ],
            "containers": [_c({"cpu": "1"})],
        },
        False,
        {"cpu": "7"},  # max(5, restartable init containers(3+2+1) + regular(1))
    ),
    "multiple restartable and regular init containers": (
        {
            "initContainers": [
                _c({"cpu": "5"}, name="init-1"),
                _sidecar("restartable-init-1", "1"),
                _sidecar("restartable-init-2", "2"),
                _c({"cpu": "5"}, name="init-2"),
                _sidecar("restartable-init-3", "3"),
            ],
            "containers": [_c({"cpu": "1"})],
        },
        False,
        {"cpu": "8"},  # init-2 needs 5 + the restartable init containers started before it (1+2)
    ),
    "restartable-init, init and regular": (
        {
            "initContainers": [_sidecar("restartable-init-1", "10"), _c({"cpu": "200"}, name="init-1")],
            "containers": [_c({"cpu": "100"})],
        },
        False,
        {"cpu": "210"},
    ),
}
REQUEST_CASES = [
    "nil options, larger init container",
    "nil options, larger containers",
    "pod overhead excluded",
    "pod overhead included",
    *SKIPPED_REQUESTS,
    "restartable init container",
    "multiple restartable init containers",
    "multiple restartable and regular init containers",
    "restartable-init, init and regular",
]


def _quantities(resources: dict) -> dict[str, Decimal]:
    return {k: quantity(v) for k, v in resources.items()}


def test_every_pod_requests_case_is_run_or_skipped():
    assert_covered(REQUEST_CASES, REQUESTS, SKIPPED_REQUESTS)


@pytest.mark.parametrize("description", REQUESTS)
def test_pod_resource_requests(description):
    spec, exclude_overhead, expected = REQUESTS[description]
    assert pod_requests(spec, overhead=not exclude_overhead) == _quantities(expected)


# TestPodConstraintsFunc: name -> (pod spec, the quota's tracked names, upstream's error or None)
CPU_1M = {"cpu": "1m"}
CONSTRAINTS = {
    "init container resource missing": (
        {"initContainers": [_c(CPU_1M, {"cpu": "2m"}, "dummy")]},
        ["memory"],
        "must specify memory for: dummy",
    ),
    "multiple init container resource missing": (
        {"initContainers": [_c(CPU_1M, {"cpu": "2m"}, "foo"), _c(CPU_1M, {"cpu": "2m"}, "bar")]},
        ["memory"],
        "must specify memory for: bar,foo",
    ),
    "container resource missing": (
        {"containers": [_c(CPU_1M, {"cpu": "2m"}, "dummy")]},
        ["memory"],
        "must specify memory for: dummy",
    ),
    "multiple container resource missing": (
        {"containers": [_c(CPU_1M, {"cpu": "2m"}, "foo"), _c(CPU_1M, {"cpu": "2m"}, "bar")]},
        ["memory"],
        "must specify memory for: bar,foo",
    ),
    "container resource missing multiple": (
        {"containers": [_c(name="foo"), _c(name="bar")]},
        ["memory", "cpu"],
        "must specify cpu for: bar,foo; memory for: bar,foo",
    ),
    "pod-level resource set, container-level required resources missing": (
        {"resources": {"requests": CPU_1M}, "containers": [_c(name="foo"), _c(name="bar")]},
        ["memory", "cpu"],
        None,
    ),
}


@pytest.mark.parametrize("name", CONSTRAINTS)
def test_pod_constraints(name):
    spec, required, error = CONSTRAINTS[name]
    assert missing_quota_resources(spec, required) == error


DONGLE = "example.com/dongle"
IMPLICIT = "deviceclass.resource.kubernetes.io/dongle"
ONE_POD = {"pods": "1", "count/pods": "1"}
# TestPodEvaluatorUsage: name -> (pod spec, phase, expected usage)
USAGE = {
    "init container CPU": (
        {"initContainers": [_c(CPU_1M, {"cpu": "2m"})]},
        "Pending",
        {"requests.cpu": "1m", "limits.cpu": "2m", "cpu": "1m", **ONE_POD},
    ),
    "init container MEM": (
        {"initContainers": [_c({"memory": "1m"}, {"memory": "2m"})]},
        "Pending",
        {"requests.memory": "1m", "limits.memory": "2m", "memory": "1m", **ONE_POD},
    ),
    "init container local ephemeral storage": (
        {"initContainers": [_c({"ephemeral-storage": "32Mi"}, {"ephemeral-storage": "64Mi"})]},
        "Pending",
        {
            "ephemeral-storage": "32Mi",
            "requests.ephemeral-storage": "32Mi",
            "limits.ephemeral-storage": "64Mi",
            **ONE_POD,
        },
    ),
    "init container hugepages": (
        {"initContainers": [_c({"hugepages-2Mi": "100Mi"})]},
        "Pending",
        {"hugepages-2Mi": "100Mi", "requests.hugepages-2Mi": "100Mi", **ONE_POD},
    ),
    "init container extended resources": (
        {"initContainers": [_c({DONGLE: "3"}, {DONGLE: "3"})]},
        "Pending",
        {f"requests.{DONGLE}": "3", **ONE_POD},
    ),
    "init container implicit extended resources": (
        {"initContainers": [_c({IMPLICIT: "3"}, {IMPLICIT: "3"})]},
        "Pending",
        {f"requests.{IMPLICIT}": "3", **ONE_POD},
    ),
    "container CPU": (
        {"containers": [_c(CPU_1M, {"cpu": "2m"})]},
        "Pending",
        {"requests.cpu": "1m", "limits.cpu": "2m", "cpu": "1m", **ONE_POD},
    ),
    "container MEM": (
        {"containers": [_c({"memory": "1m"}, {"memory": "2m"})]},
        "Pending",
        {"requests.memory": "1m", "limits.memory": "2m", "memory": "1m", **ONE_POD},
    ),
    "container local ephemeral storage": (
        {"containers": [_c({"ephemeral-storage": "32Mi"}, {"ephemeral-storage": "64Mi"})]},
        "Pending",
        {
            "ephemeral-storage": "32Mi",
            "requests.ephemeral-storage": "32Mi",
            "limits.ephemeral-storage": "64Mi",
            **ONE_POD,
        },
    ),
    "container hugepages": (
        {"containers": [_c({"hugepages-2Mi": "100Mi"})]},
        "Pending",
        {"hugepages-2Mi": "100Mi", "requests.hugepages-2Mi": "100Mi", **ONE_POD},
    ),
    "container extended resources": (
        {"containers": [_c({DONGLE: "3"}, {DONGLE: "3"})]},
        "Pending",
        {f"requests.{DONGLE}": "3", **ONE_POD},
    ),
    "container implicit extended resources": (
        {"containers": [_c({IMPLICIT: "3"}, {IMPLICIT: "3"})]},
        "Pending",
        {f"requests.{IMPLICIT}": "3", **ONE_POD},
    ),
    "terminated generic count still appears": (
        {"containers": [_c({DONGLE: "3"}, {DONGLE: "3"})]},
        "Succeeded",
        {"count/pods": "1"},
    ),
    "init container maximums override sum of containers": (
        {
            "initContainers": [
                _c({"cpu": "4", "memory": "100M", DONGLE: "4"}, {"cpu": "8", "memory": "200M", DONGLE: "4"}),
                _c({"cpu": "1", "memory": "50M", DONGLE: "2"}, {"cpu": "2", "memory": "100M", DONGLE: "2"}),
            ],
            "containers": [
                _c({"cpu": "1", "memory": "50M", DONGLE: "1"}, {"cpu": "2", "memory": "100M", DONGLE: "1"}),
                _c({"cpu": "2", "memory": "25M", DONGLE: "2"}, {"cpu": "5", "memory": "50M", DONGLE: "2"}),
            ],
        },
        "Pending",
        {
            "requests.cpu": "4",
            "requests.memory": "100M",
            "limits.cpu": "8",
            "limits.memory": "200M",
            "cpu": "4",
            "memory": "100M",
            f"requests.{DONGLE}": "4",
            **ONE_POD,
        },
    ),
    "count pod overhead as usage": (
        {"overhead": {"cpu": "1"}, "containers": [_c({"cpu": "1"}, {"cpu": "2"})]},
        "Pending",
        {"requests.cpu": "2", "limits.cpu": "3", "cpu": "2", **ONE_POD},
    ),
    "pod-level CPU": (
        {"resources": {"requests": CPU_1M, "limits": {"cpu": "2m"}}},
        "Pending",
        {"requests.cpu": "1m", "limits.cpu": "2m", "cpu": "1m", **ONE_POD},
    ),
    "pod-level Memory": (
        {"resources": {"requests": {"memory": "1Mi"}, "limits": {"memory": "2Mi"}}},
        "Pending",
        {"requests.memory": "1Mi", "limits.memory": "2Mi", "memory": "1Mi", **ONE_POD},
    ),
    "pod-level memory with container-level ephemeral storage": (
        {
            "resources": {"requests": {"memory": "1Mi"}, "limits": {"memory": "2Mi"}},
            "containers": [_c({"ephemeral-storage": "32Mi"}, {"ephemeral-storage": "64Mi"})],
        },
        "Pending",
        {
            "ephemeral-storage": "32Mi",
            "requests.ephemeral-storage": "32Mi",
            "limits.ephemeral-storage": "64Mi",
            "requests.memory": "1Mi",
            "limits.memory": "2Mi",
            "memory": "1Mi",
            **ONE_POD,
        },
    ),
}


USAGE_CASES = [  # TestPodEvaluatorUsage's case names in the copy read (not vendored)
    "init container CPU",
    "init container MEM",
    "init container local ephemeral storage",
    "init container hugepages",
    "init container extended resources",
    "init container implicit extended resources",
    "container CPU",
    "container MEM",
    "container local ephemeral storage",
    "container hugepages",
    "container extended resources",
    "container implicit extended resources",
    "terminated generic count still appears",
    "init container maximums override sum of containers",
    "pod deletion timestamp exceeded",
    "pod deletion timestamp not exceeded",
    "count pod overhead as usage",
    "pod-level CPU",
    "pod-level Memory",
    "pod-level memory with container-level ephemeral storage",
]


def test_every_usage_case_is_run_or_skipped():
    assert_covered(USAGE_CASES, USAGE, SKIPPED_USAGE)


@pytest.mark.parametrize("name", USAGE)
def test_pod_evaluator_usage(name):
    spec, phase, expected = USAGE[name]
    assert quota_usage(spec, phase) == _quantities(expected)
