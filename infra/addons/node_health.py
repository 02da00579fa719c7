"""GPU node health: the EKS node monitoring agent, node auto repair on every GPU node source, and the
alerts on what they report. Pure (no Pulumi import); managed node groups get repair through
infra/platform/node_repair.py.

The agent (EKS add-on `eks-node-monitoring-agent`, no IAM role) sets one NodeCondition per category:
AcceleratedHardwareReady, KernelReady, NetworkingReady, StorageReady, ContainerRuntimeReady. Managed groups
repair with EKS node auto repair (GA: 10 min for the GPU condition, 30 for the others). Karpenter NodePools
repair with the alpha `nodeRepair` gate (karpenter-provider-aws cloudprovider.go RepairPolicies: the same
durations), by force: the health controller (pkg/controllers/node/health) sets the NodeClaim's termination
time to now, so do-not-disrupt holds nothing and pods get almost no grace (terminator DeleteExpiringPods);
a training pod loses the steps since its last periodic checkpoint. Both stop above 20% unhealthy.
docs/node-health.md has the table and timings.
"""

from __future__ import annotations

from typing import Any

from infra.accelerators import CATALOG
from infra.addons.gpu_node_check import STARTUP_TAINT
from infra.contract import toleration_spec

NODE_MONITORING_AGENT = "eks-node-monitoring-agent"

# Condition -> minutes it must stay False before either repair acts (sources in the module docstring).
REPAIR_AFTER_MINUTES = {
    "AcceleratedHardwareReady": 10,
    "KernelReady": 30,
    "NetworkingReady": 30,
    "StorageReady": 30,
    "ContainerRuntimeReady": 30,
}
GPU_CONDITION = "AcceleratedHardwareReady"
# What a replacement adds to the wait, from the repair decision to a Ready node: the instance launch and
# boot of an EKS-optimized GPU AMI (about 1-3 minutes, docs/workloads.md "How fast") plus the startup
# GPU check. The alert below fires only once repair has had that long as well.
REPLACEMENT_MARGIN_MINUTES = 20


def monitoring_agent_configuration() -> dict[str, Any]:
    """The add-on's configuration values. Its node agent tolerates every taint, but its DCGM host engine
    (the dcgm-server DaemonSet, which the agent's GPU monitor talks to) tolerates none
    (aws/eks-node-monitoring-agent charts/eks-node-monitoring-agent/values.yaml: `nodeAgent.tolerations`
    [{operator: Exists}], `dcgmAgent.tolerations` []): on our tainted GPU nodes it would never run, and
    without a host engine the agent reports AcceleratedHardwareReady=False (DCGMError), which repair
    answers by replacing every GPU node. `dcgmAgent.tolerations` is a key of the add-on's configuration
    schema (charts/configuration.schema.json)."""
    gpu_taints = {a.taint for a in CATALOG.values() if a.vendor == "nvidia"}
    tolerations = [toleration_spec(t, any_value=True) for t in sorted(gpu_taints, key=lambda t: t.key)]
    return {"dcgmAgent": {"tolerations": [*tolerations, toleration_spec(STARTUP_TAINT)]}}


def karpenter_values(*, node_repair: bool) -> dict[str, Any]:
    """The karpenter 1.14.1 chart values for its node repair (values.yaml `settings.featureGates`)."""
    return {"settings": {"featureGates": {"nodeRepair": node_repair}}}


# An alerting rule before infra/addons/monitoring/alerts.py adds its routing labels: name, expression,
# `for`, severity, summary, description.
Rule = tuple[str, str, str, str, str, str]


def _condition_false(conditions: str) -> str:
    """kube-state-metrics exports every node condition, the agent's included, as kube_node_status_condition
    with `condition` (its type) and `status` (true/false/unknown, lowercase)."""
    return f'kube_node_status_condition{{condition=~"{conditions}",status="false"}} == 1'


def node_health_rules(*, startup_taint_key: str | None) -> list[Rule]:
    """The alerting rules on the agent's conditions, on repair, and (with the startup GPU check) on GPU
    nodes that never pass it."""
    gpu_repair = REPAIR_AFTER_MINUTES[GPU_CONDITION]
    others = "|".join(c for c in REPAIR_AFTER_MINUTES if c != GPU_CONDITION)
    rules: list[Rule] = [
        (
            "GpuHardwareUnhealthy",
            _condition_false(GPU_CONDITION),
            "0m",
            "critical",
            "GPUs of node {{ $labels.node }} are unhealthy (AcceleratedHardwareReady=False)",
            "The node monitoring agent saw an XID error or a failed DCGM diagnostic. With node repair on, "
            f"the node is replaced after {gpu_repair} minutes; the jobs on it restart from their last "
            "checkpoint. `kubectl describe node` shows the reason.",
        ),
        (
            "GpuHardwareUnhealthyNotRepaired",
            _condition_false(GPU_CONDITION),
            f"{gpu_repair + REPLACEMENT_MARGIN_MINUTES}m",
            "critical",
            "Node {{ $labels.node }} has had unhealthy GPUs for too long: nothing repaired it",
            "Node repair is off for its pool (Karpenter's alpha gate in prod), or blocked because more than "
            "20% of the pool is unhealthy. Cordon and drain it, then delete its NodeClaim or instance.",
        ),
        (
            "NodeHealthConditionFailing",
            _condition_false(others),
            "5m",
            "warning",
            "Node {{ $labels.node }}: {{ $labels.condition }} is False",
            "The node monitoring agent reports a kernel, network, storage or container runtime fault. "
            "Node repair replaces the node after 30 minutes where it is on.",
        ),
        (
            "KarpenterNodeRepaired",
            'sum by (nodepool) (increase(karpenter_nodeclaims_disrupted_total{reason="unhealthy"}[30m])) > 0',
            "0m",
            "info",
            "Karpenter replaced unhealthy nodes of NodePool {{ $labels.nodepool }}",
            "Node repair deleted a NodeClaim whose node stayed unhealthy; training jobs on it resume from "
            "their checkpoints on the replacement.",
        ),
    ]
    if startup_taint_key:
        rules.append(
            (
                "GpuNodeCheckNotPassed",
                f'max by (node) (kube_node_spec_taint{{key="{startup_taint_key}"}}) == 1',
                "15m",
                "warning",
                "GPU node {{ $labels.node }} has not passed its startup GPU check",
                "No training pod lands on it until the check removes the taint. Look at the gpu-node-check "
                "pod on that node in gpu-system: an image that cannot be pulled, or GPUs that fail it. "
                "A Karpenter node that fails is replaced by the check itself (it deletes its NodeClaim); "
                "replace a managed group's node yourself (docs/node-health.md).",
            )
        )
    return rules
