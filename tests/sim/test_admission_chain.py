"""Every committed workload stack's objects, and every object the controllers create from them, pass the
modelled admission chain (sim/admission/chain.py over the ledger's ports); and the chain refuses what the
upstream code refuses, at the stage where it happens."""

from __future__ import annotations

import copy

import pytest

from sim.admission.chain import PULUMI, admit, ledger, lifecycle, webhooks_that_see
from workloads.stacks import workload_stacks

STACKS = workload_stacks()
JOBSET_EXCLUSIVE = "alpha.jobset.sigs.k8s.io/exclusive-topology"


@pytest.mark.parametrize("stack", STACKS)
def test_every_object_of_the_stacks_life_is_admitted(stack_lives, stack):
    objects, facts, _ = stack_lives[stack]
    assert [str(r) for r in admit(objects, facts)] == []


def test_the_life_reaches_every_stage_the_controllers_create(stack_lives):
    made = {(c.obj["kind"], c.by.split(" ")[0]) for _, _, life in stack_lives.values() for c in life}
    for stage in [("JobSet", "Kubeflow"), ("Job", "JobSet"), ("Pod", "Job"), ("Pod", "Training"),
                  ("RayCluster", "KubeRay"), ("Job", "KubeRay"), ("Pod", "KubeRay")]:  # fmt: skip
        assert stage in made, stage


def _with_rule_name(objects: list[dict], name: str) -> list[dict]:
    changed = copy.deepcopy(objects)
    for obj in changed:
        if obj["kind"] == "TrainingRuntime":
            obj["spec"]["template"]["spec"]["failurePolicy"]["rules"][0]["name"] = name
    return changed


def test_a_hyphenated_failure_rule_stops_the_train_job_at_its_jobset(stack_lives):
    """What stopped every TrainJob: JobSet's webhook refuses the JobSet Trainer creates; the TrainJob itself
    is admitted, and neither Jobs nor pods are ever created."""
    objects, facts, _ = stack_lives["dev-zimdb"]
    (refusal,) = admit(_with_rule_name(objects, "permanent-exit-code"), facts)
    assert refusal.judge == "webhook validate-jobset-x-k8s-io-v1alpha2-jobset.x-k8s.io"
    assert refusal.created.obj["kind"] == "JobSet" and refusal.created.by.startswith("Kubeflow Trainer")
    assert "invalid failure policy rule name 'permanent-exit-code'" in refusal.message


def test_a_job_the_api_server_refuses_stops_its_pods(stack_lives):
    """A pod failure policy the API server refuses (an exit code 0 with In) fails the JobSet's Job."""
    objects, facts, _ = stack_lives["dev-zimdb"]
    broken = copy.deepcopy(objects)
    runtime = next(o for o in broken if o["kind"] == "TrainingRuntime")
    rules = runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["podFailurePolicy"][
        "rules"
    ]
    rules[-1]["onExitCodes"]["values"] = [0, *rules[-1]["onExitCodes"]["values"]]
    refusals = admit(broken, facts)
    assert {(r.judge, r.created.obj["kind"]) for r in refusals} == {("API server (Job validation)", "Job")}
    assert "must not be 0 for the In operator" in refusals[0].message


def test_a_queued_train_job_meets_kueues_webhooks_and_an_unqueued_one_does_not(stack_lives):
    seen = {}
    for stack, (objects, _, life) in stack_lives.items():
        namespace = next((o for o in objects if o["kind"] == "Namespace"), {"metadata": {"labels": {}}})
        for created in life:
            if created.obj["kind"] == "TrainJob":
                names = {
                    n for n, _ in webhooks_that_see(created.obj, namespace["metadata"].get("labels") or {})
                }
                seen[stack] = "vtrainjob.kb.io" in names
    assert set(seen.values()) == {True, False}, seen


def test_what_the_ledger_calls_never_reached_is_never_reached(stack_lives):
    """An entry with `sees: []` matches no object of any committed stack's life."""
    unseen = {n for n, e in ledger()["webhooks"].items() if not e["sees"]}
    for objects, _, life in stack_lives.values():
        namespaces = {o["metadata"]["name"]: o for o in objects if o["kind"] == "Namespace"}
        for created in life:
            namespace = namespaces.get(created.obj["metadata"].get("namespace", ""), {"metadata": {}})
            labels = namespace["metadata"].get("labels") or {}
            hit = {n for n, _ in webhooks_that_see(created.obj, labels)} & unseen
            assert not hit, f"{created.shown} meets {hit}, which the ledger says nothing reaches"


def test_no_jobset_of_ours_asks_for_exclusive_placement(stack_lives):
    """JobSet's pod webhooks act only on that annotation (ledger: mutate--v1-pod, validate--v1-pod)."""
    for _, _, life in stack_lives.values():
        for created in life:
            assert JOBSET_EXCLUSIVE not in (created.obj["metadata"].get("annotations") or {}), created.shown


def test_the_life_begins_with_what_pulumi_creates(stack_lives):
    objects, facts, _ = stack_lives["prod-a100"]
    life = lifecycle(objects, facts)
    assert [c.obj for c in life if c.by == PULUMI] == objects
    assert all(c.parent is not None for c in life if c.by != PULUMI)
