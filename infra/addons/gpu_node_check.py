"""The startup GPU check: a new GPU node takes no training pod before its GPUs passed a check.

GPU nodes start with STARTUP_TAINT, which training pods never tolerate. One DaemonSet per vendor and GPU
count runs gpu_node_check_script.py on each such node (image CHECK_IMAGE, the CPU image's Python base):
it checks the GPUs and removes the taint from its own node, or after a few failures deletes the node's
NodeClaim, since nothing else replaces a Karpenter node that keeps a startup taint (karpenter 1.14.1
statenode.go Taints(): pending pods count as placed on it). Its rights, `patch` on nodes and `delete` on
NodeClaims, are narrowed by two ValidatingAdmissionPolicies to its own node. docs/node-health.md
"Startup GPU check" has the whole story.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from infra.accelerators import CATALOG, Vendor
from infra.contract import INSTANCE_TYPE_LABEL, PoolTaint, toleration_spec

NAME = "gpu-node-check"
STARTUP_TAINT = PoolTaint(key="mlops-eks.io/gpu-check", value="pending", effect="NoSchedule")
CHECK_IMAGE = (
    "python:3.13.16-slim-trixie@sha256:6906dca82c0e83d5994bbf2e7fc33e6b63ce3e7f27c30eafd01dfabeb3c90bf3"
)
SCRIPT = Path(__file__).with_name("gpu_node_check_script.py")
SCRIPT_KEY = "gpu_node_check.py"
# Who the API server says the check's pods are (the token's node name, k8s.io/apiserver serviceaccount
# NodeNameKey); the admission policies bind to it.
NODE_NAME_EXTRA = "authentication.kubernetes.io/node-name"
RUN_AS = 65534  # nobody: nvidia-smi only reads, the GPU device files and sysfs are world-readable
# pulumi-kubernetes's annotation that skips its await logic for a resource (pulumi/pulumi-kubernetes#417).
SKIP_AWAIT = {"pulumi.com/skipAwait": "true"}
NODE_CLAIMS = {"apiGroups": ["karpenter.sh"], "resources": ["nodeclaims"]}
VENDORS: tuple[Vendor, ...] = ("nvidia", "amd")


def service_account_user(namespace: str) -> str:
    return f"system:serviceaccount:{namespace}:{NAME}"


def gpu_counts(instance_types: Sequence[str], vendor: Vendor = "nvidia") -> dict[int, list[str]]:
    """`vendor`'s instance types (of the stack's GPU pools) grouped by their GPU count; others are left
    out."""
    counts: dict[int, list[str]] = {}
    for acc in CATALOG.values():
        for t in acc.instance_types:
            if acc.vendor == vendor and t.name in instance_types:
                counts.setdefault(t.gpus, []).append(t.name)
    return {n: sorted(set(types)) for n, types in sorted(counts.items())}


def _meta(name: str, namespace: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": {"app.kubernetes.io/name": NAME}}
    if namespace:
        meta["namespace"] = namespace
    return meta


def _container(vendor: Vendor, expected_gpus: int, image: str) -> dict[str, Any]:
    # The script checks an NVIDIA node unless told GPU_VENDOR=amd; only NVIDIA's runtime needs the devices.
    gpus = (
        {"NVIDIA_VISIBLE_DEVICES": "all", "NVIDIA_DRIVER_CAPABILITIES": "utility"}
        if vendor == "nvidia"
        else {"GPU_VENDOR": vendor}
    )
    env = {
        "EXPECTED_GPUS": str(expected_gpus),
        "STARTUP_TAINT_KEY": STARTUP_TAINT.key,
        **gpus,
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


def _vendor_node_selector(vendor: Vendor) -> dict[str, str]:
    """The labels every GPU node of `vendor` carries (what the vendor's device plugin selects too)."""
    label_sets = [a.node_labels.items() for a in CATALOG.values() if a.vendor == vendor]
    return dict(sorted(set(label_sets[0]).intersection(*label_sets[1:])))


def daemon_set(
    namespace: str, expected_gpus: int, instance_types: Sequence[str], image: str, vendor: Vendor = "nvidia"
) -> dict[str, Any]:
    # An NVIDIA DaemonSet's name and selector name no vendor (and a live selector cannot change), so
    # another vendor's pods differ in `app.kubernetes.io/name`, which every selector matches: no
    # DaemonSet selects another's pods (test_gpu_node_check_amd.py).
    app = NAME if vendor == "nvidia" else f"{NAME}-{vendor}"
    name = f"{app}-{expected_gpus}gpu"
    selector = {"app.kubernetes.io/name": app, "mlops-eks.io/expected-gpus": str(expected_gpus)}
    gpu_taints = sorted({a.taint for a in CATALOG.values() if a.vendor == vendor}, key=lambda t: t.key)
    tolerations = [toleration_spec(STARTUP_TAINT), *(toleration_spec(t, any_value=True) for t in gpu_taints)]
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {**_meta(name, namespace), "annotations": SKIP_AWAIT},
        "spec": {
            "selector": {"matchLabels": selector},
            "template": {
                "metadata": {"labels": selector},
                "spec": {
                    "serviceAccountName": NAME,
                    "priorityClassName": "system-node-critical",
                    "nodeSelector": _vendor_node_selector(vendor),
                    "affinity": _instance_type_affinity(instance_types),
                    "tolerations": tolerations,
                    "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
                    "containers": [_container(vendor, expected_gpus, image)],
                    "volumes": [{"name": "check", "configMap": {"name": NAME}}],
                },
            },
        },
    }


