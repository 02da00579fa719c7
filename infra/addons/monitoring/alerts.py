"""Alerting rules for GPU nodes and training jobs (kube-prometheus-stack `additionalPrometheusRulesMap`).

Metrics: DCGM exporter (DCGM_FI_*, with the workload's pod/namespace labels), kube-state-metrics
(extended resources appear as `nvidia_com_gpu` / `amd_com_gpu`) and Karpenter's controller metrics.
A "training pod" is a pod that requests GPUs: no pod-label allowlist in kube-state-metrics is needed.

Every rule here carries `platform: mlops-eks`; Alertmanager routes those and every critical alert (the
chart's default rules included) to the configured receiver (`alertmanager_config`).
"""

from __future__ import annotations

from typing import Any

from infra.addons.gpu_node_check import STARTUP_TAINT
from infra.addons.node_health import node_health_rules

GPU_RESOURCES = 'resource=~"nvidia_com_gpu|amd_com_gpu"'
ROUTE_LABEL = ("platform", "mlops-eks")
RECEIVER = "platform"
# The receiver kinds `addons.observability.alertReceiver` offers -> Alertmanager's config block, whose
# secret field is read from a file (Alertmanager >= 0.25; kube-prometheus-stack 88.5.3 runs 0.34).
RECEIVER_KINDS = {
    "webhook": ("webhook_configs", "url_file"),
    "slack": ("slack_configs", "api_url_file"),
    "pagerduty": ("pagerduty_configs", "routing_key_file"),
}


def _alert(name: str, expr: str, for_: str, severity: str, summary: str, description: str) -> dict[str, Any]:
    return {
        "alert": name,
        "expr": expr,
        "for": for_,
        "labels": {"severity": severity, ROUTE_LABEL[0]: ROUTE_LABEL[1]},
        "annotations": {"summary": summary, "description": description},
    }


def prometheus_rules(*, gpu_check: bool = True) -> dict[str, Any]:
    """additionalPrometheusRulesMap entry name -> PrometheusRule spec; `gpu_check`: whether the startup GPU
    check is on (addons.nodeHealth.gpuCheck)."""
    gpu = [
        _alert(
            "GpuXidError",
            "max by (Hostname, gpu, UUID) (max_over_time(DCGM_FI_DEV_XID_ERRORS[5m])) > 0",
            "0m",
            "warning",
            "GPU {{ $labels.gpu }} on {{ $labels.Hostname }} reported XID {{ $value }}",
            "XID errors are driver-reported GPU faults (e.g. 48 double-bit ECC, 79 fell off the bus). "
            "Drain the node if they repeat.",
        ),
        _alert(
            "GpuNodeNotReady",
            f'(kube_node_status_condition{{condition="Ready",status="true"}} == 0) '
            f"and on (node) (max by (node) (kube_node_status_capacity{{{GPU_RESOURCES}}}) > 0)",
            "5m",
            "critical",
            "GPU node {{ $labels.node }} is NotReady",
            "Pods on it cannot run; jobs using it will restart from their last checkpoint.",
        ),
        _alert(
            "GpuAllocatedButIdle",
            'avg by (namespace, pod, Hostname, gpu) (avg_over_time(DCGM_FI_DEV_GPU_UTIL{pod!=""}[30m])) < 5',
            "0m",
            "warning",
            "GPU {{ $labels.gpu }} allocated to {{ $labels.namespace }}/{{ $labels.pod }} is idle",
            "Average utilisation below 5% for 30 minutes while a pod holds the GPU: paid for and unused.",
        ),
    ]
    training = [
        _alert(
            "TrainingPodRestarting",
            "(sum by (namespace, pod) (increase(kube_pod_container_status_restarts_total[15m])) > 0) "
            "and on (namespace, pod) "
            f"(sum by (namespace, pod) (kube_pod_container_resource_requests{{{GPU_RESOURCES}}}) > 0)",
            "0m",
            "warning",
            "Training pod {{ $labels.namespace }}/{{ $labels.pod }} restarted",
            "A GPU pod restarted in the last 15 minutes (crash, OOM, or a Spot interruption resume).",
        ),
        _alert(
            "KarpenterInterruptionEvents",
            "sum by (message_type) (increase(karpenter_interruption_received_messages_total[10m])) > 0",
            "0m",
            "info",
            "Karpenter received {{ $labels.message_type }} interruption events",
            "Spot interruptions, rebalance recommendations or health events: nodes are being replaced; "
            "training jobs on them resume from their checkpoints.",
        ),
    ]
    # The node monitoring agent's conditions, repair, and (with the check) GPU nodes stuck behind it.
    startup_taint_key = STARTUP_TAINT.key if gpu_check else None
    health = [_alert(*rule) for rule in node_health_rules(startup_taint_key=startup_taint_key)]
    return {
        "mlops-eks-gpu": {"groups": [{"name": "gpu-nodes", "rules": gpu}]},
        "mlops-eks-training": {"groups": [{"name": "training-jobs", "rules": training}]},
        "mlops-eks-node-health": {"groups": [{"name": "gpu-node-health", "rules": health}]},
    }


def alertmanager_config(receiver: str, secret_file: str) -> dict[str, Any]:
    """kube-prometheus-stack `alertmanager.config`. Helm merges it into the chart's default: `route`
    key by key, while `routes` and `receivers` replace the chart's lists, so the chart's Watchdog route
    (an always-firing heartbeat, meant for a dead man's switch) is kept here explicitly."""
    routes: list[dict[str, Any]] = [{"receiver": "null", "matchers": ['alertname = "Watchdog"']}]
    receivers: list[dict[str, Any]] = [{"name": "null"}]
    if receiver != "none":
        block, secret_field = RECEIVER_KINDS[receiver]
        routes += [
            {"receiver": RECEIVER, "matchers": [f'{ROUTE_LABEL[0]} = "{ROUTE_LABEL[1]}"']},
            {"receiver": RECEIVER, "matchers": ['severity = "critical"']},
        ]
        receivers.append({"name": RECEIVER, block: [{secret_field: secret_file, "send_resolved": True}]})
    return {"route": {"receiver": "null", "routes": routes}, "receivers": receivers}
