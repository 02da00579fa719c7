"""RBAC rules: what a role or binding hands out, judged by effect (policy/rbac.py), one object at a time
and for each binding of the stack with the role it names.

One object: no role grants every verb on every resource, escalate, bind or impersonate on the resources
they act on, or aggregates what it should not (every ClusterRole, or its own rules into admin, edit or
view, which are handed out widely); no binding gives cluster-admin to a group or a service account, any
role to everyone, a built-in role that escalates (admin, edit, cluster-admin) in every namespace or in a
system namespace, or the API server's own controller and node roles to anyone. A `User` subject named
`system:serviceaccount:<ns>:<name>` is that service account.

The stack: each binding judged with the rules of the role it names (a Role or ClusterRole of the stack,
a ClusterRole's aggregated rules included) where it holds them: pods/exec, Secrets, token creation in
every namespace or a system namespace; nodes/proxy, admission configuration, CSR approval,
PersistentVolumes or Namespaces through a ClusterRoleBinding. What upstream charts and manifests force on
the platform's own controllers is accepted one binding, one subject and one grant at a time, with the
reason, in policy/rbac_accepted.yaml (docs/guardrails.md "Accepted risks").
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from policy.core import Resource, Rule, StackRule, as_list, dig, known
from policy.rbac import BUILT_IN_ROLES, CLUSTER, DANGERS, dangers, system_namespaces, where

RBAC = "kubernetes:rbac.authorization.k8s.io/v1:"
CLUSTER_ROLE = f"{RBAC}ClusterRole"
ROLE = f"{RBAC}Role"
CLUSTER_ROLE_BINDING = f"{RBAC}ClusterRoleBinding"
ROLE_BINDING = f"{RBAC}RoleBinding"
BINDINGS = (CLUSTER_ROLE_BINDING, ROLE_BINDING)
CLUSTER_ADMIN = "cluster-admin"
# Groups every identity (or every pod's service account) is in: a binding to them is a binding to all.
EVERYONE = ("system:anonymous", "system:unauthenticated", "system:authenticated", "system:serviceaccounts")
# What the API server itself binds to everyone (rbac/bootstrappolicy): harmless discovery roles.
DISCOVERY_ROLES = ("system:basic-user", "system:discovery", "system:public-info-viewer")
# The API server's roles for its own components: whoever holds one acts as the kubelet or a controller.
COMPONENT_ROLE_PREFIXES = (
    "system:node",
    "system:kube-controller-manager",
    "system:kube-scheduler",
    "system:controller:",
)
AGGREGATE_TO = ("admin", "edit", "view")
AGGREGATE_LABEL = "rbac.authorization.k8s.io/aggregate-to-"
SERVICE_ACCOUNT_USER = "system:serviceaccount:"
ACCEPTED_FILE = Path(__file__).with_name("rbac_accepted.yaml")
ANY_SCOPE = frozenset(d.what for d in DANGERS if d.where == "any")


def subjects(inputs: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    """(kind, name, namespace) of a binding's subjects; a User named system:serviceaccount:<ns>:<name> is
    that ServiceAccount (the API server authenticates its tokens as that user)."""
    found = []
    for s in as_list(dig(inputs, "subjects")):
        kind, name = str(dig(s, "kind", default="")), str(dig(s, "name", default=""))
        ns = str(dig(s, "namespace", default=""))
        parts = name.split(":")
        if kind == "User" and name.startswith(SERVICE_ACCOUNT_USER) and len(parts) == 4:
            kind, ns, name = "ServiceAccount", parts[2], parts[3]
        found.append((kind, name, ns))
    return found


def _who(kind: str, name: str, ns: str) -> str:
    return f"{kind} {name}" + (f" in {ns}" if ns else "")


def _scope(type_: str, inputs: Mapping[str, Any]) -> str:
    return (
        CLUSTER
        if type_ == CLUSTER_ROLE_BINDING
        else str(dig(inputs, "metadata", "namespace", default="default"))
    )


def _broad_selector(selector: Any) -> bool:
    """A label selector that matches ClusterRoles without naming a label value (every one, or every one
    with some key)."""
    if not isinstance(selector, Mapping):
        return False
    if dig(selector, "matchLabels"):
        return False
    expressions = as_list(dig(selector, "matchExpressions"))
    return not expressions or all(
        str(dig(e, "operator")) in ("Exists", "DoesNotExist", "NotIn") for e in expressions
    )


def check_role(type_: str, inputs: Mapping[str, Any]) -> Iterator[str]:
    rules = as_list(dig(inputs, "rules"))
    for what in dangers(rules, "team"):  # the grants that escalate wherever they are held
        yield f"grants {what}"
    if type_ != CLUSTER_ROLE:
        return
    if any(_broad_selector(s) for s in as_list(dig(inputs, "aggregationRule", "clusterRoleSelectors"))):
        yield "aggregates every ClusterRole's rules (cluster-admin's too): a selector names no label value"
    labels = dig(inputs, "metadata", "labels", default={})
    into = [r for r in AGGREGATE_TO if str(labels.get(f"{AGGREGATE_LABEL}{r}", "")).lower() == "true"]
    if into:
        for what in set(dangers(rules, CLUSTER)) - ANY_SCOPE:
            yield f"adds {what} to the built-in {', '.join(into)} role(s), which are handed out widely"


def check_binding(type_: str, inputs: Mapping[str, Any]) -> Iterator[str]:
    role = str(dig(inputs, "roleRef", "name", default=""))
    scope = _scope(type_, inputs)
    built_in = (
        str(dig(inputs, "roleRef", "kind", default="ClusterRole")) == "ClusterRole" and role in BUILT_IN_ROLES
    )
    for kind, name, ns in subjects(inputs):
        who = _who(kind, name, ns)
        if role == CLUSTER_ADMIN and kind in ("Group", "ServiceAccount"):
            yield f"binds cluster-admin to {who}: every member, or every pod running as it, owns the cluster"
        everyone = name in EVERYONE or (kind == "Group" and name.startswith("system:serviceaccounts"))
        if everyone and role not in DISCOVERY_ROLES:
            yield f"binds {role} to {who}, which every identity or pod is part of"
        if role.startswith(COMPONENT_ROLE_PREFIXES) and not name.startswith("system:"):
            yield f"binds the API server's component role {role} to {who}: it acts as a system component"
        if built_in and role != CLUSTER_ADMIN and (scope == CLUSTER or scope in system_namespaces()):
            for what in dangers(BUILT_IN_ROLES[role], scope):
                yield f"binds the built-in {role} to {who} {where(scope)}: {what}"


def check_rbac(type_: str, inputs: Mapping[str, Any]) -> Iterator[str]:
    if type_ in (CLUSTER_ROLE, ROLE):
        yield from check_role(type_, inputs)
    else:
        yield from check_binding(type_, inputs)


@functools.cache
def accepted() -> list[dict[str, Any]]:
    """The platform controllers' grants that upstream forces (policy/rbac_accepted.yaml)."""
    return yaml.safe_load(ACCEPTED_FILE.read_text())["accepted"]


