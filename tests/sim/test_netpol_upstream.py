"""kubernetes-sigs/kube-network-policies' evaluator test tables run on sim/kubernetes/netpol.py.

kube-network-policies (v1.1.1, pkg/networkpolicy/networkpolicy_test.go) is the SIG Network reference
implementation of NetworkPolicy; its TestSyncPacket judges allow/deny for one packet per case under a set
of policies, and TestEvaluator_evaluateSelectors/IPBlocks/Ports judge the peer and port matching. Not
vendored: the index holds no v1.1.1 text of the file (sim/models.yaml says so); transcribed from the tag.
Each case keeps upstream's name; the SKIPPED_* lists say why a case is not run.
"""

from __future__ import annotations

import pytest

from sim.kubernetes.netpol import Endpoint, allowed, in_ip_block, peer_matches, port_matches
from tests.sim.upstream_tables import assert_covered

AB = {"a": "b"}
NAMESPACES = {ns: {"kubernetes.io/metadata.name": ns, **AB} for ns in ("foo", "bar")}
HTTP = {"http": 80}  # makePod: one container port named http, 80/TCP
POD_A = Endpoint("a", "192.168.1.11", "foo", AB, HTTP)
POD_B = Endpoint("b", "192.168.2.22", "bar", AB, HTTP)
POD_C = Endpoint("c", "192.168.3.33", "blocked", {"c": "d"}, HTTP)  # its namespace is not in the store
POD_D = Endpoint("d", "192.168.4.44", "bar", {"c": "d"}, HTTP)
ALL_PODS = (POD_A, POD_B, POD_C, POD_D)


def _policy(name: str, namespace: str, selector: dict, types: list[str], **rules) -> dict:
    return {
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"podSelector": selector, "policyTypes": types, **rules},
    }


def _port(protocol: str, port: int | str | None = None, end_port: int | None = None) -> dict:
    """makePort: port 0 or "" means no port."""
    return {
        "protocol": protocol,
        **({"port": port} if port not in (0, "", None) else {}),
        **({"endPort": end_port} if end_port else {}),
    }


DENY_INGRESS = _policy("default-deny-ingress", "bar", {}, ["Ingress"])
DENY_EGRESS = _policy("default-deny-ingress", "bar", {}, ["Egress"])
ALLOW_INGRESS_IP_BLOCK = _policy(
    "default-allow-ingress-ipBlock",
    "bar",
    {},
    ["Ingress"],
    ingress=[{"from": [{"ipBlock": {"cidr": "192.168.0.0/16"}}]}],
)
SELECT_AB = {"matchLabels": AB}
MULTIPORT_EGRESS = _policy(
    "multiport-egress",
    "foo",
    SELECT_AB,
    ["Egress"],
    egress=[{"ports": [_port("TCP", 30000, 65537)], "to": []}],
)
MULTIPORT_EGRESS_IP_BLOCK = _policy(
    "multiport-egress",
    "foo",
    SELECT_AB,
    ["Egress"],
    egress=[{"to": [{"ipBlock": {"cidr": "192.168.0.0/16"}}]}],
)
MULTIPORT_EGRESS_POD = _policy(
    "multiport-egress", "foo", SELECT_AB, ["Egress"], egress=[{"to": [{"podSelector": SELECT_AB}]}]
)
MULTIPORT_EGRESS_NS = _policy(
    "multiport-egress-ns", "foo", SELECT_AB, ["Egress"], egress=[{"to": [{"namespaceSelector": SELECT_AB}]}]
)
POD_AND_NS = {"podSelector": SELECT_AB, "namespaceSelector": SELECT_AB}
MULTIPORT_EGRESS_POD_NS = _policy(
    "multiport-egress-pod-ns", "foo", SELECT_AB, ["Egress"], egress=[{"to": [POD_AND_NS]}]
)
MULTIPORT_INGRESS_POD_NS = _policy(
    "multiport-ingress-pod-ns", "bar", SELECT_AB, ["Ingress"], ingress=[{"from": [POD_AND_NS]}]
)


def _named_port_egress(name: str) -> dict:
    return _policy(
        "allow-named-port-egress", "foo", SELECT_AB, ["Egress"], egress=[{"ports": [_port("TCP", name)]}]
    )


