"""A job whose node is repaired retries; it never fails for it. Checked on every committed workload
stack's rendered objects, with the failure handling of the controllers that run them:

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
- MPIJob: the same operator's mpijob_controller.go at v1.9.2 (the commit infra/charts.py pins) has its own
  ReconcilePods, which never deletes a failed pod and creates only the workers that do not exist. A
  launcher in phase Failed fails the job whatever its restartPolicy (updateMPIJobStatus, L430-447; reason
  "Evicted" only renames the condition MPIJobEvicted), a worker with status.reason "Evicted" as well
  (L463-481), and any other failed worker unless its replica's restartPolicy is ExitCode, which only sets a
  Restarting condition (UpdateJobStatus, L600-614). A Failed condition is final: common/job.go
  ReconcileJobs returns at IsFinished and deletes the running pods. A container that fails while its pod
  stays (restartPolicy OnFailure) is restarted in place by the kubelet, counted against backoffLimit.
- RayJob: KubeRay 1.7.0 and the entry point trainer/ray_train.py, modelled below (ray_job_outcome).

What a repaired node does to its pods (node repair drains and replaces it: infra/addons/node_health.py):
an eviction through the Eviction API marks the pod DisruptionTarget before its SIGTERM; Karpenter's forced
termination and a drain past the grace period delete pods without that condition; an instance that
vanishes leaves its pods to the pod garbage collector, which marks them DisruptionTarget and Failed
without an exit code. Each of these pods reaches phase Failed before it is gone: the kubelet sets a deleted
pod's terminal phase before the API server removes it, and the pod GC marks it Failed before deleting it.
The trainer exits 143 after its SIGTERM checkpoint, 137 when killed, and its ranks
on healthy nodes exit 202 when their peer is gone (trainer/faults.py).
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field

import pytest

from infra.addons.kuberay import kuberay_values
from infra.config.stack_files import PROJECT
from workloads.platform import example_outputs_path, load_platform_outputs
from workloads.render import render
from workloads.stacks import load_stack, program_text, read_config, stack_file, workload_stacks

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


def _exit_code_matches(rule: dict, end: PodEnd) -> bool:
    codes = rule["onExitCodes"]
    if end.exit_code is None:
        return False
    inside = end.exit_code in codes["values"]
    return inside if codes["operator"] == "In" else (not inside and end.exit_code != 0)


def train_job_outcome(runtime: dict, end: PodEnd) -> str:
    jobset = runtime["spec"]["template"]["spec"]
    (job,) = [j["template"]["spec"] for j in jobset["replicatedJobs"]]
    action = "Count"
    for rule in job.get("podFailurePolicy", {}).get("rules", []):
        on_conditions = rule.get("onPodConditions", [])
        if any(c["type"] in end.conditions and c.get("status", "True") == "True" for c in on_conditions) or (
            "onExitCodes" in rule and _exit_code_matches(rule, end)
        ):
            action = rule["action"]
            break
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


def _outcomes(objects: list[dict], end: PodEnd) -> list[str]:
    outcomes = []
    for obj in objects:
        if obj["kind"] == "TrainingRuntime":
            outcomes.append(train_job_outcome(obj, end))
        elif obj["kind"] == "PyTorchJob":
            outcomes += pytorch_job_outcome(obj, end)
    return outcomes


def _rendered(stack: str) -> list[dict]:
    loaded = load_stack(stack)
    platform = load_platform_outputs(example_outputs_path(loaded.platform_stack))
    return render(loaded.spec, platform, program_text=program_text(loaded.spec))


def _job(stack: str) -> dict:
    return read_config(stack_file(stack))[f"{PROJECT}:job"]


# The stacks of the two kinds that retry (MPI and Ray jobs are checked below), read from the stack files
# so that a stack of another kind is never rendered here.
JOB_STACKS = [
    s for s in workload_stacks() if _job(s).get("operator", "trainjob") in ("trainjob", "pytorchjob")
]
STACKS = {stack: _rendered(stack) for stack in JOB_STACKS}
# A job with `restartBudget: 0` (the one-shot gpu-check) asks not to be restarted: it is only spared the
# failures that count nothing.
RETRYING = [s for s in JOB_STACKS if load_stack(s).spec.restart_budget > 0]


def test_both_kinds_are_among_the_committed_stacks_that_retry():
    kinds = {o["kind"] for s in RETRYING for o in STACKS[s]}
    assert {"TrainingRuntime", "PyTorchJob"} <= kinds


@pytest.mark.parametrize("stack", RETRYING)
@pytest.mark.parametrize("how", REPAIR)
def test_a_repaired_nodes_job_retries(stack, how):
    outcomes = _outcomes(STACKS[stack], REPAIR[how])
    assert outcomes and FAILED not in outcomes, outcomes


@pytest.mark.parametrize(
    "stack", [s for s in JOB_STACKS if any(o["kind"] == "TrainingRuntime" for o in STACKS[s])]
)
def test_a_train_job_evicted_by_repair_does_not_spend_its_restart_budget(stack):
    for end in (
        REPAIR["evicted, checkpointed (SIGTERM)"],
        REPAIR["instance gone, marked Failed by the pod GC"],
    ):
        assert _outcomes(STACKS[stack], end) == [IGNORED]


@pytest.mark.parametrize("stack", JOB_STACKS)
@pytest.mark.parametrize("how", PERMANENT)
def test_a_permanent_failure_still_fails(stack, how):
    assert set(_outcomes(STACKS[stack], PERMANENT[how])) == {FAILED}


def test_the_model_tells_a_policy_that_would_fail_repaired_jobs():
    """Without the DisruptionTarget rule, and with 143 among the permanent codes, a drained node fails
    the job: what the checks above would catch."""
    runtime = next(o for objs in STACKS.values() for o in objs if o["kind"] == "TrainingRuntime")
    broken = {**runtime, "spec": {**runtime["spec"]}}
    jobset = dict(broken["spec"]["template"]["spec"])
    (node_job,) = jobset["replicatedJobs"]
    spec = dict(node_job["template"]["spec"])
    spec["podFailurePolicy"] = {
        "rules": [
            {"action": "FailJob", "onExitCodes": {"containerName": "node", "operator": "In", "values": [143]}}
        ]
    }
    jobset["replicatedJobs"] = [{**node_job, "template": {**node_job["template"], "spec": spec}}]
    broken["spec"]["template"] = {**broken["spec"]["template"], "spec": jobset}
    assert train_job_outcome(broken, REPAIR["deleted by a forced termination, checkpointed"]) == FAILED
    assert train_job_outcome(broken, REPAIR["instance gone, marked Failed by the pod GC"]) == RESTARTED


MPI_JOBS = {
    s: next(o for o in _rendered(s) if o["kind"] == "MPIJob")
    for s in workload_stacks()
    if _job(s).get("operator") == "mpijob"
}
REMOVED = [how for how, end in REPAIR.items() if end.pod_removed]


def test_an_mpi_stack_is_committed():
    assert MPI_JOBS


@pytest.mark.parametrize("stack", MPI_JOBS)
@pytest.mark.parametrize("how", REMOVED)
def test_an_mpi_job_fails_when_repair_removes_one_of_its_pods(stack, how):
    """The operator's known limitation, asserted as it is: the README says so and what to do (`pulumi up`
    again resubmits the job, which resumes from its checkpoint)."""
    job = MPI_JOBS[stack]
    assert mpi_job_outcome(job, "Launcher", REPAIR[how]) == FAILED
    assert mpi_job_outcome(job, "Worker", REPAIR[how]) == FAILED


@pytest.mark.parametrize("stack", MPI_JOBS)
@pytest.mark.parametrize("how", [how for how in REPAIR if how not in REMOVED])
def test_an_mpi_job_retries_a_rank_that_fails_on_a_healthy_node(stack, how):
    job = MPI_JOBS[stack]
    assert {mpi_job_outcome(job, r, REPAIR[how]) for r in ("Launcher", "Worker")} == {RESTARTED}


@pytest.mark.parametrize("launcher", ["OnFailure", "Always", "ExitCode", "Never"])
@pytest.mark.parametrize("worker", ["OnFailure", "Always", "ExitCode", "Never"])
def test_no_restart_policy_makes_an_mpi_job_survive_repair(launcher, worker):
    """ExitCode on the workers lets a removed worker be recreated, but a removed launcher fails the job
    whatever its policy, and an ExitCode worker whose container fails stays Failed."""
    job = {"spec": {"mpiReplicaSpecs": {"Launcher": {"restartPolicy": launcher},
                                         "Worker": {"restartPolicy": worker}}}}  # fmt: skip
    outcomes = {mpi_job_outcome(job, r, end) for r in ("Launcher", "Worker") for end in REPAIR.values()}
    assert outcomes - {RESTARTED}
    assert mpi_job_outcome(job, "Launcher", REPAIR["instance gone, marked Failed by the pod GC"]) == FAILED


def test_the_mpi_model_tells_exit_code_workers_apart():
    job = {"spec": {"mpiReplicaSpecs": {"Worker": {"restartPolicy": "ExitCode"}}}}
    assert mpi_job_outcome(job, "Worker", REPAIR["instance gone, marked Failed by the pod GC"]) == RESTARTED
    evicted = REPAIR["evicted, checkpointed (SIGTERM)"]
    assert mpi_job_outcome(job, "Worker", evicted, reason="Evicted") == FAILED
    assert mpi_job_outcome(job, "Worker", REPAIR["a rank on a healthy node lost its peer"]) == LEFT_FAILED


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
def _status_check_timeout_s(values: dict) -> int:
    """The operator's RAYJOB_STATUS_CHECK_TIMEOUT_SECONDS as the platform's Helm values set it (300 unset)."""
    env = {e["name"]: e["value"] for e in values.get("env") or []}
    return int(env.get("RAYJOB_STATUS_CHECK_TIMEOUT_SECONDS", 300))


RAY_STATUS_CHECK_TIMEOUT_S = _status_check_timeout_s(kuberay_values(service_monitor=True))
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


RAY_JOBS = {
    s: next(o for o in _rendered(s) if o["kind"] == "RayJob")
    for s in workload_stacks()
    if _job(s).get("operator") == "rayjob"
}


def test_a_ray_stack_is_committed_and_retries():
    assert RAY_JOBS
    assert all(job["spec"]["backoffLimit"] > 0 for job in RAY_JOBS.values())


@pytest.mark.parametrize("stack", RAY_JOBS)
@pytest.mark.parametrize("how", REPAIR)
def test_a_ray_job_restarts_in_place_when_repair_takes_a_worker(stack, how):
    assert ray_job_outcome(RAY_JOBS[stack], "worker", REPAIR[how]) == RESTARTED


@pytest.mark.parametrize("stack", RAY_JOBS)
@pytest.mark.parametrize("how", REMOVED)
def test_a_ray_job_keeps_running_when_repair_takes_its_submitter(stack, how):
    assert ray_job_outcome(RAY_JOBS[stack], "submitter", REPAIR[how]) == UNTOUCHED


@pytest.mark.parametrize("stack", RAY_JOBS)
@pytest.mark.parametrize("how", REMOVED)
def test_a_ray_job_whose_head_is_repaired_retries_if_a_new_head_answers_in_time(stack, how):
    """The head's replacement needs a node with room: on a repaired node, a new instance (1-3 min), its
    GPU check and the image pull (README, "How long"), more than KubeRay's default 5 min; the platform's
    operator waits 30 min (infra/addons/kuberay.py). A head that never comes back fails the RayJob."""
    job, end = RAY_JOBS[stack], REPAIR[how]
    assert RAY_STATUS_CHECK_TIMEOUT_S >= 20 * 60
    assert ray_job_outcome(job, "head", end, head_unanswered_s=15 * 60) == FRESH_CLUSTER
    assert ray_job_outcome(job, "head", end, head_unanswered_s=RAY_STATUS_CHECK_TIMEOUT_S) == FAILED


@pytest.mark.parametrize("stack", RAY_JOBS)
@pytest.mark.parametrize("how", PERMANENT)
def test_a_ray_jobs_permanent_failure_is_retried_on_fresh_clusters(stack, how):
    """KubeRay retries whatever failed: a permanent exit ends each fresh cluster at the same early point."""
    assert ray_job_outcome(RAY_JOBS[stack], "worker", PERMANENT[how]) == FRESH_CLUSTER


def test_the_ray_model_tells_the_cases_apart():
    job = {"spec": {"entrypoint": "python -m trainer.ray_train --restart-budget 0 -- x", "backoffLimit": 0}}
    lost = REPAIR["instance gone, marked Failed by the pod GC"]
    assert ray_job_outcome(job, "worker", lost) == FAILED
    assert ray_job_outcome(job, "head", lost) == FAILED
    retrying = {"spec": {**job["spec"], "backoffLimit": 1, "submitterConfig": {"backoffLimit": 2}}}
    assert ray_job_outcome(retrying, "worker", lost) == FRESH_CLUSTER
    assert ray_job_outcome(retrying, "submitter", lost, submitter_failures=3) == FRESH_CLUSTER
    assert ray_job_outcome(retrying, "submitter", lost, submitter_failures=2) == UNTOUCHED
    timeout = RAY_STATUS_CHECK_TIMEOUT_S
    assert ray_job_outcome(retrying, "head", lost, head_unanswered_s=timeout - 1) == FRESH_CLUSTER
    assert ray_job_outcome(retrying, "head", lost, head_unanswered_s=timeout) == FAILED
    assert _status_check_timeout_s({}) == 300  # KubeRay's default, when the platform sets nothing
