"""sim/operators/pods.py against the Training Operator's own tables (kubeflow/trainer v1.9.2, the
Training Operator v1 the platform pins): pkg/controller.v1/pytorch/initcontainer_test.go TestInitContainer,
vendored at sim/vendored/kubeflow/trainer/v1.9.2/ (PROVENANCE.txt), and elastic_test.go
TestElasticGenerate, transcribed (the index holds only an older copy of it). Upstream's other pod tests
of the mirrored controllers are envtest or Ginkgo suites (pytorchjob_controller_test.go,
mpijob_controller_test.go, Trainer's and JobSet's controller tests), not tables; test_operator_pods.py
checks the constants the model copies against the vendored sources.
"""

from __future__ import annotations

import re

import pytest

from sim.operators import pods as model
from tests.sim.upstream_tables import VENDORED

INIT_CONTAINER_TEST = "kubeflow/trainer/v1.9.2/pkg/controller.v1/pytorch/initcontainer_test.go"
# TestInitContainer sets the operator's defaults: its own template, image and tries.
DEFAULTS = model.OperatorSettings(
    pytorch_init_template=model.PYTORCH_INIT_TEMPLATE_BUILTIN,
    pytorch_init_image=model.PYTORCH_INIT_IMAGE,
    pytorch_init_max_tries=model.PYTORCH_INIT_MAX_TRIES,
    mpi_kubectl_delivery_image=model.MPI_KUBECTL_DELIVERY_IMAGE,
    gang_scheduler=None,
    ray_init_container_injection=True,
)


def _replica() -> dict:
    """`Replicas: 1`; the port builds whole pods, so the replica carries the `pytorch` container the
    operator's webhook requires of every PyTorchJob."""
    return {"replicas": 1, "template": {"spec": {"containers": [{"name": "pytorch", "image": "x"}]}}}


def _job(*types: str, **spec) -> dict:
    replicas = {t: _replica() for t in types}
    return {"metadata": {"name": "job", "namespace": "ns"}, "spec": {"pytorchReplicaSpecs": replicas, **spec}}


# TestInitContainer, in the table's order (its cases have no names): (replica types, rtype, init containers)
INIT_CONTAINER = [
    (("Worker",), "Worker", 0),
    (("Worker", "Master"), "Worker", 1),
    (("Worker", "Master"), "Master", 0),
]


def test_the_vendored_table_has_these_cases():
    text = (VENDORED / INIT_CONTAINER_TEST).read_text()
    rtypes = re.findall(r"rtype:\s+kubeflowv1\.PyTorchJobReplicaType(\w+)", text)
    expected = [int(n) for n in re.findall(r"expected:\s+(\d+)", text)]
    assert list(zip(rtypes, expected, strict=True)) == [(rtype, n) for _, rtype, n in INIT_CONTAINER]


@pytest.mark.parametrize(("types", "rtype", "expected"), INIT_CONTAINER, ids=lambda v: str(v))
def test_init_container(types, rtype, expected):
    pods = [p for p in model.pytorch_job_pods(_job(*types), DEFAULTS) if p.role == rtype]
    assert [len(p.pod["spec"].get("initContainers") or []) for p in pods] == [expected]


# TestElasticGenerate: name -> (PyTorchJob spec, the variables; None for none). Upstream compares as a set.
ELASTIC = {
    "Without ElasticPolicy": ({}, None),
    "With ElasticPolicy": (
        {
            "elasticPolicy": {
                "minReplicas": 1,
                "maxReplicas": 3,
                "rdzvBackend": "c10d",
                "rdzvPort": 1234,
                "rdzvHost": "localhost",
                "rdzvId": "rdzv-id",
                "rdzvConf": [
                    {"key": "rdzv-conf-name", "value": "rdzv-conf-value"},
                    {"key": "rdzv-conf-name-1", "value": "rdzv-conf-value-1"},
                ],
                "maxRestarts": 3,
            }
        },
        {
            ("PET_MAX_RESTARTS", "3"),
            ("PET_RDZV_BACKEND", "c10d"),
            ("PET_RDZV_ENDPOINT", "localhost:1234"),
            ("PET_RDZV_ID", "rdzv-id"),
            ("PET_RDZV_CONF", "rdzv-conf-name=rdzv-conf-value,rdzv-conf-name-1=rdzv-conf-value-1"),
            ("PET_NNODES", "1:3"),
        },
    ),
}


@pytest.mark.parametrize("name", ELASTIC)
def test_elastic_generate(name):
    spec, expected = ELASTIC[name]
    job = _job("Worker", **spec)
    env = model.elastic_env(job["metadata"]["name"], job["spec"])
    assert (None if env is None else set(env)) == expected
    assert env is None or len(env) == len(expected)


def test_the_elastic_variables_reach_every_pod():
    """What Generate returns is what setPodEnv appends to each container (nProcPerNode included)."""
    policy = {"minReplicas": 1, "maxReplicas": 2, "nProcPerNode": 4, "rdzvPort": 29400}
    (worker, *_) = model.pytorch_job_pods(_job("Worker", elasticPolicy=policy), DEFAULTS)
    env = model.container_env(worker.pod, "pytorch")
    assert env["PET_NPROC_PER_NODE"] == "4" and env["PET_RDZV_ENDPOINT"] == "job-worker-0:29400"
