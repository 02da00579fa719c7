"""Security groups and network ACLs: no admin, control-plane or kubelet port open to the internet, however
the rule is written (a SecurityGroup's inline ingress, a SecurityGroupRule, a vpc SecurityGroupIngressRule,
a network ACL's entries; one CIDR or several that add up; a port range or "all traffic" that covers the
port; a managed prefix list of the stack whose entries add up), and no VPC's default security group that
admits anything (CIS AWS Foundations Benchmark 5.1, 5.2, 5.3, 5.4)."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from infra.config.cluster_rules import PUBLIC_CIDR_MIN_PREFIX
from policy.core import Resource, Rule, StackRule, as_list, dig, known
from policy.coverage import networks, whole_number

SECURITY_GROUP = "aws:ec2/securityGroup:SecurityGroup"
SECURITY_GROUP_RULE = "aws:ec2/securityGroupRule:SecurityGroupRule"
INGRESS_RULE = "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule"
DEFAULT_SECURITY_GROUP = "aws:ec2/defaultSecurityGroup:DefaultSecurityGroup"
NETWORK_ACL = "aws:ec2/networkAcl:NetworkAcl"
DEFAULT_NETWORK_ACL = "aws:ec2/defaultNetworkAcl:DefaultNetworkAcl"
NETWORK_ACL_RULE = "aws:ec2/networkAclRule:NetworkAclRule"
PREFIX_LIST = "aws:ec2/managedPrefixList:ManagedPrefixList"
PREFIX_LIST_ENTRY = "aws:ec2/managedPrefixListEntry:ManagedPrefixListEntry"
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


def public_addresses(cidrs: list[str]) -> tuple[int, int, list[str]]:
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
    lo, hi = whole_number(low), whole_number(high if high is not None else low)
    if lo is None or hi is None:
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


def _admin_ports_open(opened: list[tuple[tuple[int, int], list[str]]]) -> Iterator[str]:
    """What of `opened` ((TCP port range, CIDRs) pairs) lets the internet reach an admin port."""
    for name, (low, high) in ADMIN_PORTS.items():
        cidrs = [c for (lo, hi), cs in opened if lo <= high and low <= hi for c in cs]
        if not cidrs:
            continue
        v4, v6, bad = public_addresses(cidrs)
        port = str(low) if low == high else f"{low}-{high}"
        if bad:
            yield f"{name} ({port}/tcp) is open to {bad}, which are not CIDRs: the group cannot be judged"
        elif v4 > 2 ** (32 - WIDEST_PUBLIC) or v6 > 2**16:
            yield (
                f"{name} ({port}/tcp) is open to the internet: {cidrs} admit {v4} public IPv4 addresses"
                f"{f' and {v6} public IPv6 /64s' if v6 else ''} (at most one /{WIDEST_PUBLIC} office block)"
            )


def _acl_entries(type_: str, inputs: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """A network ACL's ingress entries, in the shape of a NetworkAclRule's inputs."""
    if type_ == NETWORK_ACL_RULE:
        return [] if dig(inputs, "egress") is True else [inputs]
    return [
        {
            "ruleNumber": dig(e, "ruleNo"),
            "ruleAction": dig(e, "action"),
            "protocol": dig(e, "protocol"),
            "fromPort": dig(e, "fromPort"),
            "toPort": dig(e, "toPort"),
            "cidrBlock": dig(e, "cidrBlock"),
            "ipv6CidrBlock": dig(e, "ipv6CidrBlock"),
        }
        for e in as_list(dig(inputs, "ingress"))
        if isinstance(e, Mapping)
    ]


def _acl_opened(entries: list[Mapping[str, Any]]) -> list[tuple[tuple[int, int], list[str]]]:
    """The allow entries a network ACL evaluates before any deny entry that covers them (it applies the
    lowest-numbered entry that matches): (TCP port range, CIDRs) pairs."""
    ordered = sorted(entries, key=lambda e: whole_number(dig(e, "ruleNumber")) or 0)
    opened = []
    for i, entry in enumerate(ordered):
        if str(dig(entry, "ruleAction", default="")).lower() != "allow":
            continue
        ports = _ports(dig(entry, "protocol"), dig(entry, "fromPort"), dig(entry, "toPort"))
        cidrs = [str(c) for key in ("cidrBlock", "ipv6CidrBlock") for c in as_list(dig(entry, key))]
        if ports is None or not cidrs:
            continue
        denied = [
            (_ports(dig(d, "protocol"), dig(d, "fromPort"), dig(d, "toPort")), dig(d, "cidrBlock"))
            for d in ordered[:i]
            if str(dig(d, "ruleAction", default="")).lower() == "deny"
        ]
        kept = [
            c
            for c in cidrs
            if not any(
                p is not None and p[0] <= ports[0] and ports[1] <= p[1] and _contains(str(d), c)
                for p, d in denied
            )
        ]
        if kept:
            opened.append((ports, kept))
    return opened


def _contains(outer: str, inner: str) -> bool:
    """Whether CIDR `outer` holds every address of CIDR `inner`."""
    (parsed, bad) = networks([outer, inner])
    if bad or len(parsed) != 2 or parsed[0].version != parsed[1].version:
        return False
    return parsed[1].subnet_of(parsed[0])  # type: ignore[arg-type]


def check_no_internet_admin_ports(type_: str, inputs: Mapping[str, Any]) -> Iterator[str]:
    if type_ in (NETWORK_ACL, DEFAULT_NETWORK_ACL, NETWORK_ACL_RULE):
        yield from _admin_ports_open(_acl_opened(_acl_entries(type_, inputs)))
        return
    yield from _admin_ports_open(_ingress(type_, inputs))


def check_default_security_group(type_: str, inputs: Mapping[str, Any]) -> Iterator[str]:
    rules = {d: as_list(dig(inputs, d)) for d in ("ingress", "egress")}
    for direction, found in rules.items():
        if found:
            yield (
                f"the VPC's default security group has {len(found)} {direction} rule(s): anything launched "
                "without a group of its own (or given the default one) gets them"
            )


def _prefix_lists(type_: str, inputs: Mapping[str, Any]) -> list[tuple[tuple[int, int], str, list[str]]]:
    """(TCP port range, input key, prefix list ids) of every ingress a resource opens to prefix lists."""
    if type_ == SECURITY_GROUP:
        rules = [r for r in as_list(dig(inputs, "ingress")) if isinstance(r, Mapping)]
        found = [
            (
                _ports(dig(r, "protocol"), dig(r, "fromPort"), dig(r, "toPort")),
                [str(p) for p in as_list(dig(r, "prefixListIds"))],
            )
            for r in rules
        ]
        key = "ingress"
    elif type_ == SECURITY_GROUP_RULE:
        if str(dig(inputs, "type", default="")).lower() != "ingress":
            return []
        ports = _ports(dig(inputs, "protocol"), dig(inputs, "fromPort"), dig(inputs, "toPort"))
        found, key = [(ports, [str(p) for p in as_list(dig(inputs, "prefixListIds"))])], "prefixListIds"
    elif type_ == INGRESS_RULE:
        ports = _ports(dig(inputs, "ipProtocol"), dig(inputs, "fromPort"), dig(inputs, "toPort"))
        found, key = [(ports, [str(p) for p in as_list(dig(inputs, "prefixListId"))])], "prefixListId"
    else:
        return []
    return [(ports, key, ids) for ports, ids in found if ports is not None and ids]


def check_prefix_lists(resources: Sequence[Resource]) -> Iterator[tuple[str | None, str]]:
    """Admin ports opened to managed prefix lists, judged by the entries the lists of the stack hold
    (their `entries` and ManagedPrefixListEntry resources); a list the stack does not define cannot be
    judged and is reported."""
    lists = [r for r in resources if r.type == PREFIX_LIST]
    entries = [r for r in resources if r.type == PREFIX_LIST_ENTRY]

    def refers(r: Resource, key: str, value: str, target: Resource) -> bool:
        deps = (r.deps or {}).get(key, ())
        names = {target.name, str(dig(known(target.inputs), "name", default=""))}
        return target.name in deps or value in names

    for r in resources:
        inputs = known(r.inputs)
        opened: list[tuple[tuple[int, int], list[str]]] = []
        for ports, key, ids in _prefix_lists(r.type, inputs):
            for pl in ids:
                target = next((t for t in lists if refers(r, key, pl, t)), None)
                if target is None:
                    opened.append((ports, [f"prefix list {pl}"]))
                    continue
                cidrs = [str(dig(e, "cidr")) for e in as_list(dig(known(target.inputs), "entries"))]
                cidrs += [
                    str(dig(known(e.inputs), "cidr"))
                    for e in entries
                    if refers(e, "prefixListId", str(dig(known(e.inputs), "prefixListId")), target)
                ]
                opened.append((ports, cidrs))
        for message in _admin_ports_open(opened):
            yield (
                r.name,
                message.replace("are not CIDRs: the group cannot", "are not in the stack: they cannot"),
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
        types=(
            SECURITY_GROUP,
            SECURITY_GROUP_RULE,
            INGRESS_RULE,
            NETWORK_ACL,
            DEFAULT_NETWORK_ACL,
            NETWORK_ACL_RULE,
        ),
        check=check_no_internet_admin_ports,
    ),
    Rule(
        name="network-default-security-group-closed",
        description="A VPC's default security group admits and sends nothing (CIS AWS Foundations 5.4): "
        "whatever is launched without a group of its own gets it.",
        remediation="Manage the default group with aws.ec2.DefaultSecurityGroup(vpc_id=..., ingress=[], "
        "egress=[]) and give every workload a security group of its own.",
        level="mandatory",
        severity="high",
        types=(DEFAULT_SECURITY_GROUP,),
        check=check_default_security_group,
    ),
)

STACK_RULES = (
    StackRule(
        name="network-prefix-lists-not-internet",
        description="An admin, control-plane or kubelet port opened to a managed prefix list is judged by "
        "the entries the list holds, added up: no more public addresses than one office block; a list the "
        "stack does not define cannot be judged.",
        remediation="Put only the office or VPN CIDRs in the prefix list, in the same stack, or open the "
        "port to CIDRs directly; reach nodes with SSM Session Manager.",
        level="mandatory",
        severity="critical",
        check=check_prefix_lists,
    ),
)
