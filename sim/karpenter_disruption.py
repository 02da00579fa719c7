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
  do-not-disrupt holds while "true", or for a duration since the pod started (IsDoNotDisruptActive).
- Expiry (nodeclaim/expiration/controller.go) deletes the NodeClaim at expireAfter, whatever runs on it; a
  Spot interruption (aws/karpenter-provider-aws v1.14.1 pkg/controllers/interruption/utils.go
  actionForMessage: CordonAndDrain) deletes it too; node repair and instance-health events annotate the
  termination time as now (forceful).
- The end of a Capacity Block goes the same way (provider controllers/capacityreservation/expiration
  deletes a block's NodeClaims in its last 40 minutes; EC2 reclaims from 30 minutes before the end), and so
  does the capacity-reservation interruption warning (actionForMessage: CordonAndDrain, as for Spot).
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
# Karpenter deletes a block's NodeClaims 40 minutes before its end; EC2 reclaims from 30 minutes before.
CAPACITY_BLOCK_NOTICE_SECONDS = (40 - 30) * 60
# Between the NodeClaim's deletion and EC2 stopping the instance, per event. The capacity-reservation
# interruption warning's lead time is EC2's; it is taken to be the Spot notice's here.
NOTICE_SECONDS = {
    "spot-interruption": SPOT_NOTICE_SECONDS,
    "capacity-reservation-interruption": SPOT_NOTICE_SECONDS,
    "capacity-block-end": CAPACITY_BLOCK_NOTICE_SECONDS,
}
# awslabs/amazon-eks-ami nodeadm internal/kubelet/config.go withVersionToggles: from 1.34 on.
AMI_SHUTDOWN_FROM = (1, 34)
AMI_SHUTDOWN_GRACE = {"total": 150, "critical": 30}

KEEPS_RUNNING = "keeps running; the node goes once the job ends"
EVICTED = "evicted: DisruptionTarget, SIGTERM with the pod's grace"
DELETED = "deleted at the node's grace period's end: SIGTERM, no DisruptionTarget"
SHUTDOWN = "SIGTERM from the kubelet's graceful node shutdown: DisruptionTarget"
KILLED = "killed with its instance: no SIGTERM, the pod GC marks it DisruptionTarget"
FORCED = "deleted at once (grace 1 s): no checkpoint, no DisruptionTarget"


_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_DURATION = re.compile(r"(?:(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:ns|us|µs|μs|ms|s|m|h))+")
_PART = re.compile(r"([0-9]*\.?[0-9]*)(ns|us|µs|μs|ms|s|m|h)")


def go_duration(text: str) -> float:
    """Seconds in a Go duration (time.ParseDuration: "1h30m", "-5m", "1.5h", "300ms", "0"), as Karpenter
    and the kubelet read them; ValueError names the text otherwise."""
    sign, body = (-1.0, text[1:]) if text[:1] == "-" else (1.0, text.removeprefix("+"))
    if body == "0":
        return 0.0
    if not _DURATION.fullmatch(body):
        raise ValueError(f"time: invalid duration {text!r}")
    return sign * sum(float(n) * _UNITS[unit] for n, unit in _PART.findall(body))


def seconds(duration: str) -> float:
    """A Karpenter/kubelet duration ("720h", "1h30m", "90s"); "Never" is infinite."""
    return float("inf") if duration == "Never" else go_duration(duration)


DO_NOT_DISRUPT = "karpenter.sh/do-not-disrupt"


def do_not_disrupt_active(annotations: dict[str, str], running_s: float | None) -> bool:
    """utils/pod/scheduling.go IsDoNotDisruptActive: "true" protects for good; a positive duration
    protects until the pod has run that long (`running_s`: since its status.startTime; None: unknown,
    which protects); any other value is ignored (Karpenter emits an event)."""
    value = annotations.get(DO_NOT_DISRUPT)
    if value is None:
        return False
    if value == "true":
        return True
    try:
        protected = go_duration(value)
    except ValueError:
        return False
    if protected <= 0:
        return False
    return running_s is None or running_s < protected


def is_disruptable(
    phase: str, annotations: dict[str, str], running_s: float | None, *, terminating: bool = False
) -> bool:
    """IsDisruptable: a pod that is not active (terminal, or being deleted) never blocks disruption;
    an active one does while do-not-disrupt is active."""
    active = phase not in ("Succeeded", "Failed") and not terminating
    return not active or not do_not_disrupt_active(annotations, running_s)


def expiring_pod_grace(pod_grace_s: float | None, node_termination_in_s: float | None) -> int | None:
    """terminator.go DeleteExpiringPods for one pod: None while it may wait (no node termination time, or
    its whole grace still fits before it); else the grace it is deleted with now, what is left of the
    node's, at least 1 s (never a force delete)."""
    if pod_grace_s is None or node_termination_in_s is None:
        return None
    if node_termination_in_s - pod_grace_s >= 0:
        return None  # now is not after the node's termination time minus the pod's grace
    return max(int(node_termination_in_s), 1)


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
    if (major, minor) >= AMI_SHUTDOWN_FROM:
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
    drift, expiry, repair, or a reclaim: spot-interruption, capacity-reservation-interruption,
    capacity-block-end."""
    node_grace = pool_spec["template"]["spec"].get("terminationGracePeriod")
    if event == "repair":
        return Fate(FORCED, 1)
    if event == "drift" and not is_candidate(pool_spec, "eventual", do_not_disrupt_pod=True):
        return Fate(KEEPS_RUNNING)
    if event in ("drift", "expiry"):
        if node_grace is None:
            return Fate(KEEPS_RUNNING)
        return Fate(DELETED, min(pod_grace_s, seconds(node_grace)))
    if event in NOTICE_SECONDS:
        # The NodeClaim is deleted at the notice; a node grace shorter than the notice deletes the pod first.
        if node_grace is not None and seconds(node_grace) - pod_grace_s < NOTICE_SECONDS[event]:
            return Fate(DELETED, min(pod_grace_s, seconds(node_grace)))
        kubelet = shutdown_grace(node_class_spec, kubernetes_version)
        return Fate(SHUTDOWN, min(pod_grace_s, kubelet)) if kubelet else Fate(KILLED)
    raise ValueError(f"unknown event {event!r}")
