"""When Karpenter may take a node away, read from the NodePools the program registers, with the defaults
Karpenter's NodePool CRD applies to what the program leaves out (upstream/crds).

A training job loses every step since its last checkpoint and restarts its whole gang when one of its
nodes goes, so GPU nodes are removed only when empty, one at a time, never for drift in working hours,
and with time for the SIGTERM checkpoint; every node still expires, so new AMIs reach it.
"""

from __future__ import annotations

import math
import re
from datetime import datetime, timedelta
from functools import cache

import yaml

from policy.upstream import CRDS
from workloads.pod import TERMINATION_GRACE_SECONDS

NODE_POOL = "kubernetes:karpenter.sh/v1:NodePool"
CRD = CRDS / "karpenter.sh_nodepools.yaml"
MONDAY = datetime(2026, 11, 23)  # a Monday; Karpenter reads budget schedules in UTC
WORKING_HOURS = range(8, 18)


@cache
def crd_default(*path: str):
    """The default Karpenter's NodePool CRD sets at `path` (property names from the object's root)."""
    schema = yaml.safe_load(CRD.read_text())["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    for key in path:
        schema = schema["properties"][key]
    return schema["default"]


def node_pools(stack) -> dict[str, dict]:
    pools = {r.inputs["metadata"]["name"]: r.inputs["spec"] for r in stack.of_type(NODE_POOL)}
    gpu = {f"gpu-{p.name}" for p in stack.config.gpu_pools if p.source == "karpenter"}
    assert gpu and gpu <= set(pools), sorted(pools)
    return pools


def gpu_pools(stack) -> dict[str, dict]:
    return {name: spec for name, spec in node_pools(stack).items() if name.startswith("gpu-")}


def seconds(duration: str) -> float:
    """A Karpenter duration ("720h", "1h30m", "90s"); "Never" is infinite."""
    if duration == "Never":
        return float("inf")
    parts = re.fullmatch(r"((\d+)h)?((\d+)m)?((\d+)s)?", duration)
    assert parts and duration, f"not a duration: {duration!r}"
    h, m, s = (int(parts.group(i) or 0) for i in (2, 4, 6))
    return h * 3600 + m * 60 + s


DAYS = {"sun": 0, "mon": 1, "tue": 2, "wed": 3, "thu": 4, "fri": 5, "sat": 6}


def _cron_field(field: str, value: int, first: int = 0, names: dict[str, int] | None = None) -> bool:
    for part in field.split(","):
        for name, number in (names or {}).items():
            part = part.replace(name, str(number))
        step = 1
        if "/" in part:
            part, step_text = part.split("/")
            step = int(step_text)
        if part == "*":
            low, high = first, 10**6
        elif "-" in part:
            low, high = (int(x) for x in part.split("-"))
        else:
            low = high = int(part)
        if low <= value <= high and (value - low) % step == 0:
            return True
    return False


def cron_fires(schedule: str, moment: datetime) -> bool:
    """Whether a five-field cron schedule (UTC) fires at `moment`'s minute."""
    minute, hour, dom, month, dow = schedule.split()
    weekday = (moment.weekday() + 1) % 7  # cron: Sunday is 0 (or 7)
    dom_ok = _cron_field(dom, moment.day, first=1)
    dow_ok = _cron_field(dow, weekday, names=DAYS) or (weekday == 0 and _cron_field(dow, 7, names=DAYS))
    # Both day fields restricted: either matching suffices (cron's rule).
    day_ok = dom_ok or dow_ok if "*" not in (dom, dow) else dom_ok and dow_ok
    return (
        _cron_field(minute, moment.minute)
        and _cron_field(hour, moment.hour)
        and _cron_field(month, moment.month, first=1)
        and day_ok
    )


def allowed_disruptions(spec: dict, reason: str, moment: datetime, nodes: int) -> int:
    """How many of `nodes` Karpenter may disrupt for `reason` at `moment`: the most restrictive budget
    active then (no schedule: always; else from a firing of its schedule for its duration) that applies
    to the reason (no reasons: every reason)."""
    budgets = spec.get("disruption", {}).get("budgets") or crd_default("spec", "disruption", "budgets")
    allowed = nodes
    for budget in budgets:
        if reason not in budget.get("reasons", [reason]):
            continue
        if "schedule" in budget:
            minutes = int(seconds(budget["duration"]) // 60)
            if not any(cron_fires(budget["schedule"], moment - timedelta(minutes=m)) for m in range(minutes)):
                continue
        value = budget["nodes"]
        limit = math.ceil(nodes * int(value[:-1]) / 100) if value.endswith("%") else int(value)
        allowed = min(allowed, limit)
    return allowed


def test_busy_gpu_nodes_are_never_consolidated_and_cpu_nodes_are_packed(stack):
    default = crd_default("spec", "disruption", "consolidationPolicy")
    for name, spec in node_pools(stack).items():
        policy = spec["disruption"].get("consolidationPolicy", default)
        if name.startswith("gpu-"):
            # WhenEmptyOrUnderutilized would evict a running job to move it onto a cheaper node.
            assert policy == "WhenEmpty", name
        else:
            assert policy == "WhenEmptyOrUnderutilized", name


def test_empty_gpu_nodes_go_after_the_pools_configured_wait(stack):
    pools = gpu_pools(stack)
    for pool in (p for p in stack.config.gpu_pools if p.source == "karpenter"):
        after = pools[f"gpu-{pool.name}"]["disruption"]["consolidateAfter"]
        assert after == pool.consolidate_after and seconds(after) < float("inf")


def test_drift_never_replaces_gpu_nodes_in_working_hours_and_one_at_a_time_outside_them(stack):
    for name, spec in gpu_pools(stack).items():
        for hour in range(7 * 24):
            moment = MONDAY + timedelta(hours=hour)
            working = moment.weekday() < 5 and moment.hour in WORKING_HOURS
            drift = allowed_disruptions(spec, "Drifted", moment, nodes=10)
            assert drift == (0 if working else 1), f"{name}: {drift} drifted nodes at {moment:%a %H:%M}"
            # Empty nodes still go in working hours, one at a time.
            assert allowed_disruptions(spec, "Empty", moment, nodes=10) == 1, f"{name} at {moment:%a %H:%M}"


def test_the_budget_evaluation_sees_a_window_and_its_end():
    spec = {"disruption": {"budgets": [{"nodes": "0", "schedule": "30 9 * * sat", "duration": "1h"}]}}
    saturday = MONDAY + timedelta(days=5)
    assert allowed_disruptions(spec, "Drifted", saturday.replace(hour=9, minute=29), 4) == 4
    assert allowed_disruptions(spec, "Drifted", saturday.replace(hour=10, minute=29), 4) == 0
    assert allowed_disruptions(spec, "Drifted", saturday.replace(hour=10, minute=30), 4) == 4
    assert allowed_disruptions(spec, "Drifted", saturday.replace(hour=10) - timedelta(days=1), 4) == 4


def test_every_node_expires_within_thirty_days(stack):
    # Set explicitly: the CRD's default (720h) is the bound itself and may change with Karpenter.
    for name, spec in node_pools(stack).items():
        expire = spec["template"]["spec"]["expireAfter"]
        assert seconds(expire) <= 30 * 24 * 3600, f"{name}: expireAfter {expire}"


def test_gpu_nodes_drain_with_time_for_the_training_pods_checkpoint(stack):
    # A training pod is do-not-disrupt: without a node termination grace period a drifted or expired node
    # would wait for it forever; with one shorter than the pod's own grace, the checkpoint is cut short.
    for name, spec in gpu_pools(stack).items():
        grace = spec["template"]["spec"].get("terminationGracePeriod")
        assert grace is not None, f"{name} drains forever behind a do-not-disrupt pod"
        assert TERMINATION_GRACE_SECONDS < seconds(grace) <= 24 * 3600, f"{name}: {grace}"
