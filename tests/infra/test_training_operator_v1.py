"""Training Operator v1 as the platform installs it: its own overlay of a local copy of the pinned upstream
manifests (infra/addons/kustomize/training-operator-v1/base, PROVENANCE.md), whose Deployment reads the
restricted init-container template for PyTorchJob workers, and, under Volcano, starts with
--gang-scheduler-name=volcano so that it creates the PodGroup that gangs a job's pods.

The overlays are built as kustomize would (infra/addons/training_operator_v1.py build), offline."""

from __future__ import annotations

import copy
import hashlib
import re
import shutil
import subprocess
from pathlib import Path

import pulumi
import pulumi_kubernetes as k8s
import pytest
import yaml
from synth_graph import synth_with_edges

from infra import pins
from infra.addons import training_operator_v1
from infra.addons.training import Training, TrainingArgs
from infra.config.addons import AddonsConfig
from infra.image_refs import image_problem
from infra.platform.image_cache import ImageCache, ImageCacheArgs
from infra.platform.registries import ImagePath
from infra.tools.synth import stack_config
from tests.infra.dependency_graph import build_graph, depends_on

REPO = Path(__file__).resolve().parents[2]
UPSTREAM = REPO / "sim" / "vendored" / "kubeflow" / "trainer" / "v1.9.2"
TEMPLATE_FLAG = "pytorch-init-container-template-file"
PATH = ImagePath("123456789012", "us-east-1", "test")
ECR = PATH.registry


def _kustomization(directory: str) -> dict:
    return yaml.safe_load((REPO / directory / "kustomization.yaml").read_text())


OVERLAY_DIR = REPO / training_operator_v1.OVERLAY


def _applied(directory: str) -> training_operator_v1.OperatorDeployment:
    return training_operator_v1.apply_overlay(directory)


def test_the_overlays_build_on_the_local_copy_only():
    assert _kustomization(training_operator_v1.OVERLAY)["resources"] == ["base", "namespace.yaml"]
    assert _kustomization(training_operator_v1.VOLCANO_OVERLAY)["resources"] == ["../training-operator-v1"]
    remote = [
        path
        for path in OVERLAY_DIR.rglob("kustomization.yaml")
        for r in yaml.safe_load(path.read_text()).get("resources") or []
        if "://" in r
    ]
    assert remote == []


def test_the_copied_upstream_files_are_the_pinned_commits():
    """Each file PROVENANCE.md lists as copied unchanged has the sha256 it records; the Deployment is the
    one sim/vendored keeps for the pod model."""
    rows = re.findall(
        r"^\| (base/\S+) \| [^|]+ \| ([0-9a-f]{64}) \|$", (OVERLAY_DIR / "PROVENANCE.md").read_text(), re.M
    )
    assert len(rows) == 8
    assert f"`{pins.TRAINING_OPERATOR_V1_COMMIT}`" in (OVERLAY_DIR / "PROVENANCE.md").read_text()
    for path, digest in rows:
        assert hashlib.sha256((OVERLAY_DIR / path).read_bytes()).hexdigest() == digest, path
    assert (OVERLAY_DIR / "base/deployment.yaml").read_text() == (
        UPSTREAM / "manifests/base/deployment.yaml"
    ).read_text()


def test_the_operator_runs_only_the_kinds_whose_crds_it_installs():
    built = training_operator_v1.build(training_operator_v1.OVERLAY)
    kinds = {o["spec"]["names"]["kind"] for o in built.objects if o["kind"] == "CustomResourceDefinition"}
    args = _applied(training_operator_v1.OVERLAY).container["args"]
    schemes = {a.split("=", 1)[1] for a in args if a.startswith("--enable-scheme=")}
    assert kinds == {"PyTorchJob", "MPIJob"} and schemes == {k.lower() for k in kinds}
    role = built.one("ClusterRole", "training-operator")
    granted = {r for rule in role["rules"] if "kubeflow.org" in rule["apiGroups"] for r in rule["resources"]}
    assert {r.split("/")[0] for r in granted} == {"pytorchjobs", "mpijobs"}


