"""How each job controller treats a training pod that ends in a given way, ported from its source: the
models tests/workloads/test_node_repair_retry.py and tests/workloads/test_day2.py run the committed stacks'
rendered objects through.

- TrainJob: each node is a Job of the TrainingRuntime's JobSet. The Job's podFailurePolicy rules are
  tried in order and the first match decides (kubernetes pkg/controller/job/pod_failure_policy.go,
  matchPodFailurePolicy): Ignore replaces the pod without counting it, FailJob fails the Job (reason
  PodFailurePolicy), Count or no match counts it against backoffLimit (0 here: the Job fails, reason
  BackoffLimitExceeded). A failed Job is then matched against the JobSet's failurePolicy rules by its
  reason; with none matching the JobSet restarts, up to maxRestarts (jobset pkg/controllers/
  failure_policy.go: RestartJobSet is the default action).
- PyTorchJob: the Training Operator v1.9 restarts a failed pod when its replica's restartPolicy is
  ExitCode and the `pytorch` container's exit code is 128 or more; a pod without a terminated container
  counts as the magic code 0xbeef, retryable as well (pkg/controller.v1/common/pod.go, ReconcilePods).
- MPIJob: the same operator's mpijob_controller.go at v1.9.2 (the commit infra/pins.py pins) has its own
  ReconcilePods, which never deletes a failed pod and creates only the workers that do not exist. A
  launcher in phase Failed fails the job whatever its restartPolicy (updateMPIJobStatus, L430-447; reason
  "Evicted" only renames the condition MPIJobEvicted), a worker with status.reason "Evicted" as well
  (L463-481), and any other failed worker unless its replica's restartPolicy is ExitCode, which only sets a
  Restarting condition (UpdateJobStatus, L600-614). A Failed condition is final: common/job.go
  ReconcileJobs returns at IsFinished and deletes the running pods. A container that fails while its pod
  stays (restartPolicy OnFailure) is restarted in place by the kubelet, counted against backoffLimit.
- RayJob: KubeRay 1.7.0 and the entry point trainer/ray_train.py (below).
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field

from infra.addons.kuberay import kuberay_values

IGNORED, RESTARTED, FAILED = "replaced without counting", "restarted from the checkpoint", "failed"
LEFT_FAILED = "left Failed, never replaced"
BEEF = 0xBEEF


@dataclass(frozen=True)
class PodEnd:
    """How a training pod ended: its container's exit code (None: the kubelet never reported one) and
    its conditions."""

    exit_code: int | None
    conditions: tuple[str, ...] = field(default=())
    pod_removed: bool = True  # False: only its container ended, and the pod stays


REPAIR = {
    "evicted, checkpointed (SIGTERM)": PodEnd(143, ("DisruptionTarget",)),
    "evicted, killed at the end of its grace": PodEnd(137, ("DisruptionTarget",)),
    "deleted by a forced termination, checkpointed": PodEnd(143),
    "deleted by a forced termination, killed": PodEnd(137),
    "instance gone, marked Failed by the pod GC": PodEnd(None, ("DisruptionTarget",)),
    "a rank on a healthy node lost its peer": PodEnd(202, pod_removed=False),
    "NCCL watchdog abort on a healthy node (128 + SIGABRT)": PodEnd(134, pod_removed=False),
}
PERMANENT = {"invalid configuration": PodEnd(2, pod_removed=False), "a bug": PodEnd(1, pod_removed=False)}


def _exit_code_operator_matches(code: int, requirement: dict) -> bool:
    """isOnExitCodesOperatorMatching (an unknown operator matches nothing)."""
    if requirement["operator"] == "In":
        return code in requirement["values"]
    if requirement["operator"] == "NotIn":
        return code not in requirement["values"]
    return False


def _terminated_container(statuses: list[dict], requirement: dict) -> dict | None:
    """getMatchingContainerFromList: the first terminated container (of the rule's containerName, if it
    names one) whose exit code is not 0 and meets the operator."""
    for status in statuses:
        terminated = (status.get("state") or {}).get("terminated")
        if terminated is None:  # still terminating: no exit code to match
            continue
        if requirement.get("containerName") in (None, status.get("name")):
            code = terminated.get("exitCode", 0)
            if code != 0 and _exit_code_operator_matches(code, requirement):
                return status
    return None


def match_pod_failure_policy(policy: dict | None, pod: dict) -> tuple[str | None, bool, str | None]:
    """matchPodFailurePolicy: the rules in order, the first that matches with a known action decides.
    Returns the Job's failure message (a FailJob rule), whether the failure counts against backoffLimit
    (not for Ignore), and the action (None: no rule matched)."""
    if policy is None:
        return None, True, None
    status, meta = pod.get("status") or {}, pod.get("metadata") or {}
    pod_name = f"{meta.get('namespace', '')}/{meta.get('name', '')}"
    for index, rule in enumerate(policy.get("rules") or []):
        action = rule.get("action")
        if action not in ("Ignore", "Count", "FailJob", "FailIndex"):
            continue  # an unknown action: the rule is skipped
        if "onExitCodes" in rule:
            requirement = rule["onExitCodes"]
            container = _terminated_container(status.get("containerStatuses") or [], requirement)
            container = container or _terminated_container(
                status.get("initContainerStatuses") or [], requirement
            )
            if container is None:
                continue
            code = container["state"]["terminated"]["exitCode"]
            message = (
                f"Container {container.get('name', '')} for pod {pod_name} failed with exit code {code} "
                f"matching {action} rule at index {index}"
            )
        elif "onPodConditions" in rule:
            patterns = {(p["type"], p["status"]) for p in rule["onPodConditions"]}
            matched = [c for c in status.get("conditions") or [] if (c["type"], c["status"]) in patterns]
            if not matched:
                continue
            message = (
                f"Pod {pod_name} has condition {matched[0]['type']} matching {action} rule at index {index}"
            )
        else:
            continue
        return (message if action == "FailJob" else None), action != "Ignore", action
    return None, True, None


def failed_pod(end: PodEnd, container: str) -> dict:
    """A pod in phase Failed that ended so: `container` terminated with the exit code (if the kubelet
    reported one), and the pod's conditions True."""
    terminated = {"name": container, "state": {"terminated": {"exitCode": end.exit_code}}}
    return {
        "metadata": {"namespace": "default", "name": "node"},
        "status": {
            "phase": "Failed",
            "containerStatuses": [] if end.exit_code is None else [terminated],
            "conditions": [{"type": c, "status": "True"} for c in end.conditions],
        },
    }


