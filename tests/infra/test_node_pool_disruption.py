"""When Karpenter may take a node away, read from the NodePools the program registers, with the defaults
Karpenter's NodePool CRD (upstream/crds) applies to what the program leaves out, and what that does to a
running training pod (sim/karpenter_disruption.py, ported from Karpenter's source).

A training job loses every step since its last checkpoint and restarts its whole gang when one of its
nodes goes, so GPU nodes are removed only when empty, one at a time; drift and expiry wait until the job
ends; every node still expires, so new AMIs reach it.
"""

from __future__ import annotations

import math
from functools import cache

import pytest
import yaml

from infra.addons.karpenter.node_pools import CRITICAL_POD_SHUTDOWN_SECONDS
from sim.contracts import CRDS
from sim.karpenter_disruption import (
    KEEPS_RUNNING,
    SHUTDOWN,
    is_candidate,
    seconds,
    shutdown_grace,
    training_pod_fate,
)
from workloads.pod import TERMINATION_GRACE_SECONDS

NODE_POOL = "kubernetes:karpenter.sh/v1:NodePool"
NODE_CLASS = "kubernetes:karpenter.k8s.aws/v1:EC2NodeClass"
CRD = CRDS / "karpenter.sh_nodepools.yaml"


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


def node_class(stack, pool_spec: dict) -> dict:
    name = pool_spec["template"]["spec"]["nodeClassRef"]["name"]
    (spec,) = [r.inputs["spec"] for r in stack.of_type(NODE_CLASS) if r.inputs["metadata"]["name"] == name]
    return spec


def allowed_disruptions(spec: dict, reason: str, nodes: int) -> int:
    """How many of `nodes` Karpenter may disrupt for `reason`: the most restrictive budget that applies to
    the reason (no reasons: every reason). Scheduled budgets are not used by the platform."""
    budgets = spec.get("disruption", {}).get("budgets") or crd_default("spec", "disruption", "budgets")
    assert not any("schedule" in b for b in budgets), "a scheduled budget: evaluate its cron window"
    allowed = nodes
    for budget in budgets:
        if reason not in budget.get("reasons", [reason]):
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


def test_one_gpu_node_at_a_time_for_any_reason(stack):
    for name, spec in gpu_pools(stack).items():
        for reason in ("Drifted", "Empty", "Underutilized"):
            assert allowed_disruptions(spec, reason, nodes=10) == 1, f"{name}: {reason}"


def test_drift_never_takes_a_gpu_node_under_a_running_training_pod(stack):
    """Drift is eventual disruption: with a terminationGracePeriod on the pool, a node under a do-not-disrupt
    training pod would be a candidate and its pods deleted at the grace period's end (no DisruptionTarget:
    the restart counts against the job's budget). Without one, it waits for the job."""
    for name, spec in gpu_pools(stack).items():
        assert "terminationGracePeriod" not in spec["template"]["spec"], name
        assert not is_candidate(spec, "eventual", do_not_disrupt_pod=True), name
        assert is_candidate(spec, "eventual", do_not_disrupt_pod=False), name  # an idle node is replaced
        for event in ("drift", "expiry"):
            fate = training_pod_fate(event, spec, node_class(stack, spec), TERMINATION_GRACE_SECONDS, "1.35")
            assert fate.outcome == KEEPS_RUNNING, (name, event)


def test_the_karpenter_model_tells_a_terminating_pool_apart():
    with_grace = {"template": {"spec": {"terminationGracePeriod": "1h"}}}
    assert is_candidate(with_grace, "eventual", do_not_disrupt_pod=True)
    assert not is_candidate(with_grace, "graceful", do_not_disrupt_pod=True)
    fate = training_pod_fate("drift", with_grace, {}, TERMINATION_GRACE_SECONDS, "1.35")
    assert fate.outcome.startswith("deleted at the node's grace period's end") and fate.grace_s == 180


@pytest.mark.parametrize("version", ["1.33", "1.34", "1.35"])
def test_a_spot_reclaim_gives_training_pods_their_full_grace_on_every_version(stack, version):
    """Karpenter never evicts a do-not-disrupt pod, so a Spot reclaim reaches it as the kubelet's graceful
    shutdown; the AMI's own (1.34+) would cap the grace at 120 s, and 1.33 would give none."""
    for name, spec in gpu_pools(stack).items():
        node = node_class(stack, spec)
        fate = training_pod_fate("spot-interruption", spec, node, TERMINATION_GRACE_SECONDS, version)
        assert fate.outcome == SHUTDOWN and fate.grace_s == TERMINATION_GRACE_SECONDS, (name, fate)
        assert shutdown_grace(node, version) == TERMINATION_GRACE_SECONDS
    # What the AMIs do without the node class's NodeConfig.
    assert shutdown_grace({}, "1.33") is None
    assert shutdown_grace({}, "1.34") == 150 - CRITICAL_POD_SHUTDOWN_SECONDS < TERMINATION_GRACE_SECONDS


def test_every_node_expires_within_thirty_days(stack):
    # Set explicitly: the CRD's default (720h) is the bound itself and may change with Karpenter.
    for name, spec in node_pools(stack).items():
        expire = spec["template"]["spec"]["expireAfter"]
        assert seconds(expire) <= 30 * 24 * 3600, f"{name}: expireAfter {expire}"
