"""AddonsConfig: the `mlops-eks:addons` object of a platform stack (Karpenter, GPU software, observability,
Kubecost, training operators, metrics-server). Every add-on can be turned off.

It is a field of PlatformConfig, so it is validated with the rest of the stack's config before any resource
exists; a bad value fails with `mlops-eks:addons.<key path>: ...; got <value>; allowed: <what>`.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, model_validator

from infra.accelerators import CATALOG
from infra.config.base import SHORT_NAME, ConfigModel, Invalid
from infra.config.node_health import NodeHealthConfig
from infra.config.nodes import GPU_NODE_DISK_GIB, on_demand
from infra.contract import CapacityType

# Prometheus retention: a number and a unit.
_RETENTION = re.compile(r"^[0-9]+(h|d|w|y)$")
# cost-analyzer 2.8.7's prometheusRetentionCheck (templates/_helpers.tpl): retention >= 3 days, or >= 50
# hours and above kubecostModel.etlHourlyStoreDurationHours (49).
KUBECOST_MIN_RETENTION_HOURS = 50
_AMI_ALIAS = re.compile(r"^al2023@(latest|v[0-9]{8})$")


def _names(kind: str, names: list[str]) -> None:
    for i, name in enumerate(names):
        if not SHORT_NAME.match(name):
            raise Invalid(
                f"{kind}[{i}].name", name, "lowercase letters, digits and '-', <= 31, a letter first"
            )
        if name in names[:i]:
            raise Invalid(f"{kind}[{i}].name", name, "a name no other entry has")


class KarpenterCpuPool(ConfigModel):
    """The NodePool for pods that need no GPU (data preparation, notebooks' controllers, CI)."""

    enabled: bool = True
    cpu_limit: int = Field(default=64, ge=1, le=10000)
    capacity_types: list[CapacityType] = Field(default_factory=on_demand)


class KarpenterConfig(ConfigModel):
    """The Karpenter controller and its shared node settings. GPU NodePools come from the stack's
    `gpuPools` (source karpenter); this holds what they and the CPU pool share."""

    enabled: bool = True
    # The EKS-optimized AL2023 release of Karpenter's NVIDIA and CPU nodes. A changed alias drifts (and
    # replaces) every such node, so it is pinned (al2023@vYYYYMMDD, see
    # github.com/awslabs/amazon-eks-ami/releases) and bumped deliberately; "al2023@latest" is allowed in
    # dev only, where following AWS's newest AMI is worth the node replacements.
    ami_alias: str = "al2023@v20260818"
    # Root volume of Karpenter nodes (GPU and CPU pools alike).
    root_volume_gib: int = Field(default=GPU_NODE_DISK_GIB, ge=50, le=16384)
    cpu_pool: KarpenterCpuPool = Field(default_factory=KarpenterCpuPool)

    @model_validator(mode="after")
    def _check(self) -> KarpenterConfig:
        if not _AMI_ALIAS.match(self.ami_alias):
            raise Invalid("amiAlias", self.ami_alias, '"al2023@latest" or "al2023@vYYYYMMDD"')
        return self


class GpuSoftwareConfig(ConfigModel):
    nvidia_device_plugin: bool = True
    dcgm_exporter: bool = True
    amd_device_plugin: bool = False
    # Makes vpc.amazonaws.com/efa allocatable on EFA-capable instance types (pools with efa: true).
    efa_device_plugin: bool = False


class ObservabilityConfig(ConfigModel):
    enabled: bool = True
    retention: str = "15d"
    prometheus_storage_gib: int = Field(default=50, ge=10, le=16384)
    # Where Alertmanager sends the platform's alerts and every critical one; its URL (webhook, Slack
    # incoming webhook) or PagerDuty routing key is the secret config `alertReceiverSecret`.
    alert_receiver: Literal["none", "webhook", "slack", "pagerduty"] = "none"

    @model_validator(mode="after")
    def _check(self) -> ObservabilityConfig:
        if not _RETENTION.match(self.retention):
            raise Invalid("retention", self.retention, 'a number and a unit h, d, w or y, e.g. "15d"')
        return self

    @property
    def retention_hours(self) -> int:
        number, unit = int(self.retention[:-1]), self.retention[-1]
        return number * {"h": 1, "d": 24, "w": 24 * 7, "y": 24 * 365}[unit]


class Toggle(ConfigModel):
    enabled: bool = True


class TeamQueue(ConfigModel):
    """A team's share of the cluster: a Kueue ClusterQueue (or Volcano Queue) with these quotas."""

    name: str
    cpu: int = Field(default=64, ge=1)
    memory_gib: int = Field(default=256, ge=1)
    # GPUs per accelerator key, e.g. {"t4": 8}.
    gpus: dict[str, int] = Field(default_factory=dict)
    # vpc.amazonaws.com/efa interfaces (4 per p4d pod). Kueue refuses a workload requesting a resource
    # its ClusterQueue does not cover ("resource ... unavailable in ClusterQueue").
    efa_interfaces: int = Field(default=0, ge=0)

    @model_validator(mode="after")
    def _check(self) -> TeamQueue:
        for key, count in self.gpus.items():
            if key not in CATALOG:
                raise Invalid(f"gpus.{key}", key, ", ".join(CATALOG), "unknown accelerator")
            if count < 0:
                raise Invalid(f"gpus.{key}", count, ">= 0")
        return self


class PriorityClassConfig(ConfigModel):
    """A PriorityClass jobs may name (`mlops-eks:job.priority`): the scheduler places higher values first
    and, unless preemptionPolicy is Never, evicts lower ones to make room; Kueue orders a queue by it."""

    name: str
    # Kubernetes reserves values above one billion for system-node-critical and system-cluster-critical.
    value: int = Field(ge=-2_147_483_648, le=1_000_000_000)
    preemption_policy: Literal["PreemptLowerPriority", "Never"] = "PreemptLowerPriority"

    @model_validator(mode="after")
    def _check(self) -> PriorityClassConfig:
        if self.name.startswith("system-"):
            raise Invalid("name", self.name, "a name not starting with system- (Kubernetes reserves it)")
        return self


class TrainingConfig(ConfigModel):
    # Kubeflow Trainer v2 (TrainJob + the torch-distributed ClusterTrainingRuntime; bundles JobSet).
    trainer: bool = True
    # Training Operator v1.9 (PyTorchJob, MPIJob), for jobs not yet moved to TrainJob.
    training_operator_v1: bool = False
    # KubeRay operator (RayJob, RayCluster): jobs with `operator: rayjob`, run by Ray Train.
    kuberay: bool = False
    gang_scheduler: Literal["kueue", "volcano"] | None = None
    queues: list[TeamQueue] = Field(default_factory=list)
    # PriorityClasses the platform creates; a job's `priority` must name one of them.
    priority_classes: list[PriorityClassConfig] = Field(default_factory=list)

    @model_validator(mode="after")
    def _check(self) -> TrainingConfig:
        if self.queues and self.gang_scheduler is None:
            raise Invalid("queues", [q.name for q in self.queues], "[] unless gangScheduler is set")
        _names("queues", [q.name for q in self.queues])
        _names("priorityClasses", [c.name for c in self.priority_classes])
        return self


class AddonsConfig(ConfigModel):
    karpenter: KarpenterConfig = Field(default_factory=KarpenterConfig)
    gpu: GpuSoftwareConfig = Field(default_factory=GpuSoftwareConfig)
    observability: ObservabilityConfig = Field(default_factory=ObservabilityConfig)
    kubecost: Toggle = Field(default_factory=Toggle)
    training: TrainingConfig = Field(default_factory=TrainingConfig)
    metrics_server: Toggle = Field(default_factory=Toggle)
    node_health: NodeHealthConfig = Field(default_factory=NodeHealthConfig)

    @model_validator(mode="after")
    def _check(self) -> AddonsConfig:
        if self.node_health.karpenter_node_repair and not self.karpenter.enabled:
            raise Invalid(
                "nodeHealth.karpenterNodeRepair",
                True,
                "false when karpenter.enabled is false",
                "it is a setting of the Karpenter controller",
            )
        if self.kubecost.enabled and not self.observability.enabled:
            raise Invalid(
                "kubecost.enabled",
                True,
                "false when observability.enabled is false",
                "Kubecost reads the platform's Prometheus",
            )
        if self.kubecost.enabled and self.observability.retention_hours < KUBECOST_MIN_RETENTION_HOURS:
            raise Invalid(
                "observability.retention",
                self.observability.retention,
                f'at least "{KUBECOST_MIN_RETENTION_HOURS}h" (or "3d") while kubecost.enabled',
                "Kubecost's hourly ETL reads 49 hours back from Prometheus",
            )
        return self
