"""Who created the cluster, recorded where EKS keeps the cluster: a tag on the cluster itself.

EKS gives the identity that creates a cluster an admin access entry of its own (pulumi-eks always sets
`bootstrapClusterCreatorAdminPermissions: true`), outside Pulumi's state. Later updates may run as another
identity (CI, a colleague in adminPrincipalArns), so the rules that depend on the creator (no second
access entry for it; the bucket's deployer principal) must compare against the creator, not against
whoever runs `pulumi up` now. The creator goes into the cluster's tags in the CreateCluster call itself
(pulumi-eks passes `clusterTags` to the aws.eks.Cluster it creates: nodejs/eks/cluster/cluster.ts), and
every update reads it back from EKS (`recorded`, data sources a preview runs too) and passes the same value,
so the tag never changes hands. Nothing depends on the stack's own outputs: a first update that failed
after EKS created the cluster left the tag, and no backend layout (no `organization/project/stack`
reference to itself) is assumed.
"""

from __future__ import annotations

from dataclasses import dataclass

CREATOR_TAG = "mlops-eks:cluster-creator"
# The stack output that shows it (and that workload stacks and users may read).
CREATOR_EXPORT = "cluster_creator_arn"


@dataclass(frozen=True)
class Recorded:
    exists: bool  # EKS has the stack's cluster
    creator: str | None  # its creator tag; None: no cluster, or one created before the tag was set

    @property
    def first_deploy(self) -> bool:
        """No cluster yet: this update creates it (and the VPC a deploy-from-VPC runner would live in)."""
        return not self.exists


def recorded(cluster_name: str) -> Recorded:
    """What EKS records about the cluster `cluster_name` now."""
    import pulumi_aws as aws

    if cluster_name not in aws.eks.get_clusters().names:
        return Recorded(exists=False, creator=None)
    tags = aws.eks.get_cluster(name=cluster_name).tags or {}
    return Recorded(exists=True, creator=tags.get(CREATOR_TAG))