@pytest.mark.parametrize("directory", [training_operator_v1.OVERLAY, training_operator_v1.VOLCANO_OVERLAY])
def test_the_operator_reads_our_template_from_where_its_flag_points(directory):
    operator = _applied(directory)
    path = operator.flags[TEMPLATE_FLAG]
    template = (REPO / training_operator_v1.OVERLAY / "initContainer.yaml").read_text()
    assert operator.read_file(path) == template
    # The image it renders into the template, under the stack's layer: pinned by digest, from ECR Public's
    # copy of docker.io/library/alpine (the busybox nslookup the upstream default runs).
    layered = training_operator_v1.apply_overlay(directory, PATH)
    assert layered.read_file(layered.flags[TEMPLATE_FLAG]) == template
    image = layered.flags["pytorch-init-container-image"]
    assert re.fullmatch(rf"{ECR}/test/ecr-public/docker/library/alpine:[0-9.]+@sha256:[0-9a-f]{{64}}", image)
    assert image_problem(image) is None


@pytest.mark.parametrize("directory", [training_operator_v1.OVERLAY, training_operator_v1.VOLCANO_OVERLAY])
def test_the_stack_layer_names_every_image_in_the_stacks_ecr_and_keeps_the_overlays_flags(directory):
    bare, layered = _applied(directory), training_operator_v1.apply_overlay(directory, PATH)
    # The bare overlay leaves the images to the layer: the operator would fall back to upstream's defaults.
    assert not set(bare.flags) & set(training_operator_v1.JOB_IMAGE_FLAGS)
    images = {flag: layered.flags[flag] for flag in training_operator_v1.JOB_IMAGE_FLAGS}
    assert images == {
        "pytorch-init-container-image": f"{ECR}/test/ecr-public/docker/library/alpine:3.23.6@"
        + pins.IMAGES["pytorch-init"].digest,
        "mpi-kubectl-delivery-image": f"{ECR}/test/ghcr/kubeflow/training-v1/kubectl-delivery:latest",
    }
    assert {k: v for k, v in layered.flags.items() if k not in images} == bare.flags
    assert layered.container["image"] == f"{ECR}/test/ghcr/kubeflow/training-v1/training-operator:v1-3f15cb8"
    # Nothing else changes: the layer is the overlay with its images.
    rest = copy.deepcopy(layered.deployment)
    rest["spec"]["template"]["spec"]["containers"][0] |= {
        "image": bare.container["image"],
        "args": bare.container["args"],
    }
    assert rest == bare.deployment


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl (its kustomize) is not installed")
def test_the_written_layer_builds_with_kustomize_as_the_reader_builds_it(tmp_path):
    """The layer on disk, built by kustomize itself (kubectl kustomize), gives the Deployment the reader
    gives: the layer's relative base and its patch are what kustomize resolves."""
    layer = training_operator_v1.write_stack_layer(training_operator_v1.VOLCANO_OVERLAY, PATH)
    built = subprocess.run(
        ["kubectl", "kustomize", str(REPO / layer)], capture_output=True, text=True, check=True
    )
    # libyaml: the build is megabytes of CustomResourceDefinitions
    (deployment,) = [
        o for o in yaml.load_all(built.stdout, Loader=yaml.CSafeLoader) if o and o["kind"] == "Deployment"
    ]
    ours = training_operator_v1.apply_overlay(training_operator_v1.VOLCANO_OVERLAY, PATH)
    theirs = deployment["spec"]["template"]["spec"]["containers"][0]
    assert (theirs["image"], theirs["args"]) == (ours.container["image"], ours.container["args"])


def test_a_mount_elsewhere_leaves_the_operator_on_its_builtin_template():
    """What the reader catches: the operator's os.ReadFile fails and it falls back silently
    (initcontainer.go getInitContainerTemplateOrDefault)."""
    operator = _applied(training_operator_v1.OVERLAY)
    moved = copy.deepcopy(operator.deployment)
    mounts = moved["spec"]["template"]["spec"]["containers"][0]["volumeMounts"]
    mounts[-1]["mountPath"] = "/etc/config"
    broken = training_operator_v1.OperatorDeployment(moved, operator.config_maps)
    assert broken.read_file(operator.flags[TEMPLATE_FLAG]) is None


