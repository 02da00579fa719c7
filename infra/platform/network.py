"""Network: a VPC across 2-4 AZs with public and private subnets, NAT, an S3 gateway endpoint and
flow logs.

Nodes live in the private subnets; the public ones hold the NAT gateways and internet-facing load
balancers. Subnet tags let the AWS Load Balancer Controller and Karpenter find the right subnets.
The S3 endpoint's policy admits only the platform's buckets (in this account), the buckets named in
`s3EndpointExtraBuckets`, and the AWS-owned buckets nodes read from; every other S3 request in the
region is refused at the endpoint (it cannot go out through the NAT instead: S3 traffic of the region
follows the endpoint's route). VPC flow logs (accepted and rejected traffic) go to a KMS-encrypted log
group with retention, written by a role that may write to that group only.
"""

from __future__ import annotations

import json
from typing import Any, Literal

import pulumi
import pulumi_aws as aws

from infra.component_args import ComponentArgs
from infra.platform.keys import flow_log_group_name
from infra.platform.registries import endpoint_buckets


class NetworkArgs(ComponentArgs):
    cluster_name: str
    region: str
    partition: str = "aws"
    account_id: pulumi.Output[str] | str
    # Bucket names start with this (infra/platform/storage.py `bucket_prefix`).
    platform_bucket_prefix: str
    extra_endpoint_buckets: list[str] = []
    # The stack's KMS key (infra/platform/keys.py) and the retention of the flow-log group.
    log_key_arn: pulumi.Output[str] | str
    log_retention_days: int
    # One per subnet pair, in order: infra/platform/zones.py chose them from what EC2 offers.
    availability_zones: list[str]
    vpc_cidr: str
    private_subnet_cidrs: list[str]
    public_subnet_cidrs: list[str]
    # "single": one NAT gateway for the VPC (cheap; one AZ failure cuts egress). "per-az": one per AZ.
    nat_gateways: Literal["single", "per-az"]
    tags: dict[str, str]


