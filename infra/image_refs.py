"""Which container image references a job or platform object may use: a digest, or an explicit tag
other than `latest` (a moving tag runs a different image on every node pull). Pure: shared by the
workload spec (which refuses such a job before rendering) and the policy pack (k8s-images-pinned)."""

from __future__ import annotations

MOVING_TAGS = frozenset({"latest"})


def tag_problem(tag: str) -> str | None:
    if tag.strip().lower() in MOVING_TAGS:
        return f"tag {tag!r} moves: every pull may get a different image; use an immutable version tag"
    return None


def image_problem(image: str) -> str | None:
    if "@sha256:" in image:
        return None
    name = image.rsplit("/", 1)[-1]
    if ":" not in name:
        return f"image {image!r} has no tag (means :latest)"
    if tag_problem(name.rsplit(":", 1)[1]):
        return f"image {image!r} uses :{name.rsplit(':', 1)[1]}"
    return None
