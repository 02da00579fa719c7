"""The system namespaces' admission policies (infra/addons/system_admission.py) judged together with the
RBAC the platform's charts render, as the API server would apply them (sim/kubernetes/admission.py): no
controller that RBAC lets create pods anywhere can create one in kube-system, gpu-system or monitoring;
what the platform itself installs there still goes in (a `pulumi up` passes); the privileged service
accounts run only in their own workloads."""

from __future__ import annotations

import pytest

from infra.addons import system_admission
from infra.addons.system_admission import SERVICE_ACCOUNTS_POLICY, WORKLOADS_POLICY, system_namespaces
from policy.rbac import grants
from sim.kubernetes.admission import Request, refusals

CREATOR = "arn:aws:sts::210987654321:assumed-role/deployer/first-deploy"
ADMIN = "arn:aws:iam::210987654321:role/platform/ci-admin"
OBJECTS = system_admission.objects([CREATOR, ADMIN])
WORKLOAD_RESOURCES = [
    ("", "pods"),
    ("apps", "deployments"),
    ("apps", "daemonsets"),
    ("apps", "statefulsets"),
    ("apps", "replicasets"),
    ("batch", "jobs"),
    ("batch", "cronjobs"),
]
KIND_OF = {
    "pods": "Pod",
    "deployments": "Deployment",
    "daemonsets": "DaemonSet",
    "statefulsets": "StatefulSet",
    "replicasets": "ReplicaSet",
    "jobs": "Job",
    "cronjobs": "CronJob",
}


def _workload(
    kind: str, name: str, namespace: str, account: str = "default", owner: dict | None = None
) -> dict:
    pod = {"serviceAccountName": account, "containers": [{"name": "c", "image": "x:1"}]}
    meta: dict = {"name": name, "namespace": namespace}
    if owner:
        meta["ownerReferences"] = [{**owner, "controller": True, "apiVersion": "apps/v1", "uid": "u"}]
    if kind == "Pod":
        spec: dict = pod
    elif kind == "CronJob":
        spec = {"schedule": "@daily", "jobTemplate": {"spec": {"template": {"spec": pod}}}}
    else:
        spec = {"template": {"spec": pod}}
    return {"apiVersion": "v1", "kind": kind, "metadata": meta, "spec": spec}


def _create(
    resource: str,
    namespace: str,
    username: str,
    *,
    name: str = "w",
    account: str = "default",
    owner: dict | None = None,
    extra: dict | None = None,
    group: str | None = None,
) -> list[str]:
    groups = {r: g for g, r in WORKLOAD_RESOURCES}
    request = Request(
        operation="CREATE",
        group=groups[resource] if group is None else group,
        version="v1",
        resource=resource,
        namespace=namespace,
        name=name,
        username=username,
        extra=extra or {},
        object=_workload(KIND_OF[resource], name, namespace, account, owner),
    )
    return refusals(OBJECTS, request)


def _pod_creators(objects: list[dict]) -> set[tuple[str, str]]:
    """(namespace, name) of every service account a rendered ClusterRoleBinding lets create pods or a
    workload kind in every namespace."""
    creators = {
        o["metadata"]["name"]
        for o in objects
        if o["kind"] == "ClusterRole"
        and any(grants(r, g, res, "create") for r in o.get("rules") or [] for g, res in WORKLOAD_RESOURCES)
    }
    return {
        (s["namespace"], s["name"])
        for o in objects
        if o["kind"] == "ClusterRoleBinding" and o["roleRef"]["name"] in creators
        for s in o.get("subjects") or []
        if s["kind"] == "ServiceAccount"
    }


def test_no_controller_the_charts_let_create_pods_can_create_one_in_a_system_namespace(rendered):
    creators = set().union(*(_pod_creators(r.all_objects) for r in rendered.values()))
    # The operators whose upstream RBAC creates pods (or workloads) in every namespace.
    assert {("kuberay-system", "kuberay-operator"), ("kubeflow-system", "jobset-controller")} <= creators
    for namespace, account in sorted(creators):
        user = f"system:serviceaccount:{namespace}:{account}"
        for system in system_namespaces():
            for _, resource in WORKLOAD_RESOURCES:
                found = _create(resource, system, user)
                assert found and "refused for " + user in found[0], (user, system, resource)
        assert _create("pods", "team-a", user) == []  # their job namespaces are theirs


@pytest.mark.parametrize(
    ("resource", "namespace", "username", "extra"),
    [
        ("pods", "kube-system", "system:serviceaccount:kube-system:replicaset-controller", {}),
        ("pods", "gpu-system", "system:serviceaccount:kube-system:daemon-set-controller", {}),
        ("replicasets", "kube-system", "system:serviceaccount:kube-system:deployment-controller", {}),
        ("daemonsets", "kube-system", "eks:addon-manager", {}),
        ("pods", "kube-system", "system:node:ip-10-0-1-2.ec2.internal", {}),
        # pulumi up as the creator (an STS session of its role) and as a listed admin (a role with a path).
        ("deployments", "monitoring", "arn:aws:sts::210987654321:assumed-role/deployer/first-deploy", {}),
        (
            "daemonsets",
            "gpu-system",
            "someone",
            {"canonicalArn": ["arn:aws:iam::210987654321:role/ci-admin"]},
        ),
    ],
)
def test_the_kubernetes_controllers_eks_and_the_deployers_create_workloads_there(
    resource, namespace, username, extra
):
    assert _create(resource, namespace, username, extra=extra) == []


