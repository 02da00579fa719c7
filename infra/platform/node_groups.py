"""Managed node groups (pulumi-eks `eks.ManagedNodeGroup`): the system pool and the fixed-size GPU pools
(`gpuPools` entries with source managed: reserved capacity; elastic GPU pools are Karpenter NodePools).

Every pool gets its own launch template, because the one pulumi-eks would generate allows a metadata
hop limit of 2: here IMDSv2 is required with hop limit 1 (pods cannot reach the node's credentials),
there is no SSH key, and the root volume is encrypted gp3. Custom-AMI pools (AMD) bootstrap through
nodeadm user data; EFA pools get their EFA interfaces and a cluster placement group in one AZ. A pool on a
Capacity Block (EKS capacity type CAPACITY_BLOCK) targets the block from its launch template, with the
`capacity-block` market type, as EKS requires of such groups (EKS user guide, "Create a managed node group
with Capacity Blocks for ML"); its subnets are the block's AZ.
"""

from __future__ import annotations

import base64
import json
from typing import Any, Literal

import pulumi
import pulumi_aws as aws
import pulumi_eks as eks

from infra.accelerators import NodeImage
from infra.component_args import ComponentArgs, child_options
from infra.contract import NODE_ROLE_LABEL
from infra.platform.cluster import SERVICE_CIDR
from infra.platform.node_repair import node_repair_transform

# The EKS NodeGroup API spells taint effects differently from Kubernetes.
_EFFECT = {"NoSchedule": "NO_SCHEDULE", "NoExecute": "NO_EXECUTE", "PreferNoSchedule": "PREFER_NO_SCHEDULE"}
SYSTEM_AMI_TYPE = "AL2023_x86_64_STANDARD"
SYSTEM_LABELS = {NODE_ROLE_LABEL: "system"}
# The root device of the AL2023-based images every group runs (EKS-optimized or custom with nodeadm).
ROOT_DEVICE = "/dev/xvda"


class ManagedNodeGroupArgs(ComponentArgs):
    cluster: eks.Cluster
    node_role: aws.iam.Role
    subnet_ids: pulumi.Output[list[str]]
    instance_types: list[str]
    # An EKS AMI type (botocore's eks AMITypes); CUSTOM means `ami_id` with nodeadm bootstrap.
    ami_type: str
    ami_id: str | None = None
    labels: dict[str, str]
    taints: list[dict[str, str]] = []
    min_size: int
    max_size: int
    desired_size: int
    capacity_type: Literal["ON_DEMAND", "SPOT", "CAPACITY_BLOCK"]
    # CAPACITY_BLOCK: the block's reservation id (cr-...), which the launch template targets.
    capacity_reservation_id: str | None = None
    disk_size_gib: int
    # >0: attach this many EFA interfaces and keep the nodes in a cluster placement group (pass
    # `subnet_ids` of one AZ: a placement group cannot span AZs).
    efa_interfaces: int = 0
    # aws.eks.get_cluster result: endpoint, CA, security group for custom AMIs and EFA interfaces.
    cluster_info: pulumi.Output[Any] | None = None
    # EKS node auto repair (infra/platform/node_repair.py): replace a node whose health condition stays
    # False (the node monitoring agent's, or the kubelet's Ready).
    node_repair: bool = False
    tags: dict[str, str]


