"""Kubernetes NetworkPolicy semantics (networking.k8s.io/v1 as k8s.io/api networking/v1/types.go defines
it, kubernetes.io/docs/concepts/services-networking/network-policies/), evaluated over policy objects:
may `src` open a connection to `dst`?

- A pod is isolated for a direction iff some policy in its namespace selects it (podSelector) and lists
  that direction in policyTypes (unset: Ingress, plus Egress when the policy has egress rules).
- An isolated pod's connection is allowed iff some rule of some selecting policy allows it: a rule with
  no `from`/`to` allows every peer, with no `ports` every port; a peer is an ipBlock (cidr minus
  except) or namespaceSelector and/or podSelector (podSelector alone: the policy's own namespace).
- A connection needs both: the source's egress and the destination's ingress.
- Traffic to and from the node a pod runs on is always allowed, both ways ("traffic to and from the node
  where a Pod is running is always allowed", the NetworkPolicy concept page). aws-network-policy-agent
  implements it by an allow-all entry for the node's IP in both the ingress and the egress map of every
  pod (pkg/fwruleprocessor/fw_rule_processor.go ComputeMapEntriesFromEndpointRules at v1.4.1, used for
  both maps by pkg/ebpf/bpf_client.go updateEbpfMap): so a pod reaches its own node's kubelet and every
  host-network pod there (node-exporter), whatever its egress policy says, and no other node's.
The VPC CNI matches ipBlocks against pod IPs as well (they are VPC addresses), so ipBlock peers here
match any endpoint by address.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Endpoint:
    name: str
    ip: str
    namespace: str | None = None  # None: not a pod (the API server's ENIs, S3, a node, an agent)
    labels: dict[str, str] = field(default_factory=dict)
    ports: dict[str, int] = field(default_factory=dict)  # named container ports
    # The node it runs on. With namespace None, an endpoint on a node is that node's address: the node
    # itself (kubelet) or a host-network pod on it.
    node: str | None = None


def selects(selector: dict[str, Any] | None, labels: dict[str, str]) -> bool:
    """A LabelSelector: matchLabels and matchExpressions ANDed; {} selects everything."""
    selector = selector or {}
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for e in selector.get("matchExpressions") or []:
        key, op, values = e["key"], e["operator"], e.get("values") or []
        ok = {
            "In": key in labels and labels[key] in values,
            "NotIn": key not in labels or labels[key] not in values,
            "Exists": key in labels,
            "DoesNotExist": key not in labels,
        }[op]
        if not ok:
            return False
    return True


def _policy_types(spec: dict[str, Any]) -> list[str]:
    if spec.get("policyTypes"):
        return spec["policyTypes"]
    return ["Ingress", *(["Egress"] if "egress" in spec else [])]


def in_ip_block(ip: str, block: dict[str, Any]) -> bool:
    """Whether `ip` is in the ipBlock's cidr and none of its excepts."""
    addr = ipaddress.ip_address(ip)
    if addr not in ipaddress.ip_network(block["cidr"]):
        return False
    return not any(addr in ipaddress.ip_network(e) for e in block.get("except") or [])


def peer_matches(
    peer: dict[str, Any], policy_ns: str, other: Endpoint, namespaces: dict[str, dict[str, str]]
) -> bool:
    """Whether a rule's peer (of a policy in `policy_ns`) matches `other`."""
    if "ipBlock" in peer:
        return in_ip_block(other.ip, peer["ipBlock"])
    if other.namespace is None:
        return False  # selectors match pods only
    if "namespaceSelector" in peer:
        ns_ok = selects(peer["namespaceSelector"], namespaces[other.namespace])
    else:
        ns_ok = other.namespace == policy_ns
    return ns_ok and selects(peer.get("podSelector"), other.labels)


def port_matches(rule_ports: list[dict[str, Any]] | None, dst: Endpoint, port: int, protocol: str) -> bool:
    """Whether a rule's ports admit `port`/`protocol` on `dst` (a named port is `dst`'s)."""
    if not rule_ports:
        return True
    for p in rule_ports:
        if p.get("protocol", "TCP") != protocol:
            continue
        want = p.get("port")
        if want is None:
            return True
        if isinstance(want, str):
            if dst.ports.get(want) == port:
                return True
        elif want <= port <= p.get("endPort", want):
            return True
    return False


def _direction_allows(
    policies: list[dict[str, Any]],
    pod: Endpoint,
    direction: str,
    peer: Endpoint,
    dst: Endpoint,
    port: int,
    protocol: str,
    namespaces: dict[str, dict[str, str]],
) -> bool:
    selecting = [
        p
        for p in policies
        if p["metadata"]["namespace"] == pod.namespace
        and direction in _policy_types(p["spec"])
        and selects(p["spec"].get("podSelector"), pod.labels)
    ]
    if not selecting:
        return True  # not isolated in this direction
    key, peers_key = ("ingress", "from") if direction == "Ingress" else ("egress", "to")
    for policy in selecting:
        for rule in policy["spec"].get(key) or []:
            peers = rule.get(peers_key)
            peer_ok = not peers or any(
                peer_matches(x, policy["metadata"]["namespace"], peer, namespaces) for x in peers
            )
            if peer_ok and port_matches(rule.get("ports"), dst, port, protocol):
                return True
    return False


def own_node(node: Endpoint, pod: Endpoint) -> bool:
    """Whether `node` is the address of the node `pod` runs on (the node, or a host-network pod there)."""
    return node.namespace is None and node.node is not None and node.node == pod.node


def allowed(
    policies: list[dict[str, Any]],
    src: Endpoint,
    dst: Endpoint,
    port: int,
    namespaces: dict[str, dict[str, str]],
    protocol: str = "TCP",
) -> bool:
    """Whether `src` may connect to `dst` on `port`/`protocol` under `policies` (every NetworkPolicy of
    the cluster); `namespaces`: each namespace's labels."""
    if own_node(src, dst) or own_node(dst, src):
        return True  # a pod and the node it runs on (kubelet probes, port-forward, host-network pods)
    egress = src.namespace is None or _direction_allows(
        policies, src, "Egress", dst, dst, port, protocol, namespaces
    )
    ingress = dst.namespace is None or _direction_allows(
        policies, dst, "Ingress", src, dst, port, protocol, namespaces
    )
    return egress and ingress