def test_only_the_volcano_overlay_starts_the_operator_with_volcano_as_its_gang_scheduler():
    plain, volcano = _applied(training_operator_v1.OVERLAY), _applied(training_operator_v1.VOLCANO_OVERLAY)
    # The flag as cmd/training-operator.v1/main.go declares it; appended to the base overlay's args.
    assert "gang-scheduler-name" not in plain.flags
    assert volcano.flags == plain.flags | {"gang-scheduler-name": "volcano"}


@pytest.fixture
def mocks(pulumi_mocks):
    return pulumi_mocks()


def _training(gang_scheduler: str) -> Training:
    config = AddonsConfig.model_validate(
        {"training": {"trainingOperatorV1": True, "gangScheduler": gang_scheduler, "queues": [{"name": "a"}]}}
    )
    provider = k8s.Provider("k8s", kubeconfig="{}")
    key = "arn:aws:kms:us-east-1:123456789012:key/test"
    images = ImageCache("image-cache", ImageCacheArgs(path=PATH, kms_key_arn=key, tags={}))
    return Training("training", TrainingArgs(config=config.training, k8s_provider=provider, images=images))


@pulumi.runtime.test
def test_a_volcano_platform_installs_the_volcano_overlay(mocks):
    training = _training("volcano")

    def check(_):
        (operator_v1,) = mocks.by_name("kubernetes:kustomize/v2:Directory").values()
        layer = training_operator_v1.layer_directory(training_operator_v1.VOLCANO_OVERLAY, PATH)
        assert operator_v1["directory"] == layer
        assert training.operators["mpijob"] is True

    return pulumi.Output.all(*[r.urn for r in training.installed]).apply(check)


@pulumi.runtime.test
def test_a_kueue_platform_installs_the_overlay_with_the_template(mocks):
    training = _training("kueue")

    def check(_):
        (operator_v1,) = mocks.by_name("kubernetes:kustomize/v2:Directory").values()
        assert operator_v1["directory"] == training_operator_v1.layer_directory(
            training_operator_v1.OVERLAY, PATH
        )
        # The layer the provider reads is on disk, over the overlay with the template.
        written = yaml.safe_load((REPO / operator_v1["directory"] / "kustomization.yaml").read_text())
        assert written == training_operator_v1.stack_layer(training_operator_v1.OVERLAY, PATH)

    return pulumi.Output.all(*[r.urn for r in training.installed]).apply(check)


def _operator_and_volcano(gang_scheduler: str):
    values = copy.deepcopy(stack_config("dev"))
    values["mlops-eks:addons"]["training"]["gangScheduler"] = gang_scheduler
    graph = build_graph(synth_with_edges("dev", values))
    (operator_v1,) = [n for n in graph if n.type == "kubernetes:kustomize/v2:Directory"]
    volcano = [n for n in graph if n.type == "kubernetes:helm.sh/v3:Release" and n.name == "volcano"]
    return graph, operator_v1, volcano


def test_under_volcano_the_operator_starts_after_the_podgroup_crd():
    """At v1.9.2 the operator watches Volcano PodGroups only if their CRD is served when it starts
    (mpijob_controller.go SetupWithManager): started before Volcano, it never sees a gang's PodGroup."""
    graph, operator_v1, (volcano,) = _operator_and_volcano("volcano")
    assert operator_v1.inputs["directory"].endswith("/" + Path(training_operator_v1.VOLCANO_OVERLAY).name)
    assert depends_on(graph, operator_v1, volcano.urn)


def test_under_kueue_there_is_no_volcano_to_wait_for():
    _, operator_v1, volcano = _operator_and_volcano("kueue")
    assert (
        volcano == []
        and operator_v1.inputs["directory"] == "infra/addons/kustomize/stacks/dev/training-operator-v1"
    )
