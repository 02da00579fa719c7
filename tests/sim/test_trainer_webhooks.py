"""sim/admission/trainer_webhooks.py against Kubeflow Trainer's own test tables at v2.3.0:
pkg/webhooks/trainingruntime_webhook_test.go TestValidateReplicatedJobs (vendored verbatim at
sim/vendored/kubeflow/trainer/v2.3.0/pkg/webhooks/), and the cases of the plugins' Validate that reach
what is ported: pkg/runtime/framework/plugins/jobset/jobset_test.go TestValidate (the runtimePatches
cases) and pkg/runtime/framework/plugins/torch/torch_test.go TestTorchValidate (the reserved-env cases),
transcribed (those two files are not vendored: the public code index holds neither at v2.3.0). Then the
committed stacks' runtimes and TrainJobs."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from sim.admission.trainer_webhooks import UNPORTED_FIELDS, validate_replicated_jobs, validate_train_job

VENDORED = Path(__file__).resolve().parents[2] / "sim/vendored/kubeflow/trainer/v2.3.0/pkg/webhooks"
ANCESTOR = "trainer.kubeflow.org/trainjob-ancestor-step"


def _rjob(name: str, ancestor: str | None, container: str, replicas: int = 1) -> dict:
    labels = {ANCESTOR: ancestor} if ancestor else None
    meta = {"labels": labels} if labels else {}
    pod = {"containers": [{"name": container}]}
    return {
        "name": name,
        "replicas": replicas,
        "template": {"metadata": meta, "spec": {"template": {"spec": pod}}},
    }


def _wrapper(
    launcher: bool = False, replicas: int = 1, ancestors: str | None = "default", names=None
) -> list[dict]:
    """testingutil.MakeJobSetWrapper's replicated jobs (pkg/util/testing/wrapper.go): dataset-initializer,
    model-initializer, node (ancestor trainer), each with its container; LauncherReplica inserts
    `launcher` (no labels, container node) before node."""
    names = names or {}
    jobs = [
        ("dataset-initializer", "dataset-initializer", "dataset-initializer"),
        ("model-initializer", "model-initializer", "model-initializer"),
        ("node", "trainer", "node"),
    ]
    rjobs = [
        _rjob(job, ancestor if ancestors == "default" else ancestors, names.get(job, container), replicas)
        for job, ancestor, container in jobs
    ]
    if launcher:
        rjobs.insert(2, _rjob("launcher", None, "node", replicas))
    return rjobs


REPLICAS = "spec.template.spec.replicatedJobs[{}].replicas"
CONTAINERS = "spec.template.spec.replicatedJobs[{}].template.spec.template.spec.containers"
# TestValidateReplicatedJobs: (case, replicated jobs, the error paths it wants)
REPLICATED_JOBS = [
    ("valid replicatedJobs", _wrapper(launcher=True), []),
    (
        "valid replicatedJobs with unknown user-specified ancestor",
        _wrapper(replicas=2, ancestors="user-specified"),
        [],
    ),
    ("invalid replicas", _wrapper(launcher=True, replicas=2), [REPLICAS.format(i) for i in (0, 1, 3)]),
    (
        "missing required container in replicatedJobs",
        _wrapper(names={"dataset-initializer": "test", "model-initializer": "test", "node": "test"}),
        [CONTAINERS.format(i) for i in (0, 1, 2)],
    ),
]


def test_every_case_of_the_vendored_table_is_transcribed():
    names = re.findall(r'^\t\t"(.*)": \{$', (VENDORED / "trainingruntime_webhook_test.go").read_text(), re.M)
    assert names == [c[0] for c in REPLICATED_JOBS]


@pytest.mark.parametrize(("case", "rjobs", "want"), REPLICATED_JOBS, ids=[c[0] for c in REPLICATED_JOBS])
def test_validate_replicated_jobs_as_upstream(case, rjobs, want):
    """Upstream compares the error list ignoring Detail and BadValue: the paths and types, in order."""
    got = validate_replicated_jobs(rjobs)
    assert [(e.path, e.type) for e in got] == [(p, "Invalid value") for p in want]


def _runtime(containers=("node",), init_containers=(), torch: bool = True) -> dict:
    pod = {
        "containers": [{"name": c} for c in containers],
        "initContainers": [{"name": c} for c in init_containers],
    }
    rjob = {"name": "node", "template": {"spec": {"template": {"spec": pod}}}}
    ml_policy = {"torch": {}} if torch else {}
    return {"spec": {"mlPolicy": ml_policy, "template": {"spec": {"replicatedJobs": [rjob]}}}}


def _train_job(patch_rjobs=None, env=None, suspend=None, manager="test.io/manager") -> dict:
    spec: dict = {"runtimeRef": {"name": "runtime"}, "trainer": {"env": env or []}}
    if patch_rjobs is not None:
        template = {"spec": {"replicatedJobs": patch_rjobs}}
        spec["runtimePatches"] = [{"manager": manager, "trainingRuntimeSpec": {"template": template}}]
    if suspend is not None:
        spec["suspend"] = suspend
    return {"metadata": {"name": "test", "namespace": "default"}, "spec": spec}


def _pod_patch(name: str = "node", **pod) -> dict:
    return {"name": name, "template": {"spec": {"template": {"spec": pod}}}}


PATCHES = "spec.runtimePatches"
# (source case, runtime, TrainJob, old TrainJob or None, the (path, type) errors it wants)
TRAIN_JOBS = [
    # jobset_test.go TestValidate
    ("runtimePatches contain invalid replicated job", _runtime(containers=()),
     _train_job([{"name": "invalid"}]), None, [(PATCHES, "Invalid value")]),
    ("runtimePatches contain invalid initContainer",
     _runtime(containers=(), init_containers=("custom-init",)),
     _train_job([_pod_patch(initContainers=[{"name": "invalid"}])]), None, [(PATCHES, "Invalid value")]),
    ("runtimePatches contain invalid container", _runtime(),
     _train_job([_pod_patch(containers=[{"name": "invalid"}])]), None, [(PATCHES, "Invalid value")]),
    ("runtimePatches contain envs for reserved container", _runtime(),
     _train_job([_pod_patch(containers=[{"name": "node", "env": [{"name": "ENV_NAME", "value": "v"}]}])]),
     None, [(PATCHES, "Invalid value")]),
    ("allow runtimePatches when creating a new trainJob", _runtime(),
     _train_job([_pod_patch(serviceAccountName="service-account")]), None, []),
    ("allow updates to trainJob with no changes to runtimePatches", _runtime(),
     _train_job([_pod_patch(serviceAccountName="service-account")]),
     _train_job([_pod_patch(serviceAccountName="service-account")]), []),
    ("forbid changes to runtimePatches when trainJob is not suspended", _runtime(),
     _train_job([_pod_patch(serviceAccountName="new-service-account")]),
     _train_job([_pod_patch(serviceAccountName="service-account")]), [(PATCHES, "Forbidden")]),
    ("allow atomic update: modify runtimePatches and unsuspend trainJob in a single request", _runtime(),
     _train_job([_pod_patch(serviceAccountName="new-service-account")], suspend=False),
     _train_job([_pod_patch(serviceAccountName="service-account")], suspend=True), []),
    # torch_test.go TestTorchValidate
    ("valid environment variable present", _runtime(),
     _train_job(env=[{"name": "test"}, {"name": "test2"}]), None, []),
    ("reserved environment variable present", _runtime(),
     _train_job(env=[{"name": "test"}, {"name": "PET_NPROC_PER_NODE"}]), None,
     [("spec.trainer.env", "Invalid value")]),
]  # fmt: skip


@pytest.mark.parametrize(
    ("case", "runtime", "job", "old", "want"), TRAIN_JOBS, ids=[c[0] for c in TRAIN_JOBS]
)
def test_validate_train_job_as_upstream(case, runtime, job, old, want):
    got = validate_train_job(job, runtime, old)
    assert [(e.path, e.type) for e in got] == want


def test_a_train_job_on_a_runtime_that_does_not_exist_is_refused():
    (error,) = validate_train_job(_train_job(), None)
    assert error.path == "spec.runtimeRef" and "must be created before the TrainJob" in error.detail


def test_the_committed_stacks_pass_and_set_nothing_the_port_leaves_out(stack_lives):
    judged = 0
    for objects, _, _ in stack_lives.values():
        runtimes = {o["metadata"]["name"]: o for o in objects if o["kind"] == "TrainingRuntime"}
        for runtime in runtimes.values():
            assert validate_replicated_jobs(runtime["spec"]["template"]["spec"]["replicatedJobs"]) == []
        for job in (o for o in objects if o["kind"] == "TrainJob"):
            assert validate_train_job(job, runtimes[job["spec"]["runtimeRef"]["name"]]) == []
            assert not set(job["spec"]) & set(UNPORTED_FIELDS)
            assert (
                "envInjection" not in runtimes[job["spec"]["runtimeRef"]["name"]]["spec"]["mlPolicy"]["torch"]
            )
            assert job["spec"]["trainer"]["command"][:2] != ["tune", "run"]  # constants.TorchTuneEntrypoint
            judged += 1
    assert judged


def test_the_platforms_cluster_training_runtime_passes():
    from infra.addons.training import torch_distributed_runtime

    assert (
        validate_replicated_jobs(torch_distributed_runtime()["spec"]["template"]["spec"]["replicatedJobs"])
        == []
    )
