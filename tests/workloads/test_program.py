"""workloads.program under Pulumi mocks with a mocked StackReference to the dev platform."""

from __future__ import annotations

import json
import uuid

import pulumi
import pytest
from recording_mocks import RecordingMocks

from workloads.platform import example_outputs_path

JOB = {"name": "zimdb", "accelerator": "t4", "gpusPerNode": 4, "imageTag": "0.1.0"}


def _run_program():
    from workloads.program import program

    program()


@pytest.fixture
def deployed(workload_mocks):
    mocks = workload_mocks(JOB)

    @pulumi.runtime.test
    def run():
        _run_program()

    run()
    return mocks


def test_program_creates_namespace_quota_identity_config_and_trainjob(deployed):
    types = [r.typ for r in deployed.resources]
    for typ in (
        "pulumi:pulumi:StackReference",
        "pulumi:providers:kubernetes",
        "kubernetes:core/v1:Namespace",
        "kubernetes:core/v1:ResourceQuota",
        "kubernetes:core/v1:ServiceAccount",
        "kubernetes:core/v1:ConfigMap",
        "kubernetes:trainer.kubeflow.org/v1alpha1:TrainingRuntime",
        "kubernetes:trainer.kubeflow.org/v1alpha1:TrainJob",
        "aws:iam/role:Role",
        "aws:iam/rolePolicy:RolePolicy",
        "aws:eks/podIdentityAssociation:PodIdentityAssociation",
    ):
        assert typ in types, f"{typ} not created; created: {types}"
    job = deployed.of_type("kubernetes:trainer.kubeflow.org/v1alpha1:TrainJob")[0]
    assert job.inputs["spec"]["trainer"]["numProcPerNode"] == 4
    assert job.inputs["metadata"]["namespace"] == "zimdb"


def test_kubernetes_provider_uses_the_platform_kubeconfig(deployed):
    (provider,) = deployed.of_type("pulumi:providers:kubernetes")
    assert provider.inputs["kubeconfig"] == '{"apiVersion": "v1"}'
    (ref,) = deployed.of_type("pulumi:pulumi:StackReference")
    assert ref.name == "organization/mlops-eks/dev"


def test_job_role_reaches_only_the_job_prefix_from_its_service_account(deployed):
    (policy,) = deployed.of_type("aws:iam/rolePolicy:RolePolicy")
    statements = json.loads(policy.inputs["policy"])["Statement"]
    bucket = json.loads(example_outputs_path("dev").read_text())["bucket_name"]
    listing = next(s for s in statements if s["Action"] == "s3:ListBucket")
    assert listing["Resource"] == f"arn:aws:s3:::{bucket}"
    assert listing["Condition"] == {"StringLike": {"s3:prefix": ["jobs/zimdb/", "jobs/zimdb/*"]}}
    objects = next(s for s in statements if s["Action"] != "s3:ListBucket")
    assert objects["Resource"] == f"arn:aws:s3:::{bucket}/jobs/zimdb/*"
    assert objects["Action"] == ["s3:GetObject", "s3:PutObject", "s3:DeleteObject", "s3:AbortMultipartUpload"]

    (role,) = deployed.of_type("aws:iam/role:Role")
    trust = json.loads(role.inputs["assumeRolePolicy"])["Statement"][0]
    assert trust["Principal"] == {"Service": "pods.eks.amazonaws.com"}
    assert trust["Action"] == ["sts:AssumeRole", "sts:TagSession"]
    # Pinned to the platform's cluster: an association on another cluster cannot use the role.
    assert trust["Condition"]["StringEquals"] == {
        "aws:RequestTag/eks-cluster-arn": "arn:aws:eks:us-east-1:123456789012:cluster/mlops-eks-dev",
        "aws:RequestTag/kubernetes-namespace": "zimdb",
        "aws:RequestTag/kubernetes-service-account": "zimdb",
    }
    # Under the cluster's role path, which the platform's bucket policy admits (infra/platform/storage.py).
    assert role.inputs["path"] == "/mlops-eks/mlops-eks-dev/"
    kms = next(s for s in statements if s["Sid"] == "BucketKeyThroughS3")
    assert kms["Action"] == ["kms:Decrypt", "kms:GenerateDataKey"]
    assert kms["Condition"]["StringEquals"] == {"kms:ViaService": "s3.us-east-1.amazonaws.com"}
    assert kms["Condition"]["StringLike"]["kms:EncryptionContext:aws:s3:arn"] == [
        f"arn:aws:s3:::{bucket}",
        f"arn:aws:s3:::{bucket}/jobs/zimdb/*",
    ]
    (assoc,) = deployed.of_type("aws:eks/podIdentityAssociation:PodIdentityAssociation")
    assert (assoc.inputs["clusterName"], assoc.inputs["namespace"], assoc.inputs["serviceAccount"]) == (
        "mlops-eks-dev",
        "zimdb",
        "zimdb",
    )


