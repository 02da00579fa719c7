"""The platform stack: config -> network -> cluster -> node pools -> managed add-ons, storage -> exports.

`program()` is what `pulumi up` runs (through the root `__main__.py`). `build()` returns a `Platform`
holding every component, so later stages (Helm add-ons, Karpenter) plug in with the handles they need
(`platform.k8s_provider`, `platform.cluster`, `platform.node_groups`, ...) instead of re-deriving them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date
from typing import Literal

import pulumi
import pulumi_aws as aws
import pulumi_eks as eks
import pulumi_kubernetes as k8s

from infra.addons.gpu_node_check import startup_taints
from infra.addons.install import install_addons
from infra.config.cluster_rules import extended_support_notice
from infra.config.node_health import NodeHealthConfig
from infra.config.platform import ConfigError, GpuPoolConfig, PlatformConfig
from infra.contract import AcceleratorPool, PoolTaint, taint_spec
from infra.platform.cluster import Cluster, ClusterArgs, ManagedAddons, ManagedAddonsArgs
from infra.platform.creator import CREATOR_EXPORT, recorded
from infra.platform.keys import StackKey, StackKeyArgs
from infra.platform.network import Network, NetworkArgs
from infra.platform.node_groups import (
    SYSTEM_AMI_TYPE,
    SYSTEM_LABELS,
    ManagedNodeGroup,
    ManagedNodeGroupArgs,
    gpu_pool_scheduling,
)
from infra.platform.pod_identity import partition_of
from infra.platform.storage import Storage, StorageArgs, bucket_prefix


@dataclass
class Platform:
    """Every component of a platform stack and the facts add-ons need about it."""

    config: PlatformConfig
    stack: str
    cluster_name: str
    partition: str
    account_id: pulumi.Output[str]
    network: Network
    cluster: Cluster
    system_node_group: ManagedNodeGroup
    managed_gpu_groups: dict[str, ManagedNodeGroup]
    managed_addons: ManagedAddons
    storage: Storage
    # Tags on every AWS resource of the stack (and on the EC2 instances Karpenter launches).
    tags: dict[str, str] = field(default_factory=dict)
    exports: dict[str, object] = field(default_factory=dict)

    @property
    def region(self) -> str:
        return self.config.region

    @property
    def k8s_provider(self) -> k8s.Provider:
        return self.cluster.k8s_provider

    @property
    def eks_cluster(self) -> eks.Cluster:
        return self.cluster.eks

    @property
    def node_groups(self) -> list[eks.ManagedNodeGroup]:
        """Every managed node group; Helm releases that need nodes depend on these."""
        return [self.system_node_group.node_group, *(g.node_group for g in self.managed_gpu_groups.values())]


def build(config: PlatformConfig, stack: str, creator_arn: str | None = None) -> Platform:
    """Register the platform's resources for `stack`. `creator_arn`: who created the cluster
    (infra/platform/creator.py; default: whoever runs this update)."""
    cluster_name = f"mlops-eks-{stack}"
    tags = {"mlops-eks:stack": stack, "managed-by": "pulumi", **config.tags}
    partition = partition_of(config.region)
    caller = aws.get_caller_identity_output()
    account_id = caller.account_id
    # Logs and data: one key, made first (the flow-log and control-plane log groups need it).
    key = StackKey(
        "stack-key",
        StackKeyArgs(
            cluster_name=cluster_name,
            partition=partition,
            region=config.region,
            account_id=account_id,
            tags=tags,
        ),
    )

    network = Network(
        "network",
        NetworkArgs(
            cluster_name=cluster_name,
            region=config.region,
            partition=partition,
            account_id=account_id,
            platform_bucket_prefix=bucket_prefix(stack),
            extra_endpoint_buckets=config.s3_endpoint_extra_buckets,
            log_key_arn=key.arn,
            log_retention_days=config.log_retention,
            availability_zones=config.availability_zones,
            vpc_cidr=config.vpc_cidr,
            private_subnet_cidrs=config.private_subnets,
            public_subnet_cidrs=config.public_subnets,
            nat_gateways=config.nat_gateways,
            tags=tags,
        ),
    )
    cluster = Cluster(
        "cluster",
        ClusterArgs(
            cluster_name=cluster_name,
            partition=partition,
            kubernetes_version=config.kubernetes_version,
            vpc_id=network.vpc_id,
            private_subnet_ids=network.private_subnet_ids,
            public_subnet_ids=network.public_subnet_ids,
            endpoint_public_access=config.endpoint_public_access,
            public_access_cidrs=config.public_access_cidrs,
            deploy_from_vpc=config.deploy_from_vpc,
            deployer_cidrs=config.deployer_cidrs,
            admin_principal_arns=config.admin_principal_arns,
            region=config.region,
            account_id=account_id,
            log_key_arn=key.arn,
            log_retention_days=config.log_retention,
            session_manager=config.session_manager,
            tags=tags,
        ),
    )
    system = config.system_nodes
    health = config.addons.node_health
    system_node_group = ManagedNodeGroup(
        "system",
        ManagedNodeGroupArgs(
            cluster=cluster.eks,
            node_role=cluster.node_role,
            subnet_ids=network.private_subnet_ids,
            instance_types=system.instance_types,
            ami_type=SYSTEM_AMI_TYPE,
            labels=SYSTEM_LABELS,
            min_size=system.min_size,
            max_size=system.max_size,
            desired_size=system.desired,
            capacity_type=system.eks_capacity_type,
            disk_size_gib=system.disk_size_gib,
            node_repair=health.managed_node_repair,
            tags=tags,
        ),
        opts=pulumi.ResourceOptions(depends_on=cluster.node_prerequisites),
    )
    managed_gpu_groups = {
        pool.name: _managed_gpu_group(pool, cluster, network, health, tags)
        for pool in config.gpu_pools
        if pool.source == "managed"
    }
    managed_addons = ManagedAddons(
        "addons",
        ManagedAddonsArgs(
            cluster_name=cluster.name,
            cluster_arn=cluster.arn,
            pod_identity_agent=cluster.node_prerequisites[:1],
            partition=partition,
            k8s_provider=cluster.k8s_provider,
            node_monitoring_agent=config.node_monitoring_agent,
            kubeconfig=cluster.kubeconfig_json,
            tags=tags,
        ),
        # The add-ons' pods need schedulable nodes before EKS reports them ACTIVE.
        opts=pulumi.ResourceOptions(depends_on=[system_node_group.node_group]),
    )
    storage = Storage(
        "storage",
        StorageArgs(
            stack=stack,
            cluster_name=cluster_name,
            partition=partition,
            account_id=account_id,
            kms_key_arn=key.arn,
            admin_principal_arns=config.admin_principal_arns,
            # The creator, not whoever runs this update: the bucket's principals change only by config.
            deployer_arn=creator_arn if creator_arn is not None else caller.arn,
            noncurrent_days=config.checkpoint_noncurrent_days,
            keep_images=config.ecr_keep_images,
            force_destroy=config.force_destroy,
            tags=tags,
        ),
    )
    return Platform(
        config=config,
        stack=stack,
        cluster_name=cluster_name,
        partition=partition,
        account_id=account_id,
        network=network,
        cluster=cluster,
        system_node_group=system_node_group,
        managed_gpu_groups=managed_gpu_groups,
        managed_addons=managed_addons,
        storage=storage,
        tags=tags,
    )


def _managed_gpu_group(
    pool: GpuPoolConfig, cluster: Cluster, network: Network, health: NodeHealthConfig, tags: dict[str, str]
) -> ManagedNodeGroup:
    """A fixed-size managed node group (`source: managed`): min = max = desired = size. Its nodes also
    carry the startup GPU check's taint from the start; the check removes it once their GPUs passed."""
    acc = pool.catalog_entry
    labels, taints = gpu_pool_scheduling(acc)
    taints += [taint_spec(t) for t in startup_taints(acc.key, enabled=health.gpu_check)]
    efa_interfaces = pool.efa_interfaces
    # A cluster placement group lives in one AZ: EFA pools use the first AZ's private subnet only.
    subnets = (
        network.private_subnet_ids.apply(lambda ids: ids[:1])
        if efa_interfaces
        else network.private_subnet_ids
    )
    size = pool.max_nodes
    return ManagedNodeGroup(
        f"gpu-{pool.name}",
        ManagedNodeGroupArgs(
            cluster=cluster.eks,
            node_role=cluster.node_role,
            subnet_ids=subnets,
            instance_types=pool.instance_type_names,
            ami_type=str(acc.node_image),
            ami_id=pool.ami_id,
            labels=labels,
            taints=taints,
            min_size=size,
            max_size=size,
            desired_size=size,
            capacity_type=pool.eks_capacity_type,
            disk_size_gib=pool.managed_disk_size_gib,
            efa_interfaces=efa_interfaces,
            cluster_info=cluster.info,
            node_repair=health.managed_node_repair,
            tags={**tags, "mlops-eks:gpu-pool": pool.name},
        ),
        opts=pulumi.ResourceOptions(depends_on=cluster.node_prerequisites),
    )