class Network(pulumi.ComponentResource):
    vpc_id: pulumi.Output[str]
    private_subnet_ids: pulumi.Output[list[str]]
    public_subnet_ids: pulumi.Output[list[str]]

    def __init__(self, name: str, args: NetworkArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("mlops-eks:infra:Network", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        count = len(args.private_subnet_cidrs)
        azs = args.availability_zones
        cluster_tag = {f"kubernetes.io/cluster/{args.cluster_name}": "shared"}

        vpc = aws.ec2.Vpc(
            f"{name}-vpc",
            cidr_block=args.vpc_cidr,
            enable_dns_hostnames=True,
            enable_dns_support=True,
            tags={**args.tags, "Name": f"{name}-vpc"},
            opts=child,
        )
        # The VPC's default security group, adopted with no rules: nothing of the platform uses it (the
        # cluster and nodes have their own groups, the S3 endpoint is a gateway), and a resource created
        # later without a group would otherwise talk to every other member (AWS Foundational Security Best
        # Practices EC2.2; CIS AWS Foundations 5.4). Pulumi removes every rule when it adopts it.
        aws.ec2.DefaultSecurityGroup(
            f"{name}-default-sg",
            vpc_id=vpc.id,
            tags={**args.tags, "Name": f"{name}-default-closed"},
            opts=child,
        )
        igw = aws.ec2.InternetGateway(f"{name}-igw", vpc_id=vpc.id, tags=args.tags, opts=child)
        public_rt = aws.ec2.RouteTable(
            f"{name}-public",
            vpc_id=vpc.id,
            routes=[aws.ec2.RouteTableRouteArgs(cidr_block="0.0.0.0/0", gateway_id=igw.id)],
            tags={**args.tags, "Name": f"{name}-public"},
            opts=child,
        )

        public, private, private_rts = [], [], []
        nats: list[aws.ec2.NatGateway] = []
        for i in range(count):
            az = azs[i]
            pub = aws.ec2.Subnet(
                f"{name}-public-{i}",
                vpc_id=vpc.id,
                cidr_block=args.public_subnet_cidrs[i],
                availability_zone=az,
                # Nodes never run here; only NAT gateways and load balancers get public addresses.
                map_public_ip_on_launch=False,
                tags={
                    **args.tags,
                    **cluster_tag,
                    "Name": f"{name}-public-{i}",
                    "kubernetes.io/role/elb": "1",
                },
                opts=child,
            )
            aws.ec2.RouteTableAssociation(
                f"{name}-public-{i}", subnet_id=pub.id, route_table_id=public_rt.id, opts=child
            )
            public.append(pub)
            if args.nat_gateways == "per-az" or i == 0:
                eip = aws.ec2.Eip(f"{name}-nat-{i}", domain="vpc", tags=args.tags, opts=child)
                nats.append(
                    aws.ec2.NatGateway(
                        f"{name}-nat-{i}",
                        allocation_id=eip.id,
                        subnet_id=pub.id,
                        tags={**args.tags, "Name": f"{name}-nat-{i}"},
                        opts=pulumi.ResourceOptions(parent=self, depends_on=[igw]),
                    )
                )
            priv = aws.ec2.Subnet(
                f"{name}-private-{i}",
                vpc_id=vpc.id,
                cidr_block=args.private_subnet_cidrs[i],
                availability_zone=az,
                tags={
                    **args.tags,
                    **cluster_tag,
                    "Name": f"{name}-private-{i}",
                    "kubernetes.io/role/internal-elb": "1",
                    "karpenter.sh/discovery": args.cluster_name,
                },
                opts=child,
            )
            rt = aws.ec2.RouteTable(
                f"{name}-private-{i}",
                vpc_id=vpc.id,
                routes=[aws.ec2.RouteTableRouteArgs(cidr_block="0.0.0.0/0", nat_gateway_id=nats[-1].id)],
                tags={**args.tags, "Name": f"{name}-private-{i}"},
                opts=child,
            )
            aws.ec2.RouteTableAssociation(
                f"{name}-private-{i}", subnet_id=priv.id, route_table_id=rt.id, opts=child
            )
            private.append(priv)
            private_rts.append(rt)

        # Data sets and checkpoints travel to S3 through the gateway endpoint: free, and no NAT charges.
        aws.ec2.VpcEndpoint(
            f"{name}-s3",
            vpc_id=vpc.id,
            service_name=f"com.amazonaws.{args.region}.s3",
            vpc_endpoint_type="Gateway",
            route_table_ids=[rt.id for rt in private_rts],
            policy=pulumi.Output.from_input(args.account_id).apply(
                lambda account: json.dumps(
                    s3_endpoint_policy(
                        partition=args.partition,
                        region=args.region,
                        account_id=account,
                        platform_bucket_prefix=args.platform_bucket_prefix,
                        extra_buckets=args.extra_endpoint_buckets,
                    )
                )
            ),
            tags={**args.tags, "Name": f"{name}-s3"},
            opts=child,
        )
        self._flow_logs(name, args, vpc)

        self.vpc_id = vpc.id
        self.private_subnet_ids = pulumi.Output.all(*[s.id for s in private])
        self.public_subnet_ids = pulumi.Output.all(*[s.id for s in public])
        self.register_outputs(
            {
                "vpc_id": self.vpc_id,
                "private_subnet_ids": self.private_subnet_ids,
                "public_subnet_ids": self.public_subnet_ids,
            }
        )

    def _flow_logs(self, name: str, args: NetworkArgs, vpc: aws.ec2.Vpc) -> None:
        child = pulumi.ResourceOptions(parent=self)
        group = aws.cloudwatch.LogGroup(
            f"{name}-flow-logs",
            name=flow_log_group_name(args.cluster_name),
            retention_in_days=args.log_retention_days,
            kms_key_id=args.log_key_arn,
            tags=args.tags,
            opts=child,
        )
        role = aws.iam.Role(
            f"{name}-flow-logs",
            assume_role_policy=pulumi.Output.from_input(args.account_id).apply(
                lambda account: json.dumps(flow_logs_trust_policy(args.partition, args.region, account))
            ),
            description=f"VPC flow log delivery of {args.cluster_name}",
            tags=args.tags,
            opts=child,
        )
        policy = aws.iam.RolePolicy(
            f"{name}-flow-logs",
            role=role.id,
            policy=group.arn.apply(lambda arn: json.dumps(flow_logs_delivery_policy(arn))),
            opts=child,
        )
        aws.ec2.FlowLog(
            f"{name}-flow-logs",
            vpc_id=vpc.id,
            traffic_type="ALL",
            log_destination_type="cloud-watch-logs",
            log_destination=group.arn,
            iam_role_arn=role.arn,
            max_aggregation_interval=600,
            tags=args.tags,
            opts=pulumi.ResourceOptions(parent=self, depends_on=[policy]),
        )


def s3_endpoint_policy(
    *, partition: str, region: str, account_id: str, platform_bucket_prefix: str, extra_buckets: list[str]
) -> dict[str, Any]:
    """What may pass the S3 gateway endpoint: the platform's buckets (owned by this account: a bucket of
    the same name pattern in another account is refused), the configured extra buckets, and read-only the
    buckets a node reads: ECR's layer bucket in the region (`prod-<region>-starport-layer-bucket`, where
    every image a node pulls comes from: infra/platform/registries.py), the Amazon Linux 2023 package
    repositories (`al2023-repos-<region>-*`) and SSM Agent's buckets (Systems Manager User Guide, "SSM
    Agent communications with AWS managed S3 buckets")."""
    s3 = f"arn:{partition}:s3:::"
    platform = f"{s3}{platform_bucket_prefix}*"
    aws_owned = [
        *endpoint_buckets(region),
        f"al2023-repos-{region}-*",
        f"aws-ssm-{region}",
        f"aws-windows-downloads-{region}",
        f"amazon-ssm-{region}",
        f"amazon-ssm-packages-{region}",
        f"{region}-birdwatcher-prod",
        f"aws-ssm-distributor-file-{region}",
        f"aws-ssm-document-attachments-{region}",
        f"patch-baseline-snapshot-{region}",
    ]
    statements: list[dict[str, Any]] = [
        {
            "Sid": "PlatformBuckets",
            "Effect": "Allow",
            "Principal": "*",
            "Action": "s3:*",
            "Resource": [platform, f"{platform}/*"],
            "Condition": {"StringEquals": {"aws:ResourceAccount": account_id}},
        },
        {
            "Sid": "AwsOwnedBucketsNodesRead",
            "Effect": "Allow",
            "Principal": "*",
            "Action": ["s3:GetObject", "s3:GetBucketLocation", "s3:ListBucket"],
            "Resource": [f"{s3}{b}" for b in aws_owned] + [f"{s3}{b}/*" for b in aws_owned],
        },
    ]
    if extra_buckets:
        statements.append(
            {
                "Sid": "ConfiguredBuckets",
                "Effect": "Allow",
                "Principal": "*",
                "Action": "s3:*",
                "Resource": [f"{s3}{b}" for b in extra_buckets] + [f"{s3}{b}/*" for b in extra_buckets],
            }
        )
    return {"Version": "2012-10-17", "Statement": statements}


def flow_logs_trust_policy(partition: str, region: str, account_id: str) -> dict[str, Any]:
    """Assumable by VPC Flow Logs for this account's flow logs only (confused-deputy conditions)."""
    return {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Effect": "Allow",
                "Principal": {"Service": "vpc-flow-logs.amazonaws.com"},
                "Action": "sts:AssumeRole",
                "Condition": {
                    "StringEquals": {"aws:SourceAccount": account_id},
                    "ArnLike": {"aws:SourceArn": f"arn:{partition}:ec2:{region}:{account_id}:vpc-flow-log/*"},
                },
            }
        ],
    }


def flow_logs_delivery_policy(log_group_arn: str) -> dict[str, Any]:
    """Write streams and events to the one flow-log group (VPC User Guide, "IAM role for publishing
    flow logs to CloudWatch Logs", scoped from `*` to the group)."""
    group = log_group_arn.removesuffix(":*")
    return {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Sid": "WriteFlowLogGroup",
                "Effect": "Allow",
                "Action": [
                    "logs:CreateLogStream",
                    "logs:PutLogEvents",
                    "logs:DescribeLogGroups",
                    "logs:DescribeLogStreams",
                ],
                "Resource": [group, f"{group}:*"],
            }
        ],
    }
