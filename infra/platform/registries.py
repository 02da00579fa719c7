"""Where every image a node pulls comes from: the platform's own ECR registry, and nothing else.

Nodes pull from `<account>.dkr.ecr.<region>.amazonaws.com` only, authenticated by their IAM role, with layer
bytes from ECR's S3 bucket in the region (`prod-<region>-starport-layer-bucket`, through the VPC's S3
gateway endpoint: infra/platform/network.py). How an upstream image gets there depends on its registry
(`UPSTREAMS`): ECR caches registry.k8s.io, Quay and ECR Public by itself (pull-through cache rules, no
credential), GHCR and Docker Hub with a credential the user stores in Secrets Manager
(`registryCredentials`), and nvcr.io and icr.io not at all: those images, and GHCR's or Docker Hub's without
a credential, are copied in by `python -m infra images` (skopeo or crane), under the same paths.
Docker Hub's official images come from ECR Public's copies (`public.ecr.aws/docker/library/...`), so a
first deploy needs no Docker Hub account. EKS's own images stay in EKS's registry of the region.

An image keeps its path under a per-stack prefix: `registry.k8s.io/kueue/kueue:v0.19.2` is pulled as
`<registry>/<stack>/k8s/kueue/kueue:v0.19.2`. Pure data (no Pulumi).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

Route = Literal["pull-through", "copy"]

# CreatePullThroughCacheRule's ecrRepositoryPrefix: 2-30 characters (Amazon ECR API Reference).
MAX_CACHE_PREFIX = 30
# CreatePullThroughCacheRule's credentialArn pattern (the secret's name must start ecr-pullthroughcache/).
CREDENTIAL_ARN = re.compile(
    r"^arn:aws[a-z-]*:secretsmanager:([a-z0-9-]+):(\d{12}):secret:ecr-pullthroughcache/[\w/+=.@-]+$"
)


@dataclass(frozen=True)
class Upstream:
    name: str
    hosts: re.Pattern[str]  # the image reference's registry host
    prefix: str  # the cache's path under the stack's prefix
    host: str  # the registry host an image reference names it by (Docker Hub's as runtimes normalise it)
    route: Route  # without a credential
    # ECR's upstreamRegistryUrl for a pull-through cache rule; None: ECR cannot cache it.
    upstream_url: str | None
    # The registryCredentials key whose Secrets Manager secret lets ECR cache it (route becomes pull-through).
    credential: str | None
    bytes_from: str  # where ECR (or the copy command) gets the bytes
    source: str  # what says so


UPSTREAMS = (
    Upstream(
        name="registry.k8s.io",
        hosts=re.compile(r"registry\.k8s\.io"),
        prefix="k8s",
        host="registry.k8s.io",
        route="pull-through",
        upstream_url="registry.k8s.io",
        credential=None,
        bytes_from="ECR fetches from registry.k8s.io on the first pull of a tag, in AWS's account",
        source='Amazon ECR User Guide, "Sync an upstream registry with an Amazon ECR private registry" '
        "(CreatePullThroughCacheRule upstreamRegistryUrl: Kubernetes (k8s) - registry.k8s.io)",
    ),
    Upstream(
        name="quay.io",
        hosts=re.compile(r"quay\.io"),
        prefix="quay",
        host="quay.io",
        route="pull-through",
        upstream_url="quay.io",
        credential=None,
        bytes_from="ECR fetches from quay.io on the first pull of a tag",
        source="the same (Quay (quay) - quay.io, no authentication)",
    ),
    Upstream(
        name="Amazon ECR Public",
        hosts=re.compile(r"public\.ecr\.aws"),
        prefix="ecr-public",
        host="public.ecr.aws",
        route="pull-through",
        upstream_url="public.ecr.aws",
        credential=None,
        bytes_from="ECR fetches from ECR Public on the first pull of a tag (Docker official images too)",
        source="the same (Amazon ECR Public (ecr-public) - public.ecr.aws, no authentication)",
    ),
    Upstream(
        name="GitHub Container Registry",
        hosts=re.compile(r"ghcr\.io"),
        prefix="ghcr",
        host="ghcr.io",
        route="copy",
        upstream_url="ghcr.io",
        credential="ghcr",
        bytes_from="with registryCredentials.ghcr: ECR fetches from ghcr.io with it; else the copy command",
        source="the same (GitHub Container Registry - ghcr.io, requires a Secrets Manager secret)",
    ),
    Upstream(
        name="Docker Hub",
        hosts=re.compile(r"(?:index\.|registry-1\.)?docker\.io"),
        prefix="docker-hub",
        host="docker.io",
        route="copy",
        upstream_url="registry-1.docker.io",
        credential="dockerHub",
        bytes_from="official images: ECR Public's copies; others with registryCredentials.dockerHub: ECR "
        "fetches from Docker Hub with it; without: the copy command",
        source="the same (Docker Hub (docker-hub) - registry-1.docker.io, needs a Secrets Manager secret); "
        "Docker Official Images on ECR Public (gallery.ecr.aws/docker/library)",
    ),
    Upstream(
        name="NVIDIA NGC",
        hosts=re.compile(r"nvcr\.io"),
        prefix="nvcr",
        host="nvcr.io",
        route="copy",
        upstream_url=None,
        credential=None,
        bytes_from="the copy command (pull-through cache does not support nvcr.io)",
        source="the same (the list of supported upstream registries names no nvcr.io)",
    ),
    Upstream(
        name="IBM Cloud Container Registry",
        hosts=re.compile(r"icr\.io"),
        prefix="icr",
        host="icr.io",
        route="copy",
        upstream_url=None,
        credential=None,
        bytes_from="the copy command (pull-through cache does not support icr.io; Kubecost's images)",
        source="the same (the list names no icr.io)",
    ),
)

# EKS's own images (the EFA device plugin) live in an EKS registry in every region; a node reads the one of
# its region through the S3 endpoint. Amazon EKS User Guide, "View Amazon container image registries for
# Amazon EKS add-ons": the account of every region it lists apart from 602401143452. A region not known here
# keeps the chart's (us-west-2, 602401143452), whose layers come through the NAT.
EKS_REGISTRY_ACCOUNT = "602401143452"
_EKS_REGISTRY_ACCOUNTS = {
    "af-south-1": "877085696533",
    "ap-east-1": "800184023465",
    "ap-south-2": "900889452093",
    "ap-southeast-3": "296578399912",
    "ap-southeast-4": "491585149902",
    "ap-southeast-5": "151610086707",
    "ap-southeast-6": "333609536671",
    "ap-southeast-7": "121268973566",
}
_EKS_SHARED_ACCOUNT_REGIONS = frozenset(
    {
        "ap-northeast-1",
        "ap-northeast-2",
        "ap-northeast-3",
        "ap-south-1",
        "ap-southeast-1",
        "ap-southeast-2",
        "ca-central-1",
        "eu-central-1",
        "eu-north-1",
        "eu-west-1",
        "eu-west-2",
        "eu-west-3",
        "sa-east-1",
        "us-east-1",
        "us-east-2",
        "us-west-1",
        "us-west-2",
    }
)
_ECR_HOST = re.compile(r"(\d{12})\.dkr\.ecr\.([a-z0-9-]+)\.amazonaws\.com")
# One component of an ECR repository name (CreateRepository's repositoryName pattern).
_REPOSITORY_COMPONENT = re.compile(r"[a-z0-9]+(?:[._-][a-z0-9]+)*")


def eks_registry(region: str) -> str:
    """EKS's image registry a node in `region` pulls EKS's own images from."""
    if region in _EKS_REGISTRY_ACCOUNTS:
        return f"{_EKS_REGISTRY_ACCOUNTS[region]}.dkr.ecr.{region}.amazonaws.com"
    if region in _EKS_SHARED_ACCOUNT_REGIONS:
        return f"{EKS_REGISTRY_ACCOUNT}.dkr.ecr.{region}.amazonaws.com"
    return f"{EKS_REGISTRY_ACCOUNT}.dkr.ecr.us-west-2.amazonaws.com"


def registry_host(image: str) -> str:
    """The registry host of an image reference, as container runtimes read it (distribution/reference
    ParseNormalizedNamed): no host, or a first component without '.' or ':' (and not localhost), is
    Docker Hub."""
    first, sep, _ = image.partition("/")
    if not sep or ("." not in first and ":" not in first and first != "localhost"):
        return "docker.io"
    return first


def split_ref(image: str) -> tuple[str, str, str]:
    """(name, tag, digest) of an image reference; "" where it has none."""
    name, _, digest = image.partition("@")
    tag = ""
    if ":" in name.rsplit("/", 1)[-1]:
        name, tag = name.rsplit(":", 1)
    return name, tag, digest


def _normalized(image: str) -> tuple[str, str]:
    """(host, path with tag/digest) as a container runtime normalizes the reference; a Docker Hub official
    image (`python:3.13`, `library/alpine:3`) becomes ECR Public's copy of it."""
    host = registry_host(image)
    path = image.partition("/")[2] if image.startswith(f"{host}/") else image
    if host in ("docker.io", "index.docker.io", "registry-1.docker.io"):
        host = "docker.io"
        if "/" not in split_ref(path)[0]:
            path = f"library/{path}"
        if path.startswith("library/"):
            return "public.ecr.aws", f"docker/{path}"
    return host, path