class ManagedNodeGroup(pulumi.ComponentResource):
    """One EKS managed node group with its launch template. `opts.depends_on`: what a node needs before
    it can turn Ready (Cluster.node_prerequisites: the VPC CNI's credentials); the group waits for it."""

    def __init__(self, name: str, args: ManagedNodeGroupArgs, opts: pulumi.ResourceOptions | None = None):
        # The type token keeps the class's former name: a new token is a new URN, which would replace
        # the live node groups.
        super().__init__("mlops-eks:infra:NodePool", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        custom_ami = args.ami_type == NodeImage.CUSTOM
        if (custom_ami or args.efa_interfaces) and args.cluster_info is None:
            raise ValueError(f"{name}: custom AMIs and EFA need cluster_info")

        placement = None
        if args.efa_interfaces:
            group = aws.ec2.PlacementGroup(
                f"{name}-placement", strategy="cluster", tags=args.tags, opts=child
            )
            placement = aws.ec2.LaunchTemplatePlacementArgs(group_name=group.name)

        if (args.capacity_type == "CAPACITY_BLOCK") != (args.capacity_reservation_id is not None):
            raise ValueError(f"{name}: a CAPACITY_BLOCK group needs its reservation id, and only it")
        block = args.capacity_reservation_id
        template = aws.ec2.LaunchTemplate(
            f"{name}-lt",
            description=f"{name}: IMDSv2 only (hop limit 1), no SSH, encrypted gp3 root volume",
            metadata_options=aws.ec2.LaunchTemplateMetadataOptionsArgs(
                http_endpoint="enabled", http_tokens="required", http_put_response_hop_limit=1
            ),
            block_device_mappings=[
                aws.ec2.LaunchTemplateBlockDeviceMappingArgs(
                    device_name=ROOT_DEVICE,
                    ebs=aws.ec2.LaunchTemplateBlockDeviceMappingEbsArgs(
                        volume_size=args.disk_size_gib,
                        volume_type="gp3",
                        encrypted="true",
                        delete_on_termination="true",
                    ),
                )
            ],
            image_id=args.ami_id if custom_ami else None,
            user_data=self._nodeadm_user_data(args) if custom_ami else None,
            placement=placement,
            network_interfaces=self._efa_interfaces(args) if args.efa_interfaces else None,
            instance_market_options=(
                aws.ec2.LaunchTemplateInstanceMarketOptionsArgs(market_type="capacity-block")
                if block
                else None
            ),
            capacity_reservation_specification=(
                aws.ec2.LaunchTemplateCapacityReservationSpecificationArgs(
                    capacity_reservation_target=aws.ec2.LaunchTemplateCapacityReservationSpecificationCapacityReservationTargetArgs(
                        capacity_reservation_id=block
                    )
                )
                if block
                else None
            ),
            tag_specifications=[
                aws.ec2.LaunchTemplateTagSpecificationArgs(
                    resource_type=kind, tags={**args.tags, "Name": name}
                )
                for kind in ("instance", "volume")
            ],
            update_default_version=True,
            tags=args.tags,
            opts=child,
        )
        self.node_group = eks.ManagedNodeGroup(
            name,
            cluster=args.cluster,
            node_role=args.node_role,
            subnet_ids=args.subnet_ids,
            instance_types=args.instance_types,
            ami_type=args.ami_type,
            capacity_type=args.capacity_type,
            labels=args.labels,
            taints=[
                aws.eks.NodeGroupTaintArgs(key=t["key"], value=t["value"], effect=_EFFECT[t["effect"]])
                for t in args.taints
            ],
            scaling_config=aws.eks.NodeGroupScalingConfigArgs(
                min_size=args.min_size, max_size=args.max_size, desired_size=args.desired_size
            ),
            # A group that can grow (min < max) may be scaled by hand or by an autoscaler between
            # deploys: pulumi-eks then ignores scalingConfig.desiredSize, so `pulumi up` does not shrink it
            # back. A fixed-size group (min == max) has nothing to keep.
            ignore_scaling_changes=args.min_size < args.max_size,
            launch_template=aws.eks.NodeGroupLaunchTemplateArgs(
                id=template.id, version=template.latest_version.apply(str)
            ),
            tags=args.tags,
            opts=child_options(self, opts, transforms=[node_repair_transform] if args.node_repair else None),
        )
        self.register_outputs({"launch_template_id": template.id})

    @staticmethod
    def _nodeadm_user_data(args: ManagedNodeGroupArgs) -> pulumi.Output[str]:
        """EKS passes no bootstrap to a custom AMI: join the cluster with nodeadm (AL2023-based AMIs),
        registering the pool's labels and taints with the kubelet."""
        labels = ",".join(f"{k}={v}" for k, v in args.labels.items())
        taints = ",".join(f"{t['key']}={t['value']}:{t['effect']}" for t in args.taints)
        flags = [f"--node-labels={labels}"] + ([f"--register-with-taints={taints}"] if taints else [])

        def render(info: Any) -> str:
            node_config = {
                "apiVersion": "node.eks.aws/v1alpha1",
                "kind": "NodeConfig",
                "spec": {
                    "cluster": {
                        "name": info.name,
                        "apiServerEndpoint": info.endpoint,
                        "certificateAuthority": info.certificate_authorities[0].data,
                        "cidr": SERVICE_CIDR,
                    },
                    "kubelet": {"flags": flags},
                },
            }
            mime = (
                'MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary="//"\n\n--//\n'
                f"Content-Type: application/node.eks.aws\n\n{json.dumps(node_config, indent=2)}\n\n--//--\n"
            )
            return base64.b64encode(mime.encode()).decode()

        assert args.cluster_info is not None
        return args.cluster_info.apply(render)

    @staticmethod
    def _efa_interfaces(
        args: ManagedNodeGroupArgs,
    ) -> pulumi.Output[list[aws.ec2.LaunchTemplateNetworkInterfaceArgs]]:
        """One EFA interface per network card; the first card carries the primary (device 0) interface."""
        assert args.cluster_info is not None
        security_group = args.cluster_info.vpc_config.cluster_security_group_id
        return pulumi.Output.all(
            *[
                aws.ec2.LaunchTemplateNetworkInterfaceArgs(
                    device_index=0 if card == 0 else 1,
                    network_card_index=card,
                    interface_type="efa",
                    delete_on_termination="true",
                    security_groups=[security_group],
                )
                for card in range(args.efa_interfaces)
            ]
        )
