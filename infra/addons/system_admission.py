"""Who may run workloads in the system namespaces, as two ValidatingAdmissionPolicies.

kube-system, gpu-system and monitoring run pods as the node (privileged Pod Security: node agents,
device plugins, node-exporter) and hold the platform's strongest identities (Karpenter, the EBS CSI
controller, the VPC CNI). A controller that can create pods anywhere (most operators' RBAC can) could
start one there and own the node, then every Pod Identity credential on it. So:

- `mlops-eks-system-workloads`: in those namespaces, only these create or update pods, ephemeral
  containers and the workload kinds (Deployment, DaemonSet, StatefulSet, ReplicaSet, Job, CronJob): the
  Kubernetes controllers that turn workloads into pods (kube-controller-manager's service accounts),
  EKS's own components (usernames starting `eks:`, which access entries cannot take: the add-on manager
  installs the managed add-ons), the kubelet's mirror pods, the deployers (the cluster's creator and
  `adminPrincipalArns`, through which `pulumi up` installs the releases), and the platform's controllers
  for their own workloads (the Prometheus Operator for the Prometheus and Alertmanager StatefulSets in
  monitoring). Every other operator is refused there, whatever its RBAC says.
- `mlops-eks-privileged-service-accounts`: in kube-system, a pod or workload that runs as karpenter,
  ebs-csi-controller-sa or aws-node is their own workload (by name, a pod by its controller's name),
  whoever creates it.

Break glass: a cluster admin lifts a policy by deleting its binding (`kubectl delete
validatingadmissionpolicybinding mlops-eks-system-workloads`, logged in the audit log); the next
`pulumi up` puts it back. docs/guardrails.md "Admission policies of the system namespaces".
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from infra.component_args import ComponentArgs, child_options
from infra.config.cluster_rules import iam_principal
from infra.contract import POD_SECURITY

WORKLOADS_POLICY = "mlops-eks-system-workloads"
SERVICE_ACCOUNTS_POLICY = "mlops-eks-privileged-service-accounts"
LABELS = {"app.kubernetes.io/name": "mlops-eks-system-admission"}
NAMESPACE_LABEL = "kubernetes.io/metadata.name"  # every namespace carries its name as this label


def system_namespaces() -> list[str]:
    """kube-system and the platform's namespaces whose pods run as the node (privileged Pod Security)."""
    return ["kube-system", *sorted(ns for ns, (level, _) in POD_SECURITY.items() if level == "privileged")]


# kube-controller-manager's service accounts that create or update pods and workload objects
# (kubernetes plugin/pkg/auth/authorizer/rbac/bootstrappolicy/controller_policy.go): the workload
# controllers, the garbage collector (owner references) and the namespace controller.
CONTROLLERS = (
    "cronjob-controller",
    "daemon-set-controller",
    "deployment-controller",
    "generic-garbage-collector",
    "job-controller",
    "namespace-controller",
    "replicaset-controller",
    "replication-controller",
    "statefulset-controller",
)
# The platform's controllers that create workloads in a system namespace, and which: (namespace, service
# account) -> (resource, object name prefixes). The Prometheus Operator makes the Prometheus and
# Alertmanager StatefulSets of the kube-prometheus-stack release.
OWN_WORKLOADS: dict[tuple[str, str], tuple[str, tuple[str, ...]]] = {
    ("monitoring", "kube-prometheus-stack-operator"): (
        "statefulsets",
        ("prometheus-kube-prometheus-stack-", "alertmanager-kube-prometheus-stack-"),
    ),
}
# Service accounts with the platform's strongest AWS roles, and the only workloads that may run as them:
# service account -> (workload kind, name) pairs; a pod by its controller (DaemonSet by name, ReplicaSet by
# its Deployment's name and a hash).
PRIVILEGED_SERVICE_ACCOUNTS: dict[str, dict[str, str]] = {
    "aws-node": {"DaemonSet": "aws-node"},
    "ebs-csi-controller-sa": {"Deployment": "ebs-csi-controller"},
    "karpenter": {"Deployment": "karpenter"},
}
WORKLOAD_RESOURCES = {
    "": ["pods", "pods/ephemeralcontainers"],
    "apps": ["deployments", "daemonsets", "statefulsets", "replicasets"],
    "batch": ["jobs", "cronjobs"],
}