def _own_node(node_name: str) -> str:
    """CEL: the requester's token is bound to a pod on the node `node_name` (an expression) names."""
    extra = "request.userInfo.extra"
    return f"has({extra}) && '{NODE_NAME_EXTRA}' in {extra} && {extra}['{NODE_NAME_EXTRA}'] == [{node_name}]"


def _policy(name: str, namespace: str, rule: dict[str, Any], validations: list[dict[str, Any]]) -> list[dict]:
    """A ValidatingAdmissionPolicy on the check's own requests matching `rule`, and its binding. Each
    refusal answers 403 Forbidden (the default, 422 Invalid, reads like a failed JSON patch `test`)."""
    user = service_account_user(namespace)
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": _meta(name),
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [rule]},
            "matchConditions": [{"name": NAME, "expression": f"request.userInfo.username == '{user}'"}],
            "validations": [{**v, "reason": "Forbidden"} for v in validations],
        },
    }
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": _meta(name),
        "spec": {"policyName": name, "validationActions": ["Deny"]},
    }
    return [policy, binding]


def node_claim_policy(namespace: str) -> list[dict[str, Any]]:
    """The check may delete only its own node's NodeClaim: on a DELETE the policy sees the stored claim as
    `oldObject`."""
    claim_node = "oldObject.status.nodeName"
    validation = {
        "expression": f"has(oldObject.status) && has({claim_node}) && {_own_node(claim_node)}",
        "message": "the GPU node check may delete only the NodeClaim of the node its own pod runs on",
    }
    rule = {**NODE_CLAIMS, "apiVersions": ["*"], "operations": ["DELETE"]}
    return _policy(f"{NAME}-nodeclaim", namespace, rule, [validation])


def admission_policy(namespace: str) -> list[dict[str, Any]]:
    """The ValidatingAdmissionPolicy on node updates and its binding (module docstring)."""
    key = STARTUP_TAINT.key

    def taints(obj: str) -> str:
        return f"(has({obj}.spec.taints) ? {obj}.spec.taints : [])"

    def same(field: str, empty: str) -> str:
        return (
            f"(has(object.{field}) ? object.{field} : {empty}) == "
            f"(has(oldObject.{field}) ? oldObject.{field} : {empty})"
        )

    unchanged = [
        ("metadata.labels", "{}"),
        ("metadata.annotations", "{}"),
        ("metadata.finalizers", "[]"),
        ("metadata.ownerReferences", "[]"),
        ("spec.unschedulable", "false"),
    ]
    validations = [
        {
            "expression": _own_node("object.metadata.name"),
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
    return _policy(NAME, namespace, nodes, validations)


def objects(namespace: str, instance_types: Sequence[str], image: str = CHECK_IMAGE) -> list[dict[str, Any]]:
    """Everything the check needs, for the GPU instance types among `instance_types`; [] without any."""
    counts = {vendor: gpu_counts(instance_types, vendor) for vendor in VENDORS}
    if not any(counts.values()):
        return []
    rbac: list[dict[str, Any]] = [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _meta(NAME, namespace)},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": _meta(NAME),
            "rules": [
                {"apiGroups": [""], "resources": ["nodes"], "verbs": ["patch"]},
                {**NODE_CLAIMS, "verbs": ["delete"]},
            ],
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
    daemon_sets = [
        daemon_set(namespace, n, types, image, vendor)
        for vendor, by_count in counts.items()
        for n, types in by_count.items()
    ]
    policies = [*admission_policy(namespace), *node_claim_policy(namespace)]
    return [*rbac, *policies, config_map, *daemon_sets]


def startup_taints(accelerator: str, *, enabled: bool) -> tuple[PoolTaint, ...]:
    """The startup taints of a pool of `accelerator`: STARTUP_TAINT while the check is on, if the check
    knows its vendor (a node no DaemonSet checks would keep the taint for good)."""
    return (STARTUP_TAINT,) if enabled and CATALOG[accelerator].vendor in VENDORS else ()
