"""Who created the cluster, recorded in the stack itself.

EKS gives the identity that creates a cluster an admin access entry of its own (pulumi-eks always sets
`bootstrapClusterCreatorAdminPermissions: true`), outside Pulumi's state. Later updates may run as another
identity (CI, a colleague in adminPrincipalArns), so the rules that depend on the creator (no second
access entry for it; the bucket's deployer principal) must compare against the creator, not against
whoever runs `pulumi up` now. The first deploy exports `cluster_creator_arn`; every later update reads it
back through a StackReference to the stack itself (the engine's builtin provider reads the stack's last
checkpoint: pkg/resource/deploy/builtins.go, readStackReference) and exports it unchanged.
"""

from __future__ import annotations

import pulumi
from pulumi.runtime.sync_await import _sync_await

CREATOR_EXPORT = "cluster_creator_arn"


def recorded_creator(caller_arn: str) -> str:
    """The creator recorded by an earlier update of this stack, or `caller_arn` on the first deploy."""
    name = f"{pulumi.get_organization()}/{pulumi.get_project()}/{pulumi.get_stack()}"
    itself = pulumi.StackReference(f"{pulumi.get_stack()}-recorded-creator", stack_name=name)
    details = _sync_await(itself.get_output_details(CREATOR_EXPORT))
    recorded = details.value if details.value is not None else details.secret_value
    if recorded is None:
        return caller_arn
    return str(recorded)