def accelerator_pools(config: PlatformConfig) -> dict[str, AcceleratorPool]:
    """Every GPU node source (Karpenter NodePools and managed groups alike), as the contract describes
    it. A Karpenter pool exists only when the Karpenter add-on is on (config validation ensures it)."""
    pools = {}
    for pool in config.gpu_pools:
        acc = pool.catalog_entry
        labels, taints = gpu_pool_scheduling(acc)
        pools[pool.name] = AcceleratorPool(
            source=pool.source,
            accelerator=acc.key,
            instance_types=tuple(pool.instance_type_names),
            gpus_per_node=pool.gpus_per_node,
            resource_name=acc.resource_name,
            node_labels=labels,
            taints=tuple(PoolTaint.model_validate(t) for t in taints),
            startup_taints=startup_taints(acc.key, enabled=config.addons.node_health.gpu_check),
            capacity_types=tuple(pool.capacity_types),
            efa_interfaces=pool.efa_interfaces,
            gpu_limit=pool.gpu_limit,
            size=pool.size,
        )
    return pools


def export(platform: Platform) -> None:
    """The platform stack's outputs, read by workload stacks through a StackReference."""
    cluster, network, storage = platform.cluster, platform.network, platform.storage
    platform.exports.update(
        cluster_name=platform.cluster_name,
        kubeconfig=cluster.kubeconfig_json.apply(pulumi.Output.secret),
        region=platform.region,
        vpc_id=network.vpc_id,
        private_subnet_ids=network.private_subnet_ids,
        public_subnet_ids=network.public_subnet_ids,
        bucket_name=storage.bucket_name,
        ecr_repository_urls=storage.repository_urls,
        node_role_arn=cluster.node_role.arn,
        accelerator_pools={
            n: p.model_dump(mode="json") for n, p in accelerator_pools(platform.config).items()
        },
    )
    for name, value in platform.exports.items():
        pulumi.export(name, value)


