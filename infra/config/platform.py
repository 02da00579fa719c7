"""PlatformConfig: the platform stack's configuration, read once from Pulumi config and validated.

Every check runs before a resource is registered. An error names the key as it is written in
`Pulumi.<stack>.yaml` (e.g. `mlops-eks:gpuPools[1].amiId`), the value found and what is allowed.
`PlatformConfig.from_mapping` takes the `config:` mapping of a stack file, so validation is testable
without the Pulumi runtime; `PlatformConfig.from_pulumi` reads the running stack's config.
"""

from __future__ import annotations

import difflib
import ipaddress
import json
import re
import warnings
from collections.abc import Mapping
from types import UnionType
from typing import Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, model_validator
from pydantic.alias_generators import to_camel

from infra.accelerators import CATALOG, SYSTEM_INSTANCE_USD_PER_HOUR, Accelerator, NodeImage
from infra.config.addons import AddonsConfig, AddonsInvalid, config_alias, refuse_lax_bools
from infra.config.cluster_rules import (
    DEFAULT_KUBERNETES_VERSION,
    EKS_STANDARD_SUPPORT_END,
    PRIVATE_ONLY_REASON,
    creator_conflicts,
    is_access_entry_principal,
    public_cidr_problem,
    public_cidrs_problem,
)
from infra.config.environment import DEFAULT_ENVIRONMENT, Environment
from infra.config.placeholders import placeholder_problems
from infra.config.stack_files import PROJECT, PROVIDER_NAMESPACES
from infra.contract import EKS_CAPACITY_TYPE, CapacityType, EksCapacityType, Source

REGION_KEY = "aws:region"
# Keys of workload stacks (same project, other program): declared in Pulumi.yaml, never read here.
WORKLOAD_KEYS = frozenset({"platformStack", "job"})
# Keys Pulumi stores encrypted: a stack file holds them as `{secure: v1:...}` (`pulumi config set --secret`).
SECRET_KEYS = ("grafanaAdminPassword", "alertReceiverSecret")
# What an offline run (synth, tests) uses for a secret it cannot decrypt.
SECRET_PLACEHOLDER = "offline-placeholder-for-an-encrypted-secret"
# The system group runs CoreDNS, the controllers and add-ons; workloads run on Karpenter's nodes. A larger
# group is a typo or a group used for workloads, and nothing scales it back (Karpenter never scales it).
SYSTEM_MAX_NODES = 10
# AWS tag limits (Tagging AWS resources, "Tag naming limits and requirements"): 50 tags per resource, of
# which the platform and Karpenter add their own (stack, managed-by, Name, karpenter.sh/*, eks:*).
MAX_USER_TAGS = 40
_TAG_CHARS = re.compile(r"^[\w\s.:/=+\-@]*$")

_REGION = re.compile(r"^[a-z]{2}(-gov|-iso[a-z]?)?-[a-z]+-\d+$")
_AMI_ID = re.compile(r"^ami-[0-9a-f]{8}([0-9a-f]{9})?$")
_POOL_NAME = re.compile(r"^[a-z][a-z0-9-]{0,30}$")
# Karpenter's duration syntax (NodePool disruption.consolidateAfter): "30s", "10m", "1h30m" or "Never".
_DURATION = re.compile(r"^(([0-9]+(s|m|h))+|Never)$")
_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
# CloudWatch Logs PutRetentionPolicy's allowed retentionInDays.
LOG_RETENTION_DAYS = (
    1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1096, 1827, 2192, 2557, 2922, 3288, 3653
)  # fmt: skip


class ConfigError(Exception):
    """Invalid stack configuration. `str()` lists one problem per line."""

    def __init__(self, problems: list[str]):
        self.problems = problems
        super().__init__("invalid configuration:\n  " + "\n  ".join(problems))


class _Invalid(ValueError):
    """Raised by validators; `field` is the offending key relative to the model that raised it."""

    def __init__(self, field: str, value: Any, allowed: str, reason: str = ""):
        self.field, self.value, self.allowed, self.reason = field, value, allowed, reason
        super().__init__(f"{reason + '; ' if reason else ''}got {value!r}; allowed: {allowed}")


def _cidr(field: str, value: str) -> ipaddress.IPv4Network:
    try:
        return ipaddress.IPv4Network(value)
    except ValueError:
        raise _Invalid(field, value, "an IPv4 network in CIDR notation such as 10.0.0.0/16") from None


