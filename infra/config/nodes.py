"""The platform's own nodes: the system managed node group and the GPU pools (Karpenter NodePools or
fixed-size managed node groups), each checked against the accelerator catalog."""

from __future__ import annotations

import re

from pydantic import Field, model_validator

from infra.accelerators import CATALOG, SYSTEM_INSTANCE_USD_PER_HOUR, Accelerator, NodeImage
from infra.config.base import SHORT_NAME, ConfigModel, Invalid
from infra.contract import (
    EKS_CAPACITY_TYPE,
    CapacityType,
    EksCapacityType,
    GpuCapacityType,
    PoolReservation,
    Source,
)

# The system group runs CoreDNS, the controllers and add-ons; workloads run on Karpenter's nodes. A larger
# group is a typo or a group used for workloads, and nothing scales it back (Karpenter never scales it).
SYSTEM_MAX_NODES = 10
# The root volume of a GPU node (Karpenter's, and a managed pool's without diskSizeGiB): CUDA images are
# 10-20 GB compressed and unpack to several times that.
GPU_NODE_DISK_GIB = 200
_AMI_ID = re.compile(r"^ami-[0-9a-f]{8}([0-9a-f]{9})?$")
# Karpenter's duration syntax (NodePool disruption.consolidateAfter): "30s", "10m", "1h30m" or "Never".
_DURATION = re.compile(r"^(([0-9]+(s|m|h))+|Never)$")
# Karpenter 1.14's EC2NodeClass CRD: capacityReservationSelectorTerms[].id, at most 30 terms, at most 20 tags.
_RESERVATION_ID = re.compile(r"^cr-[0-9a-z]+$")
MAX_RESERVATION_TERMS = 30
MAX_RESERVATION_TAGS = 20
_ZONE = re.compile(r"^[a-z]{2}(-[a-z]+)+-[0-9]+[a-z]$")


def on_demand() -> list[CapacityType]:
    """The capacity types of a pool that names none: on-demand (Spot is a choice, not a default)."""
    return ["on-demand"]


def _gpu_on_demand() -> list[GpuCapacityType]:
    return ["on-demand"]