def _cel_list(values: Sequence[str]) -> str:
    return "[" + ", ".join(f"'{v}'" for v in values) + "]"


def deployer_expression(deployer_arns: Sequence[str]) -> str:
    """CEL: the request comes from one of the deployers (role or user ARNs, or STS sessions of a role).
    EKS's authenticator gives a role's session the username `arn:<partition>:sts::<account>:assumed-role/
    <role>/<session>` and the extra `canonicalArn` `arn:<partition>:iam::<account>:role/<role>` (paths
    left out), a user its ARN as both."""
    canonical, prefixes = [], []
    for arn in deployer_arns:
        p = iam_principal(arn)
        if p is None:
            continue
        canonical.append(f"arn:{p.partition}:iam::{p.account}:{p.kind}/{p.name}")
        if p.kind == "role":
            prefixes.append(f"arn:{p.partition}:sts::{p.account}:assumed-role/{p.name}/")
    extra = "request.userInfo.extra"
    listed = _cel_list(canonical)
    checks = [
        f"(has({extra}) && 'canonicalArn' in {extra} && {extra}['canonicalArn'].exists(a, a in {listed}))"
    ]
    checks += [f"request.userInfo.username.startsWith('{p}')" for p in sorted(set(prefixes))]
    return " || ".join(checks) if canonical else "false"


def _own_workloads_expression() -> str:
    clauses = []
    for (ns, account), (resource, prefixes) in OWN_WORKLOADS.items():
        names = " || ".join(f"request.name.startsWith('{p}')" for p in prefixes)
        clauses.append(
            f"(request.userInfo.username == 'system:serviceaccount:{ns}:{account}' "
            f"&& request.namespace == '{ns}' && request.resource.resource == '{resource}' && ({names}))"
        )
    return " || ".join(clauses)


def workloads_policy(deployer_arns: Sequence[str]) -> dict[str, Any]:
    controllers = _cel_list([f"system:serviceaccount:kube-system:{c}" for c in CONTROLLERS])
    allowed = [
        f"request.userInfo.username in {controllers}",
        "request.userInfo.username == 'system:kube-controller-manager'",
        "request.userInfo.username.startsWith('eks:')",
        "(request.userInfo.username.startsWith('system:node:') && request.resource.resource == 'pods')",
        _own_workloads_expression(),
        deployer_expression(deployer_arns),
    ]
    rules = [
        {
            "apiGroups": [group],
            "apiVersions": ["*"],
            "operations": ["CREATE", "UPDATE"],
            "resources": resources,
        }
        for group, resources in WORKLOAD_RESOURCES.items()
    ]
    return _policy(
        WORKLOADS_POLICY,
        rules,
        [
            {
                "expression": " || ".join(f"({a})" for a in allowed),
                "messageExpression": "'in the system namespaces only the Kubernetes controllers, EKS, the "
                "deployers and the platform\\'s controllers for their own workloads create workloads; "
                "refused for ' + request.userInfo.username",
            }
        ],
    )


def _pod_spec_variable() -> str:
    return (
        "object.kind == 'Pod' ? object.spec : "
        "object.kind == 'CronJob' ? object.spec.jobTemplate.spec.template.spec : object.spec.template.spec"
    )