class _Model(BaseModel):
    """Frozen, unknown keys rejected, keys spelled in camelCase as in the stack files."""

    model_config = ConfigDict(
        frozen=True, extra="forbid", alias_generator=config_alias, populate_by_name=True, strict=False
    )

    @model_validator(mode="before")
    @classmethod
    def _bools(cls, data: Any) -> Any:
        refuse_lax_bools(cls, data)
        return data


class SystemNodesConfig(_Model):
    """The managed node group for system pods (CoreDNS, controllers, add-ons): no GPUs."""

    instance_types: list[str] = Field(default_factory=lambda: ["m6i.large"])
    min_size: int = 2
    max_size: int = 3
    desired_size: int | None = None
    # Karpenter's spelling, as for GPU pools; mapped to EKS's ON_DEMAND / SPOT.
    capacity_type: CapacityType = "on-demand"
    disk_size_gib: int = Field(default=50, ge=20, le=16384)

    @model_validator(mode="after")
    def _check(self) -> SystemNodesConfig:
        allowed = ", ".join(SYSTEM_INSTANCE_USD_PER_HOUR)
        for i, t in enumerate(self.instance_types):
            if t not in SYSTEM_INSTANCE_USD_PER_HOUR:
                raise _Invalid(f"instanceTypes[{i}]", t, allowed, "not a system instance type")
        if not self.instance_types:
            raise _Invalid("instanceTypes", [], f"one or more of {allowed}")
        if self.min_size < 1:
            raise _Invalid("minSize", self.min_size, ">= 1", "system pods need at least one node")
        if self.max_size > SYSTEM_MAX_NODES:
            raise _Invalid(
                "maxSize",
                self.max_size,
                f"<= {SYSTEM_MAX_NODES}",
                reason="the system group runs only CoreDNS, controllers and add-ons (jobs run on Karpenter's "
                "nodes), and nothing scales it",
            )
        _check_sizes(self.min_size, self.max_size, self.desired_size)
        return self

    @property
    def desired(self) -> int:
        return self.min_size if self.desired_size is None else self.desired_size

    @property
    def eks_capacity_type(self) -> EksCapacityType:
        return EKS_CAPACITY_TYPE[self.capacity_type]


def _on_demand() -> list[CapacityType]:
    return ["on-demand"]