def _accepted(binding: str, subject: str, what: str) -> bool:
    return any(
        e["binding"] == binding and e["subject"] == subject and what in e["grants"] for e in accepted()
    )


def binding_id(type_: str, inputs: Mapping[str, Any]) -> str:
    kind = type_.rsplit(":", 1)[-1]
    ns = "" if kind == "ClusterRoleBinding" else str(dig(inputs, "metadata", "namespace", default="default"))
    return f"{kind}/{ns}/{dig(inputs, 'metadata', 'name', default='')}"


def _role_rules(binding: Mapping[str, Any], roles: Sequence[Resource]) -> list[Any] | None:
    """The rules of the role a binding names, aggregated ones included (None: not in the stack)."""
    kind = str(dig(binding, "roleRef", "kind", default="ClusterRole"))
    name = str(dig(binding, "roleRef", "name", default=""))
    ns = str(dig(binding, "metadata", "namespace", default="default"))
    for r in roles:
        inputs = known(r.inputs)
        same_kind = r.type.rsplit(":", 1)[-1] == kind
        same_ns = kind == "ClusterRole" or str(dig(inputs, "metadata", "namespace", default="default")) == ns
        if same_kind and same_ns and str(dig(inputs, "metadata", "name", default="")) == name:
            return as_list(dig(inputs, "rules")) + _aggregated(inputs, roles)
    return None


