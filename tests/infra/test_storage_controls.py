"""What the data bucket and the image repositories do with what is stored in them, read from the
resources the program registers: which lifecycle rules S3 applies to an object, how objects and
images are encrypted at rest."""

from __future__ import annotations

import pytest

LIFECYCLE = "aws:s3/bucketLifecycleConfiguration:BucketLifecycleConfiguration"
BUCKET = "aws:s3/bucket:Bucket"
ENCRYPTION = "aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration"
REPOSITORY = "aws:ecr/repository:Repository"
# Keys a run writes: a checkpoint shard under the job's prefix, and a data set uploaded beside the jobs.
KEYS = ["jobs/zimdb/checkpoints/step-000300/__0_0.distcp", "datasets/imdb/train.parquet"]


def applying_rules(rules: list[dict], key: str) -> list[dict]:
    """The enabled rules S3 applies to `key`: no filter, or a prefix filter the key starts with
    (this bucket's rules filter by prefix only)."""
    assert all(set(r.get("filter", {})) <= {"prefix"} for r in rules), rules
    return [
        r for r in rules if r["status"] == "Enabled" and key.startswith(r.get("filter", {}).get("prefix", ""))
    ]


def data_bucket_rules(stack) -> list[dict]:
    bucket = stack.one(BUCKET)
    lifecycle = stack.one(LIFECYCLE).inputs
    assert lifecycle["bucket"] == f"{bucket.name}-id", "the lifecycle belongs to another bucket"
    return lifecycle["rules"]


@pytest.mark.parametrize("key", KEYS)
def test_incomplete_uploads_anywhere_in_the_bucket_are_aborted_within_a_week(stack, key):
    # A trainer killed mid-upload (Spot, OOM) leaves the parts of a multipart checkpoint upload behind,
    # invisible in listings and billed until aborted.
    aborting = [
        r["abortIncompleteMultipartUpload"]["daysAfterInitiation"]
        for r in applying_rules(data_bucket_rules(stack), key)
        if "abortIncompleteMultipartUpload" in r
    ]
    assert aborting and 1 <= min(aborting) <= 7, f"parts of {key} are kept: {aborting}"


def test_old_checkpoint_versions_expire_under_jobs_and_nothing_else_expires(stack):
    rules = data_bucket_rules(stack)
    (job_rule,) = [r for r in applying_rules(rules, KEYS[0]) if "noncurrentVersionExpiration" in r]
    days = job_rule["noncurrentVersionExpiration"]["noncurrentDays"]
    assert days == stack.config.checkpoint_noncurrent_days
    # Current objects (data sets, the latest checkpoint, outputs) are never expired by a rule.
    assert not [r for r in rules if "expiration" in r]
    assert not [r for r in applying_rules(rules, KEYS[1]) if "noncurrentVersionExpiration" in r]


def test_bucket_objects_are_encrypted_with_the_stacks_key(stack):
    (rule,) = stack.one(ENCRYPTION).inputs["rules"]
    default = rule["applyServerSideEncryptionByDefault"]
    key = stack.one("aws:kms/key:Key", "stack-key")  # the mocks give a key the ARN ...:key/<its name>
    assert default["sseAlgorithm"] == "aws:kms" and default["kmsMasterKeyId"].endswith(f":key/{key.name}")


def test_image_repositories_encrypt_images_with_kms(stack):
    repos = {r.name: r.inputs for r in stack.of_type(REPOSITORY)}
    assert repos
    for name, repo in repos.items():
        # ECR's default (no configuration) is AES256 with an Amazon-owned key, out of the account's audit.
        encryption = repo.get("encryptionConfigurations") or [{"encryptionType": "AES256"}]
        assert [e["encryptionType"] for e in encryption] == ["KMS"], name