def upstream_of(image: str) -> Upstream | None:
    host, _ = _normalized(image)
    return next((u for u in UPSTREAMS if u.hosts.fullmatch(host)), None)


def _is_eks_registry(host: str) -> bool:
    found = _ECR_HOST.fullmatch(host)
    return found is not None and found[1] in {EKS_REGISTRY_ACCOUNT, *_EKS_REGISTRY_ACCOUNTS.values()}


@dataclass(frozen=True)
class ImagePath:
    """The stack's image path: which upstream images come through which ECR repositories."""

    account_id: str
    region: str
    stack: str
    # registryCredentials: Upstream.credential -> Secrets Manager secret ARN.
    credentials: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not _REPOSITORY_COMPONENT.fullmatch(self.stack):
            raise ValueError(
                f"stack name {self.stack!r}: the image cache's repositories are <stack>/<registry>/..., "
                "and ECR takes lowercase letters, digits and . _ - between them only"
            )
        longest = max(len(self.cache_prefix(u)) for u in UPSTREAMS)
        if longest > MAX_CACHE_PREFIX:
            most = MAX_CACHE_PREFIX - max(len(u.prefix) for u in UPSTREAMS) - 1
            raise ValueError(
                f"stack name {self.stack!r}: the image cache's repository prefixes are <stack>/<registry>, "
                f"at most {MAX_CACHE_PREFIX} characters (ECR's limit), so a platform stack's name has at "
                f"most {most} characters"
            )

    @property
    def registry(self) -> str:
        return f"{self.account_id}.dkr.ecr.{self.region}.amazonaws.com"

    def cache_prefix(self, upstream: Upstream) -> str:
        return f"{self.stack}/{upstream.prefix}"

    def route(self, upstream: Upstream) -> Route:
        if upstream.credential and upstream.credential in self.credentials:
            return "pull-through"
        return upstream.route

    def pulled_through(self) -> list[Upstream]:
        """The upstreams the stack has pull-through cache rules for."""
        return [u for u in UPSTREAMS if self.route(u) == "pull-through"]

    def is_served(self, image: str) -> bool:
        """Whether a node pulls `image` from ECR: this registry, or EKS's of the region."""
        return registry_host(image) in (self.registry, eks_registry(self.region))

    def ref(self, image: str) -> str:
        """Where a node pulls `image` from. Refused: an image of a registry with no row in UPSTREAMS."""
        host, path = _normalized(image)
        if host == self.registry:
            return image
        if _is_eks_registry(host):
            return f"{eks_registry(self.region)}/{path}"
        upstream = next((u for u in UPSTREAMS if u.hosts.fullmatch(host)), None)
        if upstream is None:
            known = ", ".join(u.name for u in UPSTREAMS)
            raise ValueError(f"image {image!r}: its registry {host} has no row in UPSTREAMS ({known})")
        return f"{self.registry}/{self.cache_prefix(upstream)}/{path}"


