"""Documentation placeholders (infra/config/placeholders.py) in any planned resource: the example account in
an access entry or trust, a TEST-NET CIDR on the endpoint or a security group, the example AMI id.
Mandatory under the engine; offline (`infra synth`, policy.scan, tests) the committed example stacks
carry them on purpose, so there the finding is advisory."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from infra.config.placeholders import placeholder_problems
from policy.core import Rule, known


def check_no_placeholders(type_: str, inputs: Mapping[str, Any]) -> Iterator[str]:
    yield from placeholder_problems(known(inputs))


RULES = (
    Rule(
        name="no-documentation-placeholders",
        description="No resource carries a documentation placeholder: the example account 123456789012, "
        "the RFC 5737 networks 192.0.2.0/24, 198.51.100.0/24, 203.0.113.0/24, or ami-0123456789abcdef0.",
        remediation="Replace the example values in Pulumi.<stack>.yaml (adminPrincipalArns, "
        "publicAccessCidrs, gpuPools[].amiId) with your account's, your egress CIDRs and your AMI.",
        level="mandatory",
        offline_level="advisory",
        severity="high",
        types=("aws:", "eks:", "kubernetes:"),
        check=check_no_placeholders,
    ),
)