class GpuPoolConfig(_Model):
    """One GPU node source, built from the accelerator catalog entry `accelerator`.

    `source: karpenter` (the default) is elastic: a Karpenter NodePool that launches nodes when a job's
    pods are pending and removes them when empty, up to `gpuLimit` GPUs. `source: managed` is an EKS
    managed node group of exactly `size` nodes for reserved capacity (an ODCR or a Savings Plan): nothing
    scales managed groups, so it runs `size` nodes whether jobs run or not.
    """

    name: str
    accelerator: str
    source: Source = "karpenter"
    # Default: the catalog's first (smallest) instance type of the accelerator. One GPU count per pool.
    instance_types: list[str] | None = None
    # Karpenter's spelling; a managed group takes exactly one (EKS maps it to SPOT / ON_DEMAND).
    capacity_types: list[CapacityType] = Field(default_factory=_on_demand)
    # karpenter: the most GPUs the pool runs at once (NodePool spec.limits), the cost ceiling.
    gpu_limit: int | None = None
    # karpenter: how long a GPU node must be empty before it is removed.
    consolidate_after: str = "10m"
    # managed: the fixed number of nodes.
    size: int | None = None
    # managed: the root volume (Karpenter nodes use addons.karpenter.rootVolumeGiB).
    disk_size_gib: int | None = Field(default=None, ge=20, le=16384)
    ami_id: str | None = None
    efa: bool = False

    @model_validator(mode="after")
    def _check(self) -> GpuPoolConfig:
        if not _POOL_NAME.match(self.name):
            raise _Invalid(
                "name", self.name, "lowercase letters, digits and '-', starting with a letter, <= 31"
            )
        if self.accelerator not in CATALOG:
            raise _Invalid("accelerator", self.accelerator, ", ".join(CATALOG), "unknown accelerator")
        acc = self.catalog_entry
        allowed = ", ".join(t.name for t in acc.instance_types)
        if self.instance_types is not None and not self.instance_types:
            raise _Invalid("instanceTypes", [], f"one or more of {allowed}")
        for i, t in enumerate(self.instance_types or []):
            if t not in (x.name for x in acc.instance_types):
                raise _Invalid(f"instanceTypes[{i}]", t, allowed, f"not a {acc.key} instance type")
        gpus = {acc.instance(t).gpus for t in self.instance_type_names}
        if len(gpus) > 1:
            raise _Invalid(
                "instanceTypes",
                self.instance_types,
                "instance types with the same GPU count",
                reason="a pool's GPUs per node must be one number (jobs are sized by it)",
            )
        if acc.node_image is NodeImage.CUSTOM and not (self.ami_id and _AMI_ID.match(self.ami_id)):
            raise _Invalid(
                "amiId",
                self.ami_id,
                "an AMI id like ami-0123456789abcdef0 (see README: building the AMD AMI)",
                reason=f"{acc.key} has no EKS-optimized AMI: the pool needs a custom AMI with the GPU driver",
            )
        if acc.node_image is not NodeImage.CUSTOM and self.ami_id is not None:
            raise _Invalid(
                "amiId",
                self.ami_id,
                "no amiId (unset)",
                f"{acc.key} nodes use the EKS-optimized {acc.node_image}",
            )
        if self.efa and any(acc.instance(t).efa_interfaces == 0 for t in self.instance_type_names):
            efa_types = ", ".join(t.name for t in acc.instance_types if t.efa_interfaces) or "none"
            raise _Invalid("efa", self.efa, f"false, or instance types with EFA: {efa_types}")
        self._check_source()
        return self

    def _check_source(self) -> None:
        if not self.capacity_types or len(set(self.capacity_types)) != len(self.capacity_types):
            raise _Invalid("capacityTypes", self.capacity_types, "one or both of spot, on-demand, once each")
        if self.source == "karpenter":
            if self.size is not None:
                raise _Invalid("size", self.size, "unset for source karpenter (use gpuLimit)")
            if self.disk_size_gib is not None:
                allowed = "unset for source karpenter (it uses addons.karpenter.rootVolumeGiB)"
                raise _Invalid("diskSizeGiB", self.disk_size_gib, allowed)
            if self.gpu_limit is None or not 1 <= self.gpu_limit <= 1024:
                raise _Invalid("gpuLimit", self.gpu_limit, "1-1024 GPUs (the pool's cost ceiling)")
            if self.gpu_limit < self.gpus_per_node:
                raise _Invalid(
                    "gpuLimit",
                    self.gpu_limit,
                    f">= {self.gpus_per_node} (the GPUs of one {self.instance_type_names[0]})",
                    reason="a limit below one node's GPUs lets Karpenter launch no node at all",
                )
            if not _DURATION.match(self.consolidate_after):
                raise _Invalid(
                    "consolidateAfter", self.consolidate_after, 'a duration like "10m", "1h" or "Never"'
                )
            return
        if self.gpu_limit is not None:
            raise _Invalid("gpuLimit", self.gpu_limit, "unset for source managed (use size)")
        if self.size is None or not 1 <= self.size <= 100:
            raise _Invalid(
                "size",
                self.size,
                "1-100 nodes",
                reason="a managed pool is reserved capacity of fixed size (elastic pools: source karpenter)",
            )
        if len(self.capacity_types) != 1:
            raise _Invalid("capacityTypes", self.capacity_types, "exactly one of spot, on-demand (managed)")

    @property
    def catalog_entry(self) -> Accelerator:
        return CATALOG[self.accelerator]

    @property
    def instance_type_names(self) -> list[str]:
        return self.instance_types or [self.catalog_entry.instance_types[0].name]

    @property
    def gpus_per_node(self) -> int:
        return self.catalog_entry.instance(self.instance_type_names[0]).gpus

    @property
    def efa_interfaces(self) -> int:
        """EFA interfaces per node (the smallest count among the pool's instance types), 0 without EFA."""
        if not self.efa:
            return 0
        return min(self.catalog_entry.instance(t).efa_interfaces for t in self.instance_type_names)

    @property
    def eks_capacity_type(self) -> EksCapacityType:
        return EKS_CAPACITY_TYPE[self.capacity_types[0]]

    @property
    def max_nodes(self) -> int:
        if self.source == "karpenter":
            return (self.gpu_limit or 0) // self.gpus_per_node
        return self.size or 0


def _check_sizes(min_size: int, max_size: int, desired: int | None) -> None:
    if max_size < max(min_size, 1):
        raise _Invalid("maxSize", max_size, f">= minSize ({min_size}) and >= 1")
    if desired is not None and not min_size <= desired <= max_size:
        raise _Invalid("desiredSize", desired, f"between minSize ({min_size}) and maxSize ({max_size})")


