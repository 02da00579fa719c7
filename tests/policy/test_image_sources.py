"""Every image the platform and the jobs run, followed to where its bytes come from: derived from the
rendered objects (the platform's own Kubernetes objects, every Helm release rendered from its real chart
package, every workload stack's objects), each must belong to a registry of infra/platform/registries.py
(where its blobs come from for a caller in AWS, which path they take), so a new registry cannot slip
past the S3 endpoint's policy unexamined."""

from __future__ import annotations

from typing import Any

from infra.platform.registries import REGISTRIES, Registry, registry_host
from policy.scan import platform_objects


def registry_of(image: str) -> Registry | None:
    host = registry_host(image)
    return next((r for r in REGISTRIES if r.hosts.fullmatch(host)), None)


def images(objects: list[dict[str, Any]]) -> set[str]:
    found: set[str] = set()

    def walk(value: Any) -> None:
        if isinstance(value, dict):
            for key, item in value.items():
                if key == "image" and isinstance(item, str):
                    found.add(item)
                else:
                    walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)

    walk(objects)
    return found


def test_every_image_comes_from_a_registry_whose_bytes_are_followed(
    platform_resources, chart_objects, workload_objects
):
    every = set()
    for stack, resources in platform_resources.items():
        every |= images(platform_objects(resources)) | images(chart_objects[stack])
    for objects in workload_objects.values():
        every |= images(objects)
    assert len(every) > 20, sorted(every)  # charts, the GPU check, jobs: not a vacuous pass
    unknown = sorted(i for i in every if registry_of(i) is None)
    assert unknown == [], f"images from registries with no row in infra/platform/registries.py: {unknown}"
    used = {registry_of(i).name for i in every}  # type: ignore[union-attr]
    assert {"registry.k8s.io", "quay.io", "Docker Hub", "NVIDIA NGC", "Amazon ECR (private)"} <= used


def test_registry_hosts_are_read_as_container_runtimes_read_them():
    assert registry_host("python:3.13") == registry_host("library/busybox:1.38") == "docker.io"
    assert registry_host("pytorch/pytorch:2.13.0") == "docker.io"
    assert registry_host("localhost/x:1") == "localhost"
    assert registry_host("registry.k8s.io/metrics-server/metrics-server:v0.8.1") == "registry.k8s.io"
    assert registry_of("localhost:5000/x:1") is None
    assert all(r.source and r.bytes_from for r in REGISTRIES)
