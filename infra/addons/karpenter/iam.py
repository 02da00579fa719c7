"""The Karpenter controller's IAM policies, statement for statement from Karpenter's reference
CloudFormation for 1.14 (getting-started `cloudformation.yaml`), for one cluster.

Pure functions returning policy documents, so tests compare them with the reference without Pulumi.
Each reference managed policy stays its own document (and IAM policy): one combined document would
exceed the 6,144-character managed-policy limit.
"""

from __future__ import annotations

from typing import Any

Statement = dict[str, Any]
# One IAM policy each, as in the reference (names are suffixes of the policies' resource names).
CONTROLLER_POLICY_NAMES = (
    "node-lifecycle",
    "iam-integration",
    "eks-integration",
    "interruption",
    "zonal-shift",
    "resource-discovery",
)


def controller_policies(
    *, partition: str, region: str, account_id: str, cluster_name: str, node_role_arn: str, queue_arn: str
) -> dict[str, dict[str, Any]]:
    """Policy name suffix -> IAM policy document."""
    ec2 = f"arn:{partition}:ec2:{region}"
    cluster_tag = f"kubernetes.io/cluster/{cluster_name}"
    cluster_arn = f"arn:{partition}:eks:{region}:{account_id}:cluster/{cluster_name}"
    instance_profiles = f"arn:{partition}:iam::{account_id}:instance-profile/*"
    # Everything Karpenter creates carries these request tags; everything it touches later, the resource tags.
    owned_request = {
        f"aws:RequestTag/{cluster_tag}": "owned",
        "aws:RequestTag/eks:eks-cluster-name": cluster_name,
    }
    owned_resource = {f"aws:ResourceTag/{cluster_tag}": "owned"}
    by_nodepool_request = {"aws:RequestTag/karpenter.sh/nodepool": "*"}
    by_nodepool_resource = {"aws:ResourceTag/karpenter.sh/nodepool": "*"}
    launched = [
        f"{ec2}:*:{kind}/*"
        for kind in (
            "fleet",
            "instance",
            "volume",
            "network-interface",
            "launch-template",
            "spot-instances-request",
        )
    ]
    node_lifecycle: list[Statement] = [
        _allow(
            "AllowScopedEC2InstanceAccessActions",
            ["ec2:RunInstances", "ec2:CreateFleet"],
            [
                f"{ec2}::image/*",
                f"{ec2}::snapshot/*",
                f"{ec2}:*:security-group/*",
                f"{ec2}:*:subnet/*",
                f"{ec2}:*:capacity-reservation/*",
                f"{ec2}:*:placement-group/*",
            ],
        ),
        _allow(
            "AllowScopedEC2LaunchTemplateAccessActions",
            ["ec2:RunInstances", "ec2:CreateFleet"],
            f"{ec2}:*:launch-template/*",
            {"StringEquals": owned_resource, "StringLike": by_nodepool_resource},
        ),
        _allow(
            "AllowScopedEC2InstanceActionsWithTags",
            ["ec2:RunInstances", "ec2:CreateFleet", "ec2:CreateLaunchTemplate"],
            launched,
            {"StringEquals": owned_request, "StringLike": by_nodepool_request},
        ),
        _allow(
            "AllowScopedResourceCreationTagging",
            "ec2:CreateTags",
            launched,
            {
                "StringEquals": {
                    **owned_request,
                    "ec2:CreateAction": ["RunInstances", "CreateFleet", "CreateLaunchTemplate"],
                },
                "StringLike": by_nodepool_request,
            },
        ),
        _allow(
            "AllowScopedResourceTagging",
            "ec2:CreateTags",
            f"{ec2}:*:instance/*",
            {
                "StringEquals": owned_resource,
                "StringLike": by_nodepool_resource,
                "StringEqualsIfExists": {"aws:RequestTag/eks:eks-cluster-name": cluster_name},
                "ForAllValues:StringEquals": {
                    "aws:TagKeys": ["eks:eks-cluster-name", "karpenter.sh/nodeclaim", "Name"]
                },
            },
        ),
        _allow(
            "AllowScopedDeletion",
            ["ec2:TerminateInstances", "ec2:DeleteLaunchTemplate"],
            [f"{ec2}:*:instance/*", f"{ec2}:*:launch-template/*"],
            {"StringEquals": owned_resource, "StringLike": by_nodepool_resource},
        ),
    ]
    region_tag_request = {"aws:RequestTag/topology.kubernetes.io/region": region}
    region_tag_resource = {"aws:ResourceTag/topology.kubernetes.io/region": region}
    by_nodeclass_request = {"aws:RequestTag/karpenter.k8s.aws/ec2nodeclass": "*"}
    by_nodeclass_resource = {"aws:ResourceTag/karpenter.k8s.aws/ec2nodeclass": "*"}
    iam_integration: list[Statement] = [
        _allow(
            "AllowPassingInstanceRole",
            "iam:PassRole",
            node_role_arn,
            {"StringEquals": {"iam:PassedToService": ["ec2.amazonaws.com", "ec2.amazonaws.com.cn"]}},
        ),
        _allow(
            "AllowScopedInstanceProfileCreationActions",
            ["iam:CreateInstanceProfile"],
            instance_profiles,
            {"StringEquals": {**owned_request, **region_tag_request}, "StringLike": by_nodeclass_request},
        ),
        _allow(
            "AllowScopedInstanceProfileTagActions",
            ["iam:TagInstanceProfile"],
            instance_profiles,
            {
                "StringEquals": {
                    **owned_resource,
                    **region_tag_resource,
                    **owned_request,
                    **region_tag_request,
                },
                "StringLike": {**by_nodeclass_resource, **by_nodeclass_request},
            },
        ),
        _allow(
            "AllowScopedInstanceProfileActions",
            [
                "iam:AddRoleToInstanceProfile",
                "iam:RemoveRoleFromInstanceProfile",
                "iam:DeleteInstanceProfile",
            ],
            instance_profiles,
            {"StringEquals": {**owned_resource, **region_tag_resource}, "StringLike": by_nodeclass_resource},
        ),
    ]
    eks_integration = [_allow("AllowAPIServerEndpointDiscovery", "eks:DescribeCluster", cluster_arn)]
    interruption = [
        _allow(
            "AllowInterruptionQueueActions",
            ["sqs:DeleteMessage", "sqs:GetQueueUrl", "sqs:ReceiveMessage"],
            queue_arn,
        )
    ]
    zonal_shift = [
        _allow(
            "AllowZonalShiftStatusReadOnly",
            ["arc-zonal-shift:GetManagedResource"],
            "*",
            {"StringEquals": {"arc-zonal-shift:ResourceIdentifier": cluster_arn}},
        )
    ]
    resource_discovery: list[Statement] = [
        # Describe* calls do not support resource-level permissions; the region condition is the scope.
        _allow(
            "AllowRegionalReadActions",
            [
                "ec2:DescribeCapacityReservations",
                "ec2:DescribeImages",
                "ec2:DescribeInstances",
                "ec2:DescribeInstanceStatus",
                "ec2:DescribeInstanceTypeOfferings",
                "ec2:DescribeInstanceTypes",
                "ec2:DescribeLaunchTemplates",
                "ec2:DescribePlacementGroups",
                "ec2:DescribeSecurityGroups",
                "ec2:DescribeSpotPriceHistory",
                "ec2:DescribeSubnets",
            ],
            "*",
            {"StringEquals": {"aws:RequestedRegion": region}},
        ),
        _allow(
            "AllowSSMReadActions",
            "ssm:GetParameter",
            f"arn:{partition}:ssm:{region}::parameter/aws/service/*",
        ),
        _allow("AllowPricingReadActions", "pricing:GetProducts", "*"),
        _allow("AllowUnscopedInstanceProfileListAction", "iam:ListInstanceProfiles", "*"),
        _allow("AllowInstanceProfileReadActions", "iam:GetInstanceProfile", instance_profiles),
    ]
    statements = (
        node_lifecycle,
        iam_integration,
        eks_integration,
        interruption,
        zonal_shift,
        resource_discovery,
    )
    return {
        name: {"Version": "2012-10-17", "Statement": policy}
        for name, policy in zip(CONTROLLER_POLICY_NAMES, statements, strict=True)
    }


