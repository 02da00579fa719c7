"""A job whose node is repaired retries; it never fails for it. Checked on every committed workload
stack's rendered objects, with the failure handling of the controllers that run them, ported from their source
(sim/operators/outcomes.py).

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

import pytest

from infra.config.stack_files import PROJECT
from sim.operators.outcomes import (
    FAILED,
    FRESH_CLUSTER,
    IGNORED,
    LEFT_FAILED,
    PERMANENT,
    RAY_STATUS_CHECK_TIMEOUT_S,
    REPAIR,
    RESTARTED,
    UNTOUCHED,
    PodEnd,
    mpi_job_outcome,
    pytorch_job_outcome,
    ray_job_outcome,
    status_check_timeout_s,
    train_job_outcome,
)
from workloads.platform import example_outputs_path, load_platform_outputs
from workloads.render import render
from workloads.stacks import load_stack, program_text, read_config, stack_file, workload_stacks


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
    """The operator's known limitation, asserted as it is: docs/workloads.md says so and what to do (`pulumi
    up` again resubmits the job, which resumes from its checkpoint)."""
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
    job = {
        "spec": {
            "mpiReplicaSpecs": {"Launcher": {"restartPolicy": launcher}, "Worker": {"restartPolicy": worker}}
        }
    }
    outcomes = {mpi_job_outcome(job, r, end) for r in ("Launcher", "Worker") for end in REPAIR.values()}
    assert outcomes - {RESTARTED}
    assert mpi_job_outcome(job, "Launcher", REPAIR["instance gone, marked Failed by the pod GC"]) == FAILED


def test_the_mpi_model_tells_exit_code_workers_apart():
    job = {"spec": {"mpiReplicaSpecs": {"Worker": {"restartPolicy": "ExitCode"}}}}
    assert mpi_job_outcome(job, "Worker", REPAIR["instance gone, marked Failed by the pod GC"]) == RESTARTED
    evicted = REPAIR["evicted, checkpointed (SIGTERM)"]
    assert mpi_job_outcome(job, "Worker", evicted, reason="Evicted") == FAILED
    assert mpi_job_outcome(job, "Worker", REPAIR["a rank on a healthy node lost its peer"]) == LEFT_FAILED


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
    GPU check and the image pull (docs/node-health.md "How long"), more than KubeRay's default 5 min; the
    platform's operator waits 30 min (infra/addons/kuberay.py). A head that never comes back fails the
    RayJob."""
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
    assert status_check_timeout_s({}) == 300  # KubeRay's default, when the platform sets nothing
