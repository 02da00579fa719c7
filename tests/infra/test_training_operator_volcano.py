"""Training Operator v1 under Volcano: started with --gang-scheduler-name=volcano, so that it creates the
PodGroup that gangs a PyTorchJob's or an MPIJob's pods; the same pinned overlay otherwise."""

from __future__ import annotations

from pathlib import Path

import pulumi
import pulumi_kubernetes as k8s
import pytest
import yaml

from infra.addons.training import TRAINING_OPERATOR_V1_VOLCANO, Training, TrainingArgs
from infra.charts import TRAINING_OPERATOR_V1_KUSTOMIZE
from infra.config.addons import AddonsConfig

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
