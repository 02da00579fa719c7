"""Day two of every committed workload stack: an update (image tag, trainerConfig, queue), an AMI drift and a
Spot interruption; then a node repair, a GPU check that fails on a new node and a peer lost mid-step; and a
job that keeps failing. For each, what Pulumi, the operator, Karpenter and the trainer do, and where the job
ends: still running, resumed from its last checkpoint (with or without spending its restart budget), or a
clear failure.

Each row is one event; its end state is computed for each stack from the objects `render` makes, the pods
the operators create (sim/operators/pods.py) and the controller logic ported from source, which the
row cites: sim/karpenter_disruption.py (Karpenter 1.14), sim/operators/outcomes.py
(Kubernetes Job, JobSet, Training Operator v1.9.2, KubeRay 1.7.0), trainer/attempts.py (the launcher's
restart budget), Kueue 0.19.2's queue-name rule, Pulumi's replaceOnChanges. A row only says which end
states are acceptable for the event.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from infra.addons.gpu_node_check import STARTUP_TAINT
from infra.addons.training import kueue_manager_config
from infra.config.stack_files import PROJECT
from infra.contract import CAPACITY_TYPE_LABEL, Toleration
from sim.karpenter_disruption import (
    DELETED,
    FORCED,
    KEEPS_RUNNING,
    KILLED,
    SHUTDOWN,
    training_pod_fate,
)
from sim.kubernetes.netpol import selects
from sim.kubernetes.scheduling import simulate, tolerated
from sim.operators.outcomes import (
    FAILED,
    FRESH_CLUSTER,
    IGNORED,
    LEFT_FAILED,
    REPAIR,
    RESTARTED,
    UNTOUCHED,
    PodEnd,
    mpi_job_outcome,
    pytorch_job_outcome,
    ray_job_outcome,
    train_job_outcome,
)
from sim.operators.pods import KUEUE_KINDS, container_env, operator_pods
from trainer import attempts, faults
from trainer.storage import LocalStorage
from workloads import jobs
from workloads.platform import PlatformFacts, example_outputs_path, load_platform_outputs
from workloads.pod import LAUNCHER_SHUTDOWN_SECONDS, TERMINATION_GRACE_SECONDS
from workloads.render import render
from workloads.spec import SpecError, parse_spec
from workloads.stacks import load_stack, program_text, read_config, stack_file, workload_stacks

STACKS = workload_stacks()
RUNS = "keeps running"
UNCOUNTED = "resumed from its last checkpoint, restart budget untouched"
COUNTED = "resumed from its last checkpoint, one restart of its budget spent"
REPLACED = "replaced: the new job resumes from the last checkpoint"
CLEAR_FAILURE = "fails, saying why"
WAITS = "waits for a checked node; nothing counted"
IN_PLACE = "updated in place: the running pods keep the old spec"
LOST_STEPS = ", without its SIGTERM checkpoint (the steps since the periodic one are trained again)"
KIND = {"trainjob": "TrainJob", "pytorchjob": "PyTorchJob", "mpijob": "MPIJob", "rayjob": "RayJob"}
NODE_POOL = "kubernetes:karpenter.sh/v1:NodePool"
NODE_CLASS = "kubernetes:karpenter.k8s.aws/v1:EC2NodeClass"


@dataclass(frozen=True)
class Facts:
    """What decides whether an event can reach a stack, known without synthesizing its platform."""

    spec: Any
    platform: PlatformFacts
    pool: str  # the accelerator pool the job's pods land on (sim.kubernetes.scheduling)


@functools.cache
def facts(name: str) -> Facts:
    loaded = load_stack(name)
    platform = load_platform_outputs(example_outputs_path(loaded.platform_stack))
    (pool,) = {v.source for v in simulate(_render(name), platform)}
    return Facts(loaded.spec, platform, pool)


@dataclass
class Stack:
    name: str
    platform: PlatformFacts
    objects: list[dict]
    pool_spec: dict  # the NodePool of the pool the job's pods land on
    node_class: dict
    kubernetes_version: str

    @functools.cached_property
    def spec(self):  # frozen (pydantic): one per stack, not a stack file read per row
        return load_stack(self.name).spec

    @property
    def kind(self) -> str:
        return KIND[self.spec.operator]

    def one(self, kind: str) -> dict:
        (obj,) = [o for o in self.objects if o["kind"] == kind]
        return obj


def _render(stack: str, change: dict | None = None) -> list[dict]:
    raw = read_config(stack_file(stack))[f"{PROJECT}:job"]
    loaded = load_stack(stack)
    spec = parse_spec({**raw, **(change or {})})
    platform = load_platform_outputs(example_outputs_path(loaded.platform_stack))
    return render(spec, platform, program_text=program_text(spec))


@pytest.fixture(scope="module")
def stacks(dev, prod) -> dict[str, Stack]:
    found = {}
    for name in STACKS:
        loaded = load_stack(name)
        platform = load_platform_outputs(example_outputs_path(loaded.platform_stack))
        objects = _render(name)
        synth = {"dev": dev, "prod": prod}[loaded.platform_stack.rsplit("/", 1)[-1]]
        pool = facts(name).pool
        pools = {r.inputs["metadata"]["name"]: r.inputs["spec"] for r in synth.of_type(NODE_POOL)}
        pool_spec = pools[f"gpu-{pool}"]
        class_name = pool_spec["template"]["spec"]["nodeClassRef"]["name"]
        (node_class,) = [
            r.inputs["spec"] for r in synth.of_type(NODE_CLASS) if r.inputs["metadata"]["name"] == class_name
        ]
        found[name] = Stack(name, platform, objects, pool_spec, node_class, synth.config.kubernetes_version)
    return found


def _ledger(pod_spec: dict) -> dict[str, str] | None:
    env = {e["name"]: e.get("value") for e in pod_spec["containers"][0].get("env") or []}
    return env if attempts.DIR_ENV in env else None


def pod_end_outcome(stack: Stack, end: PodEnd) -> str:
    """Where the job ends when one of its training pods ends so (one node lost, or one rank's failure)."""
    if stack.kind == "TrainJob":
        outcome = train_job_outcome(stack.one("TrainingRuntime"), end)
        return {IGNORED: UNCOUNTED, RESTARTED: COUNTED, FAILED: CLEAR_FAILURE}[outcome]
    if stack.kind == "PyTorchJob":
        job = stack.one("PyTorchJob")
        outcomes = set(pytorch_job_outcome(job, end))
        if FAILED in outcomes:
            return CLEAR_FAILURE
        code = end.exit_code if end.exit_code is not None else 0xBEEF
        pods = job["spec"]["pytorchReplicaSpecs"].values()
        if not all(_ledger(r["template"]["spec"]) for r in pods):
            return "recreated, counted nowhere: restarts until activeDeadlineSeconds"
        return COUNTED if attempts.counts(code) or end.exit_code is None else UNCOUNTED
    if stack.kind == "MPIJob":
        job = stack.one("MPIJob")
        found = {mpi_job_outcome(job, role, end) for role in ("Launcher", "Worker")}
        if FAILED in found or LEFT_FAILED in found:
            # The operator fails the job; docs/workloads.md "MPI jobs": resubmit, it resumes.
            return CLEAR_FAILURE
        return COUNTED
    job = stack.one("RayJob")
    found = {
        ray_job_outcome(job, role, end) for role in ("head", "worker") if role != "head" or end.pod_removed
    }
    if FAILED in found:
        return CLEAR_FAILURE
    return COUNTED if found & {RESTARTED, FRESH_CLUSTER} else RUNS if found == {UNTOUCHED} else str(found)


def node_event(event: str) -> Callable[[Stack], str]:
    def outcome(stack: Stack) -> str:
        fate = training_pod_fate(
            event, stack.pool_spec, stack.node_class, TERMINATION_GRACE_SECONDS, stack.kubernetes_version
        )
        if fate.outcome == KEEPS_RUNNING:
            return RUNS
        # torchrun waits that long for the ranks' save; under Ray Train the program runs in a thread, which
        # gets no SIGTERM handler (trainer/dist.py StopFlag): a RayJob resumes from its periodic checkpoint.
        checkpointed = fate.grace_s >= LAUNCHER_SHUTDOWN_SECONDS and stack.kind != "RayJob"
        if fate.outcome == SHUTDOWN:
            end = PodEnd(143 if checkpointed else 137, ("DisruptionTarget",))
        elif fate.outcome == DELETED:
            end = PodEnd(143 if checkpointed else 137)
        elif fate.outcome == FORCED:
            end = PodEnd(137)
        else:
            assert fate.outcome == KILLED
            end = PodEnd(None, ("DisruptionTarget",))
        found = pod_end_outcome(stack, end)
        return found if checkpointed or found == CLEAR_FAILURE else f"{found}{LOST_STEPS}"

    return outcome


# Pulumi property paths (its replaceOnChanges syntax: `a.b["c.d"]`) as tuples of keys.
def _parts(path: str) -> tuple[str, ...]:
    return tuple(m.group(1) or m.group(2) for m in re.finditer(r'\["([^"]+)"\]|([^.\[\]]+)', path))


def _changed(old, new, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    if isinstance(old, dict) and isinstance(new, dict):
        return [c for k in old.keys() | new.keys() for c in _changed(old.get(k), new.get(k), (*path, k))]
    return [] if old == new else [path]


def update(change: dict) -> Callable[[Stack], str]:
    """Pulumi with the job kinds' replaceOnChanges (workloads/jobs.py): a changed job is replaced (deleted
    first, its pods SIGTERMed and checkpointed, then created again under the same name: the same checkpoint
    prefix), or updated in place, where an operator that built the pods once keeps them and Kueue refuses
    a queue change on a running job (kueue 0.19.2 jobframework/validation.go validateUpdateForQueueName)."""

    def outcome(stack: Stack) -> str:
        try:
            new_objects = _render(stack.name, change)
        except SpecError:
            return CLEAR_FAILURE  # refused before anything changes
        old, new = stack.one(stack.kind), next(o for o in new_objects if o["kind"] == stack.kind)
        changed = _changed(
            {"metadata": old["metadata"], "spec": old["spec"]},
            {"metadata": new["metadata"], "spec": new["spec"]},
        )
        if not changed:
            return RUNS
        replace = [_parts(p) for p in jobs.REPLACE_ON_CHANGES[stack.kind]]
        in_place = [c for c in changed if not any(c[: len(r)] == r for r in replace)]
        if not in_place:
            return REPLACED if stack.kind in jobs.DELETE_BEFORE_REPLACE else "created beside the old job"
        queue_label = ("metadata", "labels", jobs.KUEUE_QUEUE_LABEL)
        namespace = next(o for o in new_objects if o["kind"] == "Namespace")["metadata"]
        labels = {"kubernetes.io/metadata.name": namespace["name"], **namespace["labels"]}
        managed = selects(kueue_manager_config()["managedJobsNamespaceSelector"], labels)
        if (
            queue_label in in_place
            and stack.kind in KUEUE_KINDS
            and managed
            and not new["spec"].get("suspend")
        ):
            return "update refused by Kueue's webhook: `pulumi up` fails"
        if any(c[:1] == ("spec",) for c in in_place):
            return IN_PLACE
        return RUNS

    return outcome


def gpu_check_fails(stack: Stack) -> str:
    """A new node whose GPU check fails keeps its startup taint (infra/addons/gpu_node_check.py) and is
    replaced; a pod that does not tolerate the taint never lands on it (kube-scheduler's TaintToleration)."""
    pods = operator_pods(stack.objects, stack.platform)
    landing = [
        p
        for p in pods
        if tolerated([Toleration(**t) for t in p.spec.get("tolerations") or []], STARTUP_TAINT)
    ]
    return WAITS if pods and not landing else f"{[p.role for p in landing]} land on unchecked GPUs"


def keeps_failing(stack: Stack, tmp_path) -> str:
    """A job whose training fails with 137 every time: how many restarts before it ends, per its
    controller's own bound (jobset failure_policy.go maxRestarts; Training Operator core/job.go
    PastBackoffLimit over the pods' restart counts, which ExitCode leaves at 0, and the launcher's ledger;
    KubeRay backoffLimit times the entry point's restart budget)."""
    cap = 1000
    if stack.kind == "TrainJob":
        runtime = stack.one("TrainingRuntime")
        max_restarts = runtime["spec"]["template"]["spec"]["failurePolicy"].get("maxRestarts", 0)
        for restarts in range(cap):
            # jobset failure_policy.go: a failed Job restarts the JobSet while Status.Restarts < maxRestarts.
            if train_job_outcome(runtime, PodEnd(137)) == FAILED or restarts >= max_restarts:
                return f"{CLEAR_FAILURE} after {restarts} restarts"
        return "restarts without end"
    if stack.kind == "PyTorchJob":
        job = stack.one("PyTorchJob")
        # The master pod as the operator creates it, its environment as the kubelet resolves it.
        master = next(p for p in operator_pods(stack.objects, stack.platform) if p.role == "Master")
        env = container_env(master.pod, "pytorch")
        ledger = attempts.DIR_ENV in env and attempts.Ledger(
            LocalStorage(tmp_path), "master-0", int(env[attempts.BUDGET_ENV]), env[attempts.CREATION_ENV]
        )
        for attempt in range(cap):
            code = (ledger.begin() if ledger else None) or 137
            if ledger and code == 137:
                ledger.end(137)
            if FAILED in pytorch_job_outcome(job, PodEnd(code, pod_removed=False)):
                return (
                    f"{CLEAR_FAILURE} after {attempt - 1} restarts"
                    if code == faults.BUDGET_SPENT
                    else CLEAR_FAILURE
                )
        return "restarts without end"
    if stack.kind == "MPIJob":
        # OnFailure: the kubelet restarts the container in place, the pod stays Running and its restart
        # count grows; PastBackoffLimit fails the job once the counts reach backoffLimit (0: any restart).
        limit = stack.one("MPIJob")["spec"]["runPolicy"]["backoffLimit"]
        for restarts in range(cap):
            if (restarts > 0) if limit == 0 else (restarts >= limit):
                return f"{CLEAR_FAILURE} after {restarts} restarts"
        return "restarts without end"
    job = stack.one("RayJob")
    argv = job["spec"]["entrypoint"].split()
    in_place, fresh = int(argv[argv.index("--restart-budget") + 1]), job["spec"]["backoffLimit"]
    # trainer/ray_train.py restarts the workers `in_place` times per cluster; KubeRay gives `fresh` clusters.
    return f"{CLEAR_FAILURE} after {(in_place + 1) * (fresh + 1) - 1} restarts"


def _requirement(pool_spec: dict, key: str) -> list[str]:
    return next(r["values"] for r in pool_spec["template"]["spec"]["requirements"] if r["key"] == key)


@dataclass(frozen=True)
class Row:
    event: str
    models: str  # the upstream code the row runs through
    outcome: Callable[..., str]
    acceptable: frozenset[str]
    applies: Callable[[Facts], bool] = lambda facts: True


BOUNDED = re.compile(rf"^{CLEAR_FAILURE} after \d+ restarts$")
ROWS = [
    Row(
        "update: new image tag",
        "Pulumi replaceOnChanges, workloads/jobs.py REPLACE_ON_CHANGES",
        update({"imageTag": "0.2.0"}),
        frozenset({REPLACED}),
    ),
    Row(
        "update: trainerConfig",
        "Pulumi replaceOnChanges; the trainer reads its config at start",
        update({"trainerConfig": {"train": {"max_steps": 5000}}}),
        frozenset({REPLACED}),
        applies=lambda s: s.spec.program.runs_trainer,
    ),
    Row(
        "update: queue",
        "kueue 0.19.2 jobframework/validation.go validateUpdateForQueueName",
        update({"queue": "ml-team"}),
        frozenset({REPLACED, CLEAR_FAILURE}),
        applies=lambda s: s.platform.gang_scheduler == "kueue" and "ml-team" in s.platform.kueue_queues,
    ),
    Row(
        "update: suspend",
        "Pulumi replaceOnChanges: a run policy is not among the job's replace paths",
        update({"suspend": True}),
        frozenset({IN_PLACE, RUNS}),
    ),
    Row(
        "update: TTL after finished",
        "Pulumi replaceOnChanges: a run policy is not among the job's replace paths",
        update({"ttlSecondsAfterFinished": 3600}),
        frozenset({IN_PLACE, RUNS}),
        applies=lambda s: s.spec.operator != "trainjob",  # a TrainJob's TTL is its runtime's: a new runtime
    ),
    Row(
        "update: maxRuntimeHours",
        "Pulumi replaceOnChanges; TrainJob's activeDeadlineSeconds is immutable (CEL self == oldSelf)",
        update({"maxRuntimeHours": 48}),
        frozenset({IN_PLACE, RUNS}),
        applies=lambda s: s.spec.operator != "trainjob",  # immutable activeDeadlineSeconds: replaced
    ),
    Row(
        "AMI drift",
        "karpenter v1.14.1 disruption/types.go NewCandidate, drift.go (eventual class)",
        node_event("drift"),
        frozenset({RUNS}),
    ),
    Row(
        "node expiry",
        "karpenter v1.14.1 nodeclaim/expiration, node/termination/terminator Drain",
        node_event("expiry"),
        frozenset({RUNS}),
    ),
    Row(
        "Spot interruption",
        "karpenter-provider-aws v1.14.1 interruption: CordonAndDrain; kubelet shutdown",
        node_event("spot-interruption"),
        frozenset({UNCOUNTED, COUNTED, CLEAR_FAILURE}),
        applies=lambda s: "spot" in s.platform.accelerator_pools[s.pool].capacity_types,
    ),
    Row(
        "Capacity Block ends",
        "karpenter-provider-aws v1.14.1 capacityreservation/expiration (40 min before); kubelet shutdown",
        node_event("capacity-block-end"),
        frozenset({UNCOUNTED, COUNTED, CLEAR_FAILURE}),
        applies=lambda s: "reserved" in s.platform.accelerator_pools[s.pool].capacity_types,
    ),
    Row(
        "capacity reservation interruption warning",
        "karpenter-provider-aws v1.14.1 interruption: CordonAndDrain, as for Spot; kubelet shutdown",
        node_event("capacity-reservation-interruption"),
        frozenset({UNCOUNTED, COUNTED, CLEAR_FAILURE}),
        applies=lambda s: "reserved" in s.platform.accelerator_pools[s.pool].capacity_types,
    ),
    Row(
        "node repair",
        "karpenter v1.14.1 node repair (forceful termination); pod GC",
        lambda s: {pod_end_outcome(s, end) for end in REPAIR.values()},
        frozenset({UNCOUNTED, COUNTED, CLEAR_FAILURE}),
    ),
    Row(
        "GPU check fails on a new node",
        "kube-scheduler TaintToleration; infra/addons/gpu_node_check.py",
        gpu_check_fails,
        frozenset({WAITS}),
    ),
    Row(
        "peer lost mid-step",
        "trainer/faults.py 202; the operators' retry rules",
        lambda s: pod_end_outcome(s, REPAIR["a rank on a healthy node lost its peer"]),
        frozenset({COUNTED, UNCOUNTED, CLEAR_FAILURE}),
    ),
]


# Only the events that can reach a stack (the platform's exports and the job say which), so no case is
# collected to be skipped; the NodePool the platform program registers must agree with its exports.
CASES = [(name, row) for name in STACKS for row in ROWS if row.applies(facts(name))]


@pytest.mark.parametrize(("name", "row"), CASES, ids=[f"{n}-{r.event}" for n, r in CASES])
def test_day_two(stacks, name, row):
    stack = stacks[name]
    spot = "spot" in _requirement(stack.pool_spec, CAPACITY_TYPE_LABEL)
    assert spot == ("spot" in stack.platform.accelerator_pools[facts(name).pool].capacity_types), name
    found = row.outcome(stack)
    found = found if isinstance(found, set) else {found}
    # Resuming from the periodic checkpoint instead of a SIGTERM one is still resuming (the steps in
    # between are lost): what the stack's kind can do (a RayJob, a forced repair).
    assert {f.removesuffix(LOST_STEPS) for f in found} <= row.acceptable, (
        f"{name}, {row.event} ({row.models}): {sorted(found)}"
    )


@pytest.mark.parametrize("name", STACKS)
def test_a_job_that_keeps_failing_ends_after_its_restart_budget(stacks, name, tmp_path):
    stack = stacks[name]
    found = keeps_failing(stack, tmp_path)
    assert BOUNDED.match(found), f"{name}: {found}"
    assert int(found.split()[-2]) <= (stack.spec.restart_budget + 1) ** 2


def test_every_row_reaches_some_stack(stacks):
    for row in ROWS:
        assert any(row.applies(facts(name)) for name in stacks), row.event


@pytest.mark.parametrize(
    "name", [s for s in STACKS if load_stack(s).spec.operator in ("trainjob", "pytorchjob")]
)
def test_a_lost_peer_spends_no_restart_budget_of_a_train_job_or_pytorchjob(stacks, name):
    """When a node is disrupted, its pod checkpoints and is replaced uncounted (above); its peers on healthy
    nodes see their collective break and exit 202 (trainer/faults.py), with no DisruptionTarget. They are
    replaced without counting too: neither the TrainJob's runtime (a podFailurePolicy Ignore rule, so no
    JobSet restart) nor the PyTorchJob's launcher ledger (trainer/attempts.py counts) spends a restart."""
    stack = stacks[name]
    assert pod_end_outcome(stack, REPAIR["a rank on a healthy node lost its peer"]) == UNCOUNTED


@pytest.mark.parametrize(
    "name", [s for s in STACKS if load_stack(s).spec.operator in ("trainjob", "pytorchjob")]
)
def test_a_spot_reclaim_spends_no_restart_budget_of_a_train_job_or_pytorchjob(stacks, name):
    """The kubelet's shutdown marks the pod DisruptionTarget (TrainJob's runtime ignores it) and the trainer
    exits 143 after its checkpoint (PyTorchJob's launcher does not count it: trainer/attempts.py). A
    RayJob's entry point counts a lost worker unless Ray Train recognises the preemption."""
    stack = stacks[name]
    end = PodEnd(143, ("DisruptionTarget",))
    assert pod_end_outcome(stack, end) == UNCOUNTED


@pytest.mark.parametrize("event", ["capacity-block-end", "capacity-reservation-interruption"])
def test_the_end_of_a_reservation_reaches_the_trainer_as_a_spot_reclaim_does(stacks, event):
    """prod-h100-block on its Capacity Block: Karpenter deletes the NodeClaim (block expiry 40 min before
    the end, or the interruption warning), never evicts the do-not-disrupt pod, and EC2's reclaim reaches it
    as the kubelet's shutdown: SIGTERM with the pod's full grace, a checkpoint, exit 143, no restart spent."""
    stack = stacks["prod-h100-block"]
    args = (stack.pool_spec, stack.node_class, TERMINATION_GRACE_SECONDS, stack.kubernetes_version)
    fate = training_pod_fate(event, *args)
    assert fate == training_pod_fate("spot-interruption", *args)
    assert (fate.outcome, fate.grace_s) == (SHUTDOWN, TERMINATION_GRACE_SECONDS)
    assert node_event(event)(stack) == UNCOUNTED
