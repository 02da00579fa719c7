"""The image path in ECR (infra/platform/registries.py): pull-through cache rules, the template the cached
repositories are created from, the nodes' right to fill the cache, and the check before each release.

One pull-through cache rule per upstream ECR can cache (`<stack>/<prefix>` -> the upstream; GHCR and Docker
Hub with the Secrets Manager secret of `registryCredentials`). ECR creates a cached repository on the first
pull of an image, and a copied one on the first push (`python -m infra images`), from a repository creation
template per prefix: tags immutable (a tag never changes under a running node), encrypted with the stack's
KMS key (infra/platform/keys.py), created through a role that may create repositories under these prefixes
and use that key only. Scanning is a registry-wide setting templates do not carry (docs/deploy.md). A node
fills the cache with its own role: ECR needs
`ecr:BatchImportUpstreamImage` and `ecr:CreateRepository` from the puller (Amazon ECR User Guide, "IAM
permissions required to sync an upstream registry"), granted here on the cache's prefixes only.
`primed()` registers image_primer.py as a pulumi-command step a release waits for.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import pulumi
import pulumi_aws as aws
import pulumi_command as command

from infra.component_args import ComponentArgs
from infra.pins import Image
from infra.platform.registries import UPSTREAMS, ImagePath, split_ref, upstream_of

PRIMER = "python3 -m infra.platform.image_primer"


class ImageCacheArgs(ComponentArgs):
    path: ImagePath
    partition: str = "aws"
    # The stack's KMS key: the cached and copied repositories are encrypted with it.
    kms_key_arn: pulumi.Output[str] | str
    # Roles of the managed node groups (the Karpenter add-on attaches `node_policy_arn` to its own).
    node_role_names: Sequence[pulumi.Output[str] | str] = ()
    tags: dict[str, str]


def repository_arns(path: ImagePath, partition: str, prefixes: Sequence[str]) -> list[str]:
    return [f"arn:{partition}:ecr:{path.region}:{path.account_id}:repository/{p}/*" for p in prefixes]


def node_policy(path: ImagePath, partition: str) -> dict[str, Any]:
    """What a node needs beyond AmazonEC2ContainerRegistryReadOnly to pull through the cache."""
    prefixes = [path.cache_prefix(u) for u in path.pulled_through()]
    return {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Sid": "FillThePullThroughCache",
                "Effect": "Allow",
                "Action": ["ecr:BatchImportUpstreamImage", "ecr:CreateRepository"],
                "Resource": repository_arns(path, partition, prefixes),
            }
        ],
    }


def creator_policy(path: ImagePath, partition: str, kms_key_arn: str) -> dict[str, Any]:
    """The repository creation role's rights (Amazon ECR User Guide, "Create a custom policy for repository
    creation templates"), scoped from `*` to the image path's prefixes and the stack's key."""
    prefixes = [path.cache_prefix(u) for u in UPSTREAMS]
    return {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Sid": "CreateCachedRepositories",
                "Effect": "Allow",
                "Action": ["ecr:CreateRepository", "ecr:TagResource"],
                "Resource": repository_arns(path, partition, prefixes),
            },
            {
                "Sid": "EncryptThemWithTheStacksKey",
                "Effect": "Allow",
                "Action": ["kms:CreateGrant", "kms:RetireGrant", "kms:DescribeKey"],
                "Resource": kms_key_arn,
                "Condition": {"StringEquals": {"kms:ViaService": f"ecr.{path.region}.amazonaws.com"}},
            },
        ],
    }


def copy_command(path: ImagePath, pin: Image) -> str:
    """How `pin` gets into ECR when ECR cannot cache its registry: crane copies it by digest (or tag)
    under the path nodes pull it from."""
    return f"crane copy {pin.pinned} {split_ref(path.ref(pin.ref))[0]}:{split_ref(pin.ref)[1]}"


def primer_entries(path: ImagePath, pins: Sequence[Image]) -> list[dict[str, str]]:
    """image_primer.py's IMAGES for `pins`: the platform's own registry only (EKS's images are EKS's),
    and not the on-demand ones."""
    entries = []
    for pin in dict.fromkeys(pins):
        name, tag, _ = split_ref(path.ref(pin.ref))
        upstream = upstream_of(pin.ref)
        if pin.on_demand or not name.startswith(f"{path.registry}/") or upstream is None:
            continue
        copy = copy_command(path, pin) if path.route(upstream) == "copy" else ""
        entries.append({"ref": f"{name}:{tag}", "digest": pin.digest, "copy": copy})
    return entries