def test_the_job_role_lists_its_own_prefix_and_not_a_sibling_jobs(deployed):
    """s3:prefix under IAM's StringLike (policy/iam_semantics.py): the prefixes the trainer lists with
    (trainer/storage.py: always `<dir>/`) are admitted; a prefix another job's keys also start with is not
    ("jobs/zimdb" would list "jobs/zimdb-mpi/...")."""
    from policy.iam_semantics import matches

    (policy,) = deployed.of_type("aws:iam/rolePolicy:RolePolicy")
    listing = next(
        s for s in json.loads(policy.inputs["policy"])["Statement"] if s["Action"] == "s3:ListBucket"
    )
    patterns = listing["Condition"]["StringLike"]["s3:prefix"]

    def admitted(prefix: str) -> bool:
        return any(matches(p, prefix) for p in patterns)

    for prefix in ("jobs/zimdb/", "jobs/zimdb/checkpoints/", "jobs/zimdb/checkpoints/step-00000100/"):
        assert admitted(prefix), prefix
    for prefix in ("jobs/zimdb", "jobs/zimdb-mpi/", "jobs/zimdb-mpi", "jobs/", "", "jobs/zimd"):
        assert not admitted(prefix), prefix


def test_job_without_s3_gets_no_aws_identity(workload_mocks):
    mocks = workload_mocks({**JOB, "checkpoint": None, "output": None})

    @pulumi.runtime.test
    def run():
        _run_program()

    run()
    assert not [r for r in mocks.resources if r.typ.startswith("aws:")]
    assert mocks.of_type("kubernetes:trainer.kubeflow.org/v1alpha1:TrainJob")


def test_spec_the_platform_cannot_run_fails_before_any_resource(workload_mocks):
    mocks = workload_mocks({**JOB, "gpusPerNode": 8})

    @pulumi.runtime.test
    def run():
        _run_program()

    with pytest.raises(Exception, match=r"mlops-eks:job\.gpusPerNode: 8"):
        run()
    assert [r.typ for r in mocks.resources] == ["pulumi:pulumi:StackReference"]


def test_program_creates_exactly_what_render_prints(deployed, dev_platform):
    from workloads.render import render
    from workloads.spec import parse_spec

    rendered = render(parse_spec(JOB), dev_platform)
    created = [r for r in deployed.resources if r.typ.startswith("kubernetes:") and "metadata" in r.inputs]
    assert [(r.inputs["metadata"]["name"], r.typ.rsplit(":", 1)[-1]) for r in created] == [
        (o["metadata"]["name"], o["kind"]) for o in rendered
    ]
    job = next(r for r in created if r.typ.endswith(":TrainJob"))
    assert job.inputs["spec"] == next(o for o in rendered if o["kind"] == "TrainJob")["spec"]


