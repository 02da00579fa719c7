"""KubeRay operator (chart kuberay-operator 1.7.0): RayJob and RayCluster for jobs with `operator: rayjob`.
Pure data (workload stacks read its namespace and pod labels); infra/addons/training.py installs it.

What the values change from the chart's defaults (helm-chart/kuberay-operator/values.yaml at v1.7.0):
- a pod-level securityContext matching the container's, so the pod passes `restricted`; the chart's
  limits stay (no requests in the chart: Kubernetes takes the limits, Guaranteed QoS);
- the chart's ServiceMonitor when the platform runs Prometheus;
- RAYJOB_STATUS_CHECK_TIMEOUT_SECONDS 30 min instead of 5: a lost head needs a new node, its GPU check and
  an image pull before it answers (rayjob_controller.go fails the RayJob for good after it;
  docs/workloads.md "Ray jobs").
It watches every namespace (each job creates its own), so its ClusterRole includes Secrets: the RayCluster
controller owns Secrets (raycluster_controller.go SetupWithManager) and does not start without; no feature
that creates them (authOptions, mTLS, Redis GCS) is used. No batch scheduler: RayJobs are not queued.
"""

from __future__ import annotations

from typing import Any

NAMESPACE = "kuberay-system"
RELEASE = "kuberay-operator"
CHART_KEY = "kuberay-operator"
# The operator's pods (the chart's selector labels, templates/deployment.yaml); job namespaces admit it on
# the Ray dashboard port only: it reads every RayJob's status from its head (workloads/rayjob.py).
OPERATOR_POD = {"app.kubernetes.io/name": "kuberay-operator"}
HEAD_STATUS_CHECK_TIMEOUT_S = 1800

_RESTRICTED_CONTAINER = {
    "allowPrivilegeEscalation": False,
    "readOnlyRootFilesystem": True,
    "capabilities": {"drop": ["ALL"]},
    "runAsNonRoot": True,
    "seccompProfile": {"type": "RuntimeDefault"},
}


def kuberay_values(*, service_monitor: bool) -> dict[str, Any]:
    return {
        "podSecurityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
        "securityContext": dict(_RESTRICTED_CONTAINER),
        "metrics": {"enabled": True, "serviceMonitor": {"enabled": service_monitor}},
        "singleNamespaceInstall": False,
        "env": [{"name": "RAYJOB_STATUS_CHECK_TIMEOUT_SECONDS", "value": str(HEAD_STATUS_CHECK_TIMEOUT_S)}],
    }
