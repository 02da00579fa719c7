"""Which container image references a job or platform object may use: a digest, or a version tag. A
moving tag runs a different image on every node pull: `latest`, no tag at all (which means `latest`),
and any tag that names a branch or a channel rather than a version (`main`, `master`, `stable`,
`edge`, `nightly`...): a version tag has a digit in it (`0.1.0`, `v2`, `2026-05-01`, `1.35-cuda12`),
a git commit tag is hexadecimal. Pure: shared by the workload spec (which refuses such a job before
rendering), the platform config and the policy pack (k8s-images-pinned)."""

from __future__ import annotations

import re

MOVING_TAGS = frozenset({"latest"})
# The OCI distribution spec's tag grammar (opencontainers/distribution-spec, spec.md "Pulling manifests"):
# a registry refuses any other tag, so the job would fail at image pull on every node.
TAG_GRAMMAR = "[A-Za-z0-9_][A-Za-z0-9._-]{0,127}"
_TAG = re.compile(TAG_GRAMMAR)
_COMMIT = re.compile("[0-9a-f]{7,64}")
# Digests the OCI image spec registers (descriptor.md "Registered algorithms").
_DIGEST = re.compile(r"@sha256:[0-9a-f]{64}$|@sha512:[0-9a-f]{128}$")


def tag_problem(tag: str) -> str | None:
    if not isinstance(tag, str) or not _TAG.fullmatch(tag):
        return f"tag {tag!r} is not a valid OCI tag ({TAG_GRAMMAR}: letters, digits, _ . -, at most 128)"
    if tag.strip().lower() in MOVING_TAGS:
        return f"tag {tag!r} moves: every pull may get a different image; use an immutable version tag"
    if not any(ch.isdigit() for ch in tag) and not _COMMIT.fullmatch(tag):
        return (
            f"tag {tag!r} names a branch or channel, not a version: it moves to a new image on every "
            "release; use a version tag or a digest"
        )
    return None


def image_problem(image: str) -> str | None:
    if _DIGEST.search(image):
        return None
    if "@" in image:
        return f"image {image!r} has a digest that is not sha256:<64 hex> or sha512:<128 hex>"
    name = image.rsplit("/", 1)[-1]
    if ":" not in name:
        return f"image {image!r} has no tag (means :latest)"
    if problem := tag_problem(name.rsplit(":", 1)[1]):
        return f"image {image!r}: {problem}"
    return None
