"""EKS node auto repair on a managed node group that pulumi-eks creates.

pulumi-eks 4.4.0's `eks.ManagedNodeGroup` has no `nodeRepairConfig` input (its schema and the Python SDK's
managed_node_group.py lack it), though the `aws.eks.NodeGroup` it creates does (pulumi-aws 7.51.1,
`node_repair_config`). Its child is built from a copy of the component's inputs
(nodejs/eks/nodes/nodegroup.ts, createManagedNodeGroupInternal: `Object.assign({}, args)` spread into
`new aws.eks.NodeGroup`), but an input the schema does not declare never reaches it from Python.

So a `transforms` resource option on the component adds it to the child. Transforms run in the engine,
not in our process: it keeps a remote (multi-language) component's transforms and runs them on every
resource that the component's provider registers beneath it (pulumi pkg/resource/deploy/source_eval.go,
RegisterResource: `pendingTransforms` saved for `remote` registrations, then the transforms of every
parent). The transform is a pure function of a NodeGroup's inputs, so it is tested on those inputs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pulumi

# The Pulumi type token of the aws.eks.NodeGroup that pulumi-eks's ManagedNodeGroup creates.
NODE_GROUP_TYPE = "aws:eks/nodeGroup:NodeGroup"


def with_node_repair(props: Mapping[str, Any]) -> dict[str, Any]:
    """A NodeGroup's inputs (wire names, as a transform sees them) with node auto repair turned on. An
    explicit `nodeRepairConfig` already there wins."""
    if props.get("nodeRepairConfig") is not None:
        return dict(props)
    return {**props, "nodeRepairConfig": {"enabled": True}}


def node_repair_transform(args: pulumi.ResourceTransformArgs) -> pulumi.ResourceTransformResult | None:
    """Turns on node auto repair on the aws.eks.NodeGroup beneath a pulumi-eks ManagedNodeGroup; every
    other resource passes unchanged."""
    if args.type_ != NODE_GROUP_TYPE:
        return None
    return pulumi.ResourceTransformResult(props=with_node_repair(args.props), opts=args.opts)
