"""Kubernetes rules on who may do what in the cluster, rather than on pods: admission webhooks that send
objects out of the cluster, namespaces whose Pod Security level is lowered, and NetworkPolicies that undo
the default-deny (RBAC is policy/k8s_rbac.py)."""

from __future__ import annotations

import functools
from collections.abc import Iterator, Mapping
from typing import Any

from infra.config.cluster_rules import MINIMUM_KUBERNETES_VERSION
from infra.contract import POD_SECURITY
from policy import coverage, pod_security
from policy.core import Rule, as_list, dig

WEBHOOKS = (
    "kubernetes:admissionregistration.k8s.io/v1:MutatingWebhookConfiguration",
    "kubernetes:admissionregistration.k8s.io/v1:ValidatingWebhookConfiguration",
)
NAMESPACES = ("kubernetes:core/v1:Namespace", "kubernetes:core/v1:NamespacePatch")
NETWORK_POLICY = "kubernetes:networking.k8s.io/v1:NetworkPolicy"
ENFORCE = "pod-security.kubernetes.io/enforce"
ENFORCE_VERSION = "pod-security.kubernetes.io/enforce-version"
# The least a namespace the platform does not list enforces (job namespaces: restricted, an MPIJob's
# baseline, workloads/render.py and workloads/mpijob.py).
LEAST_LEVEL = "baseline"


def _matches_everything(rule: Mapping[str, Any]) -> bool:
    groups, resources = as_list(dig(rule, "apiGroups")), [str(r) for r in as_list(dig(rule, "resources"))]
    return "*" in groups and any(r in ("*", "*/*") for r in resources)


def _sees_secrets(rule: Mapping[str, Any]) -> bool:
    groups = [str(g) for g in as_list(dig(rule, "apiGroups"))]
    resources = [str(r) for r in as_list(dig(rule, "resources"))]
    core = "" in groups or "*" in groups
    return core and any(r in ("*", "*/*", "secrets", "secrets/*") for r in resources)


def check_webhooks(type_: str, inputs: Mapping[str, Any]) -> Iterator[str]:
    """A webhook called by URL (not a Service in the cluster) that receives every object, Secrets, or,
    when it mutates, Pods: the object's content leaves the cluster, or an outside party rewrites pods."""
    mutating = type_.endswith("MutatingWebhookConfiguration")
    for hook in as_list(dig(inputs, "webhooks")):
        url = dig(hook, "clientConfig", "url")
        if not url:
            continue
        rules = as_list(dig(hook, "rules"))
        name = dig(hook, "name")
        if any(_matches_everything(r) for r in rules):
            yield f"webhook {name!r} sends every object to {url}, outside the cluster"
        elif any(_sees_secrets(r) for r in rules):
            yield f"webhook {name!r} sends Secrets to {url}, outside the cluster"
        elif mutating and any(
            "pods" in [str(x) for x in as_list(dig(r, "resources"))] or _matches_everything(r) for r in rules
        ):
            yield f"mutating webhook {name!r} lets {url}, outside the cluster, rewrite pods"


@functools.cache
def platform_levels() -> dict[str, str]:
    """namespace -> the Pod Security level the platform gives it (infra/contract.py POD_SECURITY)."""
    return {ns: level for ns, (level, _) in POD_SECURITY.items()}


def check_namespace_level(type_: str, inputs: Mapping[str, Any]) -> Iterator[str]:
    name = str(dig(inputs, "metadata", "name", default=""))
    labels = dig(inputs, "metadata", "labels", default={})
    least = platform_levels().get(name, LEAST_LEVEL)
    patch = type_.endswith("NamespacePatch")
    if ENFORCE not in labels:
        if not patch:  # EKS enforces no Pod Security level by default: the namespace is privileged
            yield f"namespace {name!r} sets no {ENFORCE}: pods there are not checked at all (privileged)"
        return
    value = labels[ENFORCE]
    # An invalid level reads as restricted (pod-security-admission api.ParseLevel); a null in a patch
    # removes the label.
    level = "privileged" if value is None else value if value in pod_security.LEVELS else "restricted"
    if pod_security.LEVELS.index(level) > pod_security.LEVELS.index(least):
        yield f"namespace {name!r} enforces {level}, below the {least} the platform gives it"
    version = labels.get(ENFORCE_VERSION)
    floor = pod_security.parse_version(MINIMUM_KUBERNETES_VERSION)
    if version is not None and pod_security.parse_version(version) < floor:
        yield (
            f"namespace {name!r} pins {ENFORCE_VERSION}: {version}, older than {MINIMUM_KUBERNETES_VERSION}: "
            "the checks added since do not run"
        )


def _selects_some(selector: Any) -> bool:
    return bool(selector) and bool(dig(selector, "matchLabels") or dig(selector, "matchExpressions"))


ALL_PEERS = "all"
TCP_PORTS = (1, 65535)


