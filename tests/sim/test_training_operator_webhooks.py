"""sim/admission/training_operator_webhooks.py against Training Operator v1's own test table at v1.9.2
(the commit infra/pins.py pins): pkg/webhooks/pytorch/pytorchjob_webhook_test.go TestValidateV1PyTorchJob,
transcribed case by case (not vendored: the public code index holds that file at other commits). Then the
committed stacks' PyTorchJobs."""

from __future__ import annotations

import copy

import pytest

from sim.admission.training_operator_webhooks import validate, validate_update

SPECS = "spec.pytorchReplicaSpecs"
IMAGE = "gcr.io/kubeflow-ci/pytorch-dist-mnist_test:1.0"
CONTROLLER, MULTIKUEUE = "kubeflow.org/training-operator", "kueue.x-k8s.io/multikueue"


def _replica(replicas: int | None = 1, containers: list[dict] | None = None) -> dict:
    spec = {
        "template": {
            "spec": {
                "containers": [{"name": "pytorch", "image": IMAGE}] if containers is None else containers
            }
        }
    }
    return spec if replicas is None else {"replicas": replicas, **spec}


VALID_SPECS = {"Master": _replica(), "Worker": _replica()}


def _job(name="test", specs=None, **spec) -> dict:
    return {
        "metadata": {"name": name},
        "spec": {"pytorchReplicaSpecs": copy.deepcopy(specs or VALID_SPECS), **spec},
    }


# (case, job, old job or None, the (path, type) errors, the warnings)
CASES = [
    ("valid PyTorchJob", _job(runPolicy={"managedBy": CONTROLLER}, elasticPolicy={"rdzvBackend": "c10d"}),
     None, [], []),
    ("pytorchJob name does not meet DNS1035", _job(name="0-test"), None,
     [("metadata.name", "Invalid value")], []),
    ("no containers", _job(specs={"Worker": _replica(None, containers=[])}), None,
     [(f"{SPECS}[Worker].template.spec.containers", "Required value")] * 2, []),
    ("image is empty", _job(specs={"Worker": _replica(None, containers=[{"name": "pytorch", "image": ""}])}),
     None,
     [(f"{SPECS}[Worker].template.spec.containers[0].image", "Required value")], []),
    ("pytorchJob default container name doesn't present",
     _job(specs={"Worker": _replica(None, containers=[{"name": "", "image": IMAGE}])}), None,
     [(f"{SPECS}[Worker].template.spec.containers", "Required value")], []),
    ("the number of replicas in masterReplica is other than 1", _job(specs={"Master": _replica(2)}), None,
     [(f"{SPECS}[Master].replicas", "Forbidden")], []),
    ("Spec.ElasticPolicy.NProcPerNode are set", _job(elasticPolicy={"nProcPerNode": 1}), None, [],
     ["spec.elasticPolicy.nProcPerNode is deprecated, use spec.nprocPerNode instead"]),
    ("Spec.NprocPerNode and Spec.ElasticPolicy.NProcPerNode are set",
     _job(nprocPerNode="1", elasticPolicy={"nProcPerNode": 1}), None,
     [("spec.elasticPolicy.nProcPerNode", "Forbidden")],
     ["spec.elasticPolicy.nProcPerNode is deprecated, use spec.nprocPerNode instead"]),
    ("attempt to set unsupported managedBy controller name gets rejected",
     _job(runPolicy={"managedBy": "other-job-controller"}), None,
     [("spec.runPolicy.managedBy", "Unsupported value")], []),
    ("attempt to update the managedBy field gets rejected", _job(runPolicy={"managedBy": MULTIKUEUE}),
     _job(runPolicy={"managedBy": CONTROLLER}), [("spec.runPolicy.managedBy", "Invalid value")], []),
    ("attempt to configure elasticPolicy when no worker is configured",
     _job(specs={"Master": _replica()}, elasticPolicy={}), None,
     [(f"{SPECS}[Worker]", "Required value")], []),
    ("attempt to configure worker with 0 replicas", _job(specs={"Worker": _replica(0)}, elasticPolicy={}),
     None,
     [(f"{SPECS}[Worker].replicas", "Forbidden")], []),
]  # fmt: skip


@pytest.mark.parametrize(("case", "job", "old", "errors", "warnings"), CASES, ids=[c[0] for c in CASES])
def test_validate_as_upstream(case, job, old, errors, warnings):
    got_warnings, got = validate(job, old)
    assert [(e.path, e.type) for e in got] == errors
    assert got_warnings == warnings


def test_the_webhooks_update_compares_the_job_with_itself():
    """ValidateUpdate hands validatePyTorchJob the new object as the old one: a managedBy change passes."""
    assert (
        validate_update(_job(runPolicy={"managedBy": CONTROLLER}), _job(runPolicy={"managedBy": MULTIKUEUE}))
        == []
    )


def test_the_committed_stacks_pytorchjobs_pass(stack_lives):
    jobs = [o for objects, _, _ in stack_lives.values() for o in objects if o["kind"] == "PyTorchJob"]
    assert jobs
    for job in jobs:
        assert validate(job) == ([], []), job["metadata"]["name"]
