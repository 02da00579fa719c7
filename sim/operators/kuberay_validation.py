"""What the KubeRay operator refuses in a RayJob before it creates anything: the checks of
ray-operator/controllers/ray/utils/validation.go at v1.7.0 (ValidateRayJobSpec, ValidateRayClusterSpec,
validateDeletionConfiguration) that the fields our renderer sets, or could set, reach. A RayJob that fails
them gets JobDeploymentStatus Failed with reason ValidationFailed and never runs; the CRD's schema and CEL
rules (sim/kubernetes/cel.py) do not include them, so the API server would accept such a RayJob.

Like upstream, validation stops at the first problem and says it in upstream's words. Not ported: GCS
fault tolerance and Redis settings, token auth versions, network policy, TLS, the history server,
idle-timeout and priority per worker group, and deletionStrategy (none of which the renderer sets; a
RayJob with a deletionStrategy raises NotImplementedError rather than being judged).
"""

from __future__ import annotations

from typing import Any

import yaml

from sim.kubernetes.names import label_key, label_value

RAY_START_RESOURCE_KEYS = ("num-cpus", "num-gpus", "memory", "resources")
CLUSTER_SELECTOR_KEY = "ray.io/cluster"  # utils.RayJobClusterSelectorKey
AUTOSCALER_V2_ENV = "RAY_enable_autoscaler_v2"
GENERATED_AUTOSCALER_COMMAND_ENV = "KUBERAY_GEN_AUTOSCALER_START_CMD"
JOB_INVALID = "The RayJob spec is invalid: "


def _pod_spec(group: dict[str, Any]) -> dict[str, Any]:
    return group.get("template", {}).get("spec", {})