def _peers(rule: Mapping[str, Any], peers_key: str) -> str | list[Any]:
    """ALL_PEERS, or the networks a rule's ipBlocks admit (each CIDR minus its exceptions); peers chosen
    by pod or namespace labels add no network (they are some pods, not everyone)."""
    peers = as_list(dig(rule, peers_key))
    if not peers:
        return ALL_PEERS
    nets: list[Any] = []
    for peer in peers:
        if "ipBlock" in peer:
            cidr, _ = coverage.networks([dig(peer, "ipBlock", "cidr")])
            excepted, _ = coverage.networks(as_list(dig(peer, "ipBlock", "except")))
            nets += coverage.minus(cidr, excepted)
            continue
        ns = peer.get("namespaceSelector")
        if ns is not None and not _selects_some(ns) and not _selects_some(peer.get("podSelector")):
            return ALL_PEERS
    return nets


def _tcp_ranges(rule: Mapping[str, Any]) -> list[tuple[int, int]]:
    """The TCP port ranges a rule admits (no ports, or a TCP entry without a port: all of them); a named
    port is some port of the pod, not a range."""
    entries = as_list(dig(rule, "ports"))
    if not entries:
        return [TCP_PORTS]
    found = []
    for p in entries:
        if str(dig(p, "protocol", default="TCP")).upper() != "TCP":
            continue
        port = dig(p, "port")
        if port is None:
            return [TCP_PORTS]
        low = coverage.whole_number(port)
        if low is None:
            continue
        high = coverage.whole_number(dig(p, "endPort"))
        found.append((low, high if high is not None and high >= low else low))
    return found


def _admits_everyone(peers: list[str | list[Any]]) -> bool:
    if ALL_PEERS in peers:
        return True
    return coverage.covers_everything(n for nets in peers if isinstance(nets, list) for n in nets)


def _everyone_everywhere(rules: list[tuple[str | list[Any], list[tuple[int, int]]]]) -> bool:
    """Whether the rules together admit every peer on every TCP port: on each stretch of ports between
    the rules' boundaries, the peers of the rules that cover it add up to everyone."""
    low, high = TCP_PORTS
    cuts = sorted(
        {low, high + 1} | {p for _, rs in rules for a, b in rs for p in (a, b + 1) if low <= p <= high}
    )
    for start in cuts[:-1]:
        covering = [peers for peers, rs in rules if any(a <= start <= b for a, b in rs)]
        if not _admits_everyone(covering):
            return False
    return True


def check_network_policy(type_: str, inputs: Mapping[str, Any]) -> Iterator[str]:
    """Rules that together admit every peer on every port: they undo a namespace's default-deny for the
    pods the policy selects (policies add up; none can take away what another allows). Split peers
    (0.0.0.0/1 and 128.0.0.0/1) and split port ranges count as the whole."""
    for direction, peers_key in (("ingress", "from"), ("egress", "to")):
        rules = [
            (_peers(rule, peers_key), _tcp_ranges(rule)) for rule in as_list(dig(inputs, "spec", direction))
        ]
        alone = [i for i, rule in enumerate(rules) if _everyone_everywhere([rule])]
        for i in alone:
            yield f"spec.{direction}[{i}] allows every peer on every port: it undoes the default-deny"
        if not alone and _everyone_everywhere(rules):
            yield (
                f"spec.{direction} rules {list(range(len(rules)))} together allow every peer on every port: "
                "they undo the default-deny"
            )


RULES = (
    Rule(
        name="k8s-webhooks-stay-in-cluster",
        description="No admission webhook called by URL receives every object or Secrets, or mutates Pods: "
        "their content would leave the cluster, or an outside party would rewrite pods.",
        remediation="Serve the webhook from a Service in the cluster (clientConfig.service) and narrow its "
        "rules to the kinds it needs.",
        level="mandatory",
        severity="high",
        types=WEBHOOKS,
        check=check_webhooks,
    ),
    Rule(
        name="k8s-namespace-pod-security-not-lowered",
        description="Every namespace enforces a Pod Security level: the platform's own at the level "
        "infra/addons/namespaces.py gives them, any other at baseline or stricter, at a version no older "
        f"than {MINIMUM_KUBERNETES_VERSION}.",
        remediation=f"Label the namespace {ENFORCE}: restricted (baseline where the reason is written down "
        "in infra/addons/namespaces.py); leave enforce-version unset or at the cluster's version.",
        level="mandatory",
        severity="high",
        types=NAMESPACES,
        check=check_namespace_level,
    ),
    Rule(
        name="k8s-no-allow-all-network-policy",
        description="No NetworkPolicy allows every peer on every port (an empty rule, namespaceSelector: {}, "
        "or 0.0.0.0/0 without exceptions): beside the default-deny it lets everything back in or out.",
        remediation="Name the peers (a namespace and pod selector, the VPC CIDR for the API server) and the "
        "ports, as infra/addons/network_policies.py does.",
        level="mandatory",
        severity="high",
        types=(NETWORK_POLICY,),
        check=check_network_policy,
    ),
)
