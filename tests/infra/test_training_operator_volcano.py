"""Training Operator v1 under Volcano: started with --gang-scheduler-name=volcano, so that it creates the
PodGroup that gangs a PyTorchJob's or an MPIJob's pods; the same pinned overlay otherwise."""

from __future__ import annotations

import copy
from pathlib import Path

import pulumi
import pulumi_kubernetes as k8s
import pytest
import yaml

from infra.addons.training import TRAINING_OPERATOR_V1_VOLCANO, Training, TrainingArgs
from infra.charts import TRAINING_OPERATOR_V1_KUSTOMIZE
from infra.config.addons import AddonsConfig
from infra.tools.synth import stack_config
from tests.conftest import synth_with_edges
from tests.infra.dependency_graph import build_graph, depends_on

REPO = Path(__file__).resolve().parents[2]
KUSTOMIZATION = yaml.safe_load((REPO / TRAINING_OPERATOR_V1_VOLCANO / "kustomization.yaml").read_text())


def test_the_volcano_overlay_is_the_pinned_overlay_and_nothing_else():
    assert KUSTOMIZATION["resources"] == [TRAINING_OPERATOR_V1_KUSTOMIZE]
    assert set(KUSTOMIZATION) == {"apiVersion", "kind", "resources", "patches"}


def test_it_starts_the_operator_with_volcano_as_its_gang_scheduler():
    (patch,) = KUSTOMIZATION["patches"]
    # The overlay's Deployment and its one container (`/manager`, no args at v1.9.2: manifests/base/
    # deployment.yaml); the flag as cmd/training-operator.v1/main.go declares it.
    assert patch["target"] == {"kind": "Deployment", "name": "training-operator"}
    (op,) = yaml.safe_load(patch["patch"])
    assert op == {
        "op": "add",
        "path": "/spec/template/spec/containers/0/args",
        "value": ["--gang-scheduler-name=volcano"],
    }


@pytest.fixture
def mocks(pulumi_mocks):
    return pulumi_mocks()


def _training(gang_scheduler: str) -> Training:
    config = AddonsConfig.model_validate(
        {"training": {"trainingOperatorV1": True, "gangScheduler": gang_scheduler, "queues": [{"name": "a"}]}}
    )
    provider = k8s.Provider("k8s", kubeconfig="{}")
    return Training("training", TrainingArgs(config=config.training, k8s_provider=provider))


@pulumi.runtime.test
def test_a_volcano_platform_installs_the_volcano_overlay(mocks):
    training = _training("volcano")

    def check(_):
        (operator_v1,) = mocks.by_name("kubernetes:kustomize/v2:Directory").values()
        assert operator_v1["directory"] == TRAINING_OPERATOR_V1_VOLCANO
        assert training.operators["mpijob"] is True

    return pulumi.Output.all(*[r.urn for r in training.installed]).apply(check)


@pulumi.runtime.test
def test_a_kueue_platform_installs_the_overlay_as_it_is(mocks):
    training = _training("kueue")

    def check(_):
        (operator_v1,) = mocks.by_name("kubernetes:kustomize/v2:Directory").values()
        assert operator_v1["directory"] == TRAINING_OPERATOR_V1_KUSTOMIZE

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
    assert operator_v1.inputs["directory"] == TRAINING_OPERATOR_V1_VOLCANO
    assert depends_on(graph, operator_v1, volcano.urn)


def test_under_kueue_there_is_no_volcano_to_wait_for():
    _, operator_v1, volcano = _operator_and_volcano("kueue")
    assert volcano == [] and operator_v1.inputs["directory"] == TRAINING_OPERATOR_V1_KUSTOMIZE