class PlatformConfig(_Model):
    """Everything a platform stack (dev, prod) is configured by. Defaults are the secure choice."""

    region: str = Field(alias="aws:region")  # the AWS provider's own key
    # "prod" applies the strict rules (narrow deployer CIDRs, on-demand system nodes). Unset means prod
    # here, in the policy pack and in the CLIs alike (infra/config/environment.py).
    environment: Environment = DEFAULT_ENVIRONMENT
    availability_zone_count: int = 3
    # Empty: the region's first availabilityZoneCount available AZs. Name them where GPU capacity is
    # (not every AZ offers every GPU family, e.g. p4d).
    availability_zones: list[str] = Field(default_factory=list)
    vpc_cidr: str = "10.0.0.0/16"
    # Empty: carved from vpcCidr (private /19s and public /22s for a /16), one per AZ.
    private_subnet_cidrs: list[str] = Field(default_factory=list)
    public_subnet_cidrs: list[str] = Field(default_factory=list)
    nat_gateways: Literal["single", "per-az"] = "per-az"
    kubernetes_version: str = DEFAULT_KUBERNETES_VERSION
    # The private endpoint is always on. The public one, limited to publicAccessCidrs, is how a deployer
    # outside the VPC reaches the API; private-only needs deployFromVpc (see check_deployable).
    endpoint_public_access: bool = False
    public_access_cidrs: list[str] = Field(default_factory=list)
    # `pulumi up` runs inside the VPC (a CI runner or bastion there): a private-only endpoint is usable.
    deploy_from_vpc: bool = False
    admin_principal_arns: list[str] = Field(default_factory=list)
    system_nodes: SystemNodesConfig = Field(default_factory=SystemNodesConfig)
    gpu_pools: list[GpuPoolConfig] = Field(default_factory=list)
    checkpoint_noncurrent_days: int = Field(default=30, ge=1, le=3650)
    ecr_keep_images: int = Field(default=30, ge=1, le=1000)
    # Lets `pulumi destroy` delete a non-empty bucket and repositories; keep false where data matters.
    force_destroy: bool = False
    # Days CloudWatch keeps control-plane and VPC flow logs; 0: 90 in prod, 14 in dev (never forever).
    log_retention_days: int = 0
    # Buckets (names) besides the platform's that pods may reach through the VPC's S3 endpoint.
    s3_endpoint_extra_buckets: list[str] = Field(default_factory=list)
    tags: dict[str, str] = Field(default_factory=dict)
    # Cluster add-ons (infra/config/addons.py); every one can be turned off.
    addons: AddonsConfig = Field(default_factory=AddonsConfig)
    # Secret config (`pulumi config set --secret grafanaAdminPassword ...`); unset: one is generated.
    grafana_admin_password: SecretStr | None = None
    # Secret config: the URL (webhook, Slack) or routing key (PagerDuty) for observability.alertReceiver.
    alert_receiver_secret: SecretStr | None = None

    @model_validator(mode="after")
    def _check_alert_receiver(self) -> PlatformConfig:
        receiver = self.addons.observability.alert_receiver
        secret = self.alert_receiver_secret.get_secret_value() if self.alert_receiver_secret else ""
        if receiver != "none" and not secret:
            raise _Invalid(
                "alertReceiverSecret", "", "the receiver's URL or routing key, set with `pulumi config set "
                "--secret alertReceiverSecret ...`", f"addons.observability.alertReceiver is {receiver!r}",
            )  # fmt: skip
        return self

    @model_validator(mode="after")
    def _check(self) -> PlatformConfig:
        if not _REGION.match(self.region):
            raise _Invalid(REGION_KEY, self.region, "an AWS region name such as us-east-1 or eu-west-2")
        if not 2 <= self.availability_zone_count <= 4:
            raise _Invalid("availabilityZoneCount", self.availability_zone_count, "2, 3 or 4")
        if self.availability_zones and len(self.availability_zones) != self.availability_zone_count:
            raise _Invalid(
                "availabilityZones", self.availability_zones, f"[] or {self.availability_zone_count} AZ names"
            )
        for i, zone in enumerate(self.availability_zones):
            if (
                not re.fullmatch(rf"{re.escape(self.region)}[a-z]", zone)
                or zone in self.availability_zones[:i]
            ):
                raise _Invalid(
                    f"availabilityZones[{i}]", zone, f"a distinct AZ of {self.region}, e.g. {self.region}a"
                )
        if self.kubernetes_version not in EKS_STANDARD_SUPPORT_END:
            raise _Invalid(
                "kubernetesVersion",
                self.kubernetes_version,
                ", ".join(f'"{v}"' for v in EKS_STANDARD_SUPPORT_END),
                reason="the EKS versions the platform and its pinned add-ons are validated with",
            )
        self._check_network()
        self._check_endpoint()
        if self.log_retention_days and self.log_retention_days not in LOG_RETENTION_DAYS:
            raise _Invalid(
                "logRetentionDays",
                self.log_retention_days,
                "0 (the environment's default) or " + ", ".join(map(str, LOG_RETENTION_DAYS)),
                reason="the values CloudWatch Logs accepts",
            )
        for i, bucket in enumerate(self.s3_endpoint_extra_buckets):
            if not _BUCKET.match(bucket):
                raise _Invalid(f"s3EndpointExtraBuckets[{i}]", bucket, "an S3 bucket name (no ARN, no '*')")
        for i, arn in enumerate(self.admin_principal_arns):
            if not is_access_entry_principal(arn):
                raise _Invalid(
                    f"adminPrincipalArns[{i}]",
                    arn,
                    "an IAM role or user ARN (arn:aws:iam::<account>:role/<name>); for an assumed-role "
                    "session (arn:aws:sts::...:assumed-role/<name>/<session>) give its role's ARN",
                )
        names = [p.name for p in self.gpu_pools]
        for i, name in enumerate(names):
            if name in names[:i]:
                raise _Invalid(f"gpuPools[{i}].name", name, "a name no other pool has")
        if self.environment == "prod" and self.system_nodes.capacity_type != "on-demand":
            raise _Invalid(
                "systemNodes.capacityType",
                self.system_nodes.capacity_type,
                "on-demand in prod",
                reason="Spot interruptions would take CoreDNS and the controllers down",
            )
        self._check_capacity()
        self._check_tags()
        return self

    def _check_tags(self) -> None:
        if len(self.tags) > MAX_USER_TAGS:
            count = f"{len(self.tags)} tags"
            raise _Invalid("tags", count, f"at most {MAX_USER_TAGS}", "AWS allows 50 per resource")
        for key, value in self.tags.items():
            allowed = "letters, digits, spaces and _ . : / = + - @"
            if key.lower().startswith("aws:"):
                reserved = "AWS reserves the aws: prefix"
                raise _Invalid(f"tags.{key}", key, "a key not starting with aws:", reserved)
            if not 1 <= len(key) <= 128 or not _TAG_CHARS.match(key):
                raise _Invalid(f"tags.{key}", key, f"1-128 characters: {allowed}", "not an AWS tag key")
            if not isinstance(value, str) or len(value) > 256 or not _TAG_CHARS.match(value):
                raise _Invalid(f"tags.{key}", value, f"a string of 0-256 characters: {allowed}")

    def _check_capacity(self) -> None:
        """What the GPU pools need from the add-ons: Karpenter for elastic pools, the vendor's device
        plugin for every pool (or its GPUs are never allocatable), a pinned node image in prod."""
        karpenter = self.addons.karpenter
        for i, pool in enumerate(self.gpu_pools):
            if pool.source == "karpenter" and not karpenter.enabled:
                raise _Invalid(
                    f"gpuPools[{i}].source",
                    pool.source,
                    "managed (with size), or addons.karpenter.enabled true",
                    reason="Karpenter pools need the Karpenter add-on",
                )
            plugin = f"{pool.catalog_entry.vendor}_device_plugin"
            if not getattr(self.addons.gpu, plugin):
                raise _Invalid(
                    f"addons.gpu.{to_camel(plugin)}",
                    False,
                    "true",
                    reason=f"gpuPools[{i}] ({pool.accelerator}) needs it, or its GPUs never count",
                )
            if pool.efa and not self.addons.gpu.efa_device_plugin:
                raise _Invalid(
                    "addons.gpu.efaDevicePlugin",
                    False,
                    "true",
                    reason=f"gpuPools[{i}] has efa: true; without the plugin vpc.amazonaws.com/efa is never "
                    "allocatable",
                )
        uses_alias = any(p.source == "karpenter" and p.catalog_entry.node_image is not NodeImage.CUSTOM
                         for p in self.gpu_pools) or (karpenter.enabled and karpenter.cpu_pool.enabled)
        if self.environment == "prod" and uses_alias and karpenter.ami_alias.endswith("@latest"):
            raise _Invalid(
                "addons.karpenter.amiAlias",
                karpenter.ami_alias,
                'a pinned release such as "al2023@v20260818" in prod',
                reason="@latest drifts every Karpenter node (training pods too) when AWS publishes an AMI",
            )

    def _check_network(self) -> None:
        vpc = _cidr("vpcCidr", self.vpc_cidr)
        if not 16 <= vpc.prefixlen <= 24:
            raise _Invalid("vpcCidr", self.vpc_cidr, "a prefix length from /16 to /24")
        seen: list[tuple[str, ipaddress.IPv4Network]] = []
        for key, cidrs in (
            ("privateSubnetCidrs", self.private_subnets),
            ("publicSubnetCidrs", self.public_subnets),
        ):
            if len(cidrs) != self.availability_zone_count:
                raise _Invalid(key, cidrs, f"one CIDR per AZ ({self.availability_zone_count})")
            for i, value in enumerate(cidrs):
                net = _cidr(f"{key}[{i}]", value)
                if not net.subnet_of(vpc):
                    raise _Invalid(f"{key}[{i}]", value, f"a subnet inside vpcCidr {self.vpc_cidr}")
                for other_key, other in seen:
                    if net.overlaps(other):
                        raise _Invalid(
                            f"{key}[{i}]", value, f"a CIDR that does not overlap {other_key} {other}"
                        )
                seen.append((f"{key}[{i}]", net))

    def _check_endpoint(self) -> None:
        if self.endpoint_public_access and not self.public_access_cidrs:
            raise _Invalid(
                "publicAccessCidrs",
                [],
                "the CIDRs allowed to reach the public endpoint",
                reason="with endpointPublicAccess true and no CIDRs EKS opens the API to 0.0.0.0/0",
            )
        if self.public_access_cidrs and not self.endpoint_public_access:
            raise _Invalid(
                "publicAccessCidrs", self.public_access_cidrs, "[] when endpointPublicAccess is false"
            )
        for i, value in enumerate(self.public_access_cidrs):
            _cidr(f"publicAccessCidrs[{i}]", value)
            if problem := public_cidr_problem(value, self.environment):
                raise _Invalid(
                    f"publicAccessCidrs[{i}]",
                    value,
                    "the deployer's own egress CIDRs (VPN or NAT, e.g. 198.51.100.7/32), never 0.0.0.0/0",
                    reason=problem,
                )
        if problem := public_cidrs_problem(self.public_access_cidrs, self.environment):
            raise _Invalid(
                "publicAccessCidrs",
                self.public_access_cidrs,
                "the deployer's own egress CIDRs (VPN or NAT, e.g. 198.51.100.7/32), never 0.0.0.0/0",
                reason=problem,
            )

    def check_deployable(self, caller_arn: str | None = None) -> None:
        """Refuse a config `pulumi up` cannot carry out from where it runs: a private-only endpoint
        with the deployer outside the VPC, or an admin entry for the deploying identity `caller_arn`
        (EKS makes the creator cluster-admin already; a second access entry for it fails)."""
        problems = []
        if not self.endpoint_public_access and not self.deploy_from_vpc:
            problems.append(
                f"{PROJECT}:endpointPublicAccess: {PRIVATE_ONLY_REASON}; got endpointPublicAccess false "
                "and deployFromVpc false; allowed: endpointPublicAccess true with publicAccessCidrs "
                "(the deployer's egress CIDRs), or deployFromVpc true when pulumi runs inside the VPC"
            )
        for i in creator_conflicts(self.admin_principal_arns, caller_arn or ""):
            problems.append(
                f"{PROJECT}:adminPrincipalArns[{i}]: {self.admin_principal_arns[i]!r} is the identity "
                f"running pulumi ({caller_arn}); EKS already gives the cluster creator cluster-admin "
                "(pulumi-eks sets bootstrapClusterCreatorAdminPermissions: true), so a second access entry "
                "for it fails with ResourceInUseException; allowed: remove it from adminPrincipalArns "
                "(the creator stays admin) or deploy as another identity"
            )
        if problems:
            raise ConfigError(problems)

    @property
    def log_retention(self) -> int:
        if self.log_retention_days:
            return self.log_retention_days
        return 90 if self.environment == "prod" else 14

    @property
    def private_subnets(self) -> list[str]:
        if self.private_subnet_cidrs:
            return self.private_subnet_cidrs
        return [str(n) for n in self._carve()[: self.availability_zone_count]]

    @property
    def public_subnets(self) -> list[str]:
        if self.public_subnet_cidrs:
            return self.public_subnet_cidrs
        # The fifth eighth of the VPC, cut in eight: small public subnets (NAT gateways, load balancers).
        return [str(n) for n in self._carve()[4].subnets(prefixlen_diff=3)][: self.availability_zone_count]

    def _carve(self) -> list[ipaddress.IPv4Network]:
        return list(ipaddress.IPv4Network(self.vpc_cidr).subnets(prefixlen_diff=3))

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any], *, decrypted: bool = False) -> PlatformConfig:
        """Build from a stack file's `config:` mapping (keys `aws:region`, `mlops-eks:<key>`).
        `decrypted`: secrets arrive decrypted (from the engine) rather than as the file's `{secure: ...}`."""
        problems = namespace_problems(values)
        problems += secret_problems(values, decrypted=decrypted)
        if problems:
            raise ConfigError(problems)
        values = offline_secrets(values)
        ours = {
            k.split(":", 1)[1]: v
            for k, v in values.items()
            if k.startswith(f"{PROJECT}:") and k.split(":", 1)[1] not in WORKLOAD_KEYS
        }
        if REGION_KEY in values:
            ours[REGION_KEY] = values[REGION_KEY]
        try:
            return cls.model_validate(ours)
        except ValidationError as e:
            raise ConfigError([_describe(err) for err in e.errors()]) from None

    @classmethod
    def from_pulumi(cls) -> PlatformConfig:
        """Build from the running stack's config. Pulumi hands structured values over as JSON strings."""
        from pulumi.runtime import config as runtime_config

        raw = {**runtime_config.get_config_env(), **runtime_config.CONFIG.get()}
        values: dict[str, Any] = {}
        for key, value in raw.items():
            name = key.split(":", 1)[1] if key.startswith(f"{PROJECT}:") else None
            structured = name is not None and _is_structured(name)
            values[key] = _parse_structured(value) if structured and isinstance(value, str) else value
            if name is not None and isinstance(value, str) and _is_bool(name) and value in _PULUMI_BOOLS:
                values[key] = _PULUMI_BOOLS[value]  # the engine passes every scalar as a string
        offline = _under_mocks()
        for name in SECRET_KEYS:
            key = f"{PROJECT}:{name}"
            value = values.get(key)
            if not isinstance(value, str):
                continue
            if offline:  # synth hands the file's {secure: ...} over as JSON; it stays encrypted
                parsed = _parse_structured(value)
                values[key] = parsed if _is_secure(parsed) else value
            elif not runtime_config.is_config_secret(key):  # the engine decrypts only what the file encrypts
                raise ConfigError(secret_problems({key: value}, decrypted=False))
        config = cls.from_mapping(values, decrypted=not offline)
        check_placeholders(values, offline=offline)
        return config


