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


# distribution/reference's grammar (reference.go, normalize.go): a repository path of lowercase
# components, after a registry host[:port] when the first component has a '.' or ':' or is localhost; a
# digest is one the OCI image spec registers (_DIGEST above).
_COMPONENT = re.compile(r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*")
_HOST = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?(?::[0-9]+)?")


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
        if not _DIGEST.fullmatch("@" + digest):
            allowed = "sha256: and 64 lowercase hex digits, or sha512: and 128"
            return f"image {image!r}: {digest!r} is not a digest ({allowed})"
        return None
    if ":" not in name.rsplit("/", 1)[-1]:
        return f"image {image!r} has no tag (means :latest)"
    if problem := tag_problem(name.rsplit(":", 1)[1]):
        return f"image {image!r}: {problem}"
    return None
