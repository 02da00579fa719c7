"""What the KubeRay operator refuses in a RayJob before it creates anything: the checks of
ray-operator/controllers/ray/utils/validation.go at v1.7.0 (ValidateRayJobSpec, ValidateRayClusterSpec,
validateDeletionConfiguration) that the fields our renderer sets, or could set, reach. A RayJob that fails
them gets JobDeploymentStatus Failed with reason ValidationFailed and never runs; the CRD's schema and CEL
rules (sim/kubernetes/cel.py) do not include them, so the API server would accept such a RayJob."""

from __future__ import annotations

from typing import Any

RAY_START_RESOURCE_KEYS = ("num-cpus", "num-gpus", "memory", "resources")


def _group_problems(name: str, group: dict[str, Any], autoscaling: bool) -> list[str]:
    problems = []
    if not group.get("template", {}).get("spec", {}).get("containers"):
        problems.append(f"{name}: should have at least one container")
    params = group.get("rayStartParams", {})
    if any(params.get(k) for k in RAY_START_RESOURCE_KEYS) and group.get("resources"):
        problems.append(f"{name}: resource fields should not be set in both rayStartParams and Resources")
    if "labels" in params:
        problems.append(f"{name}: rayStartParams['labels'] is not supported")
    if name == "head":
        return problems
    low, high = group.get("minReplicas"), group.get("maxReplicas")
    if not autoscaling and (low is None or high is None):
        problems.append(f"worker group {name} must set both minReplicas and maxReplicas (autoscaling off)")
    if (low is not None and low < 0) or (high is not None and high < 0):
        problems.append(f"worker group {name} has negative minReplicas or maxReplicas")
    if low is not None and high is not None and low > high:
        problems.append(f"worker group {name} has minReplicas {low} greater than maxReplicas {high}")
    return problems


def _cluster_problems(cluster: dict[str, Any]) -> list[str]:
    autoscaling = bool(cluster.get("enableInTreeAutoscaling"))
    problems = _group_problems("head", cluster["headGroupSpec"], autoscaling)
    for group in cluster.get("workerGroupSpecs", []):
        problems += _group_problems(group["groupName"], group, autoscaling)
    head = (cluster["headGroupSpec"].get("template", {}).get("spec", {}).get("containers") or [{}])[0]
    autoscaler_v2 = {e["name"]: e.get("value") for e in head.get("env", [])}.get("RAY_enable_autoscaler_v2")
    if not autoscaling and autoscaler_v2 in ("1", "true"):
        problems.append("RAY_enable_autoscaler_v2 cannot be set when enableInTreeAutoscaling is false")
    return problems


def rayjob_problems(job: dict[str, Any]) -> list[str]:
    """Every message KubeRay's validation would give for this RayJob (empty: it runs)."""
    spec = job["spec"]
    problems = []
    shutdown = spec.get("shutdownAfterJobFinishes", False)
    ttl = spec.get("ttlSecondsAfterFinished", 0)
    mode = spec.get("submissionMode", "K8sJobMode")
    backoff = spec.get("backoffLimit", 0)
    if spec.get("suspend") and not shutdown:
        problems.append("a RayJob with shutdownAfterJobFinishes set to false is not allowed to be suspended")
    if ttl < 0:
        problems.append("TTLSecondsAfterFinished must be a non-negative integer")
    if not shutdown and ttl > 0:
        problems.append("shutdownAfterJobFinishes false cannot have TTLSecondsAfterFinished")
    if "rayClusterSpec" not in spec and not spec.get("clusterSelector"):
        problems.append("one of RayClusterSpec or ClusterSelector must be set")
    if mode == "InteractiveMode" and backoff > 0:
        problems.append("BackoffLimit is incompatible with InteractiveMode")
    if mode == "SidecarMode" and ("submitterPodTemplate" in spec or "submitterConfig" in spec):
        problems.append("Currently, SidecarMode doesn't support SubmitterPodTemplate or SubmitterConfig")
    if "rayClusterSpec" in spec:
        problems += _cluster_problems(spec["rayClusterSpec"])
    if spec.get("activeDeadlineSeconds") is not None and spec["activeDeadlineSeconds"] <= 0:
        problems.append("activeDeadlineSeconds must be a positive integer")
    if spec.get("preRunningDeadlineSeconds") is not None and spec["preRunningDeadlineSeconds"] <= 0:
        problems.append("preRunningDeadlineSeconds must be a positive integer")
    if backoff < 0:
        problems.append("backoffLimit must be a positive integer")
    return problems