# TestSyncPacket: name -> (policies, pods in the store, source IP, destination IP, destination port, allowed)
SYNC_PACKET = {
    "no network policy": ([], ALL_PODS, "192.168.1.11", "192.168.2.22", 80, True),
    "deny ingress": ([DENY_INGRESS], ALL_PODS, "192.168.1.11", "192.168.2.22", 80, False),
    "deny egress": ([DENY_EGRESS], ALL_PODS, "192.168.2.22", "192.168.1.11", 80, False),
    "deny egress on reply does not have effect": (
        [DENY_EGRESS],
        ALL_PODS,
        "192.168.1.11",
        "192.168.2.22",
        80,
        True,
    ),
    "ip block override deny ingress": (
        [DENY_INGRESS, ALLOW_INGRESS_IP_BLOCK],
        ALL_PODS,
        "192.168.1.11",
        "192.168.2.22",
        80,
        True,
    ),
    "ip block deny ingress": ([ALLOW_INGRESS_IP_BLOCK], ALL_PODS, "10.0.0.1", "192.168.2.22", 80, False),
    "multiport deny egress port": (
        [DENY_EGRESS, MULTIPORT_EGRESS],
        ALL_PODS,
        "192.168.1.11",
        "192.168.2.22",
        80,
        False,
    ),
    "multiport allow egress port": (
        [DENY_EGRESS, MULTIPORT_EGRESS],
        ALL_PODS,
        "192.168.1.11",
        "192.168.2.22",
        30080,
        True,
    ),
    "multiport allow egress": (
        [DENY_EGRESS, MULTIPORT_EGRESS, MULTIPORT_EGRESS_IP_BLOCK],
        ALL_PODS,
        "192.168.1.11",
        "192.168.2.22",
        80,
        True,
    ),
    "multiport allow egress port selector not match ns": (
        [DENY_EGRESS, MULTIPORT_EGRESS, MULTIPORT_EGRESS_POD],
        ALL_PODS,
        "192.168.1.11",
        "192.168.2.22",
        80,
        False,
    ),
    "multiport allow egress port selector not match pod selector": (
        [DENY_EGRESS, MULTIPORT_EGRESS, MULTIPORT_EGRESS_POD],
        ALL_PODS,
        "192.168.1.11",
        "192.168.3.33",
        80,
        False,
    ),
    "multiport allow egress ns selector": (
        [DENY_EGRESS, MULTIPORT_EGRESS, MULTIPORT_EGRESS_NS],
        ALL_PODS,
        "192.168.1.11",
        "192.168.2.22",
        80,
        True,
    ),
    "multiport allow egress ns selector fail": (
        [DENY_EGRESS, MULTIPORT_EGRESS, MULTIPORT_EGRESS_NS],
        ALL_PODS,
        "192.168.1.11",
        "192.168.3.33",
        80,
        False,
    ),
    "multiport allow egress ns and pod selector": (
        [DENY_EGRESS, MULTIPORT_EGRESS, MULTIPORT_EGRESS_POD_NS],
        ALL_PODS,
        "192.168.1.11",
        "192.168.2.22",
        80,
        True,
    ),
    "multiport allow egress ns and pod selector fail": (
        [DENY_EGRESS, MULTIPORT_EGRESS, MULTIPORT_EGRESS_POD_NS],
        ALL_PODS,
        "192.168.1.11",
        "192.168.3.33",
        80,
        False,
    ),
    "multiport allow ingress ns and pod selector": (
        [DENY_INGRESS, MULTIPORT_INGRESS_POD_NS],
        ALL_PODS,
        "192.168.1.11",
        "192.168.2.22",
        80,
        True,
    ),
    "multiport allow ingress ns and pod selector fail": (
        [DENY_INGRESS, MULTIPORT_INGRESS_POD_NS],
        ALL_PODS,
        "192.168.1.11",
        "192.168.4.44",
        80,
        False,
    ),
    "allow egress on named port": (
        [_named_port_egress("http")],
        (POD_A, POD_B),
        "192.168.1.11",
        "192.168.2.22",
        80,
        True,
    ),
    "deny egress on wrong named port": (
        [_named_port_egress("https")],
        (POD_A, POD_B),
        "192.168.1.11",
        "192.168.2.22",
        80,
        False,
    ),
}
SKIPPED_SYNC_PACKET = {
    "allow all override deny ingress": (
        "an empty but present `ingress: []`: kube-network-policies' in-memory Go object treats it as "
        "allow-all (evaluateIngress, len(rules) == 0); the API defines an empty list as allowing nothing, "
        "as netpol.py does (test_an_empty_ingress_list_allows_nothing)"
    ),
}
SYNC_PACKET_CASES = [  # TestSyncPacket's case names, in order (transcribed from v1.1.1, not vendored)
    "no network policy",
    "deny ingress",
    "deny egress",
    "deny egress on reply does not have effect",
    "allow all override deny ingress",
    "ip block override deny ingress",
    "ip block deny ingress",
    "multiport deny egress port",
    "multiport allow egress port",
    "multiport allow egress",
    "multiport allow egress port selector not match ns",
    "multiport allow egress port selector not match pod selector",
    "multiport allow egress ns selector",
    "multiport allow egress ns selector fail",
    "multiport allow egress ns and pod selector",
    "multiport allow egress ns and pod selector fail",
    "multiport allow ingress ns and pod selector",
    "multiport allow ingress ns and pod selector fail",
    "allow egress on named port",
    "deny egress on wrong named port",
]