class SystemNodesConfig(ConfigModel):
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
                raise Invalid(f"instanceTypes[{i}]", t, allowed, "not a system instance type")
        if not self.instance_types:
            raise Invalid("instanceTypes", [], f"one or more of {allowed}")
        if self.min_size < 1:
            raise Invalid("minSize", self.min_size, ">= 1", "system pods need at least one node")
        if self.max_size > SYSTEM_MAX_NODES:
            raise Invalid(
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


class CapacityReservationConfig(ConfigModel):
    """The capacity reservations a reserved pool launches into: targeted On-Demand Capacity Reservations or
    Capacity Blocks for ML, by id or by tags (both: either selects), in the one AZ they were bought in."""

    ids: list[str] = Field(default_factory=list)
    tags: dict[str, str] = Field(default_factory=dict)
    # A reservation lives in one AZ; the VPC must have a subnet there, and an EFA pool's nodes launch there.
    availability_zone: str

    @model_validator(mode="after")
    def _check(self) -> CapacityReservationConfig:
        if not self.ids and not self.tags:
            raise Invalid("ids", [], "one or more reservation ids (cr-...) or `tags` that select them")
        for i, rid in enumerate(self.ids):
            if not _RESERVATION_ID.match(rid):
                raise Invalid(f"ids[{i}]", rid, "a capacity reservation id like cr-0123456789abcdef0")
        if len(set(self.ids)) != len(self.ids):
            raise Invalid("ids", self.ids, "each id once")
        if len(self.ids) + bool(self.tags) > MAX_RESERVATION_TERMS:
            raise Invalid("ids", self.ids, f"at most {MAX_RESERVATION_TERMS - bool(self.tags)} ids")
        if len(self.tags) > MAX_RESERVATION_TAGS:
            raise Invalid("tags", self.tags, f"at most {MAX_RESERVATION_TAGS} tags")
        for key, value in self.tags.items():
            if not key or not value:
                raise Invalid(f"tags.{key}", value, 'non-empty keys and values ("*": any value of the key)')
        if not _ZONE.match(self.availability_zone):
            raise Invalid(
                "availabilityZone",
                self.availability_zone,
                "the reservation's AZ, like us-east-1a (describe-capacity-reservations: AvailabilityZone)",
            )
        return self

    def contract(self) -> PoolReservation:
        return PoolReservation(
            ids=tuple(self.ids), tags=dict(self.tags), availability_zone=self.availability_zone
        )


class GpuPoolConfig(ConfigModel):
    """One GPU node source, built from the accelerator catalog entry `accelerator`.

    `source: karpenter` (the default) is elastic: a Karpenter NodePool that launches nodes when a job's
    pods are pending and removes them when empty, up to `gpuLimit` GPUs. `source: managed` is an EKS
    managed node group of exactly `size` nodes for reserved capacity (an ODCR or a Savings Plan): nothing
    scales managed groups, so it runs `size` nodes whether jobs run or not.

    `capacityTypes` with `reserved` draws from the capacity reservations `reservation` selects: a Karpenter
    pool launches into them first (Karpenter 1.14 prefers reserved offerings) and falls back to the other
    capacity types listed, if any; a managed pool with `capacityTypes: [reserved]` is an EKS group on one
    Capacity Block (capacity type CAPACITY_BLOCK), its `size` the block's instance count.
    """

    name: str
    accelerator: str
    source: Source = "karpenter"
    # Default: the catalog's first (smallest) instance type of the accelerator. One GPU count per pool.
    instance_types: list[str] | None = None
    # Karpenter's spelling; a managed group takes exactly one (EKS maps it to SPOT / ON_DEMAND).
    capacity_types: list[GpuCapacityType] = Field(default_factory=_gpu_on_demand)
    # Required with capacityTypes `reserved`: which reservations, in which AZ.
    reservation: CapacityReservationConfig | None = None
    # karpenter: the most GPUs the pool runs at once (NodePool spec.limits), the cost ceiling.
    gpu_limit: int | None = None
    # karpenter: how long a GPU node must be empty before it is removed.
    consolidate_after: str = "10m"
    # managed: the fixed number of nodes.
    size: int | None = None
    # managed: the root volume, GPU_NODE_DISK_GIB when unset (Karpenter nodes use
    # addons.karpenter.rootVolumeGiB).
    disk_size_gib: int | None = Field(default=None, ge=20, le=16384)
    ami_id: str | None = None
    efa: bool = False

    @model_validator(mode="after")
    def _check(self) -> GpuPoolConfig:
        if not SHORT_NAME.match(self.name):
            raise Invalid(
                "name", self.name, "lowercase letters, digits and '-', starting with a letter, <= 31"
            )
        if self.accelerator not in CATALOG:
            raise Invalid("accelerator", self.accelerator, ", ".join(CATALOG), "unknown accelerator")
        acc = self.catalog_entry
        allowed = ", ".join(t.name for t in acc.instance_types)
        if self.instance_types is not None and not self.instance_types:
            raise Invalid("instanceTypes", [], f"one or more of {allowed}")
        for i, t in enumerate(self.instance_types or []):
            if t not in (x.name for x in acc.instance_types):
                raise Invalid(f"instanceTypes[{i}]", t, allowed, f"not a {acc.key} instance type")
        gpus = {acc.instance(t).gpus for t in self.instance_type_names}
        if len(gpus) > 1:
            raise Invalid(
                "instanceTypes",
                self.instance_types,
                "instance types with the same GPU count",
                reason="a pool's GPUs per node must be one number (jobs are sized by it)",
            )
        if acc.node_image is NodeImage.CUSTOM and not (self.ami_id and _AMI_ID.match(self.ami_id)):
            raise Invalid(
                "amiId",
                self.ami_id,
                'an AMI id like ami-0123456789abcdef0 (docs/deploy.md "Building the AMD AMI")',
                reason=f"{acc.key} has no EKS-optimized AMI: the pool needs a custom AMI with the GPU driver",
            )
        if acc.node_image is not NodeImage.CUSTOM and self.ami_id is not None:
            raise Invalid(
                "amiId",
                self.ami_id,
                "no amiId (unset)",
                f"{acc.key} nodes use the EKS-optimized {acc.node_image}",
            )
        if self.efa and any(acc.instance(t).efa_interfaces == 0 for t in self.instance_type_names):
            efa_types = ", ".join(t.name for t in acc.instance_types if t.efa_interfaces) or "none"
            raise Invalid("efa", self.efa, f"false, or instance types with EFA: {efa_types}")
        self._check_source()
        return self

    def _check_reservation(self) -> None:
        reserved = "reserved" in self.capacity_types
        if reserved and self.reservation is None:
            raise Invalid(
                "reservation",
                None,
                "{ids: [cr-...], availabilityZone: <its AZ>} or {tags: {...}, availabilityZone: <its AZ>}",
                reason="capacityTypes includes reserved: the pool needs the reservations it launches into",
            )
        if not reserved and self.reservation is not None:
            raise Invalid(
                "capacityTypes", self.capacity_types, "a list including reserved (the pool has a reservation)"
            )
        if not reserved or self.source == "karpenter":
            return
        assert self.reservation is not None
        if self.capacity_types != ["reserved"]:
            raise Invalid(
                "capacityTypes",
                self.capacity_types,
                "[reserved] alone (source managed: one Capacity Block; fallback needs source karpenter)",
            )
        if len(self.reservation.ids) != 1 or self.reservation.tags:
            raise Invalid(
                "reservation.ids",
                self.reservation.ids,
                "exactly one Capacity Block id and no tags",
                reason="an EKS CAPACITY_BLOCK group's launch template targets one reservation",
            )
        if len(self.instance_type_names) != 1:
            raise Invalid("instanceTypes", self.instance_types, "the one instance type of the Capacity Block")

    def _check_source(self) -> None:
        if not self.capacity_types or len(set(self.capacity_types)) != len(self.capacity_types):
            raise Invalid(
                "capacityTypes", self.capacity_types, "one or more of spot, on-demand, reserved, once each"
            )
        self._check_reservation()
        if self.source == "karpenter":
            if self.size is not None:
                raise Invalid("size", self.size, "unset for source karpenter (use gpuLimit)")
            if self.disk_size_gib is not None:
                allowed = "unset for source karpenter (it uses addons.karpenter.rootVolumeGiB)"
                raise Invalid("diskSizeGiB", self.disk_size_gib, allowed)
            if self.gpu_limit is None or not 1 <= self.gpu_limit <= 1024:
                raise Invalid("gpuLimit", self.gpu_limit, "1-1024 GPUs (the pool's cost ceiling)")
            if self.gpu_limit < self.gpus_per_node:
                raise Invalid(
                    "gpuLimit",
                    self.gpu_limit,
                    f">= {self.gpus_per_node} (the GPUs of one {self.instance_type_names[0]})",
                    reason="a limit below one node's GPUs lets Karpenter launch no node at all",
                )
            if not _DURATION.match(self.consolidate_after):
                raise Invalid(
                    "consolidateAfter", self.consolidate_after, 'a duration like "10m", "1h" or "Never"'
                )
            return
        if self.gpu_limit is not None:
            raise Invalid("gpuLimit", self.gpu_limit, "unset for source managed (use size)")
        if self.size is None or not 1 <= self.size <= 100:
            raise Invalid(
                "size",
                self.size,
                "1-100 nodes",
                reason="a managed pool is reserved capacity of fixed size (elastic pools: source karpenter)",
            )
        if len(self.capacity_types) != 1:
            raise Invalid(
                "capacityTypes", self.capacity_types, "exactly one of spot, on-demand, reserved (managed)"
            )

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
    def reserved(self) -> bool:
        return "reserved" in self.capacity_types

    @property
    def max_nodes(self) -> int:
        if self.source == "karpenter":
            return (self.gpu_limit or 0) // self.gpus_per_node
        return self.size or 0

    @property
    def managed_disk_size_gib(self) -> int:
        """The root volume of a managed pool's nodes."""
        return self.disk_size_gib or GPU_NODE_DISK_GIB


def _check_sizes(min_size: int, max_size: int, desired: int | None) -> None:
    if max_size < max(min_size, 1):
        raise Invalid("maxSize", max_size, f">= minSize ({min_size}) and >= 1")
    if desired is not None and not min_size <= desired <= max_size:
        raise Invalid("desiredSize", desired, f"between minSize ({min_size}) and maxSize ({max_size})")