def program(placeholders: Literal["refuse", "warn"] = "refuse") -> Platform:
    """Entry point of a platform stack (dev, prod). `pulumi up` refuses the committed stack files'
    documentation placeholders; offline commands pass `placeholders="warn"`."""
    try:
        config = PlatformConfig.from_pulumi(placeholders)
        caller = aws.get_caller_identity().arn
        # The creator is cluster-admin through EKS itself; a later deployer needs an admin entry.
        previous = recorded()
        if previous.creator is None and not previous.first_deploy:
            # Deployed before the creator was recorded: who created it is unknown (its access entries
            # exist already), so only the endpoint is checked, and this caller is recorded from now on.
            pulumi.log.warn(f"no {CREATOR_EXPORT} recorded in this stack: recording {caller} from now on")
            config.check_deployable()
        else:
            config.check_deployable(caller, previous.creator or caller, first_deploy=previous.first_deploy)
        creator = previous.creator or caller
    except ConfigError as e:
        raise pulumi.RunError(str(e)) from None
    if notice := extended_support_notice(config.kubernetes_version, date.today()):
        pulumi.log.warn(notice)
    platform = build(config, pulumi.get_stack(), creator)
    platform.exports[CREATOR_EXPORT] = creator
    password = config.grafana_admin_password
    secret = (
        pulumi.Output.secret(password.get_secret_value())
        if password and password.get_secret_value()
        else None
    )
    receiver = config.alert_receiver_secret
    receiver_secret = pulumi.Output.secret(receiver.get_secret_value()) if receiver else None
    platform.exports.update(
        install_addons(
            platform,
            config.addons,
            secret,
            alert_receiver_secret=receiver_secret,
            deployer_arns=[creator, *config.admin_principal_arns],
        )
    )
    export(platform)
    return platform