def _endpoint(ip: str, pods: tuple[Endpoint, ...]) -> Endpoint:
    """A pod the store knows (its namespace too), else an address outside the cluster's pods."""
    known = [p for p in pods if p.ip == ip and p.namespace in NAMESPACES]
    return known[0] if known else Endpoint(ip, ip)


def test_every_sync_packet_case_is_run_or_skipped():
    assert_covered(SYNC_PACKET_CASES, SYNC_PACKET, SKIPPED_SYNC_PACKET)


@pytest.mark.parametrize("name", SYNC_PACKET)
def test_sync_packet(name):
    policies, pods, src, dst, port, expected = SYNC_PACKET[name]
    assert allowed(policies, _endpoint(src, pods), _endpoint(dst, pods), port, NAMESPACES) is expected


def test_an_empty_ingress_list_allows_nothing():
    """networking/v1 types.go NetworkPolicySpec.Ingress: "If this field is empty then this NetworkPolicy does
    not allow any traffic" (upstream's "allow all override deny ingress" expects the opposite)."""
    empty = _policy("default-allow-ingress", "bar", {}, ["Ingress"], ingress=[])
    assert not allowed([DENY_INGRESS, empty], POD_A, POD_B, 80, NAMESPACES)


POD_1 = Endpoint("pod1", "10.0.0.1", "ns1", {"app": "foo"})
POD_2 = Endpoint("pod2", "10.0.0.2", "ns2", {"app": "bar"})
SELECTOR_NAMESPACES = {"ns1": {"team": "blue"}, "ns2": {"team": "red"}}
FOO, BAR = {"matchLabels": {"app": "foo"}}, {"matchLabels": {"app": "bar"}}
BLUE, RED = {"matchLabels": {"team": "blue"}}, {"matchLabels": {"team": "red"}}
# TestEvaluator_evaluateSelectors: name -> (peer podSelector, peer namespaceSelector, pod, policy ns, matches)
SELECTORS = {
    "matching pod selector": (FOO, None, POD_1, "ns1", True),
    "non-matching pod selector": (BAR, None, POD_1, "ns1", False),
    "matching namespace selector": (None, BLUE, POD_1, "ns1", True),
    "non-matching namespace selector": (None, RED, POD_1, "ns1", False),
    "matching pod and namespace selectors": (FOO, BLUE, POD_1, "ns1", True),
    "matching pod, non-matching namespace selector": (FOO, RED, POD_1, "ns1", False),
    "non-matching pod, matching namespace selector": (BAR, BLUE, POD_1, "ns1", False),
    "empty pod selector matches all pods in policy namespace": ({}, None, POD_1, "ns1", True),
    "empty pod selector does not match pod in other namespace": ({}, None, POD_2, "ns1", False),
    "empty namespace selector matches all namespaces": (None, {}, POD_2, "ns1", True),
}
SKIPPED_SELECTORS = {
    "no selectors": "a peer with neither selector nor ipBlock: the API refuses it; netpol.py never sees one",
}