class ImageCache(pulumi.ComponentResource):
    path: ImagePath
    node_policy_arn: pulumi.Output[str]

    def __init__(self, name: str, args: ImageCacheArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("mlops-eks:infra:ImageCache", name, None, opts)
        self.path = path = args.path
        child = pulumi.ResourceOptions(parent=self)
        creator = aws.iam.Role(
            f"{name}-repository-creator",
            assume_role_policy=json.dumps(
                {
                    "Version": "2012-10-17",
                    "Statement": [
                        {
                            "Effect": "Allow",
                            "Principal": {"Service": "ecr.amazonaws.com"},
                            "Action": "sts:AssumeRole",
                            "Condition": {"StringEquals": {"aws:SourceAccount": path.account_id}},
                        }
                    ],
                }
            ),
            description=f"ECR creates the {path.stack} image cache's repositories with this role",
            tags=args.tags,
            opts=child,
        )
        creator_rights = aws.iam.RolePolicy(
            f"{name}-repository-creator",
            role=creator.id,
            policy=pulumi.Output.from_input(args.kms_key_arn).apply(
                lambda key: json.dumps(creator_policy(path, args.partition, key))
            ),
            opts=child,
        )
        self._ready: list[pulumi.Resource] = []
        for upstream in UPSTREAMS:
            route = path.route(upstream)
            template = aws.ecr.RepositoryCreationTemplate(
                f"{name}-{upstream.prefix}",
                prefix=path.cache_prefix(upstream),
                applied_fors=["PULL_THROUGH_CACHE" if route == "pull-through" else "CREATE_ON_PUSH"],
                description=f"{upstream.name} images for the {path.stack} platform ({route})",
                image_tag_mutability="IMMUTABLE",
                encryption_configurations=[
                    aws.ecr.RepositoryCreationTemplateEncryptionConfigurationArgs(
                        encryption_type="KMS", kms_key=args.kms_key_arn
                    )
                ],
                custom_role_arn=creator.arn,
                resource_tags=args.tags,
                opts=pulumi.ResourceOptions(parent=self, depends_on=[creator_rights]),
            )
            self._ready.append(template)
            if route != "pull-through":
                continue
            credential = path.credentials.get(upstream.credential or "")
            rule = aws.ecr.PullThroughCacheRule(
                f"{name}-{upstream.prefix}",
                ecr_repository_prefix=path.cache_prefix(upstream),
                upstream_registry_url=upstream.upstream_url,
                credential_arn=credential,
                # A rule without its template would create repositories with ECR's defaults.
                opts=pulumi.ResourceOptions(parent=self, depends_on=[template]),
            )
            self._ready.append(rule)
        policy = aws.iam.Policy(
            f"{name}-nodes",
            description=f"Nodes of {path.stack} fill the image cache",
            policy=json.dumps(node_policy(path, args.partition)),
            tags=args.tags,
            opts=child,
        )
        self.node_policy_arn = policy.arn
        for i, role in enumerate(args.node_role_names):
            self._ready.append(
                aws.iam.RolePolicyAttachment(
                    f"{name}-nodes-{i}", role=role, policy_arn=policy.arn, opts=child
                )
            )
        self.register_outputs({"node_policy_arn": self.node_policy_arn})

    def primed(self, name: str, pins: Sequence[Image], opts: pulumi.ResourceOptions) -> list[pulumi.Resource]:
        """The step (image_primer.py) that must pass before anything pulls `pins`; [] when none of them is
        in the platform's registry."""
        entries = primer_entries(self.path, pins)
        if not entries:
            return []
        images = json.dumps(entries, sort_keys=True)
        step = command.local.Command(
            f"{name}-images",
            create=PRIMER,
            environment={"IMAGES": images, "REGION": self.path.region},
            # Run again, before the release, whenever an image or its pin changes.
            triggers=[images],
            opts=pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(depends_on=self._ready)),
        )
        return [step]
