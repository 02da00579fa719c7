"""CrossGuard entry point: `pulumi preview --policy-pack policy` runs this file (via pulumi.policy)."""

from pulumi_policy import EnforcementLevel, PolicyPack

from policy.pack import PACK_NAME, policies

PolicyPack(
    name=PACK_NAME,
    policies=policies(),
    enforcement_level=EnforcementLevel.MANDATORY,
    description="Security and cost guardrails for the mlops-eks platform and workload stacks.",
)
