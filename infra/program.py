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
from infra.contract import taint_spec
from infra.exports import accelerator_pools, cluster_name_of, gpu_pool_scheduling
from infra.platform import zones
from infra.platform.cluster import Cluster, ClusterArgs, ManagedAddons, ManagedAddonsArgs
from infra.platform.creator import CREATOR_EXPORT, CREATOR_TAG, recorded
from infra.platform.image_cache import ImageCache, ImageCacheArgs
from infra.platform.keys import StackKey, StackKeyArgs
from infra.platform.network import Network, NetworkArgs
from infra.platform.node_groups import (
    SYSTEM_AMI_TYPE,
    SYSTEM_LABELS,
    ManagedNodeGroup,
    ManagedNodeGroupArgs,
)
from infra.platform.pod_identity import partition_of
from infra.platform.registries import ImagePath
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
    # Where every image a node pulls comes from (infra/platform/registries.py).
    image_cache: ImageCache
    zone_plan: zones.ZonePlan
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


def build(
    config: PlatformConfig, stack: str, creator_arn: str, images: ImagePath, zone_plan: zones.ZonePlan
) -> Platform:
    """Register the platform's resources for `stack`. `creator_arn`: who created the cluster (recorded on
    it: infra/platform/creator.py), `images`: the stack's image path, `zone_plan`: its AZs (zones.py)."""
    cluster_name = cluster_name_of(stack)
    tags = {"mlops-eks:stack": stack, "managed-by": "pulumi", **config.tags}
    partition = partition_of(config.region)
    account_id = pulumi.Output.from_input(images.account_id)
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
            availability_zones=zone_plan.zones,
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
            creator_arn=creator_arn,
            session_manager=config.session_manager,
            tags=tags,
        ),
    )
    image_cache = ImageCache(
        "image-cache",
        ImageCacheArgs(
            path=images,
            partition=partition,
            kms_key_arn=key.arn,
            node_role_names=[cluster.node_role.name],
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
        pool.name: _managed_gpu_group(pool, cluster, network, health, tags, zone_plan)
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
            deployer_arn=creator_arn,
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
        image_cache=image_cache,
        zone_plan=zone_plan,
        tags=tags,
    )


def _managed_gpu_group(
    pool: GpuPoolConfig,
    cluster: Cluster,
    network: Network,
    health: NodeHealthConfig,
    tags: dict[str, str],
    zone_plan: zones.ZonePlan,
) -> ManagedNodeGroup:
    """A fixed-size managed node group (`source: managed`): min = max = desired = size. Its nodes also
    carry the startup GPU check's taint from the start; the check removes it once their GPUs passed."""
    acc = pool.catalog_entry
    labels, taints = gpu_pool_scheduling(acc)
    taints += [taint_spec(t) for t in startup_taints(acc.key, enabled=health.gpu_check)]
    efa_interfaces = pool.efa_interfaces
    # A cluster placement group lives in one AZ: an EFA pool uses the private subnet of the AZ that
    # offers its instance types (zones.py); a Capacity Block's group, the subnet of the block's AZ.
    if efa_interfaces:
        index = zone_plan.efa_zone[pool.name]
        subnets = network.private_subnet_ids.apply(lambda ids: ids[index : index + 1])
    elif pool.reservation is not None:
        index = zone_plan.zones.index(pool.reservation.availability_zone)
        subnets = network.private_subnet_ids.apply(lambda ids: ids[index : index + 1])
    else:
        subnets = network.private_subnet_ids
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
            capacity_reservation_id=pool.reservation.ids[0] if pool.reservation else None,
            disk_size_gib=pool.managed_disk_size_gib,
            efa_interfaces=efa_interfaces,
            cluster_info=cluster.info,
            node_repair=health.managed_node_repair,
            tags={**tags, "mlops-eks:gpu-pool": pool.name},
        ),
        opts=pulumi.ResourceOptions(depends_on=cluster.node_prerequisites),
    )


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
        # Where nodes pull from: what the operators put into job pods is named under it (the models of
        # the pods they create read it back).
        image_path={
            "account_id": platform.image_cache.path.account_id,
            "region": platform.image_cache.path.region,
            "stack": platform.image_cache.path.stack,
        },
        accelerator_pools={
            n: p.model_dump(mode="json") for n, p in accelerator_pools(platform.config).items()
        },
    )
    for name, value in platform.exports.items():
        pulumi.export(name, value)


def program(placeholders: Literal["refuse", "warn"] = "refuse") -> Platform:
    """Entry point of a platform stack (dev, prod). `pulumi up` refuses the committed stack files'
    documentation placeholders; offline commands pass `placeholders="warn"`. Everything that can refuse
    the config (the creator rules, the AZs EC2 offers, the image path) is asked and checked here, before
    any resource is registered."""
    stack = pulumi.get_stack()
    try:
        config = PlatformConfig.from_pulumi(placeholders)
        caller = aws.get_caller_identity()
        # The creator is cluster-admin through EKS itself; a later deployer needs an admin entry.
        previous = recorded(cluster_name_of(stack))
        if previous.exists and previous.creator is None:
            # Created before the creator was recorded on it: who created it is unknown (its access entries
            # exist already), so only the endpoint is checked, and this caller is recorded from now on.
            pulumi.log.warn(
                f"cluster {cluster_name_of(stack)} has no {CREATOR_TAG} tag: recording {caller.arn} "
                "from now on"
            )
            config.check_deployable()
        else:
            config.check_deployable(
                caller.arn, previous.creator or caller.arn, first_deploy=previous.first_deploy
            )
        creator = previous.creator or caller.arn
        images = image_path(config, stack, caller.account_id)
        zone_plan = zones.plan(config, zones.ask_ec2(config), deployed=previous.exists)
    except ConfigError as e:
        raise pulumi.RunError(str(e)) from None
    if notice := extended_support_notice(config.kubernetes_version, date.today()):
        pulumi.log.warn(notice)
    platform = build(config, stack, creator, images, zone_plan)
    platform.exports[CREATOR_EXPORT] = creator
    password = config.grafana_admin_password
    secret = (
        pulumi.Output.secret(password.get_secret_value())
        if password and password.get_secret_value()
        else None
    )
    receiver = config.alert_receiver_secret
    receiver_secret = pulumi.Output.secret(receiver.get_secret_value()) if receiver else None
    for idle in config.idle_quotas:  # a pool taken away: its quotas stay in the file, not in the cluster
        pulumi.log.warn(idle)
    platform.exports.update(
        install_addons(
            platform,
            config.addons_as_deployed,
            secret,
            alert_receiver_secret=receiver_secret,
            deployer_arns=[creator, *config.admin_principal_arns],
        )
    )
    export(platform)
    return platform


def image_path(config: PlatformConfig, stack: str, account_id: str) -> ImagePath:
    """The stack's image path; ConfigError for a stack name too long for ECR's prefixes or a registry
    credential in another account."""
    problems = config.registry_credential_problems(account_id)
    try:
        path = ImagePath(account_id, config.region, stack, config.registry_credentials)
    except ValueError as err:
        problems.append(str(err))
    if problems:
        raise ConfigError(problems)
    return path
