"""Where a node's image bytes come from, per registry, for a caller inside AWS, and which way they travel from
the private subnets: through the VPC's S3 gateway endpoint (an S3 bucket in the stack's region: the
endpoint's policy must admit it, infra/platform/network.py) or through the NAT gateway (anything else).
Manifests and tokens always come from the registry host itself (NAT). Pure data (no Pulumi).

A registry that redirects an AWS caller's blob downloads to an S3 bucket in the same region is invisible
until a pull 403s at the endpoint: every such bucket is in `endpoint_buckets`, and
tests/policy/test_image_sources.py fails for an image whose registry has no row here.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

Path = Literal["nat", "s3-endpoint-in-region"]

# kubernetes/registry.k8s.io cmd/archeio/internal/app/buckets.go (`awsRegionToHostURL`, commit 093d55a,
# 2026-08): the S3 bucket (and its region) archeio redirects an AWS caller's blob requests to, by the
# caller's region. Regions not listed get the upstream (Artifact Registry) redirect instead.
_K8S_BUCKET_REGION = {
    "ap-east-2": "ap-east-1",
    "cn-northwest-1": "ap-east-1",
    "cn-north-1": "ap-east-1",
    "me-south-1": "me-central-1",
}
_K8S_OWN_BUCKET = frozenset(
    {
        "af-south-1",
        "ap-east-1",
        "ap-northeast-1",
        "ap-northeast-2",
        "ap-northeast-3",
        "ap-southeast-1",
        "ap-southeast-2",
        "ap-southeast-3",
        "ap-southeast-4",
        "ap-southeast-5",
        "ap-southeast-6",
        "ap-southeast-7",
        "ap-south-1",
        "ap-south-2",
        "ca-central-1",
        "ca-west-1",
        "eu-central-1",
        "eu-central-2",
        "eu-north-1",
        "eu-south-1",
        "eu-south-2",
        "eu-west-1",
        "eu-west-2",
        "eu-west-3",
        "il-central-1",
        "me-central-1",
        "mx-central-1",
        "sa-east-1",
        "us-east-1",
        "us-east-2",
        "us-west-1",
        "us-west-2",
    }
)
_K8S_BUCKET_NAME = {"eu-west-2": "767373bbdcb8270361b96548387bf2a9ad0d48758c35-eu-west-2"}


def registry_k8s_io_bucket(region: str) -> tuple[str, str] | None:
    """(bucket, its region) that registry.k8s.io redirects a caller in `region` to, or None."""
    bucket_region = _K8S_BUCKET_REGION.get(region, region if region in _K8S_OWN_BUCKET else None)
    if bucket_region is None:
        return None
    return _K8S_BUCKET_NAME.get(bucket_region, f"prod-registry-k8s-io-{bucket_region}"), bucket_region


def _k8s_endpoint_buckets(region: str) -> list[str]:
    found = registry_k8s_io_bucket(region)
    # A bucket in another region is reached through the NAT: the gateway endpoint serves its own region.
    return [found[0]] if found and found[1] == region else []


# Quay.io keeps blobs in S3 in us-east-1 (`quayio-production-s3`: the host Red Hat's OpenShift firewall
# documentation lists for "Quay image content in AWS") and answers a caller inside AWS in that region
# with an S3 URL instead of its CDN (quay/quay storage/cloud.py, CloudFrontedS3Storage
# .get_direct_download_url and is_in_network_request: "only allow requests within the same region").
QUAY_BUCKET, QUAY_BUCKET_REGION = "quayio-production-s3", "us-east-1"


@dataclass(frozen=True)
class Registry:
    name: str
    hosts: re.Pattern[str]  # the image reference's registry host
    bytes_from: str  # where blob bytes come from for a caller in AWS
    path: Path  # how they leave the private subnets
    source: str  # what says so
    buckets: Callable[[str], list[str]] = lambda region: []  # S3 buckets in `region` behind the endpoint


REGISTRIES = (
    Registry(
        name="registry.k8s.io",
        hosts=re.compile(r"registry\.k8s\.io"),
        bytes_from="blobs: S3 bucket prod-registry-k8s-io-<region> by HTTP redirect (regions without a "
        "bucket: the nearest one, or Artifact Registry); manifests: Artifact Registry",
        path="s3-endpoint-in-region",
        source="kubernetes/registry.k8s.io cmd/archeio/docs/request-handling.md, "
        "cmd/archeio/internal/app/buckets.go; prometheus-community/helm-charts#2421",
        buckets=_k8s_endpoint_buckets,
    ),
    Registry(
        name="quay.io",
        hosts=re.compile(r"quay\.io"),
        bytes_from=f"in {QUAY_BUCKET_REGION}: S3 bucket {QUAY_BUCKET} by redirect; elsewhere its CDN "
        "(cdn0N.quay.io)",
        path="s3-endpoint-in-region",
        source="quay/quay storage/cloud.py (CloudFrontedS3Storage, is_in_network_request)",
        buckets=lambda region: [QUAY_BUCKET] if region == QUAY_BUCKET_REGION else [],
    ),
    Registry(
        name="Amazon ECR (private)",
        hosts=re.compile(r"\d{12}\.dkr\.ecr\.[a-z0-9-]+\.amazonaws\.com"),
        bytes_from="layers: S3 bucket prod-<region>-starport-layer-bucket",
        path="s3-endpoint-in-region",
        source='Amazon ECR User Guide, "Amazon ECR interface VPC endpoints" (minimum S3 bucket permissions)',
        buckets=lambda region: [f"prod-{region}-starport-layer-bucket"],
    ),
    Registry(
        name="Amazon ECR Public",
        hosts=re.compile(r"public\.ecr\.aws"),
        bytes_from="layers: CloudFront",
        path="nat",
        source='AWS News Blog, "Amazon ECR Public: A New Public Container Registry" (layers in CloudFront)',
    ),
    Registry(
        name="Docker Hub",
        hosts=re.compile(r"docker\.io"),
        bytes_from="blobs: production.cloudflare.docker.com, production.cloudfront.docker.com, Cloudflare R2",
        path="nat",
        source="docker/docs content/manuals/desktop/setup/allow-list.md (docker/docs#25122); a redirect to "
        "an S3 bucket from inside AWS is reported by third parties only (docs/deploy.md: what only a real "
        "`pulumi up` verifies)",
    ),
    Registry(
        name="NVIDIA NGC",
        hosts=re.compile(r"nvcr\.io"),
        bytes_from="blobs: NGC's own storage behind nvcr.io (no S3 redirect documented)",
        path="nat",
        source="NVIDIA NGC documentation (no bucket documented; docs/deploy.md: what only a real `pulumi up` "
        "verifies)",
    ),
    Registry(
        name="GitHub Container Registry",
        hosts=re.compile(r"ghcr\.io"),
        bytes_from="blobs: pkg-containers.githubusercontent.com by redirect",
        path="nat",
        source='GitHub Docs, "Working with the Container registry"',
    ),
    Registry(
        name="IBM Cloud Container Registry",
        hosts=re.compile(r"icr\.io"),
        bytes_from="blobs: IBM Cloud (Kubecost's images)",
        path="nat",
        source="IBM Cloud Container Registry documentation (icr.io is the global public registry)",
    ),
    Registry(
        name="Google Artifact Registry",
        hosts=re.compile(r"[a-z0-9-]+-docker\.pkg\.dev"),
        bytes_from="blobs: Google Cloud Storage",
        path="nat",
        source="Google Cloud Artifact Registry documentation (repository locations)",
    ),
)


def registry_host(image: str) -> str:
    """The registry host of an image reference, as container runtimes read it (distribution/reference
    ParseNormalizedNamed): no host, or a first component without '.' or ':' (and not localhost), is
    Docker Hub."""
    first, sep, _ = image.partition("/")
    if not sep or ("." not in first and ":" not in first and first != "localhost"):
        return "docker.io"
    return first


def endpoint_buckets(region: str) -> list[str]:
    """Every registry bucket a node in `region` downloads from through the S3 gateway endpoint."""
    return sorted({b for r in REGISTRIES for b in r.buckets(region)})