class CreationMocks(RecordingMocks):
    """RecordingMocks whose RandomUuid answers with a fresh id: each install is one creation of the stack."""

    def new_resource(self, args):
        resource_id, state = super().new_resource(args)
        if args.typ == "random:index/randomUuid:RandomUuid":
            state["result"] = str(uuid.uuid4())
        return resource_id, state


def _created_pytorch_job(dev_outputs, pulumi_mocks, job: dict) -> tuple[dict, dict]:
    """One `pulumi up` of a new stack: the PyTorchJob as created, and the RandomUuid's inputs."""
    outputs = {**dev_outputs, "kubeconfig": '{"apiVersion": "v1"}'}
    config = {"mlops-eks:platformStack": "organization/mlops-eks/dev", "mlops-eks:job": job}
    mocks = pulumi_mocks(CreationMocks(outputs), stack="dev-test", config=config)

    @pulumi.runtime.test
    def run():
        _run_program()

    run()
    (created,) = mocks.of_type("kubernetes:kubeflow.org/v1:PyTorchJob")
    (creation,) = mocks.of_type("random:index/randomUuid:RandomUuid")
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", **_ints(created.inputs)}, creation.inputs


def _ints(value):
    """The engine hands every number over as a float (protobuf Struct): whole ones back to ints."""
    if isinstance(value, dict):
        return {k: _ints(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_ints(v) for v in value]
    return int(value) if isinstance(value, float) and value.is_integer() else value


def test_a_new_creation_of_a_pytorchjob_starts_a_new_restart_count(dev_outputs, pulumi_mocks, tmp_path):
    """`pulumi destroy` then `pulumi up` of the same job (or a job whose deadline ended it, resubmitted):
    its pods, as the operator creates them and the kubelet resolves their environment, count in a new
    ledger, where a creation that spent its budget had exited 4 at once."""
    from sim.operators.pods import container_env, operator_settings, pytorch_job_pods
    from trainer import attempts, faults
    from trainer.storage import LocalStorage
    from workloads.platform import load_platform_outputs
    from workloads.stacks import read_config, stack_file

    job = read_config(stack_file("dev-zimdb-multinode"))["mlops-eks:job"]
    settings = operator_settings(load_platform_outputs(example_outputs_path("dev")))
    ledgers = []
    for _ in range(2):
        created, _ = _created_pytorch_job(dev_outputs, pulumi_mocks, job)
        master = next(p.pod for p in pytorch_job_pods(created, settings) if p.role == "Master")
        env = container_env(master, "pytorch")
        ledgers.append(
            attempts.Ledger(
                LocalStorage(tmp_path), "master-0", int(env[attempts.BUDGET_ENV]), env[attempts.CREATION_ENV]
            )
        )
    first, second = ledgers
    assert first.creation and first.creation != second.creation
    for _ in range(first.budget + 1):
        assert first.begin() is None
        first.end(137)
    assert first.begin() == faults.BUDGET_SPENT
    assert second.begin() is None


def test_the_creation_id_lives_as_long_as_what_makes_the_job(dev_outputs, pulumi_mocks):
    """The RandomUuid is replaced (a new id, a new count) when its keeper, the job's identity, changes: not
    for suspend, TTL or deadline, which update the job in place; yes for a new image, which replaces it."""
    from workloads.stacks import read_config, stack_file

    job = read_config(stack_file("dev-zimdb-multinode"))["mlops-eks:job"]
    keepers = {}
    for change in (
        {},
        {"suspend": True},
        {"ttlSecondsAfterFinished": 60},
        {"maxRuntimeHours": 1},
        {"imageTag": "9"},
    ):
        _, creation = _created_pytorch_job(dev_outputs, pulumi_mocks, {**job, **change})
        keepers[tuple(change) or ("as committed",)] = creation["keepers"]["job"]
    assert len({keepers[k] for k in keepers if k != ("imageTag",)}) == 1, keepers
    assert keepers[("imageTag",)] != keepers[("as committed",)]
