"""Who is admin of the cluster through AWS, and whether NetworkPolicies are enforced at all.

Cluster admin through EKS (an access policy association of AmazonEKSClusterAdminPolicy, or of
AmazonEKSAdminPolicy cluster-wide or in a system namespace; an access entry's or aws-auth's
`system:masters`, which no RBAC can take back) goes to named people: not an account root (every IAM
identity of the account allowed eks:* would be admin), not a wildcard, and, judged over the stack, not a
role that pods, nodes or an AWS service assume. `system:masters` is refused wherever it is mapped.
NetworkPolicies are objects the API server stores and the VPC CNI's network policy agent enforces:
without the vpc-cni add-on's `enableNetworkPolicy`, every default-deny of the platform is inert.

Standards: Amazon EKS Best Practices Guide, Identity and Access Management (use access entries, least
privilege, no system:masters; the EKS user guide deprecates aws-auth); CIS Amazon EKS Benchmark 4.1.1
(cluster-admin only where required); Amazon EKS User Guide, "Limit Pod traffic with Kubernetes network
policies" (the VPC CNI enforces them only with enableNetworkPolicy).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import yaml

from policy.core import Resource, Rule, StackRule, as_list, dig, known, policy_document, statements
from policy.iam_semantics import is_allow, principals
from policy.rbac import system_namespaces

ACCESS_ENTRY = "aws:eks/accessEntry:AccessEntry"
ASSOCIATION = "aws:eks/accessPolicyAssociation:AccessPolicyAssociation"
EKS_CLUSTER = "eks:index:Cluster"
CONFIG_MAPS = ("kubernetes:core/v1:ConfigMap", "kubernetes:core/v1:ConfigMapPatch")
ADDON = "aws:eks/addon:Addon"
VPC_CNI_COMPONENT = "eks:index:VpcCniAddon"
ROLE = "aws:iam/role:Role"
MASTERS = "system:masters"
CLUSTER_ADMIN_POLICY = "AmazonEKSClusterAdminPolicy"
ADMIN_POLICY = "AmazonEKSAdminPolicy"
ROOT = re.compile(r"^arn:aws[a-z-]*:iam::\d{12}:root$")


def _admin_grant(policy_arn: Any, scope: Any) -> str | None:
    """Which admin an access policy association hands out (None: none)."""
    name = str(policy_arn or "").rsplit("/", 1)[-1]
    kind = str(dig(scope, "type", default="cluster"))
    namespaces = {str(n) for n in as_list(dig(scope, "namespaces"))}
    if name == CLUSTER_ADMIN_POLICY:
        return "cluster-admin (AmazonEKSClusterAdminPolicy)"
    if name == ADMIN_POLICY and (kind == "cluster" or namespaces & system_namespaces()):
        where = (
            "cluster-wide"
            if kind == "cluster"
            else f"in {', '.join(sorted(namespaces & system_namespaces()))}"
        )
        return f"admin {where} (AmazonEKSAdminPolicy)"
    return None


def _principal_problem(arn: Any) -> str | None:
    text = str(arn or "")
    if ROOT.match(text):
        return f"{text} is an account root: every IAM identity of the account allowed to call EKS gets it"
    if "*" in text or "?" in text:
        return f"{text} is a pattern, not a principal"
    return None


def _associations(type_: str, inputs: Mapping[str, Any]) -> list[tuple[Any, Any, Any]]:
    """(principal ARN, policy ARN, access scope) of every access policy association a resource makes."""
    if type_ == ASSOCIATION:
        return [(dig(inputs, "principalArn"), dig(inputs, "policyArn"), dig(inputs, "accessScope"))]
    if type_ == EKS_CLUSTER:
        entries = dig(inputs, "accessEntries", default={})
        return [
            (dig(entry, "principalArn"), dig(p, "policyArn"), dig(p, "accessScope"))
            for entry in (entries.values() if isinstance(entries, Mapping) else [])
            for p in (dig(entry, "accessPolicies", default={}) or {}).values()
        ]
    return []


def _masters(type_: str, inputs: Mapping[str, Any]) -> Iterator[str]:
    """Where a resource maps someone into system:masters."""
    if type_ == ACCESS_ENTRY and MASTERS in [str(g) for g in as_list(dig(inputs, "kubernetesGroups"))]:
        yield f"access entry for {dig(inputs, 'principalArn')}"
    if type_ == EKS_CLUSTER:
        entries = dig(inputs, "accessEntries", default={})
        for name, entry in entries.items() if isinstance(entries, Mapping) else []:
            if MASTERS in [str(g) for g in as_list(dig(entry, "kubernetesGroups"))]:
                yield f"accessEntries.{name}"
        for key, arn_key in (("roleMappings", "roleArn"), ("userMappings", "userArn")):
            for m in as_list(dig(inputs, key)):
                if MASTERS in [str(g) for g in as_list(dig(m, "groups"))]:
                    yield f"{key} for {dig(m, arn_key)}"
    if type_ in CONFIG_MAPS and dig(inputs, "metadata", "name") == "aws-auth":
        for key in ("mapRoles", "mapUsers"):
            try:
                mapped = yaml.safe_load(str(dig(inputs, "data", key, default="[]")))
            except yaml.YAMLError:
                yield f"aws-auth {key} (not YAML: cannot be judged)"
                continue
            for m in as_list(mapped):
                if isinstance(m, Mapping) and MASTERS in [str(g) for g in as_list(m.get("groups"))]:
                    yield f"aws-auth {key} for {m.get('rolearn') or m.get('userarn')}"


def check_admin_access(type_: str, inputs: Mapping[str, Any]) -> Iterator[str]:
    for where in _masters(type_, inputs):
        yield f"{where} maps into {MASTERS}: admin that no RBAC or access policy can take back"
    for principal, policy_arn, scope in _associations(type_, inputs):
        grant = _admin_grant(policy_arn, scope)
        if grant and (problem := _principal_problem(principal)):
            yield f"{grant} for {problem}"


def _cni_enabled(value: Any) -> bool:
    return value is True or str(value).lower() == "true"


def check_network_policy_agent(type_: str, inputs: Mapping[str, Any]) -> Iterator[str]:
    if type_ == ADDON:
        if str(dig(inputs, "addonName")) != "vpc-cni":
            return
        raw = dig(inputs, "configurationValues", default="{}")
        try:
            values = json.loads(raw) if isinstance(raw, str) else raw
        except json.JSONDecodeError:
            yield "the vpc-cni add-on's configurationValues are not JSON: enableNetworkPolicy is unknown"
            return
        if not _cni_enabled(dig(values, "enableNetworkPolicy")):
            yield "the vpc-cni add-on runs without enableNetworkPolicy: no NetworkPolicy is enforced"
    elif type_ == EKS_CLUSTER:
        if dig(inputs, "useDefaultVpcCni") is True:
            yield "useDefaultVpcCni: EKS's bootstrapped VPC CNI enforces no NetworkPolicy"
        elif not _cni_enabled(dig(inputs, "vpcCniOptions", "enableNetworkPolicy")):
            yield "vpcCniOptions.enableNetworkPolicy is not true: no NetworkPolicy is enforced"
    elif not _cni_enabled(dig(inputs, "enableNetworkPolicy")):
        yield "the VPC CNI add-on runs without enableNetworkPolicy: no NetworkPolicy is enforced"


def _machine_role(role: Resource) -> str | None:
    """Who assumes a role of the stack, when it is not a person: a service or a web identity."""
    for s in statements(policy_document(dig(known(role.inputs), "assumeRolePolicy"))):
        if is_allow(s):
            machines = [f"{k}:{v}" for k, v in principals(s) if k.lower() in ("service", "federated")]
            if machines:
                return ", ".join(machines)
    return None


def check_admin_principals(resources: Sequence[Resource]) -> Iterator[tuple[str | None, str]]:
    """Admin associations whose principal is a role of the stack that a service, node or pod assumes."""
    roles = [r for r in resources if r.type == ROLE]
    for r in resources:
        inputs = known(r.inputs)
        deps = set((r.deps or {}).get("principalArn", ()))
        for principal, policy_arn, scope in _associations(r.type, inputs):
            grant = _admin_grant(policy_arn, scope)
            if not grant:
                continue
            for role in roles:
                named = role.name in deps or str(principal).rsplit("/", 1)[-1] == role.name
                if named and (machine := _machine_role(role)):
                    yield r.name, f"{grant} for role {role.name}, which {machine} assumes: it is not a person"


RULES = (
    Rule(
        name="eks-admin-access-for-named-people",
        description="Cluster admin through EKS (AmazonEKSClusterAdminPolicy; AmazonEKSAdminPolicy "
        "cluster-wide or in a system namespace) only for a named role or user, never an account root or a "
        "pattern; nobody mapped into system:masters (access entries, pulumi-eks mappings, aws-auth).",
        remediation="List the people's (or CI's) role ARNs in adminPrincipalArns; give others "
        "AmazonEKSEditPolicy or AmazonEKSViewPolicy in their namespaces; map no one to system:masters.",
        level="mandatory",
        severity="critical",
        types=(ACCESS_ENTRY, ASSOCIATION, EKS_CLUSTER, *CONFIG_MAPS),
        check=check_admin_access,
    ),
    Rule(
        name="eks-network-policy-enforced",
        description="The VPC CNI enforces NetworkPolicies (the vpc-cni add-on's enableNetworkPolicy): "
        "without it every default-deny NetworkPolicy is stored and ignored.",
        remediation="eks.Cluster(vpc_cni_options=eks.VpcCniOptionsArgs(enable_network_policy=True)), or the "
        'vpc-cni add-on\'s configuration_values {"enableNetworkPolicy": "true"}.',
        level="mandatory",
        severity="high",
        types=(ADDON, EKS_CLUSTER, VPC_CNI_COMPONENT),
        check=check_network_policy_agent,
    ),
)

STACK_RULES = (
    StackRule(
        name="eks-admin-access-not-for-workloads",
        description="No cluster-admin access policy association for a role of the stack that an AWS service, "
        "a node or a pod assumes: whoever runs there would own the cluster.",
        remediation="Give the workload the Kubernetes RBAC it needs through its service account instead.",
        level="mandatory",
        severity="critical",
        check=check_admin_principals,
    ),
)
