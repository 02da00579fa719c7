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


# distribution/reference's grammar (reference.go, normalize.go): a repository path of lowercase
# components, after a registry host[:port] when the first component has a '.' or ':' or is localhost; a
# digest is sha256 and 64 lowercase hex digits.
_COMPONENT = re.compile(r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*")
_HOST = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?(?::[0-9]+)?")
_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")


def _is_repository(name: str) -> bool:
    first, _, rest = name.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        if not _HOST.fullmatch(first):
            return False
        name = rest
    return all(_COMPONENT.fullmatch(c) for c in name.split("/"))


def image_problem(image: str) -> str | None:
    name, _, digest = image.partition("@")
    repository = name.rsplit(":", 1)[0] if ":" in name.rsplit("/", 1)[-1] else name
    if not _is_repository(repository):
        return (
            f"image {image!r}: {repository!r} is not a repository name (lowercase path components, "
            "optionally after a registry host[:port])"
        )
    if digest:
        if not _DIGEST.fullmatch(digest):
            return f"image {image!r}: {digest!r} is not a digest (sha256: and 64 lowercase hex digits)"
        return None
    name = image.rsplit("/", 1)[-1]
    if ":" not in name:
        return f"image {image!r} has no tag (means :latest)"
    if problem := tag_problem(name.rsplit(":", 1)[1]):
        return f"image {image!r}: {problem}"
    return None
