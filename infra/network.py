"""Network: a VPC across 2-4 AZs with public and private subnets, NAT and an S3 gateway endpoint.

Nodes live in the private subnets; the public ones hold the NAT gateways and internet-facing load
balancers. Subnet tags let the AWS Load Balancer Controller and Karpenter find the right subnets.
"""

from __future__ import annotations

from typing import Literal

import pulumi
import pulumi_aws as aws
from pydantic import BaseModel, ConfigDict


class NetworkArgs(BaseModel):
    model_config = ConfigDict(frozen=True)

    cluster_name: str
    region: str
    # Empty: the first len(private_subnet_cidrs) available AZs of the region.
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
        if args.availability_zones:
            azs = pulumi.Output.from_input(args.availability_zones)
        else:
            available = aws.get_availability_zones_output(
                state="available", opts=pulumi.InvokeOutputOptions(parent=self)
            )
            azs = available.names.apply(lambda names: names[:count])
        cluster_tag = {f"kubernetes.io/cluster/{args.cluster_name}": "shared"}

        vpc = aws.ec2.Vpc(
            f"{name}-vpc",
            cidr_block=args.vpc_cidr,
            enable_dns_hostnames=True,
            enable_dns_support=True,
            tags={**args.tags, "Name": f"{name}-vpc"},
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
            tags={**args.tags, "Name": f"{name}-s3"},
            opts=child,
        )

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
