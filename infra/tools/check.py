"""`python -m infra check --stack S`: what would stop a platform stack's `pulumi up`, found before it runs.

The stack's config as PlatformConfig reads it, whether `pulumi up` can reach the cluster it creates from
here, the documentation placeholders a real deploy refuses, and the input rules pulumi-eks applies inside
its provider (sim/pulumi/eks_rules.py) to what the program passes `eks.Cluster` and
`eks.ManagedNodeGroup`: the program runs offline under Pulumi mocks (infra/tools/synth.py), which never
run those rules themselves.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from infra.config.placeholders import placeholder_problems
from infra.config.platform import PROJECT, ConfigError, PlatformConfig
from infra.tools.idle_cost import idle_cost_report
from infra.tools.synth import synth
from sim.pulumi.eks_rules import CLUSTER, NODE_GROUP, RULES, violations


@dataclass
class Check:
    stack: str
    lines: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # why `pulumi up` would fail; empty: it deploys

    def text(self) -> str:
        verdict = (
            ["verdict: will deploy"]
            if not self.problems
            else ["verdict: will not deploy because:", *(f"  - {p}" for p in self.problems)]
        )
        return "\n".join(
            [f"check of platform stack {self.stack} (Pulumi.{self.stack}.yaml)", *self.lines, *verdict]
        )


def check(stack: str, values: dict[str, Any]) -> Check:
    result = Check(stack)
    try:
        config = PlatformConfig.from_mapping(values)
    except ConfigError as err:
        result.lines.append("config: refused (PlatformConfig)")
        result.problems += err.problems
        return result
    result.lines.append("config: valid (PlatformConfig)")
    result.lines += [f"  note: {idle}" for idle in config.idle_quotas]
    try:
        config.check_deployable()
    except ConfigError as err:
        result.lines.append("reachable from here: no (pulumi-eks rules not run until it is)")
        result.problems += err.problems
        return result
    public = config.endpoint_public_access
    reach = "public endpoint, limited to publicAccessCidrs" if public else "from inside the VPC"
    result.lines.append(f"reachable from here: yes ({reach}); the deploying identity is not known offline")
    placeholders = placeholder_problems({k: v for k, v in values.items() if k.startswith(f"{PROJECT}:")})
    refused = "a real preview or update refuses it (allowed: a real value)"
    result.problems += [f"{p}; {refused}" for p in placeholders]
    _, resources, _ = synth(stack, values)
    records = [asdict(r) for r in resources]
    broken = violations(records)
    kinds = {CLUSTER: "eks.Cluster", NODE_GROUP: "eks.ManagedNodeGroup"}
    counted = ", ".join(f"{sum(r['type'] == t for r in records)} {name}" for t, name in kinds.items())
    result.lines.append(
        f"pulumi-eks input rules: {len(RULES)} rules on {counted}: "
        + (f"{len(broken)} broken" if broken else "none broken")
    )
    result.problems += [f"pulumi-eks would refuse it: {b}" for b in broken]
    result.lines.append(idle_cost_report(config))
    return result