# Pulumi's Config.get_bool accepts exactly these (pulumi/config.py).
_PULUMI_BOOLS = {"true": True, "True": True, "false": False, "False": False}


def _is_bool(alias: str) -> bool:
    return any(alias in (n, f.alias) and f.annotation is bool for n, f in PlatformConfig.model_fields.items())


def known_keys() -> list[str]:
    """Every key a stack file of this project may set in our namespace (platform and workload keys)."""
    names = [f.alias or n for n, f in PlatformConfig.model_fields.items() if f.alias != REGION_KEY]
    return [f"{PROJECT}:{n}" for n in [*names, *sorted(WORKLOAD_KEYS)]] + [REGION_KEY]


def namespace_problems(values: Mapping[str, Any]) -> list[str]:
    """Keys in a namespace no one reads (`mlopseks:natGateways`): Pulumi keeps them, the program never sees
    them, so a typo silently gives the default. Refused with the closest known key."""
    problems = []
    for key in values:
        namespace = key.split(":", 1)[0] if ":" in key else ""
        if namespace == PROJECT or namespace in PROVIDER_NAMESPACES:
            continue
        close = difflib.get_close_matches(key, known_keys(), n=1, cutoff=0.6)
        hint = f" (did you mean {close[0]}?)" if close else ""
        problems.append(
            f"{key}: unknown namespace {namespace or '(none)'!r}, read by nothing{hint}; allowed: "
            f"{PROJECT}:<key> or a provider's namespace ({', '.join(sorted(PROVIDER_NAMESPACES))})"
        )
    return problems


