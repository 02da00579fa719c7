"""Storage for training: one S3 bucket for data sets and checkpoints, ECR repositories for the images.

The bucket is private, versioned, SSE-KMS encrypted and reachable only over TLS;
old checkpoint versions expire. Repositories scan on push, refuse tag overwrites (a tag names one
image forever) and keep the last N images.
"""

from __future__ import annotations

import json

import pulumi
import pulumi_aws as aws

from infra.cluster import ComponentArgs

IMAGE_FLAVOURS = ("cuda", "rocm", "cpu")
# Every job writes under jobs/<name>/ (workloads/pod.py): checkpoints there are rewritten every few
# hundred steps, so their old versions pile up. Data sets live beside it (e.g. datasets/) and keep theirs.
JOBS_PREFIX = "jobs/"


class StorageArgs(ComponentArgs):
    stack: str
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
            bucket_prefix=f"mlops-eks-{args.stack}-",
            force_destroy=args.force_destroy,
            tags=args.tags,
            opts=child,
        )
        aws.s3.BucketPublicAccessBlock(
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
                    # The AWS-managed aws/s3 key (rotated yearly by AWS): a job role's S3 grant is then
                    # all it needs, with no key policy to keep in step with every workload stack.
                    apply_server_side_encryption_by_default=aws.s3.BucketServerSideEncryptionConfigurationRuleApplyServerSideEncryptionByDefaultArgs(
                        sse_algorithm="aws:kms"
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
            policy=bucket.arn.apply(tls_only_policy),
            opts=child,
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


def tls_only_policy(bucket_arn: str) -> str:
    """Deny every request to the bucket and its objects that does not use TLS."""
    return json.dumps(
        {
            "Version": "2012-10-17",
            "Statement": [
                {
                    "Sid": "DenyInsecureTransport",
                    "Effect": "Deny",
                    "Principal": "*",
                    "Action": "s3:*",
                    "Resource": [bucket_arn, f"{bucket_arn}/*"],
                    "Condition": {"Bool": {"aws:SecureTransport": "false"}},
                }
            ],
        }
    )
