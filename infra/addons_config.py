"""AddonsConfig: the `mlops-eks:addons` object of a platform stack (Karpenter, GPU software, observability,
Kubecost, training operators, metrics-server). Every add-on can be turned off.

It is a field of PlatformConfig, so it is validated with the rest of the stack's config before any resource
exists; a bad value fails with `mlops-eks:addons.<key path>: ...; got <value>; allowed: <what>`.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic.alias_generators import to_camel

from infra.accelerators import CATALOG, NodeImage

# Karpenter's duration syntax (NodePool disruption.consolidateAfter): "30s", "10m", "1h30m" or "Never".
_DURATION = re.compile(r"^(([0-9]+(s|m|h))+|Never)$")
# Prometheus retention: a number and a unit.
_RETENTION = re.compile(r"^[0-9]+(h|d|w|y)$")
_NAME = re.compile(r"^[a-z][a-z0-9-]{0,30}$")
_AMI_ID = re.compile(r"^ami-[0-9a-f]{8}([0-9a-f]{9})?$")
_AMI_ALIAS = re.compile(r"^al2023@(latest|v[0-9]{8})$")
CapacityType = Literal["spot", "on-demand"]


def _on_demand() -> list[CapacityType]:
    return ["on-demand"]


class AddonsInvalid(ValueError):
    """A bad add-on value. `field` is the key relative to the model that raised it (config.py adds the
    path above it and the `mlops-eks:` prefix)."""

    def __init__(self, field: str, value: Any, allowed: str, reason: str = ""):
        self.field, self.value, self.allowed, self.reason = field, value, allowed, reason
        super().__init__(f"{reason + '; ' if reason else ''}got {value!r}; allowed: {allowed}")


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", alias_generator=to_camel, populate_by_name=True)


def _names(kind: str, names: list[str]) -> None:
    for i, name in enumerate(names):
        if not _NAME.match(name):
            raise AddonsInvalid(
                f"{kind}[{i}].name", name, "lowercase letters, digits and '-', <= 31, a letter first"
            )
        if name in names[:i]:
            raise AddonsInvalid(f"{kind}[{i}].name", name, "a name no other entry has")


class KarpenterGpuPool(_Model):
    """One Karpenter NodePool (and its EC2NodeClass) for accelerator `accelerator` of the catalog."""

    name: str
    accelerator: str
    # Default: every instance type the catalog lists for the accelerator.
    instance_types: list[str] | None = None
    capacity_types: list[CapacityType] = Field(default_factory=_on_demand)
    # The most GPUs this pool may run at once (NodePool spec.limits): the cost ceiling.
    gpu_limit: int = Field(default=8, ge=1, le=1024)
    # How long a GPU node must be empty before Karpenter removes it. Nodes with pods are never consolidated.
    consolidate_after: str = "10m"
    # Custom AMI for AMD pools (there is no EKS-optimized AMD AMI); must be unset for NVIDIA pools.
    ami_id: str | None = None

    @model_validator(mode="after")
    def _check(self) -> KarpenterGpuPool:
        if self.accelerator not in CATALOG:
            raise AddonsInvalid("accelerator", self.accelerator, ", ".join(CATALOG), "unknown accelerator")
        acc = CATALOG[self.accelerator]
        known = [t.name for t in acc.instance_types]
        if self.instance_types is not None and not self.instance_types:
            raise AddonsInvalid("instanceTypes", [], f"one or more of {', '.join(known)}")
        for i, t in enumerate(self.instance_types or []):
            if t not in known:
                raise AddonsInvalid(
                    f"instanceTypes[{i}]", t, ", ".join(known), f"not a {acc.key} instance type"
                )
        if not self.capacity_types:
            raise AddonsInvalid("capacityTypes", [], "one or both of spot, on-demand")
        if not _DURATION.match(self.consolidate_after):
            raise AddonsInvalid(
                "consolidateAfter", self.consolidate_after, 'a duration like "10m", "1h" or "Never"'
            )
        custom = acc.node_image is NodeImage.CUSTOM
        if custom and not (self.ami_id and _AMI_ID.match(self.ami_id)):
            raise AddonsInvalid(
                "amiId", self.ami_id, "an AMI id like ami-0123456789abcdef0 with the amdgpu driver",
                f"{acc.key} has no EKS-optimized AMI (the al2023 alias would give it the NVIDIA one)",
            )  # fmt: skip
        if not custom and self.ami_id is not None:
            raise AddonsInvalid("amiId", self.ami_id, "unset", f"{acc.key} nodes use karpenter.amiAlias")
        return self

    @property
    def instance_type_names(self) -> list[str]:
        return self.instance_types or [t.name for t in CATALOG[self.accelerator].instance_types]


class KarpenterCpuPool(_Model):
    """The NodePool for pods that need no GPU (data preparation, notebooks' controllers, CI)."""

    enabled: bool = True
    cpu_limit: int = Field(default=64, ge=1, le=10000)
    capacity_types: list[CapacityType] = Field(default_factory=_on_demand)


class KarpenterConfig(_Model):
    enabled: bool = True
    # Pin to a release (al2023@v20251023) in prod so AMI updates are deliberate (they drift every node).
    ami_alias: str = "al2023@latest"
    # Root volume of Karpenter nodes: CUDA images are 10-20 GB compressed and unpack to several times that.
    root_volume_gib: int = Field(default=200, ge=50, le=16384)
    gpu_pools: list[KarpenterGpuPool] = Field(default_factory=list)
    cpu_pool: KarpenterCpuPool = Field(default_factory=KarpenterCpuPool)

    @model_validator(mode="after")
    def _check(self) -> KarpenterConfig:
        if not _AMI_ALIAS.match(self.ami_alias):
            raise AddonsInvalid("amiAlias", self.ami_alias, '"al2023@latest" or "al2023@vYYYYMMDD"')
        _names("gpuPools", [p.name for p in self.gpu_pools])
        return self


class GpuSoftwareConfig(_Model):
    nvidia_device_plugin: bool = True
    dcgm_exporter: bool = True
    amd_device_plugin: bool = False


class ObservabilityConfig(_Model):
    enabled: bool = True
    retention: str = "15d"
    prometheus_storage_gib: int = Field(default=50, ge=10, le=16384)

    @model_validator(mode="after")
    def _check(self) -> ObservabilityConfig:
        if not _RETENTION.match(self.retention):
            raise AddonsInvalid("retention", self.retention, 'a number and a unit h, d, w or y, e.g. "15d"')
        return self


class Toggle(_Model):
    enabled: bool = True


class TeamQueue(_Model):
    """A team's share of the cluster: a Kueue ClusterQueue (or Volcano Queue) with these quotas."""

    name: str
    cpu: int = Field(default=64, ge=1)
    memory_gib: int = Field(default=256, ge=1)
    # GPUs per accelerator key, e.g. {"t4": 8}.
    gpus: dict[str, int] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _check(self) -> TeamQueue:
        for key, count in self.gpus.items():
            if key not in CATALOG:
                raise AddonsInvalid(f"gpus.{key}", key, ", ".join(CATALOG), "unknown accelerator")
            if count < 0:
                raise AddonsInvalid(f"gpus.{key}", count, ">= 0")
        return self


class TrainingConfig(_Model):
    # Kubeflow Trainer v2 (TrainJob + the torch-distributed ClusterTrainingRuntime; bundles JobSet).
    trainer: bool = True
    # Training Operator v1.9 (PyTorchJob, MPIJob), for jobs not yet moved to TrainJob.
    training_operator_v1: bool = False
    gang_scheduler: Literal["kueue", "volcano"] | None = None
    queues: list[TeamQueue] = Field(default_factory=list)

    @model_validator(mode="after")
    def _check(self) -> TrainingConfig:
        if self.queues and self.gang_scheduler is None:
            raise AddonsInvalid("queues", [q.name for q in self.queues], "[] unless gangScheduler is set")
        _names("queues", [q.name for q in self.queues])
        return self


class AddonsConfig(_Model):
    karpenter: KarpenterConfig = Field(default_factory=KarpenterConfig)
    gpu: GpuSoftwareConfig = Field(default_factory=GpuSoftwareConfig)
    observability: ObservabilityConfig = Field(default_factory=ObservabilityConfig)
    kubecost: Toggle = Field(default_factory=Toggle)
    training: TrainingConfig = Field(default_factory=TrainingConfig)
    metrics_server: Toggle = Field(default_factory=Toggle)

    @model_validator(mode="after")
    def _check(self) -> AddonsConfig:
        if self.kubecost.enabled and not self.observability.enabled:
            raise AddonsInvalid(
                "kubecost.enabled", True, "false when observability.enabled is false",
                "Kubecost reads the platform's Prometheus",
            )  # fmt: skip
        if self.karpenter.enabled:
            for i, pool in enumerate(self.karpenter.gpu_pools):
                plugin = f"{CATALOG[pool.accelerator].vendor}_device_plugin"
                if not getattr(self.gpu, plugin):
                    reason = f"karpenter.gpuPools[{i}] ({pool.accelerator}) needs it, or its GPUs never count"
                    raise AddonsInvalid(f"gpu.{to_camel(plugin)}", False, "true", reason)
        return self
