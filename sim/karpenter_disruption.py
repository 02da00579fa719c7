"""What Karpenter 1.14 does to a training pod when its node goes, ported from its source for the tests.

kubernetes-sigs/karpenter v1.14.1:
- Which nodes a disruption method may take (pkg/controllers/disruption/types.go NewCandidate): a node with a
  pod that blocks eviction (`karpenter.sh/do-not-disrupt`, state/statenode.go ValidatePodsDisruptable) is a
  candidate only for the eventual class (drift.go, staticdrift.go `Class() = EventualDisruptionClass`) and
  only when its NodeClaim has a terminationGracePeriod (copied from the NodePool template); consolidation
  (emptiness.go, single/multinodeconsolidation.go) is graceful and never takes it.
- What the drain does (node/termination/terminator/terminator.go Drain, utils/pod/scheduling.go): it evicts
  through the Eviction API only pods that are IsEvictable, never a do-not-disrupt one (an evicted pod gets
  DisruptionTarget and its own grace); it waits for the rest, and deletes them without that condition at
  T = the node's termination time - the pod's grace (DeleteExpiringPods), the termination time being
  deletion + terminationGracePeriod, or now for a forceful termination. Without a termination time it waits.
- Expiry (nodeclaim/expiration/controller.go) deletes the NodeClaim at expireAfter, whatever runs on it; a
  Spot interruption (aws/karpenter-provider-aws v1.14.1 pkg/controllers/interruption/utils.go
  actionForMessage: CordonAndDrain) deletes it too; node repair and instance-health events annotate the
  termination time as now (forceful).
- When EC2 stops the instance (a Spot reclaim 2 minutes after its notice), only the kubelet's graceful node
  shutdown gives a pod SIGTERM (kubernetes pkg/kubelet/nodeshutdown: the pod's grace capped at
  shutdownGracePeriod - shutdownGracePeriodCriticalPods, and a DisruptionTarget condition); without it the
  pod dies with the instance and the pod GC marks it Failed with DisruptionTarget.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import yaml

SPOT_NOTICE_SECONDS = 120
# awslabs/amazon-eks-ami nodeadm internal/kubelet/config.go withVersionToggles: from 1.34 on.
AMI_SHUTDOWN_GRACE = {"from": "1.34", "total": 150, "critical": 30}

KEEPS_RUNNING = "keeps running; the node goes once the job ends"
EVICTED = "evicted: DisruptionTarget, SIGTERM with the pod's grace"
DELETED = "deleted at the node's grace period's end: SIGTERM, no DisruptionTarget"
SHUTDOWN = "SIGTERM from the kubelet's graceful node shutdown: DisruptionTarget"
KILLED = "killed with its instance: no SIGTERM, the pod GC marks it DisruptionTarget"
FORCED = "deleted at once (grace 1 s): no checkpoint, no DisruptionTarget"


def seconds(duration: str) -> float:
    """A Karpenter/kubelet duration ("720h", "1h30m", "90s"); "Never" is infinite."""
    if duration == "Never":
        return float("inf")
    parts = re.fullmatch(r"((\d+)h)?((\d+)m)?((\d+)s)?", duration)
    assert parts and duration, f"not a duration: {duration!r}"
    h, m, s = (int(parts.group(i) or 0) for i in (2, 4, 6))
    return h * 3600 + m * 60 + s


def is_candidate(pool_spec: dict, method_class: str, *, do_not_disrupt_pod: bool) -> bool:
    """types.go NewCandidate for a node of the pool (method_class: "graceful" or "eventual")."""
    if not do_not_disrupt_pod:
        return True
    grace = pool_spec["template"]["spec"].get("terminationGracePeriod")
    return grace is not None and method_class == "eventual"


def shutdown_grace(node_class_spec: dict, kubernetes_version: str) -> int | None:
    """Seconds the kubelet gives regular pods when the node shuts down, or None when graceful node shutdown
    is off: the NodeConfig in the node class's userData, else the AMI's default for the version."""
    for doc in yaml.safe_load_all(node_class_spec.get("userData") or ""):
        config = ((doc or {}).get("spec") or {}).get("kubelet", {}).get("config", {})
        if "shutdownGracePeriod" in config:
            critical = seconds(config.get("shutdownGracePeriodCriticalPods", "0s"))
            return int(seconds(config["shutdownGracePeriod"]) - critical)
    major, minor = (int(x) for x in kubernetes_version.split("."))
    if (major, minor) >= tuple(int(x) for x in AMI_SHUTDOWN_GRACE["from"].split(".")):
        return AMI_SHUTDOWN_GRACE["total"] - AMI_SHUTDOWN_GRACE["critical"]
    return None


@dataclass(frozen=True)
class Fate:
    outcome: str
    grace_s: float = 0  # the time the pod has between SIGTERM and SIGKILL


def training_pod_fate(
    event: str, pool_spec: dict, node_class_spec: dict, pod_grace_s: int, kubernetes_version: str
) -> Fate:
    """What happens to a running training pod (karpenter.sh/do-not-disrupt) when its node meets `event`:
    drift, expiry, spot-interruption, repair."""
    node_grace = pool_spec["template"]["spec"].get("terminationGracePeriod")
    if event == "repair":
        return Fate(FORCED, 1)
    if event == "drift" and not is_candidate(pool_spec, "eventual", do_not_disrupt_pod=True):
        return Fate(KEEPS_RUNNING)
    if event in ("drift", "expiry"):
        if node_grace is None:
            return Fate(KEEPS_RUNNING)
        return Fate(DELETED, min(pod_grace_s, seconds(node_grace)))
    if event == "spot-interruption":
        # The NodeClaim is deleted at the notice; a node grace shorter than the notice deletes the pod first.
        if node_grace is not None and seconds(node_grace) - pod_grace_s < SPOT_NOTICE_SECONDS:
            return Fate(DELETED, min(pod_grace_s, seconds(node_grace)))
        kubelet = shutdown_grace(node_class_spec, kubernetes_version)
        return Fate(SHUTDOWN, min(pod_grace_s, kubelet)) if kubelet else Fate(KILLED)
    raise ValueError(f"unknown event {event!r}")