def secret_problems(values: Mapping[str, Any], *, decrypted: bool) -> list[str]:
    """A secret written in plaintext into a stack file ends up in git; Pulumi writes `{secure: ...}`."""
    problems = []
    for name in SECRET_KEYS:
        value = values.get(f"{PROJECT}:{name}")
        if value is None or decrypted or _is_secure(value):
            continue
        problems.append(
            f"{PROJECT}:{name}: a plaintext secret in the stack file (got {'*' * 8}); allowed: an "
            f"encrypted value, set with `pulumi config set --secret {name} <value>` (the file then holds "
            "{secure: ...})"
        )
    return problems


def _is_secure(value: Any) -> bool:
    return isinstance(value, Mapping) and set(value) == {"secure"} and isinstance(value["secure"], str)


def offline_secrets(values: Mapping[str, Any]) -> dict[str, Any]:
    """`{secure: v1:...}` can only be decrypted by the Pulumi engine: offline (synth, tests) the secret
    becomes a placeholder, with a warning, so the rest of the stack is still checked and synthesized."""
    out = dict(values)
    for name in SECRET_KEYS:
        key = f"{PROJECT}:{name}"
        if _is_secure(out.get(key)):
            message = f"{key}: encrypted; offline runs use a placeholder (pulumi up decrypts it)"
            warnings.warn(message, stacklevel=3)
            out[key] = SECRET_PLACEHOLDER
    return out


