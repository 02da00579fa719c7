"""Every image the platform and the jobs run, followed to where a node pulls it from: the platform's own ECR
registry (or EKS's, for EKS's images), and nothing else (infra/platform/registries.py). Derived from what is
rendered: the platform's own Kubernetes objects, every Helm release rendered from its real chart package
(images named in container flags too: an operator puts them into the pods it makes), every workload
stack's objects and the pods the operators make from them (sim/operators/pods.py)."""

from __future__ import annotations

import re
from typing import Any

import pytest

from infra.addons import training_operator_v1
from infra.config import stack_files
from infra.pins import IMAGES
from infra.platform.registries import UPSTREAMS, ImagePath, eks_registry, registry_host, upstream_of
from infra.tools.synth import ACCOUNT_ID
from policy.scan import REPO, platform_objects
from sim.operators.pods import operator_pods
from workloads.platform import example_outputs_path, load_platform_outputs

# `--prometheus-config-reloader=quay.io/...`, `--pytorch-init-container-image=...`: images in flags.
_IMAGE_FLAG = re.compile(r"^--[\w.-]*(?:image|reloader)[\w.-]*=(\S+/\S+)$")


def images(objects: Any) -> set[str]:
    found: set[str] = set()

    def walk(value: Any) -> None:
        if isinstance(value, dict):
            for key, item in value.items():
                if key == "image" and isinstance(item, str):
                    found.add(item)
                elif key == "args" and isinstance(item, list):
                    found.update(m[1] for a in item if isinstance(a, str) and (m := _IMAGE_FLAG.match(a)))
                else:
                    walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)

    walk(objects)
    return found


def unserved(every: set[str], path: ImagePath) -> list[str]:
    return sorted(i for i in every if not path.is_served(i))


def kustomized_objects(resources: list[dict[str, Any]], path: ImagePath) -> list[dict[str, Any]]:
    """The objects of every kustomize Directory the program registers, built as the provider's kustomize
    builds the directory it names: the stack's layer over its overlay. The layer is the kustomization
    write_stack_layer writes there for `path`, taken from that function rather than from the file: a test
    worker rehearsing the same stack for another account rewrites the file meanwhile
    (test_training_operator_v1.py builds the written file with kustomize itself)."""
    found = []
    for r in resources:
        if r["type"] != "kubernetes:kustomize/v2:Directory":
            continue
        directory = r["inputs"]["directory"]
        overlays = [training_operator_v1.OVERLAY, training_operator_v1.VOLCANO_OVERLAY]
        (overlay,) = [o for o in overlays if training_operator_v1.layer_directory(o, path) == directory]
        layer = training_operator_v1.stack_layer(overlay, path)
        found += training_operator_v1.build(directory, layer).objects
    return found


def test_every_image_the_platform_runs_comes_through_ecr(platform_resources, chart_objects, dev, prod):
    for stack, synth in (("dev", dev), ("prod", prod)):
        path = ImagePath(ACCOUNT_ID, synth.config.region, stack)
        kustomized = kustomized_objects(platform_resources[stack], path)
        every = images(platform_objects(platform_resources[stack])) | images(chart_objects[stack])
        every |= images(kustomized)
        assert len(every) > 15, sorted(every)  # charts, flags, the GPU check: not a vacuous pass
        assert unserved(every, path) == [], f"{stack}: images a node would pull from outside ECR"
        # The operators' flags were followed: the config reloader prometheus-operator puts into Prometheus's
        # pods, the init container Training Operator v1 puts into PyTorchJob workers (and its own image).
        assert any("/quay/prometheus-operator/prometheus-config-reloader:" in i for i in every)
        assert {i.split("/", 2)[2].split(":")[0] for i in images(kustomized)} == {
            "ghcr/kubeflow/training-v1/training-operator",
            "ecr-public/docker/library/alpine",
            "ghcr/kubeflow/training-v1/kubectl-delivery",
        }


# Training Operator v1 puts the images of its --pytorch-init-container-image and
# --mpi-kubectl-delivery-image flags into the pods it makes: the pod model reads them from the operator's
# Deployment as the stack's layer renders it (infra/addons/training_operator_v1.py stack_layer).
V1_KINDS = {"PyTorchJob", "MPIJob"}


@pytest.fixture(scope="module")
def job_images(workload_objects) -> dict[str, tuple[ImagePath, set[str], set[str], set[str]]]:
    """stack -> (its platform's image path, the images of its objects, those of its operators' pods, the
    job kinds)."""
    found = {}
    for stack, objects in workload_objects.items():
        config = stack_files.read_config(stack_files.stack_file(REPO, stack))
        platform_stack = str(config[stack_files.WORKLOAD_STACK_KEY])
        facts = load_platform_outputs(example_outputs_path(platform_stack))
        registry = re.match(r"(\d{12})\.dkr\.ecr\.([a-z0-9-]+)\.", facts.ecr_repository_urls["cpu"])
        assert registry, facts.ecr_repository_urls
        pods = operator_pods(objects, facts)
        path = ImagePath(registry[1], registry[2], platform_stack.rsplit("/", 1)[-1])
        kinds = {o["kind"] for o in objects}
        found[stack] = (path, images(objects), images([p.spec for p in pods]), kinds)
    return found


