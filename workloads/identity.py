"""The job's AWS identity, as data: what workloads.program creates with the AWS provider for a job that
reads or writes S3 (an IAM role assumable only through EKS Pod Identity by the job's service account, its
inline policy granting only the job's prefix, and the Pod Identity association), described for `render`.
Pure functions: no Pulumi import, so `render` and `run-local` stay free of the Pulumi SDKs.
"""

from __future__ import annotations

from typing import Any

from infra.platform import pod_identity
from workloads import pod
from workloads.platform import PlatformFacts
from workloads.spec import TrainingJobSpec

# Known only at deploy time (aws.get_caller_identity of the deployer's credentials).
ACCOUNT = "<deployer-account-id>"


def s3_policy(bucket: str, prefix: str, region: str) -> dict[str, Any]:
    """Least privilege: list only under the prefix, read/write/delete only objects below it, and use the
    bucket's KMS key (the platform's, infra/platform/keys.py) only through S3 for this bucket: S3 passes the
    bucket ARN as encryption context when the bucket key is on (the object ARN for objects written before).
    Listing is matched on `<prefix>/` and below, never on `<prefix>` itself: a ListObjects for the prefix
    "jobs/zimdb" returns the keys of "jobs/zimdb-mpi/" too (S3 prefixes are strings, not directories);
    the trainer always lists with a trailing slash (trainer/storage.py)."""
    partition = pod_identity.partition_of(region)
    return {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Sid": "ListJobPrefix",
                "Effect": "Allow",
                "Action": "s3:ListBucket",
                "Resource": f"arn:aws:s3:::{bucket}",
                "Condition": {"StringLike": {"s3:prefix": [f"{prefix}/", f"{prefix}/*"]}},
            },
            {
                "Sid": "ReadWriteJobObjects",
                "Effect": "Allow",
                # AbortMultipartUpload: checkpoints are multipart uploads; a preempted one must be abortable.
                "Action": ["s3:GetObject", "s3:PutObject", "s3:DeleteObject", "s3:AbortMultipartUpload"],
                "Resource": f"arn:aws:s3:::{bucket}/{prefix}/*",
            },
            {
                "Sid": "BucketKeyThroughS3",
                "Effect": "Allow",
                "Action": ["kms:Decrypt", "kms:GenerateDataKey"],
                "Resource": f"arn:{partition}:kms:{region}:*:key/*",
                "Condition": {
                    "StringEquals": {"kms:ViaService": f"s3.{region}.amazonaws.com"},
                    "StringLike": {
                        "kms:EncryptionContext:aws:s3:arn": [
                            f"arn:aws:s3:::{bucket}",
                            f"arn:aws:s3:::{bucket}/{prefix}/*",
                        ]
                    },
                },
            },
        ],
    }


def role_description(spec: TrainingJobSpec, facts: PlatformFacts) -> str:
    return f"mlops-eks job {spec.name}: s3://{facts.bucket_name}/{pod.s3_prefix(spec)}/ only"


def aws_resources(spec: TrainingJobSpec, facts: PlatformFacts) -> list[dict[str, Any]]:
    """The AWS resources of the workload stack (none for a job without S3), each as
    {"awsResource": <Pulumi type token>, "name": <Pulumi name>, "properties": {...}}: not Kubernetes
    objects. Values known only at deploy time (the account id, the role's ARN) are named in <...>."""
    if not spec.uses_s3:
        return []
    cluster_arn = pod_identity.cluster_arn(
        partition=pod_identity.partition_of(facts.region),
        region=facts.region,
        account_id=ACCOUNT,
        cluster_name=facts.cluster_name,
    )
    role = f"{spec.name}-job"
    return [
        {
            "awsResource": "aws:iam/role:Role",
            "name": role,
            "properties": {
                "path": pod_identity.role_path(facts.cluster_name),
                "description": role_description(spec, facts),
                "assumeRolePolicy": pod_identity.trust_policy(
                    cluster_arn=cluster_arn, namespace=spec.namespace_name, service_account=spec.name
                ),
            },
        },
        {
            "awsResource": "aws:iam/rolePolicy:RolePolicy",
            "name": f"{spec.name}-s3",
            "properties": {
                "role": f"<id of {role}>",
                "policy": s3_policy(facts.bucket_name, pod.s3_prefix(spec), facts.region),
            },
        },
        {
            "awsResource": "aws:eks/podIdentityAssociation:PodIdentityAssociation",
            "name": f"{spec.name}-pod-identity",
            "properties": {
                "clusterName": facts.cluster_name,
                "namespace": spec.namespace_name,
                "serviceAccount": spec.name,
                "roleArn": f"<arn of {role}>",
            },
        },
    ]
