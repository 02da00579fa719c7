"""What Kubernetes RBAC grants a subject, judged by effect rather than by `*`: the permissions the
Kubernetes documentation lists as ways to escalate (RBAC good practices, "Privilege escalation risks";
CIS Kubernetes Benchmark 5.1), on the resources they really act on.

A rule grants (API group, resource, verb) when each of its lists holds the value or `*` (`resource/*`
and `*/subresource` included) and it names no `resourceNames` (which narrow it to a few objects). What a
grant is worth depends on where it holds: a ClusterRoleBinding gives it in every namespace, a
RoleBinding in its own, and cluster-scoped resources (nodes, webhooks, namespaces) only through a
ClusterRoleBinding. The system namespaces are kube-system and the platform's privileged ones (infra/
contract.py POD_SECURITY): their pods run as the node, so rights there are rights on every node.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from infra.contract import POD_SECURITY
from policy.core import as_list, dig

RBAC_GROUP = "rbac.authorization.k8s.io"
ADMISSION_GROUP = "admissionregistration.k8s.io"
CLUSTER = "*"  # the scope of a ClusterRoleBinding: every namespace and the cluster-scoped resources


@functools.cache
def system_namespaces() -> frozenset[str]:
    privileged = {ns for ns, (level, _) in POD_SECURITY.items() if level == "privileged"}
    return frozenset({"kube-system", *privileged})


@dataclass(frozen=True)
class Danger:
    what: str
    grants: tuple[tuple[str, str, tuple[str, ...]], ...]  # (API group, resource, verbs)
    # "any": dangerous wherever it holds; "system": cluster-wide or in a system namespace; "cluster":
    # only through a ClusterRoleBinding (cluster-scoped resources).
    where: str


def _on(
    group: str, resources: Iterable[str], verbs: tuple[str, ...]
) -> tuple[tuple[str, str, tuple[str, ...]], ...]:
    return tuple((group, r, verbs) for r in resources)


DANGERS = (
    Danger(
        "escalate on roles: grants itself any permission",
        _on(RBAC_GROUP, ("roles", "clusterroles"), ("escalate",)),
        "any",
    ),
    Danger(
        "bind on roles: binds itself any role, cluster-admin too",
        _on(RBAC_GROUP, ("roles", "clusterroles"), ("bind",)),
        "any",
    ),
    Danger(
        "impersonate: acts as any user, group or service account",
        _on("", ("users", "groups", "serviceaccounts"), ("impersonate",))
        + _on("authentication.k8s.io", ("uids", "userextras/scopes"), ("impersonate",)),
        "any",
    ),
    Danger(
        "nodes/proxy: the kubelet API of every node (exec in any pod)",
        _on("", ("nodes/proxy",), ("get", "create")),
        "cluster",
    ),
    Danger(
        "serviceaccounts/token create: a token of any service account",
        _on("", ("serviceaccounts/token",), ("create",)),
        "system",
    ),
    Danger("pods/exec: commands in any pod", _on("", ("pods/exec", "pods/attach"), ("create",)), "system"),
    Danger(
        "reads Secrets (every service account token and credential)",
        _on("", ("secrets",), ("get", "list", "watch")),
        "system",
    ),
    Danger(
        "writes admission configuration: sees or rewrites every object, or lifts the admission policies",
        _on(
            ADMISSION_GROUP,
            (
                "mutatingwebhookconfigurations",
                "validatingwebhookconfigurations",
                "validatingadmissionpolicies",
                "validatingadmissionpolicybindings",
                "mutatingadmissionpolicies",
                "mutatingadmissionpolicybindings",
            ),
            ("create", "update", "patch", "delete"),
        ),
        "cluster",
    ),
    Danger(
        "approves certificate signing requests: a client certificate for any identity",
        _on("certificates.k8s.io", ("certificatesigningrequests/approval",), ("update", "patch")),
        "cluster",
    ),
    Danger(
        "creates PersistentVolumes: a hostPath volume of any node path",
        _on("", ("persistentvolumes",), ("create",)),
        "cluster",
    ),
    Danger(
        "writes Namespaces: lowers any namespace's Pod Security level",
        _on("", ("namespaces",), ("update", "patch")),
        "cluster",
    ),
)


def _listed(values: Any, wanted: str) -> bool:
    return "*" in [str(v) for v in as_list(values)] or wanted in [str(v) for v in as_list(values)]


def _resource_listed(values: Any, wanted: str) -> bool:
    base, _, sub = wanted.partition("/")
    names = [str(v) for v in as_list(values)]
    if "*" in names or wanted in names:
        return True
    return bool(sub) and (f"{base}/*" in names or f"*/{sub}" in names)


def grants(rule: Mapping[str, Any], group: str, resource: str, verb: str) -> bool:
    """Whether one RBAC rule grants `verb` on every `resource` of `group`."""
    if dig(rule, "resourceNames"):
        return False
    return (
        _listed(dig(rule, "apiGroups"), group)
        and _resource_listed(dig(rule, "resources"), resource)
        and _listed(dig(rule, "verbs"), verb)
    )


def _applies(where: str, scope: str) -> bool:
    if where == "any":
        return True
    if where == "cluster":
        return scope == CLUSTER
    return scope == CLUSTER or scope in system_namespaces()


def dangers(rules: Iterable[Mapping[str, Any]], scope: str) -> list[str]:
    """What `rules`, held at `scope` (CLUSTER or a namespace), grant that escalates."""
    rules = [r for r in rules if isinstance(r, Mapping)]
    if any(all(_listed(dig(r, k), "*") for k in ("apiGroups", "resources", "verbs")) for r in rules):
        return ["every verb on every resource: cluster-admin" + ("" if scope == CLUSTER else f" of {scope}")]
    found = []
    for danger in DANGERS:
        if not _applies(danger.where, scope):
            continue
        hits = [
            f"{verb} {resource}"
            for group, resource, verbs in danger.grants
            for verb in verbs
            if any(grants(r, group, resource, verb) for r in rules)
        ]
        if hits:
            found.append(danger.what)
    return found


def where(scope: str) -> str:
    return "in every namespace" if scope == CLUSTER else f"in namespace {scope}"


# What the API server's own roles grant that escalates (kubernetes plugin/pkg/auth/authorizer/rbac/
# bootstrappolicy/policy.go, system:aggregate-to-edit, which admin aggregates too), for the ones a binding
# may name without the stack defining them.
ADMIN_RULES = [
    {
        "apiGroups": [""],
        "resources": ["secrets"],
        "verbs": ["get", "list", "watch", "create", "update", "patch"],
    },
    {"apiGroups": [""], "resources": ["pods/exec", "pods/attach"], "verbs": ["get", "create"]},
    {"apiGroups": [""], "resources": ["serviceaccounts"], "verbs": ["impersonate"]},
]
BUILT_IN_ROLES: dict[str, list[dict[str, Any]]] = {
    "cluster-admin": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}],
    "admin": ADMIN_RULES,
    "edit": ADMIN_RULES,
    "view": [],
}