def test_every_image_a_job_runs_comes_through_ecr(job_images):
    for stack, (path, rendered, _, _) in job_images.items():
        assert rendered, stack
        assert unserved(rendered, path) == [], stack


def test_every_image_trainer_jobset_and_kuberay_put_into_job_pods_comes_through_ecr(job_images):
    checked = {s: v for s, v in job_images.items() if not v[3] & V1_KINDS}
    assert checked
    for stack, (path, _, made, _) in checked.items():
        assert made, stack
        assert unserved(made, path) == [], stack


def test_every_image_training_operator_v1_puts_into_job_pods_comes_through_ecr(job_images):
    checked = {s: v for s, v in job_images.items() if v[3] & V1_KINDS}
    assert {k for v in checked.values() for k in v[3] & V1_KINDS} == V1_KINDS
    for stack, (path, _, made, _) in checked.items():
        assert unserved(made, path) == [], stack
    # The operators' own containers were followed: the PyTorchJob Worker's init container, the MPIJob
    # launcher's kubectl-delivery.
    made = set().union(*(v[2] for v in checked.values()))
    assert any("/ecr-public/docker/library/alpine:" in i for i in made), sorted(made)
    assert any("/ghcr/kubeflow/training-v1/kubectl-delivery:" in i for i in made), sorted(made)


def test_an_image_is_pulled_from_its_registrys_cache_or_copy_under_the_stacks_prefix():
    path = ImagePath("210987654321", "us-east-1", "dev", {"ghcr": "arn:aws:secretsmanager:x"})
    ecr = "210987654321.dkr.ecr.us-east-1.amazonaws.com"
    assert path.ref("registry.k8s.io/kueue/kueue:v0.19.2") == f"{ecr}/dev/k8s/kueue/kueue:v0.19.2"
    # Docker Hub's official images: ECR Public's copies, so no Docker Hub account is needed.
    digest = "sha256:" + "a" * 64
    assert path.ref(f"python:3.13@{digest}") == f"{ecr}/dev/ecr-public/docker/library/python:3.13@{digest}"
    assert (
        path.ref("docker.io/library/busybox:1.38.0") == f"{ecr}/dev/ecr-public/docker/library/busybox:1.38.0"
    )
    assert path.ref("grafana/grafana:13.2.0") == f"{ecr}/dev/docker-hub/grafana/grafana:13.2.0"
    assert path.ref(f"{ecr}/mlops-eks/dev/cuda:v1") == f"{ecr}/mlops-eks/dev/cuda:v1"
    # EKS's images: EKS's registry of the stack's region, whatever region the chart names.
    efa = "602401143452.dkr.ecr.us-west-2.amazonaws.com/eks/aws-efa-k8s-device-plugin:v0.5.20"
    assert (
        path.ref(efa) == "602401143452.dkr.ecr.us-east-1.amazonaws.com/eks/aws-efa-k8s-device-plugin:v0.5.20"
    )
    assert eks_registry("af-south-1") == "877085696533.dkr.ecr.af-south-1.amazonaws.com"
    with pytest.raises(ValueError, match="registry gcr.io has no row in UPSTREAMS"):
        path.ref("gcr.io/x/y:1")
    # With its credential GHCR is pulled through; without, Docker Hub's non-official images are copied.
    routes = {u.prefix: path.route(u) for u in UPSTREAMS}
    assert routes == {
        "k8s": "pull-through",
        "quay": "pull-through",
        "ecr-public": "pull-through",
        "ghcr": "pull-through",
        "docker-hub": "copy",
        "nvcr": "copy",
        "icr": "copy",
    }


def test_a_stack_name_ecr_cannot_prefix_repositories_with_is_refused_with_what_it_can():
    with pytest.raises(ValueError, match="at most 19 characters"):
        ImagePath("210987654321", "us-east-1", "staging-eu-central-1")
    with pytest.raises(ValueError, match="lowercase letters, digits and . _ -"):
        ImagePath("210987654321", "us-east-1", "Prod")
    ImagePath("210987654321", "us-east-1", "x" * 19)
    docker_hub = ImagePath("210987654321", "us-east-1", "dev").ref("index.docker.io/grafana/grafana:13.2.0")
    assert docker_hub == "210987654321.dkr.ecr.us-east-1.amazonaws.com/dev/docker-hub/grafana/grafana:13.2.0"


def test_every_pinned_image_has_a_registry_row_and_a_rendered_chart_uses_it():
    assert all(upstream_of(p.ref) or p.ref.startswith("602401143452.") for p in IMAGES.values())
    assert all(u.source and u.bytes_from for u in UPSTREAMS)
    # Read as a container runtime reads references.
    assert registry_host("python:3.13") == registry_host("library/busybox:1.38") == "docker.io"
    assert registry_host("localhost:5000/x:1") == "localhost:5000"
