"""workloads.program under Pulumi mocks with a mocked StackReference to the dev platform."""

from __future__ import annotations

import json

import pulumi
import pytest

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
