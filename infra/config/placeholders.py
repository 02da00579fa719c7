"""Documentation placeholders in stack config and planned resources: values the committed stack files
carry as examples (the example AWS account, the RFC 5737 documentation networks, an example AMI id,
an example capacity reservation id).
A real preview or update refuses them (a cluster admin in someone else's account, an endpoint open to
a range nobody deploys from, an AMI that does not exist); offline synth of the committed files only
warns, so the examples stay runnable. Pure (no Pulumi import): the program and the policy pack share it.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

EXAMPLE_ACCOUNT = "123456789012"  # the account id of the AWS documentation's examples
EXAMPLE_AMI = "ami-0123456789abcdef0"
EXAMPLE_RESERVATION = "cr-0123456789abcdef0"  # a capacity reservation id of the same example shape
# RFC 5737 TEST-NET-1/2/3: reserved for documentation, never routed on the internet.
DOCUMENTATION_NETWORKS = tuple(
    ipaddress.IPv4Network(n) for n in ("192.0.2.0/24", "198.51.100.0/24", "203.0.113.0/24")
)
_CIDR = re.compile(r"\b\d{1,3}(?:\.\d{1,3}){3}(?:/\d{1,2})?\b")
_ACCOUNT = re.compile(rf"(?<!\d){EXAMPLE_ACCOUNT}(?!\d)")


def placeholder_problem(value: str) -> str | None:
    """What documentation placeholder a string carries, or None."""
    if _ACCOUNT.search(value):
        return f"{EXAMPLE_ACCOUNT} is the AWS documentation's example account; use your account's ARN"
    if EXAMPLE_AMI in value:
        return f"{EXAMPLE_AMI} is an example AMI id; use the id of your AMI in this region"
    if EXAMPLE_RESERVATION in value:
        return (
            f"{EXAMPLE_RESERVATION} is an example capacity reservation id; use your reservation's "
            "(aws ec2 describe-capacity-reservations)"
        )
    for match in _CIDR.findall(value):
        try:
            net = ipaddress.IPv4Network(match, strict=False)
        except ValueError:
            continue
        # Inside a documentation range, not merely overlapping one: 0.0.0.0/0 (a default route, a
        # NetworkPolicy's egress) contains every range and is no placeholder.
        doc = next((d for d in DOCUMENTATION_NETWORKS if net.subnet_of(d)), None)
        if doc is not None:
            return f"{match} is in {doc}, reserved for documentation (RFC 5737); use your real egress CIDR"
    return None


def _strings(value: Any, path: str) -> Iterator[tuple[str, str]]:
    if isinstance(value, str):
        yield path, value
    elif isinstance(value, Mapping):
        for key, item in value.items():
            yield from _strings(item, f"{path}.{key}" if path else str(key))
    elif isinstance(value, Sequence) and not isinstance(value, str | bytes):
        # Sequence, not list: under the engine the pack sees pulumi-policy's read-only proxies.
        for i, item in enumerate(value):
            yield from _strings(item, f"{path}[{i}]")


def placeholder_problems(values: Any, path: str = "") -> list[str]:
    """`<key path>: <value>: <why>` for every string under `values` that is a placeholder."""
    return [
        f"{where}: {text!r}: {problem}"
        for where, text in _strings(values, path)
        if (problem := placeholder_problem(text))
    ]
