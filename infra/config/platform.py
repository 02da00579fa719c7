"""PlatformConfig: the platform stack's configuration, validated before any resource is registered.

An error names the key as it is written in `Pulumi.<stack>.yaml` (e.g. `mlops-eks:gpuPools[1].amiId`), the
value found and what is allowed. `PlatformConfig.from_mapping` takes the `config:` mapping of a stack
file, so validation is testable without the Pulumi runtime; `PlatformConfig.from_pulumi` reads the running
stack's config (infra/config/pulumi_config.py). The node groups and GPU pools are in nodes.py, the add-ons
in addons.py, the shared model base in base.py, the messages in errors.py.
"""

from __future__ import annotations

import difflib
import ipaddress
import re
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import Field, SecretStr, ValidationError, model_validator
from pydantic.alias_generators import to_camel

from infra.accelerators import NodeImage
from infra.config.addons import AddonsConfig
from infra.config.base import ConfigModel, Invalid, is_number, is_text
from infra.config.cluster_rules import (
    DEFAULT_KUBERNETES_VERSION,
    EKS_REGIONS,
    EKS_STANDARD_SUPPORT_END,
    PRIVATE_ONLY_REASON,
    PRIVATE_RANGES,
    creator_conflicts,
    has_cluster_access,
    is_access_entry_principal,
    public_cidr_problem,
    public_cidrs_problem,
)
from infra.config.environment import DEFAULT_ENVIRONMENT, Environment
from infra.config.errors import ConfigError, describe
from infra.config.nodes import GpuPoolConfig, SystemNodesConfig
from infra.config.secrets import SECRET_KEYS, is_unset_secret, offline_secrets, secret_problems
from infra.config.stack_files import PROJECT, PROVIDER_NAMESPACES, REGION_KEY, WORKLOAD_KEYS
from infra.platform.registries import CREDENTIAL_ARN, UPSTREAMS

# The model, its parts and its error: what the program, the tools and the tests import from here.
__all__ = [
    "PROJECT",
    "REGION_KEY",
    "ConfigError",
    "GpuPoolConfig",
    "PlatformConfig",
    "SystemNodesConfig",
    "known_keys",
    "namespace_problems",
]

# AWS tag limits (Tagging AWS resources, "Tag naming limits and requirements"): 50 tags per resource, of
# which the platform and Karpenter add their own (stack, managed-by, Name, karpenter.sh/*, eks:*).
MAX_USER_TAGS = 40
_TAG_CHARS = re.compile(r"^[\w\s.:/=+\-@]*$")

_REGION = re.compile(r"^[a-z]{2}(-gov|-iso[a-z]?)?-[a-z]+-\d+$")
_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
# CloudWatch Logs PutRetentionPolicy's allowed retentionInDays.
LOG_RETENTION_DAYS = (
    1,
    3,
    5,
    7,
    14,
    30,
    60,
    90,
    120,
    150,
    180,
    365,
    400,
    545,
    731,
    1096,
    1827,
    2192,
    2557,
    2922,
    3288,
    3653,
)


# Addresses no request to the public endpoint comes from: RFC 1918, loopback, link-local. (The documentation
# ranges of the committed stack files are placeholders, refused in a real deploy by placeholders.py.)
UNROUTED = tuple(
    ipaddress.IPv4Network(n)
    for n in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "127.0.0.0/8", "169.254.0.0/16")
)


def _cidr(
    field: str, value: str, example: str = "10.0.0.0/16", allowed: str = "an IPv4 network in CIDR notation"
) -> ipaddress.IPv4Network:
    """An IPv4 network as written: a prefix length (a bare address is not a network) and no host bits."""
    if isinstance(value, str) and "/" not in value:
        # Python reads "198.51.100.7" as a /32; EKS (CreateCluster, UpdateClusterConfig) and EC2 security
        # group rules refuse an entry without a prefix length, after the VPC exists.
        reason = "a bare IP address, which AWS refuses: a network needs its prefix length"
        raise Invalid(field, value, f"{allowed} with its prefix length, such as {example}", reason=reason)
    try:
        return ipaddress.IPv4Network(value)
    except (ValueError, TypeError):
        raise Invalid(
            field, value, f"{allowed} with its prefix length and no host bits, such as {example}"
        ) from None