def _under_mocks() -> bool:
    """Whether the program runs against Pulumi mocks (`infra synth`, tests) rather than an engine."""
    from pulumi.runtime import settings
    from pulumi.runtime.mocks import MockMonitor

    return isinstance(settings.get_monitor(), MockMonitor)


def check_placeholders(values: Mapping[str, Any], offline: bool) -> None:
    """Refuse the committed files' documentation placeholders in a real preview or update; offline
    (mocks) only warn, so the example stacks still synthesize."""
    problems = placeholder_problems({k: v for k, v in values.items() if k.startswith(f"{PROJECT}:")})
    if problems and not offline:
        raise ConfigError([f"{p}; allowed: a real value (this one is an example)" for p in problems])
    if problems:
        import pulumi

        for problem in problems:
            pulumi.log.warn(f"{problem} (accepted offline only: a real preview or update refuses it)")


def _parse_structured(value: str) -> Any:
    """JSON as Pulumi passes it. A plain string (`gpuPools: t4`) stays a string, so validation reports
    the key and the type it wants instead of a JSON decoder position."""
    try:
        return json.loads(value)
    except json.JSONDecodeError:
        return value


def _is_structured(alias: str) -> bool:
    """Whether the key holds a list or an object (which Pulumi passes to the program as JSON)."""
    for name, field in PlatformConfig.model_fields.items():
        if alias in (name, field.alias):
            ann = field.annotation
            options = get_args(ann) if get_origin(ann) in (Union, UnionType) else (ann,)
            return any(
                get_origin(a) in (list, dict) or (isinstance(a, type) and issubclass(a, BaseModel))
                for a in options
            )
    return False


