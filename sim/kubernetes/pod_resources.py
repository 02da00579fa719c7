"""What a pod asks for, counted as Kubernetes 1.35 counts it for the scheduler and for a ResourceQuota.

- pod_requests / pod_limits: k8s.io/component-helpers resource/helpers.go PodRequests and PodLimits (the
  KEP-753 formula): the containers' sum; each init container adds to the sidecars (restartPolicy: Always)
  started before it, the pod takes the larger of the two per resource; sidecars run beside the containers,
  so they add to the sum; pod-level `resources` (PodLevelResources, on by default since 1.34) replace the
  containers' cpu, memory and hugepages; `overhead` (a RuntimeClass's) is added, to non-zero limits only.
- quota_usage / missing_quota_resources: kubernetes pkg/quota/v1/evaluator/core/pods.go PodUsageFunc and
  podEvaluator.Constraints: what the pod adds to each tracked name (bare cpu/memory/ephemeral-storage and
  hugepages count requests; extended resources count only as requests.X; a terminal pod counts only as
  an object), and which tracked cpu/memory names a container leaves unstated (the API server refuses it).
Quantities are Decimals (infra.contract.quantity). A pod's resize status is not modelled: the pods judged
here have not run.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from decimal import Decimal
from typing import Any

from infra.contract import quantity

# resource/helpers.go supportedPodLevelResources, plus every hugepages-<size>.
_POD_LEVEL = ("cpu", "memory")
_HUGEPAGES = "hugepages-"
# pods.go: the resources a quota counts by their bare name as well as requests./limits.
_COMPUTE = ("cpu", "memory", "ephemeral-storage")
_DEVICE_CLASS = "deviceclass.resource.kubernetes.io/"


def _pod_level(name: str) -> bool:
    return name in _POD_LEVEL or name.startswith(_HUGEPAGES)


def _resources(container: Mapping[str, Any], kind: str) -> dict[str, Decimal]:
    return {k: quantity(v) for k, v in ((container.get("resources") or {}).get(kind) or {}).items()}


def _add(total: dict[str, Decimal], more: Mapping[str, Decimal]) -> None:
    for name, amount in more.items():
        total[name] = total.get(name, Decimal(0)) + amount


def _aggregate(spec: Mapping[str, Any], kind: str) -> dict[str, Decimal]:
    """AggregateContainerRequests / AggregateContainerLimits."""
    total: dict[str, Decimal] = {}
    for container in spec.get("containers") or []:
        _add(total, _resources(container, kind))
    sidecars: dict[str, Decimal] = {}
    init_peak: dict[str, Decimal] = {}
    for container in spec.get("initContainers") or []:
        own = _resources(container, kind)
        if container.get("restartPolicy") == "Always":
            _add(total, own)
            _add(sidecars, own)
            use = dict(sidecars)
        else:
            use = dict(own)
            _add(use, sidecars)
        for name, amount in use.items():
            init_peak[name] = max(init_peak.get(name, amount), amount)
    for name, amount in init_peak.items():
        total[name] = max(total.get(name, amount), amount)
    return total


def pod_requests(spec: Mapping[str, Any], *, overhead: bool = True) -> dict[str, Decimal]:
    """PodRequests (overhead=False: PodResourcesOptions.ExcludeOverhead)."""
    total = _aggregate(spec, "requests")
    for name, amount in _resources(spec, "requests").items():
        if _pod_level(name):
            total[name] = amount
    if overhead:
        _add(total, {k: quantity(v) for k, v in (spec.get("overhead") or {}).items()})
    return total


def pod_limits(spec: Mapping[str, Any], *, overhead: bool = True) -> dict[str, Decimal]:
    """PodLimits: overhead is added only to limits that are set and non-zero."""
    total = _aggregate(spec, "limits")
    for name, amount in _resources(spec, "limits").items():
        if _pod_level(name):
            total[name] = amount
    if overhead:
        for name, amount in (spec.get("overhead") or {}).items():
            if total.get(name):
                total[name] += quantity(amount)
    return total


def _extended(name: str) -> bool:
    """schedutil.IsDRAExtendedResourceName: a domain-prefixed name outside kubernetes.io (or a DRA device
    class's implicit one); a quota counts it only as requests.<name>."""
    if name.startswith(_DEVICE_CLASS):
        return True
    return "/" in name and "kubernetes.io/" not in name and not name.startswith("requests.")


def _usage(requests: Mapping[str, Decimal], limits: Mapping[str, Decimal]) -> dict[str, Decimal]:
    """podComputeUsageHelper: the names a quota counts for these requests and limits."""
    usage = {"pods": Decimal(1)}
    for name in _COMPUTE:
        if name in requests:
            usage[name] = usage[f"requests.{name}"] = requests[name]
        if name in limits:
            usage[f"limits.{name}"] = limits[name]
    for name, amount in requests.items():
        if name.startswith(_HUGEPAGES):
            usage[name] = usage[f"requests.{name}"] = amount
        if _extended(name):
            usage[f"requests.{name}"] = amount
    return usage


def quota_usage(spec: Mapping[str, Any], phase: str = "Pending") -> dict[str, Decimal]:
    """PodUsageFunc: what one pod adds to each name a ResourceQuota may track. count/pods always; the
    rest only while the pod is not terminal (QuotaV1Pod)."""
    usage = {"count/pods": Decimal(1)}
    if phase in ("Succeeded", "Failed"):
        return usage
    return {**usage, **_usage(pod_requests(spec), pod_limits(spec))}


# pods.go validationSet: a quota on one of these makes every container state it (the only names it does).
_MUST_STATE = ("cpu", "limits.cpu", "limits.memory", "memory", "requests.cpu", "requests.memory")


def _pod_level_set(spec: Mapping[str, Any]) -> bool:
    """IsPodLevelResourcesSet: pod-level requests or limits of a supported resource."""
    resources = spec.get("resources") or {}
    return any(_pod_level(n) for kind in ("requests", "limits") for n in resources.get(kind) or {})


def missing_quota_resources(spec: Mapping[str, Any], tracked: Iterable[str]) -> str | None:
    """podEvaluator.Constraints: None when every container (init containers included) states each of the
    quota's tracked cpu/memory names, else upstream's error, e.g. "must specify cpu for: bar,foo; memory
    for: bar,foo" (the API server then refuses the pod). Pod-level resources waive the check."""
    required = set(tracked) & set(_MUST_STATE)
    if not required or _pod_level_set(spec):
        return None
    missing: dict[str, set[str]] = {}
    for container in [*(spec.get("containers") or []), *(spec.get("initContainers") or [])]:
        stated = _usage(_resources(container, "requests"), _resources(container, "limits"))
        for name in required - set(stated):
            missing.setdefault(name, set()).add(container["name"])
    if not missing:
        return None
    return "must specify " + "; ".join(f"{n} for: {','.join(sorted(missing[n]))}" for n in sorted(missing))
