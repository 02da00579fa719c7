"""The startup GPU check: a new NVIDIA GPU node takes no training pod before its GPUs passed a check.

Every NVIDIA GPU node source starts its nodes with STARTUP_TAINT (a Karpenter NodePool as a
`startupTaints` entry, which Karpenter expects something else to remove and does not count against
pending pods; a managed node group as one more taint of the group). Training pods never tolerate it
(workloads/pod.py tolerates a pool's `taints` only; the contract exports it apart, as `startup_taints`).
The gpu-node-check DaemonSet does: on each such node it runs gpu_node_check_script.py, which checks the
node's GPUs with nvidia-smi and then removes the taint from its own node.

The image: the platform stack cannot run the trainer's image, which lives in this stack's own ECR
repository and is pushed only after the stack exists; a torch image would also be gigabytes pulled before
every new node takes a job. The check needs only Python: CHECK_IMAGE is the Python base the CPU image is
built from (docker/cpu/Dockerfile, pinned by digest; a test keeps the two equal). The NVIDIA container
runtime of the EKS GPU AMIs adds nvidia-smi and the GPUs to any container that sets
NVIDIA_VISIBLE_DEVICES=all, as the DCGM exporter's pods do: the pod requests no `nvidia.com/gpu`, so it
runs before the device plugin, and its pods differ only in the GPU count they expect (one DaemonSet per
count, selected by instance type).

Rights: the taint is on the Node object, so the check needs `patch` on nodes, a cluster-scoped right
(RBAC cannot name the node a pod runs on). It gets that verb alone (no get, list, update, delete, nor
nodes/status), and a ValidatingAdmissionPolicy narrows it to what it is for: its service account may
only change the node its own pod is bound to (the node name the API server records for a pod-bound
service account token: user extra `authentication.kubernetes.io/node-name`, k8s.io/apiserver
pkg/authentication/serviceaccount NodeNameKey, on by default in every Kubernetes version the platform
allows) and only by removing
the startup taint: labels, annotations, finalizers, owner references, the other taints and
`unschedulable` stay as they were.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from infra.accelerators import CATALOG
from infra.contract import INSTANCE_TYPE_LABEL, PoolTaint, toleration_spec

NAME = "gpu-node-check"
STARTUP_TAINT = PoolTaint(key="mlops-eks.io/gpu-check", value="pending", effect="NoSchedule")
CHECK_IMAGE = (
    "python:3.13.16-slim-trixie@sha256:6906dca82c0e83d5994bbf2e7fc33e6b63ce3e7f27c30eafd01dfabeb3c90bf3"
)
SCRIPT = Path(__file__).with_name("gpu_node_check_script.py")
SCRIPT_KEY = "gpu_node_check.py"
# Who the API server says the check's pods are; the admission policy binds to it.
NODE_NAME_EXTRA = "authentication.kubernetes.io/node-name"
RUN_AS = 65534  # nobody: nvidia-smi only reads, and the GPU device files are world-readable


def service_account_user(namespace: str) -> str:
    return f"system:serviceaccount:{namespace}:{NAME}"


def gpu_counts(instance_types: Sequence[str]) -> dict[int, list[str]]:
    """NVIDIA instance types (of the stack's GPU pools) grouped by their GPU count; others are left out."""
    counts: dict[int, list[str]] = {}
    for acc in CATALOG.values():
        for t in acc.instance_types:
            if acc.vendor == "nvidia" and t.name in instance_types:
                counts.setdefault(t.gpus, []).append(t.name)
    return {n: sorted(set(types)) for n, types in sorted(counts.items())}


def _meta(name: str, namespace: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": {"app.kubernetes.io/name": NAME}}
    if namespace:
        meta["namespace"] = namespace
    return meta


def _container(expected_gpus: int, image: str) -> dict[str, Any]:
    env = {
        "EXPECTED_GPUS": str(expected_gpus),
        "STARTUP_TAINT_KEY": STARTUP_TAINT.key,
        "NVIDIA_VISIBLE_DEVICES": "all",
        "NVIDIA_DRIVER_CAPABILITIES": "utility",
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    return {
        "name": "check",
        "image": image,
        "command": ["python", f"/check/{SCRIPT_KEY}"],
        "env": [{"name": k, "value": v} for k, v in env.items()]
        + [{"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}],
        "resources": {
            "requests": {"cpu": "10m", "memory": "32Mi"},
            "limits": {"cpu": "100m", "memory": "64Mi"},
        },
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "runAsNonRoot": True,
            "runAsUser": RUN_AS,
            "runAsGroup": RUN_AS,
            "capabilities": {"drop": ["ALL"]},
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "volumeMounts": [{"name": "check", "mountPath": "/check", "readOnly": True}],
    }


def _instance_type_affinity(instance_types: Sequence[str]) -> dict[str, Any]:
    term = {
        "matchExpressions": [{"key": INSTANCE_TYPE_LABEL, "operator": "In", "values": list(instance_types)}]
    }
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}}


def daemon_set(
    namespace: str, expected_gpus: int, instance_types: Sequence[str], image: str
) -> dict[str, Any]:
    name = f"{NAME}-{expected_gpus}gpu"
    selector = {"app.kubernetes.io/name": NAME, "mlops-eks.io/expected-gpus": str(expected_gpus)}
    gpu_taint = CATALOG["t4"].taint
    tolerations = [toleration_spec(STARTUP_TAINT), toleration_spec(gpu_taint, any_value=True)]
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": _meta(name, namespace),
        "spec": {
            "selector": {"matchLabels": selector},
            "template": {
                "metadata": {"labels": selector},
                "spec": {
                    "serviceAccountName": NAME,
                    "priorityClassName": "system-node-critical",
                    "nodeSelector": {"nvidia.com/gpu.present": "true"},
                    "affinity": _instance_type_affinity(instance_types),
                    "tolerations": tolerations,
                    "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
                    "containers": [_container(expected_gpus, image)],
                    "volumes": [{"name": "check", "configMap": {"name": NAME}}],
                },
            },
        },
    }


def admission_policy(namespace: str) -> list[dict[str, Any]]:
    """The ValidatingAdmissionPolicy and its binding (module docstring)."""
    key = STARTUP_TAINT.key

    def taints(obj: str) -> str:
        return f"(has({obj}.spec.taints) ? {obj}.spec.taints : [])"

    def same(field: str, empty: str) -> str:
        return (
            f"(has(object.{field}) ? object.{field} : {empty}) == "
            f"(has(oldObject.{field}) ? oldObject.{field} : {empty})"
        )

    unchanged = [
        ("metadata.labels", "{}"), ("metadata.annotations", "{}"), ("metadata.finalizers", "[]"),
        ("metadata.ownerReferences", "[]"), ("spec.unschedulable", "false"),
    ]  # fmt: skip
    validations = [
        {
            "expression": f"has(request.userInfo.extra) && '{NODE_NAME_EXTRA}' in request.userInfo.extra && "
            f"request.userInfo.extra['{NODE_NAME_EXTRA}'] == [object.metadata.name]",
            "message": "the GPU node check may change only the node its own pod runs on",
        },
        {
            "expression": f"{taints('object')}.all(t, t in {taints('oldObject')}) && "
            f"{taints('oldObject')}.all(t, t.key == '{key}' || t in {taints('object')})",
            "message": f"the GPU node check may only remove the taint {key}",
        },
        {
            "expression": " && ".join(same(field, empty) for field, empty in unchanged),
            "message": "the GPU node check may change nothing but the node's taints",
        },
    ]
    nodes = {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["UPDATE"], "resources": ["nodes"]}
    user = service_account_user(namespace)
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": _meta(NAME),
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [nodes]},
            "matchConditions": [
                {"name": "gpu-node-check", "expression": f"request.userInfo.username == '{user}'"}
            ],
            "validations": validations,
        },
    }
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": _meta(NAME),
        "spec": {"policyName": NAME, "validationActions": ["Deny"]},
    }
    return [policy, binding]


