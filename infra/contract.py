"""The capacity contract: what a platform stack exports about its nodes, device plugins and queues.

Pure data (pydantic, no Pulumi import). `infra.program` builds these models from the config and exports
them (`accelerator_pools`, `device_plugins`, `queue_quotas`); `workloads` reads them back from a
StackReference or an example file to place jobs and simulate scheduling; `policy` reads the same
spellings. A pool's `max_nodes` is what really can run: a Karpenter pool holds at most
floor(gpu_limit / gpus_per_node) nodes, a managed node group exactly its fixed size (nothing scales
managed groups: Karpenter ignores them and no cluster-autoscaler is installed).

It also holds the conventions both sides rely on without exchanging them: the labels pods and nodes are
scheduled and monitored by, where a job's files live in the platform bucket, the user the images run as,
and the config key that makes a stack a workload stack. `trainer` runs alone in the job's image and never
imports this module.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from decimal import ROUND_UP, Decimal, localcontext
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict

from infra.accelerators import ACCELERATOR_LABEL as ACCELERATOR_LABEL  # the catalog's nodes carry it
from infra.accelerators import CATALOG

# Every training pod carries it (the job's name): the PodMonitor, DCGM's metrics, the Grafana dashboards
# and `kubectl logs -l` select a job's pods by it. Pods also carry ACCELERATOR_LABEL.
JOB_LABEL = "mlops-eks.io/job"
# On the system node group's nodes.
NODE_ROLE_LABEL = "mlops-eks.io/node-role"
# A job reads and writes only under jobs/<name>/ of the platform bucket (its IAM role's scope); the
# bucket expires old object versions under JOBS_PREFIX only.
JOBS_PREFIX = "jobs/"
# The images' non-root user and group (docker/*/Dockerfile): pods run as it, volumes are writable by it.
RUN_AS_UID = 1000
# A training pod's terminationGracePeriodSeconds: the Spot notice is 2 minutes before the reclaim; the trainer
# checkpoints on SIGTERM. Karpenter's GPU nodes give pods this long when they shut down (node_pools.py).
TRAINING_POD_GRACE_SECONDS = 180
# The stack config key (in the project's namespace) that names a workload stack's platform stack.
PLATFORM_STACK_KEY = "platformStack"

# Karpenter's spelling (karpenter.sh/capacity-type); EKS managed node groups spell it SPOT/ON_DEMAND.
CapacityType = Literal["spot", "on-demand"]
# A GPU pool may also draw from capacity reservations (targeted ODCRs, Capacity Blocks for ML): Karpenter
# 1.14 labels such nodes `reserved` (ReservedCapacity gate, beta and on by default); an EKS managed group on
# a Capacity Block is `CAPACITY_BLOCK`.
GpuCapacityType = Literal["spot", "on-demand", "reserved"]
EksCapacityType = Literal["SPOT", "ON_DEMAND", "CAPACITY_BLOCK"]
EKS_CAPACITY_TYPE: Mapping[str, EksCapacityType] = {
    "spot": "SPOT",
    "on-demand": "ON_DEMAND",
    "reserved": "CAPACITY_BLOCK",
}
Source = Literal["karpenter", "managed"]
Effect = Literal["NoSchedule", "NoExecute", "PreferNoSchedule"]
EFA_RESOURCE = "vpc.amazonaws.com/efa"
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
CAPACITY_TYPE_LABEL = "karpenter.sh/capacity-type"


def job_prefix(job: str) -> str:
    """The job's own prefix in the platform bucket ("jobs/<job>", no trailing slash)."""
    return f"{JOBS_PREFIX}{job}"


class _Taint(Protocol):
    """A taint: the catalog's (`infra.accelerators.Taint`) or an exported pool's (`PoolTaint`)."""

    @property
    def key(self) -> str: ...
    @property
    def value(self) -> str: ...
    @property
    def effect(self) -> str: ...


def taint_spec(taint: _Taint) -> dict[str, str]:
    """`taint` as Kubernetes spells it (a node's or a Karpenter NodePool's `taints`)."""
    return {"key": taint.key, "value": taint.value, "effect": taint.effect}


def toleration_spec(taint: _Taint, *, any_value: bool = False) -> dict[str, str]:
    """The toleration of `taint` as Kubernetes spells it: of its value, or of any value (`Exists`)."""
    if any_value:
        return {"key": taint.key, "operator": "Exists", "effect": taint.effect}
    return {"key": taint.key, "operator": "Equal", "value": taint.value, "effect": taint.effect}


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class PoolTaint(_Frozen):
    key: str
    value: str = ""
    effect: Effect


class Toleration(_Frozen):
    key: str = ""
    operator: Literal["Exists", "Equal"] = "Equal"
    value: str = ""
    effect: Literal["", "NoSchedule", "NoExecute", "PreferNoSchedule"] = ""