def test_the_prometheus_operator_creates_only_its_own_statefulsets_in_monitoring():
    operator = "system:serviceaccount:monitoring:kube-prometheus-stack-operator"
    ok = "prometheus-kube-prometheus-stack-prometheus"
    assert _create("statefulsets", "monitoring", operator, name=ok) == []
    assert (
        _create(
            "statefulsets", "monitoring", operator, name="alertmanager-kube-prometheus-stack-alertmanager"
        )
        == []
    )
    assert _create("statefulsets", "monitoring", operator, name="miner")
    assert _create("pods", "monitoring", operator, name=ok)
    assert _create("statefulsets", "kube-system", operator, name=ok)


def test_an_identity_that_only_resembles_a_deployer_is_refused():
    assert _create("deployments", "kube-system", "arn:aws:sts::210987654321:assumed-role/deployer-2/x")
    assert _create(
        "deployments", "kube-system", "x", extra={"canonicalArn": ["arn:aws:iam::111122223333:role/deployer"]}
    )
    assert _create("deployments", "kube-system", "eks-admin")  # not EKS's: no colon


@pytest.mark.parametrize(
    ("resource", "name", "account", "owner", "allowed"),
    [
        ("pods", "karpenter-abc-1", "karpenter", {"kind": "ReplicaSet", "name": "karpenter-abc"}, True),
        ("pods", "x", "karpenter", {"kind": "ReplicaSet", "name": "miner-abc"}, False),
        ("pods", "x", "karpenter", None, False),
        ("pods", "aws-node-1", "aws-node", {"kind": "DaemonSet", "name": "aws-node"}, True),
        ("daemonsets", "aws-node", "aws-node", None, True),
        ("deployments", "miner", "aws-node", None, False),
        ("cronjobs", "miner", "ebs-csi-controller-sa", None, False),
        ("replicasets", "ebs-csi-controller-7f9", "ebs-csi-controller-sa", None, True),
        ("deployments", "metrics-server", "metrics-server", None, True),
    ],
)
def test_the_privileged_service_accounts_run_only_in_their_own_workloads(
    resource, name, account, owner, allowed
):
    # Created by those allowed to create there at all: what the second policy adds.
    user = (
        "system:serviceaccount:kube-system:replicaset-controller"
        if resource == "pods"
        else "eks:addon-manager"
    )
    found = _create(resource, "kube-system", user, name=name, account=account, owner=owner)
    assert (found == []) is allowed, found
    if not allowed:
        assert any(f"service account {account} runs only in its own workload" in m for m in found)


def test_every_workload_the_platform_renders_in_a_system_namespace_is_admitted_from_the_deployer(rendered):
    """What `pulumi up` installs there (the releases' Deployments, DaemonSets, StatefulSets, Jobs) passes
    both policies when the deployer creates it, and its pods pass when their controller creates them."""
    plural = {v: k for k, v in KIND_OF.items()}
    seen = 0
    for result in rendered.values():
        for o in result.all_objects:
            ns = o["metadata"].get("namespace", "")
            if o["kind"] not in plural or ns not in system_namespaces():
                continue
            spec = o["spec"]["jobTemplate"]["spec"] if o["kind"] == "CronJob" else o["spec"]
            account = spec["template"]["spec"].get("serviceAccountName", "default")
            request = Request(
                operation="CREATE",
                group=o["apiVersion"].rpartition("/")[0],
                version="v1",
                resource=plural[o["kind"]],
                namespace=ns,
                name=o["metadata"]["name"],
                username="x",
                extra={"canonicalArn": ["arn:aws:iam::210987654321:role/ci-admin"]},
                object=o,
            )
            assert refusals(OBJECTS, request) == [], o["metadata"]["name"]
            if o["kind"] == "Deployment":
                owner = {"kind": "ReplicaSet", "name": f"{o['metadata']['name']}-5d4f"}
                user = "system:serviceaccount:kube-system:replicaset-controller"
                assert _create("pods", ns, user, name="p", account=account, owner=owner) == []
            seen += 1
    assert seen >= 8


def test_the_platform_registers_both_policies_bound_and_before_its_releases(dev):
    policies = {
        r.inputs["metadata"]["name"]: r
        for r in dev.of_type("kubernetes:admissionregistration.k8s.io/v1:ValidatingAdmissionPolicy")
    }
    assert {WORKLOADS_POLICY, SERVICE_ACCOUNTS_POLICY} <= set(policies)
    bindings = dev.of_type("kubernetes:admissionregistration.k8s.io/v1:ValidatingAdmissionPolicyBinding")
    assert {b.inputs["spec"]["policyName"] for b in bindings} >= {WORKLOADS_POLICY, SERVICE_ACCOUNTS_POLICY}
    expression = policies[WORKLOADS_POLICY].inputs["spec"]["validations"][0]["expression"]
    for arn in dev.config.admin_principal_arns:
        assert arn.rsplit("/", 1)[-1] in expression
    deps = dev.dependencies()
    binding_urns = {
        e.urn for r, e in zip(dev.resources, dev.edges, strict=True) if r.type.endswith("PolicyBinding")
    }
    karpenter = next(k for k in deps if k == ("kubernetes:helm.sh/v3:Release", "karpenter"))
    assert deps[karpenter] & binding_urns or _after(dev, karpenter, binding_urns)


def _after(synth, key, urns) -> bool:
    """Whether the registration `key` depends, directly or through its parents' dependencies, on `urns`."""
    deps = synth.dependencies()
    by_urn = {e.urn: (r.type, r.name) for r, e in zip(synth.resources, synth.edges, strict=True)}
    seen, todo = set(), list(deps[key])
    while todo:
        urn = todo.pop()
        if urn in urns:
            return True
        if urn in seen or urn not in by_urn:
            continue
        seen.add(urn)
        todo += deps.get(by_urn[urn], ())
    return False