def train_job_outcome(runtime: dict, end: PodEnd) -> str:
    jobset = runtime["spec"]["template"]["spec"]
    (job,) = [j["template"]["spec"] for j in jobset["replicatedJobs"]]
    container = job["template"]["spec"]["containers"][0]["name"]
    _, _, matched = match_pod_failure_policy(job.get("podFailurePolicy"), failed_pod(end, container))
    if matched == "FailIndex":
        raise NotImplementedError("FailIndex: the platform's Jobs set no backoffLimitPerIndex")
    action = matched or "Count"
    if action == "Ignore":
        return IGNORED
    if action == "Count" and job.get("backoffLimit", 6) > 0:
        return RESTARTED  # the Job itself retries the pod
    reason = "PodFailurePolicy" if action == "FailJob" else "BackoffLimitExceeded"
    for rule in jobset.get("failurePolicy", {}).get("rules", []):
        if reason in rule.get("onJobFailureReasons", [reason]):
            return FAILED if rule["action"] == "FailJobSet" else RESTARTED
    return RESTARTED if jobset.get("failurePolicy", {}).get("maxRestarts", 0) > 0 else FAILED


def pytorch_job_outcome(job: dict, end: PodEnd) -> list[str]:
    outcomes = []
    for replica in job["spec"]["pytorchReplicaSpecs"].values():
        assert any(c["name"] == "pytorch" for c in replica["template"]["spec"]["containers"])
        code = BEEF if end.exit_code is None else end.exit_code
        retryable = replica["restartPolicy"] in ("OnFailure", "Always") or (
            replica["restartPolicy"] == "ExitCode" and code >= 128
        )
        outcomes.append(RESTARTED if retryable else FAILED)
    return outcomes


def mpi_job_outcome(job: dict, replica_type: str, end: PodEnd, reason: str = "") -> str:
    """What the operator does when a pod of `replica_type` ends so (`reason`: the pod's status.reason)."""
    policy = job["spec"]["mpiReplicaSpecs"][replica_type]["restartPolicy"]
    pod_restart_policy = "Never" if policy == "ExitCode" else policy  # setRestartPolicy, L1394
    if not end.pod_removed and pod_restart_policy in ("OnFailure", "Always"):
        return RESTARTED  # by the kubelet, in place; the pod never leaves phase Running
    # The pod is in phase Failed.
    if replica_type == "Launcher" or reason == "Evicted" or policy != "ExitCode":
        return FAILED
    # Restarting: only the pod's deletion (drain, pod GC) lets getOrCreateWorker recreate it by name.
    return RESTARTED if end.pod_removed else LEFT_FAILED


