"""Security groups: no admin, control-plane or kubelet port open to the internet, however the rule is
written (a SecurityGroup's inline ingress, a SecurityGroupRule, a vpc SecurityGroupIngressRule; one CIDR
or several that add up; a port range or "all traffic" that covers the port)."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator, Mapping
from typing import Any

from infra.config.cluster_rules import PUBLIC_CIDR_MIN_PREFIX
from policy.core import Rule, as_list, dig

SECURITY_GROUP = "aws:ec2/securityGroup:SecurityGroup"
SECURITY_GROUP_RULE = "aws:ec2/securityGroupRule:SecurityGroupRule"
INGRESS_RULE = "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule"
# TCP ports that hand over a node or the cluster to whoever reaches them.
ADMIN_PORTS: dict[str, tuple[int, int]] = {
    "SSH": (22, 22),
    "telnet": (23, 23),
    "RDP": (3389, 3389),
    "WinRM": (5985, 5986),
    "Docker API": (2375, 2376),
    "etcd": (2379, 2380),
    "Kubernetes API": (6443, 6443),
    "kubelet": (10250, 10250),
    "kubelet read-only / kube-proxy": (10255, 10256),
    "kube-controller-manager": (10257, 10257),
    "kube-scheduler": (10259, 10259),
}
ALL_PROTOCOLS = ("-1", "all")
TCP = ("tcp", "6")
# Addresses that are not the internet: RFC 1918, shared address space (RFC 6598), link-local, IPv6
# unique-local and link-local.
PRIVATE = tuple(
    ipaddress.ip_network(n)
    for n in (
        "10.0.0.0/8",
        "172.16.0.0/12",
        "192.168.0.0/16",
        "100.64.0.0/10",
        "169.254.0.0/16",
        "127.0.0.0/8",
        "fc00::/7",
        "fe80::/10",
        "::1/128",
    )
)
# The most public addresses a group may admit to an admin port: one office block, as for the EKS API.
WIDEST_PUBLIC = PUBLIC_CIDR_MIN_PREFIX["dev"]


def _public_addresses(cidrs: list[str]) -> tuple[int, int, list[str]]:
    """(public IPv4 addresses, public IPv6 /64s, unreadable CIDRs) that `cidrs` admit together."""
    v4: list[ipaddress.IPv4Network] = []
    v6: list[ipaddress.IPv6Network] = []
    bad = []
    for cidr in cidrs:
        try:
            net = ipaddress.ip_network(cidr, strict=False)
        except ValueError:
            bad.append(cidr)
            continue
        pieces = [net]
        for private in PRIVATE:
            if private.version != net.version:
                continue
            pieces = [rest for p in pieces for rest in _minus(p, private)]
        (v4 if net.version == 4 else v6).extend(pieces)  # type: ignore[arg-type]
    count4 = sum(n.num_addresses for n in ipaddress.collapse_addresses(v4))
    count6 = sum(max(1, n.num_addresses >> 64) for n in ipaddress.collapse_addresses(v6))
    return count4, count6, bad


def _minus(net: Any, private: Any) -> list[Any]:
    if not net.overlaps(private):
        return [net]
    if net.subnet_of(private):
        return []
    return list(net.address_exclude(private))


def _ports(protocol: Any, low: Any, high: Any) -> tuple[int, int] | None:
    """The TCP port range a rule opens (None: no TCP)."""
    proto = str(protocol).lower()
    if proto in ALL_PROTOCOLS:
        return 0, 65535
    if proto not in TCP:
        return None
    try:
        lo, hi = int(low), int(high if high is not None else low)
    except (TypeError, ValueError):
        return 0, 65535  # unknown ports on a TCP rule: assume all
    return (0, 65535) if lo == -1 else (lo, hi)


def _ingress(type_: str, inputs: Mapping[str, Any]) -> list[tuple[tuple[int, int], list[str]]]:
    """(TCP port range, CIDRs) of every ingress rule a resource opens."""
    if type_ == SECURITY_GROUP:
        rules = [r for r in as_list(dig(inputs, "ingress")) if isinstance(r, Mapping)]
        opened = [
            (
                _ports(dig(r, "protocol"), dig(r, "fromPort"), dig(r, "toPort")),
                [str(c) for key in ("cidrBlocks", "ipv6CidrBlocks") for c in as_list(dig(r, key))],
            )
            for r in rules
        ]
    elif type_ == SECURITY_GROUP_RULE:
        if str(dig(inputs, "type", default="")).lower() != "ingress":
            return []
        cidrs = [str(c) for key in ("cidrBlocks", "ipv6CidrBlocks") for c in as_list(dig(inputs, key))]
        opened = [(_ports(dig(inputs, "protocol"), dig(inputs, "fromPort"), dig(inputs, "toPort")), cidrs)]
    else:
        cidrs = [str(c) for key in ("cidrIpv4", "cidrIpv6") for c in as_list(dig(inputs, key))]
        ports = _ports(dig(inputs, "ipProtocol"), dig(inputs, "fromPort"), dig(inputs, "toPort"))
        opened = [(ports, cidrs)]
    return [(ports, cidrs) for ports, cidrs in opened if ports is not None and cidrs]


def check_no_internet_admin_ports(type_: str, inputs: Mapping[str, Any]) -> Iterator[str]:
    opened = _ingress(type_, inputs)
    for name, (low, high) in ADMIN_PORTS.items():
        cidrs = [c for (lo, hi), cs in opened if lo <= high and low <= hi for c in cs]
        if not cidrs:
            continue
        v4, v6, bad = _public_addresses(cidrs)
        port = str(low) if low == high else f"{low}-{high}"
        if bad:
            yield f"{name} ({port}/tcp) is open to {bad}, which are not CIDRs: the group cannot be judged"
        elif v4 > 2 ** (32 - WIDEST_PUBLIC) or v6 > 2**16:
            yield (
                f"{name} ({port}/tcp) is open to the internet: {cidrs} admit {v4} public IPv4 addresses"
                f"{f' and {v6} public IPv6 /64s' if v6 else ''} (at most one /{WIDEST_PUBLIC} office block)"
            )


RULES = (
    Rule(
        name="network-no-internet-admin-ports",
        description="No security group opens an admin, control-plane or kubelet port (SSH 22, RDP 3389, "
        "WinRM, Docker 2375-2376, etcd 2379-2380, Kubernetes API 6443, kubelet 10250/10255, ...) to the "
        f"internet: more public addresses than one /{WIDEST_PUBLIC} block, in any rule or port range.",
        remediation="Reach nodes with SSM Session Manager or `kubectl debug node/...`; let the cluster's "
        "own security groups (pulumi-eks) carry control-plane traffic; name the office CIDR when a port "
        "must be reachable from outside.",
        level="mandatory",
        severity="critical",
        types=(SECURITY_GROUP, SECURITY_GROUP_RULE, INGRESS_RULE),
        check=check_no_internet_admin_ports,
    ),
)