def objects(namespace: str, instance_types: Sequence[str], image: str = CHECK_IMAGE) -> list[dict[str, Any]]:
    """Everything the check needs, for the NVIDIA instance types among `instance_types`; [] without any."""
    counts = gpu_counts(instance_types)
    if not counts:
        return []
    rbac: list[dict[str, Any]] = [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _meta(NAME, namespace)},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": _meta(NAME),
            "rules": [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["patch"]}],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": _meta(NAME),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": NAME},
            "subjects": [{"kind": "ServiceAccount", "name": NAME, "namespace": namespace}],
        },
    ]
    config_map: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _meta(NAME, namespace),
        "data": {SCRIPT_KEY: SCRIPT.read_text()},
    }
    daemon_sets = [daemon_set(namespace, n, types, image) for n, types in counts.items()]
    return [*rbac, *admission_policy(namespace), config_map, *daemon_sets]


def startup_taints(accelerator: str, *, enabled: bool) -> tuple[PoolTaint, ...]:
    """The startup taints of a pool of `accelerator`: STARTUP_TAINT on NVIDIA pools while the check is on
    (AMD nodes have no nvidia-smi: they are not checked)."""
    return (STARTUP_TAINT,) if enabled and CATALOG[accelerator].vendor == "nvidia" else ()
