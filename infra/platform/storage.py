"""Storage for training: one S3 bucket for data sets and checkpoints, ECR repositories for the images.

The bucket is private, versioned, encrypted with the stack's KMS key (infra/platform/keys.py) and reachable
only over TLS; its objects (and their listing) only by the cluster's pod roles (IAM path
`/mlops-eks/<cluster>/`, infra/platform/pod_identity.py), the cluster admins and the cluster's creator
(infra/platform/creator.py: recorded at the first deploy, so a later deployer does not take its place). The
bucket's own configuration stays governed by IAM, so a new deployer is never locked out of it. Old
checkpoint versions expire. Repositories scan on push, refuse tag overwrites (a tag names one
image forever) and keep the last N images.
"""

from __future__ import annotations

import json

import pulumi
import pulumi_aws as aws

from infra.component_args import ComponentArgs
from infra.contract import JOBS_PREFIX
from infra.platform.pod_identity import role_path

IMAGE_FLAVOURS = ("cuda", "rocm", "cpu")


def bucket_prefix(stack: str) -> str:
    """The data bucket's name starts with this (the S3 endpoint's policy admits it:
    infra/platform/network.py)."""
    return f"mlops-eks-{stack}-"


class StorageArgs(ComponentArgs):
    stack: str
    cluster_name: str
    partition: str = "aws"
    account_id: pulumi.Output[str] | str
    # The stack's KMS key (infra/platform/keys.py).
    kms_key_arn: pulumi.Output[str] | str
    # Principals besides the cluster's pod roles that may use the bucket: the admins and the deployer
    # (IAM ARNs; an assumed-role session counts as its role, see `principal_patterns`).
    admin_principal_arns: list[str] = []
    deployer_arn: pulumi.Output[str] | str
    noncurrent_days: int
    keep_images: int
    force_destroy: bool
    tags: dict[str, str]