def upstream_image(image: str) -> str:
    """The upstream reference an image of a stack's ECR path stands for (`ImagePath.ref` read backwards):
    `<registry>/<stack>/k8s/kueue/kueue:v0.19.2` is `registry.k8s.io/kueue/kueue:v0.19.2`, and an image of
    EKS's registry of any region is the one of us-west-2 (the same repositories in every region). Any other
    reference is returned as written."""
    host, sep, rest = image.partition("/")
    found = _ECR_HOST.fullmatch(host)
    if not sep or found is None:
        return image
    if _is_eks_registry(host):
        return f"{EKS_REGISTRY_ACCOUNT}.dkr.ecr.us-west-2.amazonaws.com/{rest}"
    parts = rest.split("/", 2)
    upstream = next((u for u in UPSTREAMS if len(parts) == 3 and u.prefix == parts[1]), None)
    return f"{upstream.host}/{parts[2]}" if upstream else image


def endpoint_buckets(region: str) -> list[str]:
    """The S3 buckets nodes read image layers from through the VPC's S3 gateway endpoint: ECR's layer bucket
    of the region, for every repository of every account there (Amazon ECR User Guide, "Amazon ECR interface
    VPC endpoints", minimum Amazon S3 bucket permissions)."""
    return [f"prod-{region}-starport-layer-bucket"]
