"""Controller images by digest (policy/image_digests.py): the images the platform still installs by tag
are exactly the ones policy/image_digests.yaml lists, and any other tag-only controller image is refused,
through the engine's path."""

from __future__ import annotations

from infra.pins import IMAGES
from policy.image_digests import CONTROLLER_NAMESPACES, _value_images, pending, repository
from policy.k8s import containers, pod_specs
from tests.policy.engine_path import violations

RULE = "k8s-controller-images-by-digest"
# Training Operator v1's Deployment (a kustomize Directory, whose children the engine sees at `pulumi up`):
# the tag its pin names (infra/pins.py, upstream's standalone overlay).
TRAINING_OPERATOR_IMAGE = IMAGES["training-operator-v1"].ref


def _installed_by_tag(chart_objects, platform_resources) -> set[str]:
    found = {repository(TRAINING_OPERATOR_IMAGE)}
    for objects in chart_objects.values():
        for o in objects:
            if o["metadata"].get("namespace") not in CONTROLLER_NAMESPACES:
                continue
            for _, spec in pod_specs(o):
                found |= {
                    repository(c["image"]) for c in containers(spec) if "@sha" not in c.get("image", "")
                }
    for records in platform_resources.values():
        for r in records:
            if r["type"] == "kubernetes:helm.sh/v3:Release":
                found |= {
                    repository(i)
                    for _, i in _value_images(r["inputs"].get("values") or {})
                    if "@sha" not in i
                }
    return found


def test_the_pending_list_is_exactly_what_the_platform_installs_by_tag(chart_objects, platform_resources):
    by_tag = _installed_by_tag(chart_objects, platform_resources)
    assert by_tag <= pending(), f"tag-only controller images not listed: {sorted(by_tag - pending())}"
    assert pending() <= by_tag, f"listed but installed by digest or not at all: {sorted(pending() - by_tag)}"


def _daemon_set(image: str, namespace: str = "kube-system") -> dict:
    pod = {"containers": [{"name": "agent", "image": image}]}
    return {
        "kind": "DaemonSet",
        "metadata": {"name": "a", "namespace": namespace},
        "spec": {"template": {"spec": pod}},
    }


def test_a_tag_only_controller_image_is_refused_and_a_digest_or_a_job_namespace_is_not():
    digest = "@sha256:" + "0" * 64
    assert violations(RULE, "kubernetes:apps/v1:DaemonSet", _daemon_set("ghcr.io/example/agent:v1.0.0"))
    assert (
        violations(RULE, "kubernetes:apps/v1:DaemonSet", _daemon_set("ghcr.io/example/agent" + digest)) == []
    )
    # A listed repository with a tag still passes until it is pinned; a team's own Deployment is not judged.
    assert (
        violations(RULE, "kubernetes:apps/v1:DaemonSet", _daemon_set("quay.io/kuberay/operator:v1.7.0")) == []
    )
    assert (
        violations(RULE, "kubernetes:apps/v1:DaemonSet", _daemon_set("ghcr.io/example/agent:v1", "team-a"))
        == []
    )
    release = {
        "chart": "c",
        "namespace": "monitoring",
        "values": {"sidecar": {"image": {"repository": "ghcr.io/example/s", "tag": "1.0"}}},
    }
    (message,) = violations(RULE, "kubernetes:helm.sh/v3:Release", release)
    assert "values sidecar.image" in message and "ghcr.io/example/s:1.0" in message
    pinned = {
        **release,
        "values": {"sidecar": {"image": {"repository": "ghcr.io/example/s", "digest": digest[1:]}}},
    }
    assert violations(RULE, "kubernetes:helm.sh/v3:Release", pinned) == []


def test_repositories_are_compared_with_docker_hubs_implicit_names_spelled_out():
    assert repository("alpine:3.23") == "docker.io/library/alpine"
    assert repository("kubeflow/training-operator:v1-3f15cb8") == "docker.io/kubeflow/training-operator"
    assert repository("localhost:5000/x:1") == "localhost:5000/x"
    assert repository("quay.io/kuberay/operator@sha256:" + "0" * 64) == "quay.io/kuberay/operator"