def _aggregated(role: Mapping[str, Any], roles: Sequence[Resource]) -> list[Any]:
    selectors = as_list(dig(role, "aggregationRule", "clusterRoleSelectors"))
    found: list[Any] = []
    for r in roles:
        if r.type != CLUSTER_ROLE:
            continue
        labels = dig(known(r.inputs), "metadata", "labels", default={})
        if any(
            all(str(labels.get(k)) == str(v) for k, v in dig(s, "matchLabels", default={}).items())
            for s in selectors
            if dig(s, "matchLabels")
        ):
            found += as_list(dig(known(r.inputs), "rules"))
    return found


def effective_grants(resources: Sequence[Resource]) -> Iterator[tuple[Resource, str, str, str, str]]:
    """(binding, binding id, subject id, grant, message) for every escalating grant a binding of the
    stack gives its subjects through a role of the stack, where it holds it."""
    roles = [r for r in resources if r.type in (CLUSTER_ROLE, ROLE)]
    for b in (r for r in resources if r.type in BINDINGS):
        inputs = known(b.inputs)
        rules = _role_rules(inputs, roles)
        scope = _scope(b.type, inputs)
        if rules is None or not (scope == CLUSTER or scope in system_namespaces()):
            continue
        role = f"{dig(inputs, 'roleRef', 'kind')} {dig(inputs, 'roleRef', 'name')}"
        grants = [w for w in dangers(rules, scope) if w not in ANY_SCOPE]
        for kind, name, ns in subjects(inputs):
            for what in grants:
                message = f"{_who(kind, name, ns)} holds, through {role}, {where(scope)}: {what}"
                yield b, binding_id(b.type, inputs), f"{kind}/{ns}/{name}", what, message


def check_effective_privileges(resources: Sequence[Resource]) -> Iterator[tuple[str | None, str]]:
    for b, binding, subject, what, message in effective_grants(resources):
        if not _accepted(binding, subject, what):
            yield b.name, message


RULES = (
    Rule(
        name="k8s-rbac-no-cluster-admin-grants",
        description="No role grants every verb on every resource, escalate, bind or impersonate on the "
        "resources they act on, aggregates every ClusterRole or adds escalating grants to admin/edit/view; "
        "no binding gives cluster-admin to a group or service account, any role to everyone, admin or edit "
        "in every namespace or a system namespace, or the API server's component roles to anyone (a User "
        "named system:serviceaccount:... is that service account).",
        remediation="Bind a role with the verbs and resources the subject needs, in its own namespace; "
        "give people cluster admin through EKS access entries (adminPrincipalArns), never a job's service "
        "account.",
        level="mandatory",
        severity="critical",
        types=(CLUSTER_ROLE, ROLE, *BINDINGS),
        check=check_rbac,
    ),
)

STACK_RULES = (
    StackRule(
        name="k8s-rbac-effective-privileges",
        description="Each binding's subjects are judged on the rules of the role it names, where the binding "
        "holds them: no pods/exec, Secret reads or service account tokens in every namespace or a system "
        "namespace, no nodes/proxy, admission configuration writes, CSR approval, PersistentVolume creation "
        "or Namespace writes through a ClusterRoleBinding, except what policy/rbac_accepted.yaml accepts for "
        "the platform's own controllers.",
        remediation="Bind the role in the namespaces the subject works in (RoleBinding), scope it with "
        "resourceNames, or drop the grant; for an upstream controller, use its chart's watch-namespace "
        "options, or accept the grant in policy/rbac_accepted.yaml with the reason.",
        level="mandatory",
        severity="critical",
        check=check_effective_privileges,
    ),
)
