"""sim/admission/kueue_webhooks.py against Kueue's own test table at v0.19.2: the cases of
pkg/controller/jobs/trainjob/trainjob_webhook_test.go TestValidateCreate that reach what is ported (the
queue-name and prebuilt-workload labels; the Topology Aware Scheduling cases read annotations no object of
ours carries, asserted below), transcribed (the file is not vendored: the public code index holds it at
another commit). Then what Kueue's Update of an admitted TrainJob keeps of the committed stacks'
runtime patches (its Trainer v2.2.1 types)."""

from __future__ import annotations

import pytest

from sim.admission.kueue_webhooks import (
    QUEUE_LABEL,
    UNPORTED_PREFIXES,
    dropped_on_admission,
    validate_job_on_create,
    validate_job_on_update,
)

PREBUILT = "kueue.x-k8s.io/prebuilt-workload-name"


def _train_job(labels: dict[str, str], suspend: bool = False) -> dict:
    return {
        "metadata": {"name": "trainjob", "namespace": "ns", "labels": labels},
        "spec": {"suspend": suspend},
    }


CASES = [
    ("base", {QUEUE_LABEL: "local-queue"}, []),
    ("invalid queue-name label", {QUEUE_LABEL: "queue_name"}, [f"metadata.labels[{QUEUE_LABEL}]"]),
    ("with prebuilt workload", {QUEUE_LABEL: "local-queue", PREBUILT: "prebuilt-workload"}, []),
]


@pytest.mark.parametrize(("case", "labels", "want"), CASES, ids=[c[0] for c in CASES])
def test_validate_create_as_upstream(case, labels, want):
    got = validate_job_on_create(_train_job(labels))
    assert [e.path for e in got] == want
    # testutil.InvalidRFC1123Message: the RFC 1123 subdomain message
    assert all("RFC 1123 subdomain" in e.detail for e in got)


def test_a_running_jobs_queue_cannot_change_but_a_suspended_ones_can():
    old = _train_job({QUEUE_LABEL: "a"})
    assert [e.detail for e in validate_job_on_update(old, _train_job({QUEUE_LABEL: "b"}))] == [
        "field is immutable"
    ]
    assert validate_job_on_update(old, _train_job({QUEUE_LABEL: "b"}, suspend=True)) == []


def test_no_object_of_ours_carries_what_the_port_leaves_out(stack_lives):
    for _, _, life in stack_lives.values():
        for created in life:
            meta = created.obj["metadata"]
            keys = [*(meta.get("labels") or {}), *(meta.get("annotations") or {})]
            template = ((created.obj.get("spec") or {}).get("template") or {}).get("metadata") or {}
            keys += [*(template.get("labels") or {}), *(template.get("annotations") or {})]
            assert not [k for k in keys if k.startswith(UNPORTED_PREFIXES)], created.shown


def test_kueue_keeps_every_field_of_the_committed_train_jobs_patches(stack_lives):
    """An admitted TrainJob is updated with Trainer v2.2.1's types: no field of our patches may be one
    they lack, or the live object drifts from Pulumi's inputs under spec.runtimePatches (replaceOnChanges)."""
    jobs = [o for objects, _, _ in stack_lives.values() for o in objects if o["kind"] == "TrainJob"]
    assert jobs
    for job in jobs:
        assert dropped_on_admission(job) == [], job["metadata"]["name"]


def test_the_model_catches_a_field_added_after_v2_2_1():
    pod = {"terminationGracePeriodSeconds": 180, "containers": [{"name": "node", "resources": {}}]}
    rjob = {"name": "node", "template": {"spec": {"template": {"spec": pod}}}}
    patch = {"manager": "m", "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [rjob]}}}}
    job = {"spec": {"runtimePatches": [patch]}}
    assert dropped_on_admission(job) == [
        "spec.runtimePatches[0].trainingRuntimeSpec.template.spec.replicatedJobs[0].template.spec.template.spec"
        ".terminationGracePeriodSeconds",
        "spec.runtimePatches[0].trainingRuntimeSpec.template.spec.replicatedJobs[0].template.spec.template.spec"
        ".containers[0].resources",
    ]
