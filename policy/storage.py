"""S3, ECR, SQS and KMS rules. S3 settings live on companion resources in pulumi-aws 7 (public access
block, encryption, versioning, bucket policy), so each companion is checked on its own and a stack rule
checks that every bucket has all of them. Public access is refused wherever it can be granted: the
account's and an access point's public access block (AWS Foundational Security Best Practices S3.1,
S3.19; CIS AWS Foundations 2.1.4), bucket and object ACLs for everyone or every AWS user (S3.2, S3.3).
ECR repositories that ECR creates itself (creation templates, pull-through cache) get immutable tags
from a template (FSBP ECR.2)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from policy.core import UNKNOWN, Resource, Rule, StackRule, as_list, dig, known, policy_document, statements

BUCKETS = ("aws:s3/bucket:Bucket", "aws:s3/bucketV2:BucketV2")
PUBLIC_ACCESS_BLOCK = "aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock"
ACCOUNT_PUBLIC_ACCESS_BLOCK = "aws:s3/accountPublicAccessBlock:AccountPublicAccessBlock"
ACCESS_POINT = "aws:s3/accessPoint:AccessPoint"
BUCKET_ACLS = ("aws:s3/bucketAcl:BucketAcl", "aws:s3/bucketAclV2:BucketAclV2")
OBJECTS = ("aws:s3/bucketObject:BucketObject", "aws:s3/bucketObjectv2:BucketObjectv2")
# The grantee groups an ACL opens to the world: everyone, and every AWS account's users.
PUBLIC_GRANTEES = (
    "http://acs.amazonaws.com/groups/global/AllUsers",
    "http://acs.amazonaws.com/groups/global/AuthenticatedUsers",
)
CREATION_TEMPLATE = "aws:ecr/repositoryCreationTemplate:RepositoryCreationTemplate"
PULL_THROUGH_RULE = "aws:ecr/pullThroughCacheRule:PullThroughCacheRule"
ENCRYPTION = (
    "aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration",
    "aws:s3/bucketServerSideEncryptionConfigurationV2:BucketServerSideEncryptionConfigurationV2",
)
VERSIONING = ("aws:s3/bucketVersioning:BucketVersioning", "aws:s3/bucketVersioningV2:BucketVersioningV2")
BUCKET_POLICY = "aws:s3/bucketPolicy:BucketPolicy"
ECR_REPOSITORY = "aws:ecr/repository:Repository"
SQS_QUEUE = "aws:sqs/queue:Queue"
KMS_KEY = "aws:kms/key:Key"

BLOCK_FLAGS = ("blockPublicAcls", "blockPublicPolicy", "ignorePublicAcls", "restrictPublicBuckets")
SSE_ALGORITHMS = ("aws:kms", "aws:kms:dsse", "AES256")
PUBLIC_ACLS = ("public-read", "public-read-write", "authenticated-read")


def _public_grants(acl: Any) -> list[str]:
    grants = as_list(dig(acl, "grants"))
    return [
        f"{dig(g, 'permission')} to {dig(g, 'grantee', 'uri')}"
        for g in grants
        if str(dig(g, "grantee", "uri", default="")) in PUBLIC_GRANTEES
    ]


def check_public_access_block(type_: str, inputs: Mapping[str, Any]) -> Iterator[str]:
    if type_ in (*BUCKETS, *BUCKET_ACLS, *OBJECTS):
        acl = dig(inputs, "acl")
        if acl in PUBLIC_ACLS:
            yield f"acl {acl!r} makes it readable outside the account"
        for grant in _public_grants(dig(inputs, "accessControlPolicy")):
            yield f"its ACL grants {grant}"
        return
    flags = inputs if type_ != ACCESS_POINT else dig(inputs, "publicAccessBlockConfiguration", default=None)
    if flags is None:
        return  # an access point blocks public access unless told otherwise (all four default to true)
    # An access point's omitted flag is true; a public access block's omitted flag is false.
    default = type_ == ACCESS_POINT
    off = [f for f in BLOCK_FLAGS if dig(flags, f, default=default) is not True]
    if off:
        what = {ACCOUNT_PUBLIC_ACCESS_BLOCK: "every bucket of the account", ACCESS_POINT: "the access point"}
        yield f"{', '.join(off)} not true: {what.get(type_, 'the bucket')} can be made public"


def check_encryption(type_: str, inputs: Mapping[str, Any]) -> Iterator[str]:
    algorithms = [
        dig(r, "applyServerSideEncryptionByDefault", "sseAlgorithm") for r in as_list(dig(inputs, "rules"))
    ]
    if not any(a in SSE_ALGORITHMS for a in algorithms):
        yield f"no default encryption rule with one of {', '.join(SSE_ALGORITHMS)} (found {algorithms})"


def _everyone(s: Mapping[str, Any]) -> bool:
    principal = s.get("Principal")
    if isinstance(principal, Mapping):
        principal = principal.get("AWS")
    return s.get("NotPrincipal") is None and "*" in [str(p) for p in as_list(principal)]


def _insecure_only(s: Mapping[str, Any]) -> bool:
    values = as_list(dig(s, "Condition", "Bool", "aws:SecureTransport"))
    return len(values) == 1 and str(values[0]).lower() == "false"


def insecure_transport_gaps(policy: Any) -> list[str]:
    """What of the bucket stays reachable without TLS: [] when Deny statements for Principal "*" and
    every S3 action (aws:SecureTransport false) cover both the bucket ARN (ListBucket and the bucket's
    own settings) and `<bucket>/*` (the objects). A Deny for one principal leaves every other one in."""
    covered: set[str] = set()
    for s in statements(policy_document(policy)):
        actions = {str(a).lower() for a in as_list(s.get("Action"))}
        if s.get("Effect") == "Deny" and actions & {"s3:*", "*"} and _everyone(s) and _insecure_only(s):
            covered.update(str(r) for r in as_list(s.get("Resource")))
    if any(r == "*" or (r.startswith("arn:") and r.endswith(":s3:::*")) for r in covered):
        return []
    buckets = {r for r in covered if r.startswith("arn:") and ":s3:::" in r and "/" not in r}
    if any(f"{b}/*" in covered for b in buckets):
        return []
    if not covered:
        return ["the bucket and its objects"]
    return ["its objects (<bucket>/*)"] if buckets else ["the bucket ARN itself"]


def check_tls_only(type_: str, inputs: Mapping[str, Any]) -> Iterator[str]:
    for gap in insecure_transport_gaps(dig(inputs, "policy")):
        yield (
            f"no Deny of s3:* for Principal '*' when aws:SecureTransport is false covers {gap}: "
            "requests without TLS reach it"
        )


def check_versioning(type_: str, inputs: Mapping[str, Any]) -> Iterator[str]:
    status = dig(inputs, "versioningConfiguration", "status")
    if status != "Enabled":
        yield f"versioningConfiguration.status is {status!r}: an overwritten checkpoint cannot be recovered"


def _companion_matches(bucket: Resource, companion: Resource) -> bool:
    """Whether `companion` configures `bucket`, from what the engine hands the pack: the companion's
    `bucket` input computed from the bucket (its property dependencies: a preview, where the bucket's name
    is not known yet), or the same bucket name in both (the bucket's `bucket` input, which is its id: a
    name set in the program, or the one the provider chose)."""
    if companion.deps and bucket.name in companion.deps.get("bucket", ()):
        return True
    target = dig(known(companion.inputs), "bucket", default=None)
    name = dig(known(bucket.inputs), "bucket", default=None)
    return isinstance(target, str) and target != UNKNOWN and target == name


def check_bucket_companions(resources: Sequence[Resource]) -> Iterator[tuple[str | None, str]]:
    wanted = {
        "public access block": ((PUBLIC_ACCESS_BLOCK,), check_public_access_block),
        "default encryption": (ENCRYPTION, check_encryption),
        "versioning": (VERSIONING, check_versioning),
        "TLS-only bucket policy": ((BUCKET_POLICY,), check_tls_only),
    }
    for bucket in (r for r in resources if r.type in BUCKETS):
        for what, (types, check) in wanted.items():
            companions = [r for r in resources if r.type in types and _companion_matches(bucket, r)]
            if not any(not list(check(c.type, c.inputs)) for c in companions):
                yield bucket.name, f"bucket has no compliant {what} ({' / '.join(types)})"


def check_ecr(type_: str, inputs: Mapping[str, Any]) -> Iterator[str]:
    if type_ == CREATION_TEMPLATE:
        mutability = dig(inputs, "imageTagMutability", default="MUTABLE")
        if mutability != "IMMUTABLE":
            yield f"repositories this template creates get imageTagMutability {mutability!r}, not 'IMMUTABLE'"
        return
    if dig(inputs, "imageScanningConfiguration", "scanOnPush") is not True:
        yield "imageScanningConfiguration.scanOnPush is not true"
    mutability = dig(inputs, "imageTagMutability", default="MUTABLE")
    if mutability != "IMMUTABLE":
        yield f"imageTagMutability is {mutability!r}, not 'IMMUTABLE'"


def check_pull_through_templates(resources: Sequence[Resource]) -> Iterator[tuple[str | None, str]]:
    """Every pull-through cache rule's repositories are created from a template for PULL_THROUGH_CACHE
    with their prefix (or ROOT): without one ECR creates them with its defaults (mutable tags, no KMS key)."""
    templates = {}
    for t in (r for r in resources if r.type == CREATION_TEMPLATE):
        inputs = known(t.inputs)
        if "PULL_THROUGH_CACHE" in [str(a) for a in as_list(dig(inputs, "appliedFors"))]:
            templates[str(dig(inputs, "prefix", default=""))] = t
    for rule in (r for r in resources if r.type == PULL_THROUGH_RULE):
        prefix = str(dig(known(rule.inputs), "ecrRepositoryPrefix", default=""))
        if prefix not in templates and "ROOT" not in templates:
            yield (
                rule.name,
                (
                    f"pull-through cache rule {prefix!r} has no repository creation template for "
                    "PULL_THROUGH_CACHE with its prefix (or ROOT): ECR creates its repositories mutable"
                ),
            )


def check_sqs(type_: str, inputs: Mapping[str, Any]) -> Iterator[str]:
    if dig(inputs, "sqsManagedSseEnabled") is not True and not dig(inputs, "kmsMasterKeyId"):
        yield "neither sqsManagedSseEnabled nor kmsMasterKeyId is set: messages are stored unencrypted"


def check_kms_rotation(type_: str, inputs: Mapping[str, Any]) -> Iterator[str]:
    spec = dig(inputs, "customerMasterKeySpec", default="SYMMETRIC_DEFAULT")
    if spec != "SYMMETRIC_DEFAULT":
        return  # AWS rotates only symmetric encryption keys
    if dig(inputs, "enableKeyRotation") is not True:
        yield "enableKeyRotation is not true"


RULES = (
    Rule(
        name="s3-public-access-blocked",
        description="S3 blocks every form of public access: all four public access block flags on each "
        "bucket and on the account, no access point that turns one off, no public canned ACL or ACL grant to "
        "AllUsers / AuthenticatedUsers on a bucket or object.",
        remediation="aws.s3.BucketPublicAccessBlock(bucket=..., block_public_acls=True, "
        "block_public_policy=True, ignore_public_acls=True, restrict_public_buckets=True); drop public ACLs.",
        level="mandatory",
        severity="critical",
        types=(
            PUBLIC_ACCESS_BLOCK,
            ACCOUNT_PUBLIC_ACCESS_BLOCK,
            ACCESS_POINT,
            *BUCKETS,
            *BUCKET_ACLS,
            *OBJECTS,
        ),
        check=check_public_access_block,
    ),
    Rule(
        name="s3-encryption",
        description="S3 buckets encrypt objects by default (SSE-KMS for the data/checkpoint bucket).",
        remediation="aws.s3.BucketServerSideEncryptionConfiguration with "
        "apply_server_side_encryption_by_default={'sse_algorithm': 'aws:kms', 'kms_master_key_id': ...}.",
        level="mandatory",
        severity="high",
        types=ENCRYPTION,
        check=check_encryption,
    ),
    Rule(
        name="s3-tls-only",
        description="S3 bucket policies deny every request that does not use TLS.",
        remediation="Add a statement {Effect: Deny, Principal: '*', Action: 's3:*', Resource: [bucket, "
        "bucket/*], Condition: {Bool: {'aws:SecureTransport': 'false'}}}.",
        level="mandatory",
        severity="high",
        types=(BUCKET_POLICY,),
        check=check_tls_only,
    ),
    Rule(
        name="s3-versioning",
        description="S3 bucket versioning is enabled (the checkpoint bucket keeps overwritten checkpoints).",
        remediation="aws.s3.BucketVersioning(bucket=..., versioning_configuration={'status': 'Enabled'}) "
        "and a lifecycle rule that expires non-current versions.",
        level="mandatory",
        severity="medium",
        types=VERSIONING,
        check=check_versioning,
    ),
    Rule(
        name="ecr-scan-and-immutable-tags",
        description="ECR repositories scan images on push and have immutable tags; the repositories ECR "
        "creates from a creation template get immutable tags too.",
        remediation="aws.ecr.Repository(image_scanning_configuration={'scan_on_push': True}, "
        "image_tag_mutability='IMMUTABLE').",
        level="mandatory",
        severity="medium",
        types=(ECR_REPOSITORY, CREATION_TEMPLATE),
        check=check_ecr,
    ),
    Rule(
        name="sqs-encryption",
        description="SQS queues (e.g. the Karpenter interruption queue) are encrypted at rest.",
        remediation="Set sqs_managed_sse_enabled=True or kms_master_key_id=<key>.",
        level="mandatory",
        severity="medium",
        types=(SQS_QUEUE,),
        check=check_sqs,
    ),
    Rule(
        name="kms-key-rotation",
        description="Symmetric KMS keys rotate yearly.",
        remediation="Set enable_key_rotation=True on aws.kms.Key.",
        level="mandatory",
        severity="medium",
        types=(KMS_KEY,),
        check=check_kms_rotation,
    ),
)

STACK_RULES = (
    StackRule(
        name="ecr-pull-through-templated",
        description="Every pull-through cache rule has a repository creation template for PULL_THROUGH_CACHE "
        "covering its prefix, so the repositories ECR creates for it get the template's settings.",
        remediation="aws.ecr.RepositoryCreationTemplate(prefix=<the rule's prefix>, applied_fors="
        "['PULL_THROUGH_CACHE'], image_tag_mutability='IMMUTABLE', encryption_configurations=[...]).",
        level="mandatory",
        severity="medium",
        check=check_pull_through_templates,
    ),
    StackRule(
        name="s3-bucket-guardrails-present",
        description="Every S3 bucket has a public access block, default encryption, versioning and a "
        "TLS-only bucket policy.",
        remediation="Create the four companion resources for the bucket (see infra/platform/storage.py).",
        level="mandatory",
        severity="high",
        check=check_bucket_companions,
    ),
)