def _env(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", "") for e in container.get("env") or []}


def _group_resources(name: str, group: dict[str, Any]) -> str | None:
    """validateRayGroupResources."""
    params = group.get("rayStartParams") or {}
    if any(params.get(k) for k in RAY_START_RESOURCE_KEYS) and group.get("resources"):
        return (
            f"resource fields should not be set in both rayStartParams and Resources for {name} group; "
            "please use only one"
        )
    return None


def _group_labels(name: str, group: dict[str, Any]) -> str | None:
    """validateRayGroupLabels: no `labels` in rayStartParams; label keys and values as Kubernetes allows."""
    if "labels" in (group.get("rayStartParams") or {}):
        return (
            f"rayStartParams['labels'] is not supported for {name} group; please use the top-level Labels "
            "field instead"
        )
    problems = []
    for key, value in (group.get("labels") or {}).items():
        problems += [f"invalid label key for {name} group: '{key}', error: {e}" for e in label_key(key)]
        problems += [
            f"invalid label value for key '{key}' in {name} group: '{value}', error: {e}"
            for e in label_value(value)
        ]
    return "; ".join(problems) or None


def _worker_group(group: dict[str, Any], autoscaling: bool) -> str | None:
    name = group.get("groupName", "")
    if not _pod_spec(group).get("containers"):
        return "workerGroupSpec should have at least one container"
    low, high = group.get("minReplicas"), group.get("maxReplicas")
    if not autoscaling and (low is None or high is None):
        return f"worker group {name} must set both minReplicas and maxReplicas when autoscaling is disabled"
    if low is not None and low < 0:
        return f"worker group {name} has negative minReplicas {low}"
    if high is not None and high < 0:
        return f"worker group {name} has negative maxReplicas {high}"
    if low is not None and high is not None and low > high:
        return f"worker group {name} has minReplicas {low} greater than maxReplicas {high}"
    return _group_resources(name, group) or _group_labels(name, group)


def _autoscaler(spec: dict[str, Any], head_env: dict[str, Any]) -> str | None:
    """The autoscaler checks of ValidateRayClusterSpec (the RayJobDeletionPolicy gate is on by default
    in v1.7.0, so a suspended worker group is refused only with the autoscaler)."""
    workers = spec.get("workerGroupSpecs") or []
    options = spec.get("autoscalerOptions") or {}
    if not spec.get("enableInTreeAutoscaling"):
        value = head_env.get(AUTOSCALER_V2_ENV)
        if value in ("1", "true"):
            return (
                f"environment variable {AUTOSCALER_V2_ENV} cannot be set to '{value}' when "
                "enableInTreeAutoscaling is false. Please set enableInTreeAutoscaling: true to use "
                "autoscaler v2"
            )
    else:
        for group in workers:
            if group.get("suspend"):
                return (
                    f"worker group {group.get('groupName', '')} cannot be suspended with Autoscaler enabled"
                )
        if options.get("version") is not None and AUTOSCALER_V2_ENV in head_env:
            return (
                f"both .spec.autoscalerOptions.version and head Pod env var {AUTOSCALER_V2_ENV} are set, "
                "please only use the former"
            )
        if options.get("version") == "v2":
            if _pod_spec(spec["headGroupSpec"]).get("restartPolicy", "Never") != "Never":
                return "restartPolicy for head Pod should be Never or unset when using autoscaler V2"
            for group in workers:
                if _pod_spec(group).get("restartPolicy", "Never") != "Never":
                    return (
                        f"restartPolicy for worker group {group.get('groupName', '')} should be Never or "
                        "unset when using autoscaler V2"
                    )
    idle = options.get("idleTimeoutSeconds")
    if idle is not None and idle < 0:
        return f"autoscalerOptions.idleTimeoutSeconds must be non-negative, got {idle}"
    if GENERATED_AUTOSCALER_COMMAND_ENV in {e["name"] for e in options.get("env") or []}:
        return (
            f"autoscalerOptions.env must not contain {GENERATED_AUTOSCALER_COMMAND_ENV}: it is managed by "
            "KubeRay and injected automatically into the autoscaler container"
        )
    return None


def validate_cluster_spec(spec: dict[str, Any]) -> str | None:
    """ValidateRayClusterSpec's first problem (None: valid), for the parts ported."""
    head = spec.get("headGroupSpec") or {}
    containers = _pod_spec(head).get("containers")
    if not containers:
        return "headGroupSpec should have at least one container"
    problem = _group_resources("Head", head) or _group_labels("Head", head)
    autoscaling = bool(spec.get("enableInTreeAutoscaling"))
    for group in spec.get("workerGroupSpecs") or []:
        problem = problem or _worker_group(group, autoscaling)
    return problem or _autoscaler(spec, _env(containers[0]))


def _selector_problem(spec: dict[str, Any]) -> str | None:
    if not spec.get("clusterSelector"):
        return None
    if not spec["clusterSelector"].get(CLUSTER_SELECTOR_KEY):
        return "cluster name in ClusterSelector should not be empty"
    if spec.get("submissionMode") == "SidecarMode":
        return "ClusterSelector is not supported in SidecarMode"
    if (spec.get("backoffLimit") or 0) > 0:
        return JOB_INVALID + "BackoffLimit is incompatible with ClusterSelector mode"
    return None


def _sidecar_problem(spec: dict[str, Any]) -> str | None:
    if spec.get("submissionMode") != "SidecarMode":
        return None
    if "submitterPodTemplate" in spec:
        return "Currently, SidecarMode doesn't support SubmitterPodTemplate"
    if "submitterConfig" in spec:
        return "Currently, SidecarMode doesn't support SubmitterConfig"
    head = (spec.get("rayClusterSpec") or {}).get("headGroupSpec") or {}
    if _pod_spec(head).get("restartPolicy", "Never") != "Never":
        return "restartPolicy for head Pod should be Never or unset when using SidecarMode"
    return None


def _runtime_env_problem(text: str) -> str | None:
    """dashboardclient.UnmarshalRuntimeEnvYAML: the text must be YAML for a map (or empty)."""
    try:
        parsed = yaml.safe_load(text) if text else None
    except yaml.YAMLError as err:
        return f"failed to unmarshal RuntimeEnvYAML: {text}: {err}"
    if parsed is not None and not isinstance(parsed, dict):
        return f"failed to unmarshal RuntimeEnvYAML: {text}: not a map"
    return None


def validate_rayjob_spec(job: dict[str, Any]) -> str | None:
    """ValidateRayJobSpec's first problem (None: KubeRay runs it)."""
    spec = job["spec"]
    shutdown = spec.get("shutdownAfterJobFinishes", False)
    ttl = spec.get("ttlSecondsAfterFinished", 0)
    backoff = spec.get("backoffLimit")
    cluster = spec.get("rayClusterSpec")
    if spec.get("suspend") and not shutdown:
        return (
            JOB_INVALID + "a RayJob with shutdownAfterJobFinishes set to false is not allowed to be suspended"
        )
    if ttl < 0:
        return JOB_INVALID + "TTLSecondsAfterFinished must be a non-negative integer"
    if not shutdown and ttl > 0:
        return (
            JOB_INVALID
            + "a RayJob with shutdownAfterJobFinishes set to false cannot have TTLSecondsAfterFinished"
        )
    if "deletionStrategy" in spec:
        raise NotImplementedError(
            "spec.deletionStrategy: KubeRay's checks of it are not ported; the renderer never sets it"
        )
    if spec.get("suspend") and spec.get("clusterSelector"):
        return JOB_INVALID + "the ClusterSelector mode doesn't support the suspend operation"
    if cluster is None and not spec.get("clusterSelector"):
        return JOB_INVALID + "one of RayClusterSpec or ClusterSelector must be set"
    problem = _selector_problem(spec)
    if not problem and spec.get("submissionMode") == "InteractiveMode" and (backoff or 0) > 0:
        problem = JOB_INVALID + "BackoffLimit is incompatible with InteractiveMode"
    problem = problem or _sidecar_problem(spec)
    if not problem and cluster is not None:
        if (cluster.get("authOptions") or {}).get("enableK8sTokenAuth"):
            return JOB_INVALID + "K8s token auth mode is currently not supported for RayJob"
        cluster_problem = validate_cluster_spec(cluster)
        problem = JOB_INVALID + cluster_problem if cluster_problem else None
    problem = problem or _runtime_env_problem(spec.get("runtimeEnvYAML", ""))
    for field in ("activeDeadlineSeconds", "preRunningDeadlineSeconds"):
        if not problem and spec.get(field) is not None and spec[field] <= 0:
            problem = JOB_INVALID + f"{field} must be a positive integer"
    if not problem and backoff is not None and backoff < 0:
        problem = JOB_INVALID + "backoffLimit must be a positive integer"
    return problem


def rayjob_problems(job: dict[str, Any]) -> list[str]:
    """What KubeRay's validation says about this RayJob: its first problem, or [] when it runs."""
    problem = validate_rayjob_spec(job)
    return [problem] if problem else []
