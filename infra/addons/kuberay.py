"""KubeRay operator (chart kuberay-operator 1.7.0): RayJob and RayCluster for jobs with `operator: rayjob`.
Pure data (workload stacks read its namespace and pod labels); infra/addons/training.py installs it.

What the values change from the chart's defaults (helm-chart/kuberay-operator/values.yaml at v1.7.0):
- Pod Security `restricted`: the chart's container securityContext already drops every capability, runs
  as non-root with a read-only root and RuntimeDefault seccomp; the pod-level context (empty upstream) says
  the same, so the pod passes whatever its container declares.
- Resources: the chart's limits (100m CPU, 512Mi memory) are kept. With no requests set, Kubernetes takes
  the limits as requests, so the scheduler counts the pod and it runs in the Guaranteed QoS class
  (upstream's estimate: 500 Ray pods need about 500 MB). `resources.requests` exists in the chart only as
  a comment, so it is not set here.
- Metrics: the operator's /metrics (on by default) gets the chart's ServiceMonitor when the platform runs
  Prometheus (templates/servicemonitor.yaml; our Prometheus selects every ServiceMonitor).
- Watch scope: every namespace (the chart's default, `singleNamespaceInstall: false`). Each workload stack
  creates its own job namespace after the platform is up, so a `watchNamespace` list would need a
  platform update per job. The ClusterRole that comes with it (templates/_helpers.tpl `role.consistentRules`)
  includes Secrets: the RayCluster controller owns Secrets (ray-operator/controllers/ray/
  raycluster_controller.go SetupWithManager: `Owns(&corev1.Secret{})`, for its auth token and mTLS
  Secrets), so its informer lists and watches them in every namespace and the operator does not start
  without that permission. No feature that creates Secrets is turned on: authOptions, mTLS
  (`RayClusterMTLS` gate, off) and GCS fault tolerance with Redis are not used by our RayJobs.
- No batch scheduler: our RayJobs are not queued (workloads/placement.py refuses a queue on them).
- A RayJob whose head is lost survives the time a replacement head needs: KubeRay fails a RayJob for good
  (reason JobStatusCheckTimeoutExceeded, never retried: rayjob_controller.go L531-555) once the head's
  dashboard has not answered for RAYJOB_STATUS_CHECK_TIMEOUT_SECONDS (utils/constant.go L288-290, default
  300 s, read from the operator's environment: rayjob_controller.go L1288). A head on a repaired node needs
  a new instance, its GPU check and an image pull first (README "How long"), often more than 5 min, so the
  operator waits 30 min instead; a head that never comes back still fails the RayJob then.
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