def _allow(
    sid: str, action: str | list[str], resource: str | list[str], condition: dict | None = None
) -> Statement:
    statement: Statement = {"Sid": sid, "Effect": "Allow", "Action": action, "Resource": resource}
    if condition:
        statement["Condition"] = condition
    return statement


def interruption_queue_policy(queue_arn: str, rule_arns: list[str]) -> dict[str, Any]:
    """EventBridge may send, for the stack's own interruption rules only (aws:SourceArn); nobody may use
    the queue without TLS. The reference also names sqs.amazonaws.com without a condition: nothing of SQS
    sends to this queue (it is no dead-letter queue), and without a source condition any rule of any
    account could feed Karpenter forged interruption events (a confused deputy), so neither stays."""
    return {
        "Version": "2012-10-17",
        "Id": "EC2InterruptionPolicy",
        "Statement": [
            {
                "Effect": "Allow",
                "Principal": {"Service": "events.amazonaws.com"},
                "Action": "sqs:SendMessage",
                "Resource": queue_arn,
                "Condition": {"ArnEquals": {"aws:SourceArn": sorted(rule_arns)}},
            },
            {
                "Sid": "DenyHTTP",
                "Effect": "Deny",
                "Action": "sqs:*",
                "Resource": queue_arn,
                "Condition": {"Bool": {"aws:SecureTransport": "false"}},
                "Principal": "*",
            },
        ],
    }


# EventBridge rules feeding the interruption queue: (rule suffix, source, detail-type).
INTERRUPTION_EVENTS: tuple[tuple[str, str, str], ...] = (
    ("health", "aws.health", "AWS Health Event"),
    ("spot-interruption", "aws.ec2", "EC2 Spot Instance Interruption Warning"),
    ("rebalance", "aws.ec2", "EC2 Instance Rebalance Recommendation"),
    ("instance-state-change", "aws.ec2", "EC2 Instance State-change Notification"),
    (
        "capacity-reservation-interruption",
        "aws.ec2",
        "EC2 Capacity Reservation Instance Interruption Warning",
    ),
)


def node_trust_policy() -> dict[str, Any]:
    return {
        "Version": "2012-10-17",
        "Statement": [
            {"Effect": "Allow", "Principal": {"Service": "ec2.amazonaws.com"}, "Action": "sts:AssumeRole"}
        ],
    }


# No AmazonEKS_CNI_Policy: the VPC CNI has its own Pod Identity role (infra/platform/cluster.py). No
# AmazonSSMManagedInstanceCore (the reference's): Session Manager gets an inline policy of its own actions
# (infra/platform/session_manager.py).
NODE_MANAGED_POLICIES = ("AmazonEKSWorkerNodePolicy", "AmazonEC2ContainerRegistryPullOnly")