def test_every_selector_case_is_run_or_skipped():
    upstream = [
        "no selectors",
        "matching pod selector",
        "non-matching pod selector",
        "matching namespace selector",
        "non-matching namespace selector",
        "matching pod and namespace selectors",
        "matching pod, non-matching namespace selector",
        "non-matching pod, matching namespace selector",
        "empty pod selector matches all pods in policy namespace",
        "empty pod selector does not match pod in other namespace",
        "empty namespace selector matches all namespaces",
    ]
    assert_covered(upstream, SELECTORS, SKIPPED_SELECTORS)


@pytest.mark.parametrize("name", SELECTORS)
def test_evaluate_selectors(name):
    pod_selector, ns_selector, pod, policy_ns, expected = SELECTORS[name]
    peer = {
        **({"podSelector": pod_selector} if pod_selector is not None else {}),
        **({"namespaceSelector": ns_selector} if ns_selector is not None else {}),
    }
    assert peer_matches(peer, policy_ns, pod, SELECTOR_NAMESPACES) is expected


# TestEvaluator_evaluateIPBlocks: name -> (ipBlock, address, matches)
IP_BLOCKS = {
    "match cidr": ({"cidr": "192.168.0.0/24"}, "192.168.0.1", True),
    "no match cidr": ({"cidr": "192.168.0.0/24"}, "10.0.0.1", False),
    "match cidr and not except": (
        {"cidr": "192.168.0.0/24", "except": ["192.168.1.0/24"]},
        "192.168.0.1",
        True,
    ),
    "match cidr and  except": (
        {"cidr": "192.168.0.0/24", "except": ["192.168.1.0/24"]},
        "192.168.1.1",
        False,
    ),
}
SKIPPED_IP_BLOCKS = {"empty": "a nil ipBlock: netpol.py checks an address only against a peer's ipBlock"}


def test_every_ip_block_case_is_run_or_skipped():
    upstream = ["empty", "match cidr", "no match cidr", "match cidr and not except", "match cidr and  except"]
    assert_covered(upstream, IP_BLOCKS, SKIPPED_IP_BLOCKS)


@pytest.mark.parametrize("name", IP_BLOCKS)
def test_evaluate_ip_blocks(name):
    block, address, expected = IP_BLOCKS[name]
    assert in_ip_block(address, block) is expected


NAMED = Endpoint("a", "192.168.1.1", "b", AB, HTTP)
NO_POD = Endpoint("none", "192.168.1.1")
# TestEvaluator_evaluatePorts: name -> (rule ports, destination, port, protocol, matches)
PORTS = {
    "empty": ([], NO_POD, 0, "TCP", True),
    "match TCP": ([_port("TCP", 30000)], NO_POD, 30000, "TCP", True),
    "match UDP": ([_port("UDP", 30000)], NO_POD, 30000, "UDP", True),
    "no match TCP": ([_port("TCP", 30000)], NO_POD, 138, "TCP", False),
    "no match UDP": ([_port("UDP", 30000)], NO_POD, 138, "UDP", False),
    "match TCP range": ([_port("TCP", 30000, 65537)], NO_POD, 30138, "TCP", True),
    "match UDP range": ([_port("UDP", 30000, 65537)], NO_POD, 30138, "UDP", True),
    "no match TCP range": ([_port("TCP", 30000, 65537)], NO_POD, 138, "TCP", False),
    "no match UDP range": ([_port("UDP", 30000, 65537)], NO_POD, 138, "UDP", False),
    "match TCP named port": ([_port("TCP", "http")], NAMED, 80, "TCP", True),
    "no match UDP named port": ([_port("UDP", "http")], NAMED, 80, "TCP", False),
}


def test_every_port_case_is_run():
    upstream = [
        "empty",
        *(
            f"{match} {protocol}{kind}"
            for kind in ("", " range")
            for match in ("match", "no match")
            for protocol in ("TCP", "UDP")
        ),
        "match TCP named port",
        "no match UDP named port",
    ]
    assert_covered(upstream, PORTS, {})


@pytest.mark.parametrize("name", PORTS)
def test_evaluate_ports(name):
    ports, destination, port, protocol, expected = PORTS[name]
    assert port_matches(ports, destination, port, protocol) is expected
