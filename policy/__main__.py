"""CrossGuard entry point: `pulumi preview --policy-pack policy` runs this file (via pulumi.policy)."""

import sys

if {"-h", "--help"} & set(sys.argv[1:]):
    # Building the pack starts its analyzer server (and prints its port): answer --help before that.
    print(
        "usage: pulumi preview|up --policy-pack policy   (or: make preview|up STACK=<stack>)\n\n"
        "The mlops-eks CrossGuard policy pack. The Pulumi CLI runs this package as an analyzer; run offline\n"
        "over every stack with `python -m policy.scan` (make lint)."
    )
    sys.exit(0)

from infra.extras import needs_dev_install  # noqa: E402
from infra.startup import imports_without_gc  # noqa: E402

with needs_dev_install("the policy pack (pulumi preview --policy-pack policy)"), imports_without_gc():
    from pulumi_policy import EnforcementLevel, PolicyPack

    from policy.pack import PACK_NAME, policies

PolicyPack(
    name=PACK_NAME,
    policies=policies(),
    enforcement_level=EnforcementLevel.MANDATORY,
    description="Security and cost guardrails for the mlops-eks platform and workload stacks.",
)