class PoolReservation(_Frozen):
    """The capacity reservations a reserved pool draws from, as its config selects them: by id or by tags
    (Karpenter's capacityReservationSelectorTerms), all in one AZ."""

    ids: tuple[str, ...] = ()
    tags: dict[str, str] = {}
    availability_zone: str

    def selects(self, reservation_id: str, tags: Mapping[str, str], zone: str) -> bool:
        """Whether a reservation with this id, these tags and AZ is one of the pool's (a tag value "*"
        matches any value, as Karpenter's selector reads it)."""
        if zone != self.availability_zone:
            return False
        if reservation_id in self.ids:
            return True
        return bool(self.tags) and all(k in tags and v in ("*", tags[k]) for k, v in self.tags.items())


class AcceleratorPool(_Frozen):
    """One GPU node source as the platform exports it."""

    source: Source
    accelerator: str
    instance_types: tuple[str, ...]
    gpus_per_node: int
    resource_name: str
    node_labels: dict[str, str]
    taints: tuple[PoolTaint, ...]
    # Taints a new node starts with until the startup GPU check removes them (infra/addons/gpu_node_check.py):
    # training pods never tolerate them, and the pool counts as schedulable once its nodes are checked.
    startup_taints: tuple[PoolTaint, ...] = ()
    capacity_types: tuple[GpuCapacityType, ...]
    # Set when capacity_types include "reserved": the reservations the pool launches into.
    reservation: PoolReservation | None = None
    # EFA interfaces each node gets (0: none). Karpenter attaches them when a pod requests
    # vpc.amazonaws.com/efa; a managed group's launch template always does.
    efa_interfaces: int = 0
    # Karpenter: NodePool spec.limits for resource_name. Managed: None.
    gpu_limit: int | None = None
    # Managed: the fixed node count. Karpenter: None.
    size: int | None = None

    @property
    def efa(self) -> bool:
        return self.efa_interfaces > 0

    @property
    def max_nodes(self) -> int:
        """How many nodes this source can ever run at once."""
        if self.source == "karpenter":
            return (self.gpu_limit or 0) // self.gpus_per_node
        return self.size or 0

    def node_labels_for(self, instance_type: str, capacity_type: str) -> dict[str, str]:
        """The labels a node of this pool carries (well-known ones included), for selector matching."""
        return {
            **self.node_labels,
            INSTANCE_TYPE_LABEL: instance_type,
            CAPACITY_TYPE_LABEL: capacity_type,
            "kubernetes.io/arch": "amd64",
            "kubernetes.io/os": "linux",
        }


class DevicePlugin(_Frozen):
    """A device-plugin DaemonSet: on which nodes it runs and which extended resource it advertises."""

    name: str
    resource: str
    node_selector: dict[str, str] = {}
    # Required node affinity as `{label: allowed values}` (the terms ANDed, as the chart renders them).
    node_affinity: dict[str, tuple[str, ...]] = {}
    tolerations: tuple[Toleration, ...] = ()


class QueueQuota(_Frozen):
    """A ClusterQueue (Kueue) or Queue (Volcano): the resources it covers and their nominal quota, as
    Kubernetes quantities. No cohort: nothing can be borrowed. Kueue gives each accelerator its own
    ResourceFlavor, so its GPU quota is per accelerator (`gpus`); Volcano's is one total in `nominal`."""

    name: str
    scheduler: Literal["kueue", "volcano"]
    nominal: dict[str, str]
    gpus: dict[str, int] = {}

    def quota_for(self, resource: str, accelerator: str) -> str | None:
        """The nominal quota for `resource` on nodes of `accelerator`; None when not covered."""
        if self.scheduler == "kueue" and resource == _gpu_resource(accelerator):
            return str(self.gpus[accelerator]) if accelerator in self.gpus else None
        return self.nominal.get(resource)


def _gpu_resource(accelerator: str) -> str:
    return CATALOG[accelerator].resource_name


