"""Hostile job specs: the workload program runs under Pulumi mocks with the platform's example exports;
a job the platform cannot run (more GPUs than a pool's instances have, more nodes than it grows to, an
accelerator it does not offer, bad types) must fail naming the key, with no resource created."""

from __future__ import annotations

import json

import pytest
import yaml
from recording_mocks import RecordingMocks

from infra.tools.synth import REPO
from workloads.platform import example_outputs_path

BASE_JOB = yaml.safe_load((REPO / "Pulumi.dev-zimdb.yaml").read_text())["config"]["mlops-eks:job"]
DELETE = object()
# (case, changes to the dev-zimdb job, platform, the key the message must name)
CASES = [
    ("t4-gpus-above-pool", {"gpusPerNode": 8}, "dev", "mlops-eks:job.gpusPerNode"),
    (
        "amd-gpus-above-pool",
        {"accelerator": "amd-v520", "gpusPerNode": 2},
        "dev",
        "mlops-eks:job.gpusPerNode",
    ),
    ("a100-gpus-above-p4d", {"accelerator": "a100", "gpusPerNode": 16}, "prod", "mlops-eks:job.gpusPerNode"),
    ("nodes-above-pool-max", {"nodes": 5}, "dev", "mlops-eks:job.nodes"),
    ("accelerator-not-offered", {"accelerator": "a100"}, "dev", "mlops-eks:job.accelerator"),
    ("accelerator-unknown", {"accelerator": "v100"}, "dev", "mlops-eks:job.accelerator"),
    ("gpus-zero", {"gpusPerNode": 0}, "dev", "mlops-eks:job.gpusPerNode"),
    ("gpus-wrong-type", {"gpusPerNode": "four"}, "dev", "mlops-eks:job.gpusPerNode"),
    ("nodes-negative", {"nodes": -1}, "dev", "mlops-eks:job.nodes"),
    ("image-missing", {"imageTag": DELETE}, "dev", "mlops-eks:job.image"),
    ("procs-above-gpus", {"procsPerNode": 8}, "dev", "mlops-eks:job.procsPerNode"),
    ("unknown-key", {"gpus": 4}, "dev", "mlops-eks:job.gpus"),
    ("cpu-above-instance", {"cpuPerNode": 500}, "dev", "mlops-eks:job.cpuPerNode"),
    ("memory-above-instance", {"memoryGiBPerNode": 10000}, "dev", "mlops-eks:job.memoryGiBPerNode"),
    (
        "namespace-kube-system",
        {"namespace": "kube-system", "createNamespace": False},
        "dev",
        "mlops-eks:job.namespace",
    ),
    ("name-of-a-platform-namespace", {"name": "monitoring"}, "dev", "mlops-eks:job.name"),
    ("image-of-the-other-vendor", {"imageRepository": "rocm"}, "dev", "mlops-eks:job.imageRepository"),
    ("priority-the-platform-lacks", {"priority": "high"}, "dev", "mlops-eks:job.priority"),
    ("env-the-operator-sets", {"env": {"MASTER_PORT": "1234"}}, "dev", "mlops-eks:job.env.MASTER_PORT"),
    ("image-tag-unquoted-number", {"imageTag": 1.1}, "dev", "mlops-eks:job.imageTag"),
    (
        "pytorchjob-script-with-restarts",
        {
            "operator": "pytorchjob",
            "trainerConfig": DELETE,
            "restartBudget": 2,
            "program": {"delivery": "configmap", "file": "trainer/gpu_check.py"},
        },
        "dev",
        "mlops-eks:job.restartBudget",
    ),
]


def run_workload(pulumi_mocks, program_error, job: object, platform: str) -> tuple[str | None, list[str]]:
    """(error message or None, types created) for the workload program under mocks."""
    from workloads.program import program

    outputs = json.loads(example_outputs_path(platform).read_text())
    mocks = RecordingMocks({**outputs, "kubeconfig": '{"apiVersion": "v1"}'})
    job_text = json.dumps(job)  # a string too: the engine passes what the stack file holds, as JSON
    config = {"mlops-eks:platformStack": f"organization/mlops-eks/{platform}", "mlops-eks:job": job_text}
    pulumi_mocks(mocks, stack=f"{platform}-faults", config=config)
    error = program_error(program)
    # Reading the platform's outputs (StackReference) creates nothing.
    return error, [r.typ for r in mocks.resources if r.typ != "pulumi:pulumi:StackReference"]


def changed(changes: dict) -> dict:
    job = {**BASE_JOB, **{k: v for k, v in changes.items() if v is not DELETE}}
    return {k: v for k, v in job.items() if changes.get(k) is not DELETE}


def test_the_unmodified_job_creates_resources(pulumi_mocks, program_error):
    """Control: the same harness deploys the dev-zimdb job, so an empty list below means refused."""
    error, created = run_workload(pulumi_mocks, program_error, BASE_JOB, "dev")
    assert error is None and "kubernetes:trainer.kubeflow.org/v1alpha1:TrainJob" in created


@pytest.mark.parametrize(("case", "changes", "platform", "key"), CASES, ids=[c[0] for c in CASES])
def test_hostile_job_spec_creates_nothing_and_names_the_key(
    pulumi_mocks, program_error, ledger, case, changes, platform, key
):
    error, created = run_workload(pulumi_mocks, program_error, changed(changes), platform)
    entry = ledger("job spec", case, error=error, names=f"{key}:", created=len(created))
    assert error is not None, f"{case}: accepted"
    assert created == [], f"{case}: created {created} before failing"
    assert entry.clear, f"{case}: message does not name {key}: {error}"


def test_job_that_is_not_an_object_is_refused(pulumi_mocks, program_error, ledger):
    error, created = run_workload(pulumi_mocks, program_error, "4xT4 please", "dev")
    entry = ledger("job spec", "job-not-an-object", error=error, names="mlops-eks:job:", created=len(created))
    assert entry.rejected and entry.clear, error