class PlatformConfig(ConfigModel):
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
    # Where that runner is (its subnet's CIDR, inside the VPC or a network peered with it): the cluster's
    # security group admits 443 from here, or the runner cannot reach the private endpoint.
    deployer_cidrs: list[str] = Field(default_factory=list)
    admin_principal_arns: list[str] = Field(default_factory=list)
    # Shell access to nodes through SSM Session Manager (only its own permissions, never SSH); false: the
    # node roles get no Systems Manager permission at all (infra/platform/session_manager.py).
    session_manager: bool = True
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
    # Secrets Manager secrets (ARNs, names starting ecr-pullthroughcache/) with the credentials ECR pulls
    # from a registry that needs one (infra/platform/registries.py): `ghcr`, `dockerHub`. Unset: their
    # images are copied in with `python -m infra images`.
    registry_credentials: dict[str, str] = Field(default_factory=dict)
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
            raise Invalid(
                "alertReceiverSecret",
                "",
                "the receiver's URL or routing key, set with `pulumi config set "
                "--secret alertReceiverSecret ...`",
                f"addons.observability.alertReceiver is {receiver!r}",
            )
        return self

    @model_validator(mode="after")
    def _check(self) -> PlatformConfig:
        if not _REGION.match(self.region):
            raise Invalid(REGION_KEY, self.region, "an AWS region name such as us-east-1 or eu-west-2")
        if self.region not in EKS_REGIONS:
            close = difflib.get_close_matches(self.region, EKS_REGIONS, n=3, cutoff=0.8)
            hint = f" (closest: {', '.join(close)})" if close else ""
            allowed = f"a region that offers EKS{hint}: {', '.join(EKS_REGIONS)}"
            raise Invalid(REGION_KEY, self.region, allowed, "not a region with EKS")
        if not 2 <= self.availability_zone_count <= 4:
            raise Invalid("availabilityZoneCount", self.availability_zone_count, "2, 3 or 4")
        if self.availability_zones and len(self.availability_zones) != self.availability_zone_count:
            raise Invalid(
                "availabilityZones", self.availability_zones, f"[] or {self.availability_zone_count} AZ names"
            )
        for i, zone in enumerate(self.availability_zones):
            if (
                not re.fullmatch(rf"{re.escape(self.region)}[a-z]", zone)
                or zone in self.availability_zones[:i]
            ):
                raise Invalid(
                    f"availabilityZones[{i}]", zone, f"a distinct AZ of {self.region}, e.g. {self.region}a"
                )
        if self.kubernetes_version not in EKS_STANDARD_SUPPORT_END:
            raise Invalid(
                "kubernetesVersion",
                self.kubernetes_version,
                ", ".join(f'"{v}"' for v in EKS_STANDARD_SUPPORT_END),
                reason="the EKS versions the platform and its pinned add-ons are validated with",
            )
        self._check_network()
        self._check_endpoint()
        self._check_deployer_cidrs()
        if self.log_retention_days and self.log_retention_days not in LOG_RETENTION_DAYS:
            raise Invalid(
                "logRetentionDays",
                self.log_retention_days,
                "0 (the environment's default) or " + ", ".join(map(str, LOG_RETENTION_DAYS)),
                reason="the values CloudWatch Logs accepts",
            )
        self._check_registry_credentials()
        for i, bucket in enumerate(self.s3_endpoint_extra_buckets):
            if not _BUCKET.match(bucket):
                raise Invalid(f"s3EndpointExtraBuckets[{i}]", bucket, "an S3 bucket name (no ARN, no '*')")
        for i, arn in enumerate(self.admin_principal_arns):
            if not is_access_entry_principal(arn):
                raise Invalid(
                    f"adminPrincipalArns[{i}]",
                    arn,
                    "an IAM role or user ARN (arn:aws:iam::<account>:role/<name>); for an assumed-role "
                    "session (arn:aws:sts::...:assumed-role/<name>/<session>) give its role's ARN",
                )
        names = [p.name for p in self.gpu_pools]
        for i, name in enumerate(names):
            if name in names[:i]:
                raise Invalid(f"gpuPools[{i}].name", name, "a name no other pool has")
        if self.environment == "prod" and self.system_nodes.capacity_type != "on-demand":
            raise Invalid(
                "systemNodes.capacityType",
                self.system_nodes.capacity_type,
                "on-demand in prod",
                reason="Spot interruptions would take CoreDNS and the controllers down",
            )
        self._check_capacity()
        self._check_tags()
        return self

    def _check_registry_credentials(self) -> None:
        known = sorted(u.credential for u in UPSTREAMS if u.credential)
        for key, arn in self.registry_credentials.items():
            if key not in known:
                raise Invalid(f"registryCredentials.{key}", key, f"one of {', '.join(known)}")
            found = CREDENTIAL_ARN.match(arn) if isinstance(arn, str) else None
            if not found:
                raise Invalid(
                    f"registryCredentials.{key}",
                    arn,
                    "the ARN of a Secrets Manager secret whose name starts with ecr-pullthroughcache/ "
                    "(arn:aws:secretsmanager:<region>:<account>:secret:ecr-pullthroughcache/<name>)",
                    reason="ECR's pull-through cache reads only secrets named so",
                )
            if found[1] != self.region:
                raise Invalid(
                    f"registryCredentials.{key}",
                    arn,
                    f"a secret in {self.region}",
                    reason="ECR takes the credential of a pull-through cache rule from its own region",
                )

    def registry_credential_problems(self, account_id: str) -> list[str]:
        """A credential in another account than the deploying one (ECR reads its own account's secrets)."""
        return [
            f"{PROJECT}:registryCredentials.{key}: {arn!r} is in account {CREDENTIAL_ARN.match(arn)[2]}; "  # type: ignore[index]
            f"allowed: a secret in the account the platform deploys to ({account_id})"
            for key, arn in self.registry_credentials.items()
            if CREDENTIAL_ARN.match(arn)[2] != account_id  # type: ignore[index]
        ]

    @property
    def idle_quotas(self) -> list[str]:
        """Queue quotas for an accelerator no GPU pool offers (a pool taken away, e.g. dev's AMD pool
        without its AMI): they could admit no pod that any node runs, so the queues are deployed without
        them (addons_as_deployed), and `infra check` and the program say so instead of refusing the
        stack: dropping a pool is then one edit."""
        offered = {p.accelerator for p in self.gpu_pools}
        return [
            f"{PROJECT}:addons.training.queues[{i}].gpus.{key}: {count} GPU(s) left out of queue "
            f"{queue.name!r}: no GPU pool offers {key} (gpuPools: {', '.join(sorted(offered)) or 'none'})"
            for i, queue in enumerate(self.addons.training.queues)
            for key, count in queue.gpus.items()
            if key not in offered
        ]

    @property
    def addons_as_deployed(self) -> AddonsConfig:
        """The add-ons as the program installs them: each queue's GPU quotas only for accelerators a pool
        offers (idle_quotas names the others)."""
        offered = {p.accelerator for p in self.gpu_pools}
        training = self.addons.training
        queues = [
            q.model_copy(update={"gpus": {k: n for k, n in q.gpus.items() if k in offered}})
            for q in training.queues
        ]
        return self.addons.model_copy(update={"training": training.model_copy(update={"queues": queues})})

    def _check_tags(self) -> None:
        if len(self.tags) > MAX_USER_TAGS:
            count = f"{len(self.tags)} tags"
            raise Invalid("tags", count, f"at most {MAX_USER_TAGS}", "AWS allows 50 per resource")
        for key, value in self.tags.items():
            allowed = "letters, digits, spaces and _ . : / = + - @"
            if key.lower().startswith("aws:"):
                reserved = "AWS reserves the aws: prefix"
                raise Invalid(f"tags.{key}", key, "a key not starting with aws:", reserved)
            if not 1 <= len(key) <= 128 or not _TAG_CHARS.match(key):
                raise Invalid(f"tags.{key}", key, f"1-128 characters: {allowed}", "not an AWS tag key")
            if not isinstance(value, str) or len(value) > 256 or not _TAG_CHARS.match(value):
                raise Invalid(f"tags.{key}", value, f"a string of 0-256 characters: {allowed}")

    def _check_capacity(self) -> None:
        """What the GPU pools need from the add-ons: Karpenter for elastic pools, the vendor's device
        plugin for every pool (or its GPUs are never allocatable), a pinned node image in prod."""
        karpenter = self.addons.karpenter
        for i, pool in enumerate(self.gpu_pools):
            if pool.source == "karpenter" and not karpenter.enabled:
                raise Invalid(
                    f"gpuPools[{i}].source",
                    pool.source,
                    "managed (with size), or addons.karpenter.enabled true",
                    reason="Karpenter pools need the Karpenter add-on",
                )
            plugin = f"{pool.catalog_entry.vendor}_device_plugin"
            if not getattr(self.addons.gpu, plugin):
                raise Invalid(
                    f"addons.gpu.{to_camel(plugin)}",
                    False,
                    "true",
                    reason=f"gpuPools[{i}] ({pool.accelerator}) needs it, or its GPUs never count",
                )
            if pool.efa and not self.addons.gpu.efa_device_plugin:
                raise Invalid(
                    "addons.gpu.efaDevicePlugin",
                    False,
                    "true",
                    reason=f"gpuPools[{i}] has efa: true; without the plugin vpc.amazonaws.com/efa is never "
                    "allocatable",
                )
        uses_alias = any(
            p.source == "karpenter" and p.catalog_entry.node_image is not NodeImage.CUSTOM
            for p in self.gpu_pools
        ) or (karpenter.enabled and karpenter.cpu_pool.enabled)
        if self.environment == "prod" and uses_alias and karpenter.ami_alias.endswith("@latest"):
            raise Invalid(
                "addons.karpenter.amiAlias",
                karpenter.ami_alias,
                'a pinned release such as "al2023@v20260818" in prod',
                reason="@latest drifts every Karpenter node (training pods too) when AWS publishes an AMI",
            )

    def _check_network(self) -> None:
        vpc = _cidr("vpcCidr", self.vpc_cidr)
        if not 16 <= vpc.prefixlen <= 24:
            raise Invalid("vpcCidr", self.vpc_cidr, "a prefix length from /16 to /24")
        if not any(vpc.subnet_of(r) for r in PRIVATE_RANGES):
            raise Invalid(
                "vpcCidr",
                self.vpc_cidr,
                f"a private range: inside {', '.join(map(str, PRIVATE_RANGES))}",
                "a public range hides those internet addresses from everything in the VPC",
            )
        seen: list[tuple[str, ipaddress.IPv4Network]] = []
        for key, cidrs in (
            ("privateSubnetCidrs", self.private_subnets),
            ("publicSubnetCidrs", self.public_subnets),
        ):
            if len(cidrs) != self.availability_zone_count:
                raise Invalid(key, cidrs, f"one CIDR per AZ ({self.availability_zone_count})")
            for i, value in enumerate(cidrs):
                net = _cidr(f"{key}[{i}]", value)
                if not net.subnet_of(vpc):
                    raise Invalid(f"{key}[{i}]", value, f"a subnet inside vpcCidr {self.vpc_cidr}")
                for other_key, other in seen:
                    if net.overlaps(other):
                        raise Invalid(
                            f"{key}[{i}]", value, f"a CIDR that does not overlap {other_key} {other}"
                        )
                seen.append((f"{key}[{i}]", net))

    def _check_deployer_cidrs(self) -> None:
        if self.deploy_from_vpc and not self.deployer_cidrs:
            raise Invalid(
                "deployerCidrs",
                [],
                "the CIDR of the subnet the runner lives in (inside vpcCidr or a peered network)",
                reason="with deployFromVpc true the runner reaches the API through the private endpoint "
                "only, whose security group admits nothing else",
            )
        if self.deployer_cidrs and not self.deploy_from_vpc:
            raise Invalid("deployerCidrs", self.deployer_cidrs, "[] when deployFromVpc is false")
        for i, value in enumerate(self.deployer_cidrs):
            private = "a private network in CIDR notation"
            net = _cidr(f"deployerCidrs[{i}]", value, "10.30.0.0/19, a private subnet of the VPC", private)
            if not net.is_private:
                raise Invalid(
                    f"deployerCidrs[{i}]",
                    value,
                    "a private network in CIDR notation (e.g. 10.30.0.0/19, a private subnet of the VPC)",
                    reason="the private endpoint is reached from inside the VPC or a peered network",
                )

    def _check_endpoint(self) -> None:
        if self.endpoint_public_access and not self.public_access_cidrs:
            raise Invalid(
                "publicAccessCidrs",
                [],
                "the CIDRs allowed to reach the public endpoint",
                reason="with endpointPublicAccess true and no CIDRs EKS opens the API to 0.0.0.0/0",
            )
        if self.public_access_cidrs and not self.endpoint_public_access:
            raise Invalid(
                "publicAccessCidrs", self.public_access_cidrs, "[] when endpointPublicAccess is false"
            )
        for i, value in enumerate(self.public_access_cidrs):
            net = _cidr(f"publicAccessCidrs[{i}]", value, "198.51.100.7/32")
            if value in self.public_access_cidrs[:i]:
                raise Invalid(f"publicAccessCidrs[{i}]", value, "each CIDR once")
            if any(net.subnet_of(r) for r in UNROUTED):
                raise Invalid(
                    f"publicAccessCidrs[{i}]",
                    value,
                    "the deployer's public egress CIDRs (VPN or NAT)",
                    "a private, loopback or link-local range never reaches the public endpoint: the API "
                    "server sees the deployer's public address",
                )
            if problem := public_cidr_problem(value, self.environment):
                raise Invalid(
                    f"publicAccessCidrs[{i}]",
                    value,
                    "the deployer's own egress CIDRs (VPN or NAT, e.g. 198.51.100.7/32), never 0.0.0.0/0",
                    reason=problem,
                )
        if problem := public_cidrs_problem(self.public_access_cidrs, self.environment):
            raise Invalid(
                "publicAccessCidrs",
                self.public_access_cidrs,
                "the deployer's own egress CIDRs (VPN or NAT, e.g. 198.51.100.7/32), never 0.0.0.0/0",
                reason=problem,
            )

    def check_deployable(
        self, caller_arn: str | None = None, creator_arn: str | None = None, *, first_deploy: bool = False
    ) -> None:
        """Refuse a config `pulumi up` cannot carry out from where it runs: a private-only endpoint
        with the deployer outside the VPC, an admin entry for the cluster's creator `creator_arn` (EKS
        makes the creator cluster-admin already; a second access entry for it fails), or a deploying
        identity `caller_arn` that is neither the creator nor an admin (it could not install anything
        into the cluster). The creator is the identity of the first deploy, recorded then
        (infra/program.py); on the first deploy it is the caller. `first_deploy`: the stack has never been
        updated, so the VPC a deploy-from-VPC runner would live in does not exist yet."""
        creator_arn = creator_arn or caller_arn
        problems = []
        if self.deploy_from_vpc and first_deploy:
            problems.append(
                f"{PROJECT}:deployFromVpc: true on the stack's first deploy, which creates the VPC the "
                "runner would live in, so no runner can be there yet; allowed: deploy first with "
                "endpointPublicAccess true and publicAccessCidrs (your egress), put the runner in a private "
                "subnet (stack output private_subnet_ids), then set deployFromVpc true, deployerCidrs to its "
                "subnet's CIDR and endpointPublicAccess false, and run the update from the runner"
            )
        if not self.endpoint_public_access and not self.deploy_from_vpc:
            problems.append(
                f"{PROJECT}:endpointPublicAccess: {PRIVATE_ONLY_REASON}; got endpointPublicAccess false "
                "and deployFromVpc false; allowed: endpointPublicAccess true with publicAccessCidrs "
                "(the deployer's egress CIDRs), or deployFromVpc true when pulumi runs inside the VPC"
            )
        for i in creator_conflicts(self.admin_principal_arns, creator_arn or ""):
            problems.append(
                f"{PROJECT}:adminPrincipalArns[{i}]: {self.admin_principal_arns[i]!r} is the cluster's "
                f"creator ({creator_arn}); EKS already gives the cluster creator cluster-admin "
                "(pulumi-eks sets bootstrapClusterCreatorAdminPermissions: true), so a second access entry "
                "for it fails with ResourceInUseException; allowed: remove it from adminPrincipalArns "
                "(the creator stays admin) or create the cluster as another identity"
            )
        admins = self.admin_principal_arns
        if caller_arn and creator_arn and not has_cluster_access(caller_arn, creator_arn, admins):
            problems.append(
                f"{PROJECT}:adminPrincipalArns: the identity running pulumi ({caller_arn}) is neither the "
                f"cluster's creator ({creator_arn}, recorded at the first deploy) nor listed, so it cannot "
                "install the Helm releases and custom resources; allowed: add its role to adminPrincipalArns "
                "in an update run by the creator or a listed admin, then deploy as it"
            )
        if problems:
            raise ConfigError(problems)

    @property
    def node_monitoring_agent(self) -> bool:
        """Whether the EKS node monitoring agent (and its DCGM host engine) runs: GPU faults are what it
        is here for, so a stack without GPU pools goes without it."""
        return self.addons.node_health.monitoring_agent and bool(self.gpu_pools)

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
        values = {
            k: v
            for k, v in offline_secrets(values).items()
            if not (k.removeprefix(f"{PROJECT}:") in SECRET_KEYS and is_unset_secret(v))
        }
        ours = {
            k.split(":", 1)[1]: v
            for k, v in values.items()
            if k.startswith(f"{PROJECT}:") and k not in WORKLOAD_KEYS
        }
        if REGION_KEY in values:
            ours[REGION_KEY] = values[REGION_KEY]
        # The Pulumi CLI reads a stack file's top-level value as text first (pulumi/pulumi sdk/go/common/
        # resource/config/value.go unmarshalValue), so `kubernetesVersion: 1.35` reaches `pulumi up` as
        # "1.35"; read it so here too. Only nested values (in lists and objects) stay YAML numbers.
        fields = {f.alias or n: f.annotation for n, f in cls.model_fields.items()}
        as_text = {k for k, v in ours.items() if is_number(v) and k in fields and is_text(fields[k])}
        ours = {k: str(v) if k in as_text else v for k, v in ours.items()}
        try:
            return cls.model_validate(ours)
        except ValidationError as e:
            problems = [describe(err, cls) for err in e.errors()]
            raise ConfigError([_quote_hint(p, as_text) for p in problems]) from None

    @classmethod
    def from_pulumi(cls, placeholders: Literal["refuse", "warn"] = "refuse") -> PlatformConfig:
        """Build from the running stack's config (what `pulumi up` or `infra synth` hands the program);
        `placeholders="warn"` for offline commands (infra/config/pulumi_config.py)."""
        # Imported here: the reader imports pulumi, and the model serves tools that never do (schemas).
        from infra.config.pulumi_config import read_platform_config

        return read_platform_config(placeholders)


def _quote_hint(problem: str, as_text: set[str]) -> str:
    """A refused value that YAML read as a number and the CLI passes as text: quoting keeps what was typed
    (YAML makes an unquoted 1.30 the number 1.3 before anything reads it)."""
    key = next((k for k in as_text if problem.startswith(f"{PROJECT}:{k}:")), None)
    return f"{problem} (written unquoted: quote it to keep it as typed)" if key else problem


def known_keys() -> list[str]:
    """Every key a stack file of this project may set in our namespace (platform and workload keys)."""
    names = [f.alias or n for n, f in PlatformConfig.model_fields.items() if f.alias != REGION_KEY]
    return [f"{PROJECT}:{n}" for n in names] + sorted(WORKLOAD_KEYS) + [REGION_KEY]


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
