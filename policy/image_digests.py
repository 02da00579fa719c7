"""Controller images by digest: the platform's controllers and node agents (every pod-bearing object, and
the image fields of Helm release values, in the platform's namespaces, where no training code runs)
run the image a digest names,
so a registry, a mirror or a re-pushed tag cannot swap what runs with the cluster's strongest rights.
Training images are tagged in the platform's own ECR repositories, whose tags are immutable
(k8s-images-pinned holds them to version tags). Images the platform still installs by tag are listed,
repository by repository, in policy/image_digests.yaml until each is pinned.

Standards: NIST SP 800-190 (Application Container Security Guide) 4.1.5 / 4.2 (use immutable image
references); Kubernetes documentation, "Images" (a digest pins the image; a tag can move)."""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from infra.contract import PLATFORM_NAMESPACES
from infra.platform.registries import upstream_image
from policy.core import Rule, dig
from policy.k8s import containers, pod_specs

PENDING_FILE = Path(__file__).with_name("image_digests.yaml")
DIGEST = re.compile(r"@sha(256:[0-9a-f]{64}|512:[0-9a-f]{128})$")
RELEASES = ("kubernetes:helm.sh/v3:Release", "kubernetes:helm.sh/v3:Chart", "kubernetes:helm.sh/v4:Chart")
# Where the platform's controllers run: its add-ons' namespaces, Kubernetes' own and Training Operator
# v1's (a job namespace is a workload stack's, whose images k8s-images-pinned judges).
CONTROLLER_NAMESPACES = frozenset({"kube-system", "kubeflow", *PLATFORM_NAMESPACES})


@functools.cache
def pending() -> frozenset[str]:
    return frozenset(yaml.safe_load(PENDING_FILE.read_text())["pending"])


def repository(image: str) -> str:
    """The upstream repository an image reference names, with Docker Hub's implicit host and library/
    spelled out (docker.io/library/alpine for `alpine:3`); an image of the stack's ECR path names the
    upstream one it caches (infra/platform/registries.py), so the pending list holds one entry per
    upstream repository whatever the stack, account or region."""
    name = upstream_image(image).split("@", 1)[0]
    last = name.rsplit("/", 1)[-1]
    if ":" in last:
        name = name.rsplit(":", 1)[0]
    first = name.split("/", 1)[0]
    if "/" not in name or not ("." in first or ":" in first or first == "localhost"):
        name = f"docker.io/{name if '/' in name else 'library/' + name}"
    return name


def problem(image: str) -> str | None:
    if DIGEST.search(image):
        return None
    if repository(image) in pending():
        return None
    return f"image {image!r} is named by tag alone: pin it by digest (@sha256:...)"


def _value_images(values: Any, path: str = "") -> Iterator[tuple[str, str]]:
    """(where, image reference) for every image a release's values set: an `image` string, or a mapping
    with a repository and a tag (or digest), as charts spell them."""
    if isinstance(values, Mapping):
        repo = values.get("repository")
        if isinstance(repo, str) and ("tag" in values or "digest" in values):
            registry = values.get("registry")
            ref = f"{registry}/{repo}" if isinstance(registry, str) and registry else repo
            digest = values.get("digest")
            tag = str(values.get("tag") or "")
            yield path or ".", ref + (f"@{digest}" if isinstance(digest, str) and digest else f":{tag}")
        for key, value in values.items():
            where = f"{path}.{key}" if path else str(key)
            if key == "image" and isinstance(value, str) and value:
                yield where, value
            else:
                yield from _value_images(value, where)
    elif isinstance(values, Sequence) and not isinstance(values, str):
        for i, value in enumerate(values):
            yield from _value_images(value, f"{path}[{i}]")


def check_controller_images(type_: str, inputs: Mapping[str, Any]) -> Iterator[str]:
    namespace = dig(inputs, "namespace") if type_ in RELEASES else dig(inputs, "metadata", "namespace")
    if str(namespace or "default") not in CONTROLLER_NAMESPACES:
        return
    if type_ in RELEASES:
        for where, image in _value_images(dig(inputs, "values", default={})):
            if why := problem(image):
                yield f"values {where}: {why}"
        return
    for path, spec in pod_specs(inputs):
        for c in containers(spec):
            ref = c.get("image")
            if isinstance(ref, str) and (why := problem(ref)):
                yield f"{path}: container {c.get('name')!r}: {why}"


RULES = (
    Rule(
        name="k8s-controller-images-by-digest",
        description="The platform's controllers and node agents (every pod-bearing object and Helm release "
        "value in the platform's namespaces) run images pinned by digest; the ones not pinned yet are "
        "listed in policy/image_digests.yaml, one repository each.",
        remediation="Name the image as repository@sha256:<digest> (or set the chart's `digest` value); the "
        "digest of a tag: `crane digest <image>:<tag>` or `docker buildx imagetools inspect`.",
        level="mandatory",
        severity="high",
        types=("kubernetes:",),
        check=check_controller_images,
    ),
)
