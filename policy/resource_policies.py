"""Resource policies (S3 bucket and access point, KMS key, ECR repository, registry and creation
template, SQS queue, SNS topic, Secrets Manager secret, Lambda permission) that grant anyone: an Allow for
Principal "*" (or AWS "*", a wildcard principal, NotPrincipal) without a condition that pins the caller's
account, organization, ARN or network path. A bucket's public access block refuses such a policy at apply
time; the others have no such guard."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from policy.core import Rule, dig, policy_document, statements, unparsable_policy
from policy.iam_semantics import admits_anyone, conditions, is_allow, pinned_by, principals

# type token -> the input that holds its resource policy.
POLICY_INPUTS = {
    "aws:s3/bucketPolicy:BucketPolicy": "policy",
    "aws:s3/bucket:Bucket": "policy",
    "aws:s3/bucketV2:BucketV2": "policy",
    "aws:kms/key:Key": "policy",
    "aws:kms/keyPolicy:KeyPolicy": "policy",
    "aws:kms/replicaKey:ReplicaKey": "policy",
    "aws:ecr/repositoryPolicy:RepositoryPolicy": "policy",
    "aws:ecr/registryPolicy:RegistryPolicy": "policy",
    "aws:sqs/queue:Queue": "policy",
    "aws:sqs/queuePolicy:QueuePolicy": "policy",
    "aws:sns/topic:Topic": "policy",
    "aws:sns/topicPolicy:TopicPolicy": "policy",
    "aws:secretsmanager/secret:Secret": "policy",
    "aws:secretsmanager/secretPolicy:SecretPolicy": "policy",
    "aws:s3/accessPoint:AccessPoint": "policy",
    "aws:s3control/accessPointPolicy:AccessPointPolicy": "policy",
    "aws:s3control/objectLambdaAccessPointPolicy:ObjectLambdaAccessPointPolicy": "policy",
    "aws:s3control/bucketPolicy:BucketPolicy": "policy",
    "aws:ecr/repositoryCreationTemplate:RepositoryCreationTemplate": "repositoryPolicy",
}
LAMBDA_PERMISSION = "aws:lambda/permission:Permission"
# A Lambda permission for "*" is scoped by these inputs (the service's source, the caller's org).
LAMBDA_SCOPES = ("sourceArn", "sourceAccount", "principalOrgId")


def check_not_public(type_: str, inputs: Mapping[str, Any]) -> Iterator[str]:
    if type_ == LAMBDA_PERMISSION:
        if "*" in str(dig(inputs, "principal", default="")) and not any(
            dig(inputs, k) for k in LAMBDA_SCOPES
        ):
            scopes = ", ".join(LAMBDA_SCOPES)
            yield f"principal {dig(inputs, 'principal')!r} without {scopes}: anyone may invoke the function"
        return
    policy = dig(inputs, POLICY_INPUTS[type_])
    if bad := unparsable_policy(policy):
        yield bad
    for s in statements(policy_document(policy)):
        if whom := admits_anyone(s):
            actions = s.get("Action") or s.get("NotAction")
            yield f"statement {s.get('Sid') or ''!r} allows {actions!r} to anyone: {whom}"


# What pins an AWS service's call to the caller's own resources (IAM User Guide, "The confused deputy
# problem": cross-service confused deputy prevention): the source resource or account, or a KMS
# encryption context naming them.
SOURCE_PINS = ("aws:sourcearn", "aws:sourceaccount", "aws:sourceorgid", "aws:sourceorgpaths")
CONTEXT_PIN = "kms:encryptioncontext:"


def _service_principals(statement: Mapping[str, Any]) -> list[str]:
    return [v for k, v in principals(statement) if k.lower() == "service"]


def check_service_principals_pinned(type_: str, inputs: Mapping[str, Any]) -> Iterator[str]:
    if type_ == LAMBDA_PERMISSION:
        principal = str(dig(inputs, "principal", default=""))
        if principal.endswith(".amazonaws.com") and not any(dig(inputs, k) for k in LAMBDA_SCOPES):
            yield f"the function's permission for {principal} names no sourceArn or sourceAccount"
        return
    for s in statements(policy_document(dig(inputs, POLICY_INPUTS[type_]))):
        services = _service_principals(s)
        if not services or not is_allow(s):
            continue
        keys = {k for entries in conditions(s).values() for k in entries}
        pins = frozenset(SOURCE_PINS) | frozenset(k for k in keys if k.startswith(CONTEXT_PIN))
        if not pinned_by(s, pins):
            yield (
                f"statement {s.get('Sid') or ''!r} lets {', '.join(services)} act for any account's "
                "resources: no aws:SourceArn / aws:SourceAccount condition (confused deputy)"
            )


RULES = (
    Rule(
        name="resource-policy-not-public",
        description="No resource policy (S3 bucket, KMS key, ECR, SQS, SNS, Secrets Manager, Lambda) grants "
        'Principal "*", AWS "*" or NotPrincipal without a condition pinning the caller\'s account, '
        "organization, ARN or VPC endpoint.",
        remediation="Name the principals (account roots, role ARNs, services); where a policy must say "
        '"*", add StringEquals aws:PrincipalAccount / aws:PrincipalOrgID / aws:SourceAccount / '
        'aws:SourceVpce (Deny statements for "*", such as the TLS-only one, are fine).',
        level="mandatory",
        severity="critical",
        types=(*POLICY_INPUTS, LAMBDA_PERMISSION),
        check=check_not_public,
    ),
    Rule(
        name="resource-policy-service-principals-pinned",
        description="A resource policy's Allow for an AWS service principal (EventBridge, CloudWatch Logs, "
        "...) pins the source: aws:SourceArn, aws:SourceAccount or a KMS encryption context naming the "
        "caller's resources, so no other account's resource can make the service use it.",
        remediation="Add Condition ArnEquals {'aws:SourceArn': <the rule, log group, ... of this stack>} or "
        "StringEquals {'aws:SourceAccount': <account>} to the statement.",
        level="mandatory",
        severity="high",
        types=(*POLICY_INPUTS, LAMBDA_PERMISSION),
        check=check_service_principals_pinned,
    ),
)
