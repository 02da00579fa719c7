"""What the stack's last update recorded: who created the cluster, and whether the stack was deployed before.

EKS gives the identity that creates a cluster an admin access entry of its own (pulumi-eks always sets
`bootstrapClusterCreatorAdminPermissions: true`), outside Pulumi's state. Later updates may run as another
identity (CI, a colleague in adminPrincipalArns), so the rules that depend on the creator (no second
access entry for it; the bucket's deployer principal) must compare against the creator, not against
whoever runs `pulumi up` now. The first deploy exports `cluster_creator_arn`; every later update reads it
back through a StackReference to the stack itself (the engine's builtin provider reads the stack's last
checkpoint: pulumi/pulumi pkg/resource/deploy/builtins.go, readStackReference) and exports it unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi
from pulumi.runtime.sync_await import _sync_await

CREATOR_EXPORT = "cluster_creator_arn"


@dataclass(frozen=True)
class Recorded:
    creator: str | None  # None: never recorded (the first deploy)
    vpc_id: str | None  # None: the stack has no VPC yet (its first deploy)

    @property
    def first_deploy(self) -> bool:
        return self.vpc_id is None


def recorded() -> Recorded:
    """The outputs of this stack's last completed update (none before its first)."""
    name = f"{pulumi.get_organization()}/{pulumi.get_project()}/{pulumi.get_stack()}"
    itself = pulumi.StackReference(f"{pulumi.get_stack()}-recorded", stack_name=name)

    def output(key: str) -> Any:
        details = _sync_await(itself.get_output_details(key))
        return details.value if details.value is not None else details.secret_value

    creator, vpc_id = output(CREATOR_EXPORT), output("vpc_id")
    return Recorded(None if creator is None else str(creator), None if vpc_id is None else str(vpc_id))