# RayJob, KubeRay 1.7.0 (ray-operator/controllers/ray/), K8sJobMode as rendered. The RayCluster controller
# deletes a head or worker pod in phase Failed (raycluster_controller.go shouldDeletePod, L1517) and creates
# what is missing: a head (L1025-1055; ray.io/disable-provisioned-head-restart, which would stop that, is set
# only for SidecarMode, rayjob_controller.go L1006-1008) and the group's `replicas` workers (L1167-1210).
# The RayJob itself fails only through rayjob_controller.go: its submitter Job failed (L1147-1163; that Job
# has backoffLimit = submitterConfig.backoffLimit and no podFailurePolicy, L718-737), the Ray job ended
# FAILED (L340-348), or the head's dashboard did not answer for RAYJOB_STATUS_CHECK_TIMEOUT_SECONDS
# (default 300, utils/constant.go L290; checked first on every reconcile, L262; the failure time is set at
# the first failed check, L322, and cleared only by a successful one, L329). A failed RayJob gets a fresh
# RayCluster up to backoffLimit, except for the reasons DeadlineExceeded and JobStatusCheckTimeoutExceeded
# (checkBackoffLimitAndUpdateStatusIfNeeded, L531-555).
FRESH_CLUSTER = "retried on a fresh Ray cluster, from the checkpoint"
UNTOUCHED = "reattached; the Ray job runs on"


def status_check_timeout_s(values: dict) -> int:
    """The operator's RAYJOB_STATUS_CHECK_TIMEOUT_SECONDS as the platform's Helm values set it (300 unset)."""
    env = {e["name"]: e["value"] for e in values.get("env") or []}
    return int(env.get("RAYJOB_STATUS_CHECK_TIMEOUT_SECONDS", 300))


RAY_STATUS_CHECK_TIMEOUT_S = status_check_timeout_s(kuberay_values(service_monitor=True))
RAY_NOT_RETRIED = ("DeadlineExceeded", "JobStatusCheckTimeoutExceeded")


def _ray_job_failed(job: dict, reason: str) -> str:
    retried = reason not in RAY_NOT_RETRIED and job["spec"].get("backoffLimit", 0) > 0
    return FRESH_CLUSTER if retried else FAILED


def _entry_point_restart_budget(job: dict) -> int:
    argv = shlex.split(job["spec"]["entrypoint"])
    return int(argv[argv.index("--restart-budget") + 1])


def ray_job_outcome(
    job: dict, role: str, end: PodEnd, head_unanswered_s: float = 0, submitter_failures: int = 1
) -> str:
    """What happens when a pod of `role` (head, worker, submitter) ends so. `head_unanswered_s`: how long
    the operator's status checks fail after a head is lost, until the submitter's Job ends or a new head
    answers for the resubmitted job (common/job.go L119-126: a new submitter pod submits again when the
    head does not know the submission id)."""
    if role == "submitter":
        assert end.pod_removed
        limit = job["spec"].get("submitterConfig", {}).get("backoffLimit", 2)
        # A new submitter pod finds the Ray job running and follows its log again.
        return UNTOUCHED if submitter_failures <= limit else _ray_job_failed(job, "SubmissionFailed")
    if not end.pod_removed or role == "worker":
        # A Ray Train worker's program exited, or its pod went: the pod is replaced by the RayCluster and
        # the entry point (trainer/ray_train.py) restarts the workers in place, or ends the Ray job at once
        # with a permanent exit code.
        permanent = not end.pod_removed and end.exit_code is not None and 0 < end.exit_code < 128
        if not permanent and _entry_point_restart_budget(job) > 0:
            return RESTARTED
        return _ray_job_failed(job, "AppFailed")
    # The head, with the Ray job's driver and its GCS, is gone and comes back empty.
    if head_unanswered_s >= RAY_STATUS_CHECK_TIMEOUT_S:
        return _ray_job_failed(job, "JobStatusCheckTimeoutExceeded")
    return _ray_job_failed(job, "SubmissionFailed")
