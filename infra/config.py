"""PlatformConfig: the platform stack's configuration, read once from Pulumi config and validated.

Every check runs before a resource is registered. An error names the key as it is written in
`Pulumi.<stack>.yaml` (e.g. `mlops-eks:gpuPools[1].amiId`), the value found and what is allowed.
`PlatformConfig.from_mapping` takes the `config:` mapping of a stack file, so validation is testable
without the Pulumi runtime; `PlatformConfig.from_pulumi` reads the running stack's config.
"""

from __future__ import annotations

import ipaddress
import json
import re
from collections.abc import Mapping
from types import UnionType
from typing import Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, model_validator
from pydantic.alias_generators import to_camel

from infra.accelerators import CATALOG, SYSTEM_INSTANCE_USD_PER_HOUR, Accelerator, NodeImage
from infra.addons_config import AddonsConfig, AddonsInvalid

PROJECT = "mlops-eks"
REGION_KEY = "aws:region"
MIN_KUBERNETES_MINOR = 33
# Keys of workload stacks (same project, other program): declared in Pulumi.yaml, never read here.
WORKLOAD_KEYS = frozenset({"platformStack", "job"})

_REGION = re.compile(r"^[a-z]{2}(-gov|-iso[a-z]?)?-[a-z]+-\d+$")
_AMI_ID = re.compile(r"^ami-[0-9a-f]{8}([0-9a-f]{9})?$")
_POOL_NAME = re.compile(r"^[a-z][a-z0-9-]{0,30}$")
_PRINCIPAL_ARN = re.compile(r"^arn:aws[a-z-]*:(iam|sts)::\d{12}:(role|user|assumed-role)/[\w+=,.@/-]+$")
_KUBERNETES_VERSION = re.compile(r"^1\.(\d+)$")


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
        frozen=True, extra="forbid", alias_generator=to_camel, populate_by_name=True, strict=False
    )


class SystemNodesConfig(_Model):
    """The managed node group for system pods (CoreDNS, controllers, add-ons): no GPUs."""

    instance_types: list[str] = Field(default_factory=lambda: ["m6i.large"])
    min_size: int = 2
    max_size: int = 3
    desired_size: int | None = None
    capacity_type: Literal["ON_DEMAND", "SPOT"] = "ON_DEMAND"
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
        _check_sizes(self.min_size, self.max_size, self.desired_size)
        return self

    @property
    def desired(self) -> int:
        return self.min_size if self.desired_size is None else self.desired_size


class GpuPoolConfig(_Model):
    """One managed GPU node group, built from the accelerator catalog entry `accelerator`."""

    name: str
    accelerator: str
    # Default: the catalog's first (smallest) instance type of the accelerator.
    instance_types: list[str] | None = None
    min_size: int = Field(default=0, ge=0)
    max_size: int = 2
    desired_size: int | None = None
    capacity_type: Literal["ON_DEMAND", "SPOT"] = "ON_DEMAND"
    disk_size_gib: int = Field(default=200, ge=20, le=16384)
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
        _check_sizes(self.min_size, self.max_size, self.desired_size)
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
        return self

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
    def desired(self) -> int:
        return self.min_size if self.desired_size is None else self.desired_size


def _check_sizes(min_size: int, max_size: int, desired: int | None) -> None:
    if max_size < max(min_size, 1):
        raise _Invalid("maxSize", max_size, f">= minSize ({min_size}) and >= 1")
    if desired is not None and not min_size <= desired <= max_size:
        raise _Invalid("desiredSize", desired, f"between minSize ({min_size}) and maxSize ({max_size})")


class PlatformConfig(_Model):
    """Everything a platform stack (dev, prod) is configured by. Defaults are the secure choice."""

    region: str = Field(alias="aws:region")  # the AWS provider's own key
    # "prod" applies the strict rules (no public endpoint open to the internet, on-demand system nodes).
    environment: Literal["dev", "prod"] = "prod"
    availability_zone_count: int = 3
    # Empty: the region's first availabilityZoneCount available AZs. Name them where GPU capacity is
    # (not every AZ offers every GPU family, e.g. p4d).
    availability_zones: list[str] = Field(default_factory=list)
    vpc_cidr: str = "10.0.0.0/16"
    # Empty: carved from vpcCidr (private /19s and public /22s for a /16), one per AZ.
    private_subnet_cidrs: list[str] = Field(default_factory=list)
    public_subnet_cidrs: list[str] = Field(default_factory=list)
    nat_gateways: Literal["single", "per-az"] = "per-az"
    kubernetes_version: str = "1.33"
    endpoint_public_access: bool = False
    public_access_cidrs: list[str] = Field(default_factory=list)
    admin_principal_arns: list[str] = Field(default_factory=list)
    system_nodes: SystemNodesConfig = Field(default_factory=SystemNodesConfig)
    gpu_pools: list[GpuPoolConfig] = Field(default_factory=list)
    checkpoint_noncurrent_days: int = Field(default=30, ge=1, le=3650)
    ecr_keep_images: int = Field(default=30, ge=1, le=1000)
    # Lets `pulumi destroy` delete a non-empty bucket and repositories; keep false where data matters.
    force_destroy: bool = False
    tags: dict[str, str] = Field(default_factory=dict)
    # Cluster add-ons (infra/addons_config.py); every one can be turned off.
    addons: AddonsConfig = Field(default_factory=AddonsConfig)
    # Secret config (`pulumi config set --secret grafanaAdminPassword ...`); unset: one is generated.
    grafana_admin_password: SecretStr | None = None

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
        version = _KUBERNETES_VERSION.match(self.kubernetes_version)
        if not version or int(version.group(1)) < MIN_KUBERNETES_MINOR:
            raise _Invalid(
                "kubernetesVersion", self.kubernetes_version, f'"1.{MIN_KUBERNETES_MINOR}" or newer'
            )
        self._check_network()
        self._check_endpoint()
        for i, arn in enumerate(self.admin_principal_arns):
            if not _PRINCIPAL_ARN.match(arn):
                raise _Invalid(f"adminPrincipalArns[{i}]", arn, "an IAM role or user ARN")
        names = [p.name for p in self.gpu_pools]
        for i, name in enumerate(names):
            if name in names[:i]:
                raise _Invalid(f"gpuPools[{i}].name", name, "a name no other pool has")
        if self.environment == "prod" and self.system_nodes.capacity_type != "ON_DEMAND":
            raise _Invalid(
                "systemNodes.capacityType",
                self.system_nodes.capacity_type,
                "ON_DEMAND in prod",
                reason="Spot interruptions would take CoreDNS and the controllers down",
            )
        return self

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
            if _cidr(f"publicAccessCidrs[{i}]", value).prefixlen == 0 and self.environment == "prod":
                raise _Invalid(
                    f"publicAccessCidrs[{i}]",
                    value,
                    "specific CIDRs (e.g. your VPN's), or endpointPublicAccess false",
                    reason="prod must not expose the Kubernetes API to the whole internet",
                )

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
    def from_mapping(cls, values: Mapping[str, Any]) -> PlatformConfig:
        """Build from a stack file's `config:` mapping (keys `aws:region`, `mlops-eks:<key>`)."""
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
        return cls.from_mapping(values)


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
        message = f"unknown key (got {err['input']!r}); allowed keys: {', '.join(_allowed_keys(path[:-1]))}"
    elif err["type"] == "missing":
        message = "required but not set"
    else:
        message = f"{err['msg']} (got {err['input']!r})"
    key = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path).lstrip(".")
    return f"{key if key.startswith('aws:') else f'{PROJECT}:{key}'}: {message}"


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