class Storage(pulumi.ComponentResource):
    def __init__(self, name: str, args: StorageArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("mlops-eks:infra:Storage", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)

        bucket = aws.s3.Bucket(
            f"{name}-data",
            bucket_prefix=bucket_prefix(args.stack),
            force_destroy=args.force_destroy,
            tags=args.tags,
            opts=child,
        )
        public_access = aws.s3.BucketPublicAccessBlock(
            f"{name}-data",
            bucket=bucket.id,
            block_public_acls=True,
            block_public_policy=True,
            ignore_public_acls=True,
            restrict_public_buckets=True,
            opts=child,
        )
        aws.s3.BucketOwnershipControls(
            f"{name}-data",
            bucket=bucket.id,
            rule=aws.s3.BucketOwnershipControlsRuleArgs(object_ownership="BucketOwnerEnforced"),
            opts=child,
        )
        versioning = aws.s3.BucketVersioning(
            f"{name}-data",
            bucket=bucket.id,
            versioning_configuration=aws.s3.BucketVersioningVersioningConfigurationArgs(status="Enabled"),
            opts=child,
        )
        aws.s3.BucketServerSideEncryptionConfiguration(
            f"{name}-data",
            bucket=bucket.id,
            rules=[
                aws.s3.BucketServerSideEncryptionConfigurationRuleArgs(
                    # The stack's key: its key policy defers to IAM, and a job role gets kms:Decrypt and
                    # GenerateDataKey through S3 for this bucket only (workloads/program.py).
                    apply_server_side_encryption_by_default=aws.s3.BucketServerSideEncryptionConfigurationRuleApplyServerSideEncryptionByDefaultArgs(
                        sse_algorithm="aws:kms", kms_master_key_id=args.kms_key_arn
                    ),
                    # One KMS call per bucket key instead of per object: checkpoints are many objects.
                    bucket_key_enabled=True,
                )
            ],
            opts=child,
        )
        aws.s3.BucketLifecycleConfiguration(
            f"{name}-data",
            bucket=bucket.id,
            rules=[
                aws.s3.BucketLifecycleConfigurationRuleArgs(
                    id="expire-old-job-object-versions",
                    status="Enabled",
                    # Checkpoints under jobs/<name>/ are rewritten every few hundred steps, so their old
                    # versions pile up. Data sets live beside it (e.g. datasets/) and keep theirs.
                    filter=aws.s3.BucketLifecycleConfigurationRuleFilterArgs(prefix=JOBS_PREFIX),
                    noncurrent_version_expiration=aws.s3.BucketLifecycleConfigurationRuleNoncurrentVersionExpirationArgs(
                        noncurrent_days=args.noncurrent_days
                    ),
                ),
                aws.s3.BucketLifecycleConfigurationRuleArgs(
                    id="abort-incomplete-uploads",
                    status="Enabled",
                    filter=aws.s3.BucketLifecycleConfigurationRuleFilterArgs(prefix=""),
                    abort_incomplete_multipart_upload=aws.s3.BucketLifecycleConfigurationRuleAbortIncompleteMultipartUploadArgs(
                        days_after_initiation=7
                    ),
                ),
            ],
            opts=pulumi.ResourceOptions(parent=self, depends_on=[versioning]),
        )
        aws.s3.BucketPolicy(
            f"{name}-data-tls-only",
            bucket=bucket.id,
            policy=pulumi.Output.all(bucket.arn, args.account_id, args.deployer_arn).apply(
                lambda v: json.dumps(
                    data_bucket_policy(
                        v[0],
                        principal_patterns(
                            partition=args.partition,
                            account_id=v[1],
                            cluster_name=args.cluster_name,
                            principal_arns=[*args.admin_principal_arns, v[2]],
                        ),
                    )
                )
            ),
            # S3 refuses a bucket policy while the public access block is being applied.
            opts=pulumi.ResourceOptions(parent=self, depends_on=[public_access]),
        )

        self.repositories = {
            flavour: aws.ecr.Repository(
                f"{name}-{flavour}",
                name=f"mlops-eks/{args.stack}/{flavour}",
                image_tag_mutability="IMMUTABLE",
                image_scanning_configuration=aws.ecr.RepositoryImageScanningConfigurationArgs(
                    scan_on_push=True
                ),
                encryption_configurations=[
                    aws.ecr.RepositoryEncryptionConfigurationArgs(encryption_type="KMS")
                ],
                force_delete=args.force_destroy,
                tags=args.tags,
                opts=child,
            )
            for flavour in IMAGE_FLAVOURS
        }
        for flavour, repo in self.repositories.items():
            aws.ecr.LifecyclePolicy(
                f"{name}-{flavour}",
                repository=repo.name,
                policy=json.dumps(
                    {
                        "rules": [
                            {
                                "rulePriority": 1,
                                "description": f"keep the last {args.keep_images} images",
                                "selection": {
                                    "tagStatus": "any",
                                    "countType": "imageCountMoreThan",
                                    "countNumber": args.keep_images,
                                },
                                "action": {"type": "expire"},
                            }
                        ]
                    }
                ),
                opts=child,
            )

        self.bucket_name = bucket.bucket
        self.bucket_arn = bucket.arn
        self.repository_urls = pulumi.Output.all(
            **{flavour: repo.repository_url for flavour, repo in self.repositories.items()}
        )
        self.register_outputs({"bucket_name": self.bucket_name, "repository_urls": self.repository_urls})


def principal_patterns(
    *, partition: str, account_id: str, cluster_name: str, principal_arns: list[str]
) -> list[str]:
    """`aws:PrincipalArn` patterns of who may use the bucket. An STS assumed-role session ARN
    (`arn:aws:sts::<acct>:assumed-role/<role>/<session>`) becomes its role's ARN, with or without a path
    (the session ARN does not carry the role's path; `aws:PrincipalArn` does)."""
    patterns = [f"arn:{partition}:iam::{account_id}:role{role_path(cluster_name)}*"]
    for arn in principal_arns:
        parts = arn.split(":", 5)
        if len(parts) == 6 and parts[2] == "sts" and parts[5].startswith("assumed-role/"):
            role = parts[5].split("/")[1]
            iam = f"arn:{parts[1]}:iam::{parts[4]}:role/"
            patterns += [iam + role, f"{iam}*/{role}"]
        else:
            patterns.append(arn)
    return list(dict.fromkeys(patterns))


def data_bucket_policy(bucket_arn: str, allowed_principals: list[str]) -> dict:
    """Deny every request without TLS; deny reading, writing and listing the data to every principal
    outside `allowed_principals` (aws:PrincipalArn patterns)."""
    outsiders = {"ArnNotLike": {"aws:PrincipalArn": allowed_principals}}
    return {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Sid": "DenyInsecureTransport",
                "Effect": "Deny",
                "Principal": "*",
                "Action": "s3:*",
                "Resource": [bucket_arn, f"{bucket_arn}/*"],
                "Condition": {"Bool": {"aws:SecureTransport": "false"}},
            },
            {
                "Sid": "DenyObjectsOutsideThePlatform",
                "Effect": "Deny",
                "Principal": "*",
                "Action": "s3:*",
                "Resource": f"{bucket_arn}/*",
                "Condition": outsiders,
            },
            {
                "Sid": "DenyListingOutsideThePlatform",
                "Effect": "Deny",
                "Principal": "*",
                "Action": ["s3:ListBucket", "s3:ListBucketVersions", "s3:ListBucketMultipartUploads"],
                "Resource": bucket_arn,
                "Condition": outsiders,
            },
        ],
    }
