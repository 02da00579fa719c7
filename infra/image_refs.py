"""Which container image references a job or platform object may use: a digest, or an explicit tag
other than `latest` (a moving tag runs a different image on every node pull). Pure: shared by the
workload spec (which refuses such a job before rendering) and the policy pack (k8s-images-pinned)."""

from __future__ import annotations

import re

MOVING_TAGS = frozenset({"latest"})
# The OCI distribution spec's tag grammar (opencontainers/distribution-spec, spec.md "Pulling manifests"):
# a registry refuses any other tag, so the job would fail at image pull on every node.
TAG_GRAMMAR = "[A-Za-z0-9_][A-Za-z0-9._-]{0,127}"
_TAG = re.compile(TAG_GRAMMAR)


def tag_problem(tag: str) -> str | None:
    if not isinstance(tag, str) or not _TAG.fullmatch(tag):
        return f"tag {tag!r} is not a valid OCI tag ({TAG_GRAMMAR}: letters, digits, _ . -, at most 128)"
    if tag.strip().lower() in MOVING_TAGS:
        return f"tag {tag!r} moves: every pull may get a different image; use an immutable version tag"
    return None


def image_problem(image: str) -> str | None:
    if "@sha256:" in image:
        return None
    name = image.rsplit("/", 1)[-1]
    if ":" not in name:
        return f"image {image!r} has no tag (means :latest)"
    if problem := tag_problem(name.rsplit(":", 1)[1]):
        return f"image {image!r}: {problem}"
    return None