# A Kubernetes quantity as k8s.io/apimachinery pkg/api/resource quantity.go ParseQuantity reads it: a sign,
# digits with an optional fraction, then a suffix: binary (Ki..Ei), decimal (n, u, m, k, M..E) or a decimal
# exponent (e3, E-6). No whitespace. tests/sim/test_scheduling_upstream.py runs upstream's table on it.
_QUANTITY = re.compile(r"([+-]?)([0-9]*)(?:\.([0-9]*))?([eEinumkKMGTP]*[+-]?[0-9]*)")
_DECIMAL_SUFFIX = {"": 0, "n": -9, "u": -6, "m": -3, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_BINARY_SUFFIX = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_EXPONENT = re.compile(r"[eE]([+-]?[0-9]+)")
_NANO = Decimal("1e-9")
_MAX_BINARY = Decimal(2**63 - 1)  # quantity.go maxAllowed: a binary quantity saturates at int64's maximum


def quantity(value: str | int | float) -> Decimal:
    """A Kubernetes resource quantity ("500m", "864Gi", "8", "1e3") as a number, rounded up to the
    nanounit as the API server stores it."""
    text = str(value)
    match = _QUANTITY.fullmatch(text) if text else None
    if match is None:
        raise ValueError(
            f"not a Kubernetes quantity: {value!r} (a number, then optionally Ki..Ei, n, u, m, k, M..E "
            "or an exponent such as e3; no spaces)"
        )
    sign, whole, fraction, suffix = match.groups()
    with localcontext() as ctx:
        ctx.prec = 200  # exact: the largest suffix and int64 digits need far fewer
        number = Decimal(f"{whole or 0}.{fraction}" if fraction else whole or "0")
        if suffix in _BINARY_SUFFIX:
            amount = min(number * 2 ** _BINARY_SUFFIX[suffix], _MAX_BINARY)
        elif suffix in _DECIMAL_SUFFIX:
            amount = number.scaleb(_DECIMAL_SUFFIX[suffix])
        elif exponent := _EXPONENT.fullmatch(suffix):
            amount = number.scaleb(int(exponent.group(1)))
        else:
            raise ValueError(f"not a Kubernetes quantity: {value!r}: unknown suffix {suffix!r}")
        if isinstance(amount.as_tuple().exponent, int) and amount.as_tuple().exponent < -9:
            # ParseQuantity rounds a non-zero amount up to the smallest it can hold: asked for some, get some.
            amount = amount.quantize(_NANO, rounding=ROUND_UP)
    return -amount if sign == "-" else amount


# Kueue ResourceFlavors the platform creates (infra/addons/training.py kueue_objects): CPU and EFA flavors
# carry nothing, a GPU flavor pins admitted pods to the accelerator's nodes. Kueue writes an admitted job's
# flavors into its pods (kueue pkg/podset/podset.go FromAssignment: nodeLabels as nodeSelector, tolerations).
KUEUE_CPU_FLAVOR = "cpu"
KUEUE_EFA_FLAVOR = "efa"
KUEUE_GPU_FLAVOR_PREFIX = "gpu-"
# Kueue manages the jobs of a namespace with this label only (its managedJobsNamespaceSelector): its Fail
# webhooks then never stand between another namespace's jobs and their controllers.
KUEUE_NAMESPACE_LABEL = "mlops-eks.io/kueue"


def kueue_gpu_flavor(accelerator: str) -> tuple[str, dict[str, Any]]:
    """(name, spec) of the ResourceFlavor of `accelerator`'s GPUs."""
    acc = CATALOG[accelerator]
    spec = {"nodeLabels": dict(acc.node_labels), "tolerations": [toleration_spec(acc.taint)]}
    return f"{KUEUE_GPU_FLAVOR_PREFIX}{accelerator}", spec


# The platform's namespaces (each add-on's NAMESPACE; a test keeps them equal) -> (the Pod Security level it
# enforces, why not stricter). infra/addons/namespaces.py labels them so; the policy pack checks namespaces
# against it in every preview (policy/k8s_access.py): it lives here, away from the Kubernetes SDK.
POD_SECURITY: dict[str, tuple[str, str]] = {
    "monitoring": (
        "privileged",
        "prometheus-node-exporter reads the host's /proc, /sys and / (hostPath) from the host's network "
        "and PID namespaces: that is what node metrics are",
    ),
    "gpu-system": (
        "privileged",
        "device plugins register with the kubelet through its socket directory (hostPath "
        "/var/lib/kubelet/device-plugins); the NVIDIA MPS control daemon runs privileged in the host's PID "
        "namespace; DCGM reads the kubelet's pod-resources socket (hostPath) and needs SYS_ADMIN for its "
        "profiling metrics",
    ),
    "kubecost": ("restricted", ""),
    "kubeflow-system": ("restricted", ""),
    "kuberay-system": ("restricted", ""),
    "kueue-system": ("restricted", ""),
    "volcano-system": (
        "baseline",
        "volcano's admission, controller and scheduler containers add Linux capabilities (chart defaults) "
        "beyond the NET_BIND_SERVICE restricted allows",
    ),
    "kubeflow": (
        "baseline",
        "training-operator's Deployment sets neither runAsNonRoot, a seccomp profile nor drops capabilities "
        "(kubeflow/trainer manifests/base/deployment.yaml at the pinned commit)",
    ),
}

# Namespaces no job may use: Kubernetes' own and every one a platform add-on installs into. A job there
# would put its ResourceQuota, LocalQueue and default-deny NetworkPolicy on the platform's own pods.
KUBERNETES_NAMESPACES = frozenset({"default", "kube-system", "kube-public", "kube-node-lease"})
PLATFORM_NAMESPACES = frozenset(POD_SECURITY)
