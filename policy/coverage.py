"""What a union of ranges or networks covers, for rules that must not be split in parts: two rules of
ports 1-32767 and 32768-65535 open every port, 0.0.0.0/1 and 128.0.0.0/1 are the internet. Numbers are
read as the engine hands them over (every number a float: a protobuf Struct carries no integers)."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from typing import Any

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
EVERY_IPV4 = ipaddress.ip_network("0.0.0.0/0")
EVERY_IPV6 = ipaddress.ip_network("::/0")


def whole_number(value: Any) -> int | None:
    """An integer given as an int, an integral float (how the engine sends 443) or a decimal string;
    None for anything else (a named port, a fraction, a missing value)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return int(value) if value.is_integer() else None
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value)
    return None


def ranges_cover(ranges: Iterable[tuple[int, int]], low: int, high: int) -> bool:
    """Whether the union of inclusive [a, b] ranges covers every integer of [low, high]."""
    reached = low - 1
    for a, b in sorted(ranges):
        if a > reached + 1:
            break
        reached = max(reached, b)
        if reached >= high:
            return True
    return reached >= high


def networks(cidrs: Iterable[Any]) -> tuple[list[Network], list[str]]:
    """(parsed networks, the entries that are not CIDRs)."""
    parsed: list[Network] = []
    bad: list[str] = []
    for cidr in cidrs:
        try:
            parsed.append(ipaddress.ip_network(str(cidr), strict=False))
        except ValueError:
            bad.append(str(cidr))
    return parsed, bad


def minus(nets: Iterable[Network], removed: Iterable[Network]) -> list[Network]:
    """The addresses of `nets` outside every network of `removed`."""
    pieces = list(nets)
    for r in removed:
        kept: list[Network] = []
        for n in pieces:
            if n.version != r.version or not n.overlaps(r):
                kept.append(n)
            elif not n.subnet_of(r):  # type: ignore[arg-type]
                kept.extend(n.address_exclude(r))  # type: ignore[arg-type]
        pieces = kept
    return pieces


def covers_everything(nets: Iterable[Network]) -> bool:
    """Whether the union of `nets` is every IPv4 address (or every IPv6 address)."""
    nets = list(nets)
    v4 = [n for n in nets if n.version == 4]
    v6 = [n for n in nets if n.version == 6]
    return list(ipaddress.collapse_addresses(v4)) == [EVERY_IPV4] or list(  # type: ignore[arg-type]
        ipaddress.collapse_addresses(v6)  # type: ignore[arg-type]
    ) == [EVERY_IPV6]