def _describe(err: Mapping[str, Any]) -> str:
    """One line per problem: `mlops-eks:<key path>: <what is wrong>`."""
    path = list(err["loc"])
    cause = (err.get("ctx") or {}).get("error")
    if isinstance(cause, (_Invalid, AddonsInvalid)):
        path.append(cause.field)
        message = str(cause)
    elif err["type"] == "extra_forbidden":
        allowed = _allowed_keys(path[:-1])
        # At the top, a workload key's typo (platfromStack) makes the stack a platform stack: name it.
        candidates = allowed + ([] if path[:-1] else sorted(WORKLOAD_KEYS))
        close = difflib.get_close_matches(str(path[-1]), candidates, n=1, cutoff=0.6)
        hint = f"did you mean {close[0]}? " if close else ""
        secret = bool(close) and close[0] in SECRET_KEYS
        message = f"unknown key (got {_shown(err, path, secret)}); {hint}allowed keys: {', '.join(allowed)}"
    elif err["type"] == "missing":
        message = "required but not set"
    else:
        message = f"{err['msg']} (got {_shown(err, path)})"
    key = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path).lstrip(".")
    return f"{key if key.startswith('aws:') else f'{PROJECT}:{key}'}: {message}"


def _shown(err: Mapping[str, Any], path: list[Any], secret: bool = False) -> str:
    """The offending value, masked under a secret key (or a key that looks like a misspelt one): error
    messages reach terminals and CI logs."""
    if secret or any(p in SECRET_KEYS for p in path):
        return "*" * 8
    return repr(err["input"])


def _allowed_keys(path: list[str | int]) -> list[str]:
    """The keys the model at `path` accepts (for 'unknown key' messages)."""
    model: type[BaseModel] = PlatformConfig
    for part in path:
        if isinstance(part, int):
            continue
        field = next(f for n, f in model.model_fields.items() if part in (n, f.alias))
        annotation = field.annotation
        inner = [
            a for a in getattr(annotation, "__args__", ()) if isinstance(a, type) and issubclass(a, BaseModel)
        ]
        model = inner[0] if inner else annotation  # type: ignore[assignment]
    return [f.alias or n for n, f in model.model_fields.items() if f.alias != REGION_KEY]