def service_accounts_policy() -> dict[str, Any]:
    """Pods and workloads in kube-system that run as a privileged service account are its own."""
    checks = []
    for account, owners in PRIVILEGED_SERVICE_ACCOUNTS.items():
        allowed = []
        for kind, name in owners.items():
            allowed.append(f"(object.kind == '{kind}' && object.metadata.name == '{name}')")
            if kind == "Deployment":
                allowed.append(f"(object.kind == 'ReplicaSet' && object.metadata.name.startsWith('{name}-'))")
                owner = f"(o.kind == 'ReplicaSet' && o.name.startsWith('{name}-'))"
            else:
                owner = f"(o.kind == '{kind}' && o.name == '{name}')"
            allowed.append(
                "(object.kind == 'Pod' && has(object.metadata.ownerReferences) && "
                f"object.metadata.ownerReferences.exists(o, has(o.controller) && o.controller && {owner}))"
            )
        checks.append(f"(variables.serviceAccount != '{account}' || {' || '.join(allowed)})")
    rules = [
        {
            "apiGroups": [group],
            "apiVersions": ["*"],
            "operations": ["CREATE", "UPDATE"],
            "resources": resources,
        }
        for group, resources in WORKLOAD_RESOURCES.items()
        if group != ""
    ] + [{"apiGroups": [""], "apiVersions": ["*"], "operations": ["CREATE", "UPDATE"], "resources": ["pods"]}]
    policy = _policy(
        SERVICE_ACCOUNTS_POLICY,
        rules,
        [
            {
                "expression": " && ".join(checks),
                "messageExpression": "'service account ' + variables.serviceAccount + ' runs only in its "
                "own workload in kube-system'",
            }
        ],
        namespaces=["kube-system"],
    )
    policy["spec"]["variables"] = [
        {"name": "podSpec", "expression": _pod_spec_variable()},
        {
            "name": "serviceAccount",
            "expression": "has(variables.podSpec.serviceAccountName) ? "
            "variables.podSpec.serviceAccountName : 'default'",
        },
    ]
    return policy


def _policy(
    name: str,
    rules: list[dict[str, Any]],
    validations: list[dict[str, Any]],
    namespaces: list[str] | None = None,
) -> dict[str, Any]:
    selector = {
        "matchExpressions": [
            {"key": NAMESPACE_LABEL, "operator": "In", "values": namespaces or system_namespaces()}
        ]
    }
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name, "labels": LABELS},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"namespaceSelector": selector, "resourceRules": rules},
            "validations": [{**v, "reason": "Forbidden"} for v in validations],
        },
    }


def binding(policy: dict[str, Any]) -> dict[str, Any]:
    name = policy["metadata"]["name"]
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name, "labels": LABELS},
        "spec": {"policyName": name, "validationActions": ["Deny"]},
    }


def objects(deployer_arns: Sequence[str]) -> list[dict[str, Any]]:
    """The two policies and their bindings, for a cluster deployed by `deployer_arns`."""
    policies = [workloads_policy(deployer_arns), service_accounts_policy()]
    return [*policies, *map(binding, policies)]


class SystemAdmissionArgs(ComponentArgs):
    # The cluster's creator and adminPrincipalArns: who runs `pulumi up`.
    deployer_arns: list[str]
    k8s_provider: k8s.Provider


class SystemAdmission(pulumi.ComponentResource):
    """The policies and their bindings; everything that installs into a system namespace comes after
    them (nothing of the platform's needs an exemption, so the order only makes the first deploy the
    test of the policies)."""

    def __init__(self, name: str, args: SystemAdmissionArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("mlops-eks:infra:SystemAdmission", name, None, opts)
        base = child_options(self, opts, provider=args.k8s_provider)
        policies = [workloads_policy(args.deployer_arns), service_accounts_policy()]
        self.resources: list[pulumi.Resource] = []
        for policy in policies:
            created = k8s.admissionregistration.v1.ValidatingAdmissionPolicy(
                f"{name}-{policy['metadata']['name']}",
                metadata=policy["metadata"],
                spec=policy["spec"],
                opts=base,
            )
            bound = binding(policy)
            self.resources.append(
                k8s.admissionregistration.v1.ValidatingAdmissionPolicyBinding(
                    f"{name}-{policy['metadata']['name']}-binding",
                    metadata=bound["metadata"],
                    spec=bound["spec"],
                    opts=pulumi.ResourceOptions.merge(base, pulumi.ResourceOptions(depends_on=[created])),
                )
            )
        self.register_outputs({"policies": [p["metadata"]["name"] for p in policies]})
