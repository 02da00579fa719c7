"""`mlops-eks:addons` validation: bad values fail before any resource exists, naming key, value and
what is allowed."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from infra.config import ConfigError, PlatformConfig

REPO = Path(__file__).resolve().parents[2]
BASE = {"aws:region": "us-east-1"}


def _load(addons: dict) -> PlatformConfig:
    return PlatformConfig.from_mapping({**BASE, "mlops-eks:addons": addons})


def _problem(addons: dict) -> str:
    with pytest.raises(ConfigError) as e:
        _load(addons)
    return str(e.value)


def test_defaults_turn_on_what_a_team_needs_and_no_gang_scheduler():
    addons = _load({}).addons
    assert addons.karpenter.enabled and addons.observability.enabled and addons.kubecost.enabled
    assert addons.training.trainer and addons.training.gang_scheduler is None


@pytest.mark.parametrize(
    ("addons", "expected"),
    [
        (
            {"karpenter": {"gpuPools": [{"name": "x", "accelerator": "v100"}]}},
            "addons.karpenter.gpuPools[0].accelerator: unknown accelerator; got 'v100'; allowed: t4",
        ),
        (
            {
                "karpenter": {"gpuPools": [{"name": "amd", "accelerator": "amd-v520"}]},
                "gpu": {"amdDevicePlugin": True},
            },
            "mlops-eks:addons.karpenter.gpuPools[0].amiId: amd-v520 has no EKS-optimized AMI",
        ),
        (
            {"karpenter": {"gpuPools": [{"name": "t4", "accelerator": "t4", "consolidateAfter": "soon"}]}},
            "mlops-eks:addons.karpenter.gpuPools[0].consolidateAfter: got 'soon'; allowed: a duration",
        ),
        (
            {
                "karpenter": {
                    "gpuPools": [{"name": "t4", "accelerator": "t4", "instanceTypes": ["p4d.24xlarge"]}]
                }
            },
            "addons.karpenter.gpuPools[0].instanceTypes[0]: not a t4 instance type; got 'p4d.24xlarge'",
        ),
        (
            {
                "karpenter": {"gpuPools": [{"name": "t4", "accelerator": "t4"}]},
                "gpu": {"nvidiaDevicePlugin": False},
            },
            "mlops-eks:addons.gpu.nvidiaDevicePlugin: karpenter.gpuPools[0] (t4) needs it",
        ),
        (
            {"observability": {"enabled": False}},
            "mlops-eks:addons.kubecost.enabled: Kubecost reads the platform's Prometheus; got True",
        ),
        (
            {"observability": {"retention": "forever"}},
            "mlops-eks:addons.observability.retention: got 'forever'",
        ),
        (
            {"training": {"gangScheduler": "yunikorn"}},
            "mlops-eks:addons.training.gangScheduler: Input should be",
        ),
        (
            {"training": {"queues": [{"name": "team-a"}]}},
            "mlops-eks:addons.training.queues: got ['team-a']; allowed: [] unless gangScheduler is set",
        ),
        ({"karpenter": {"amiAlias": "al2@latest"}}, "mlops-eks:addons.karpenter.amiAlias: got 'al2@latest'"),
        ({"grafana": {}}, "mlops-eks:addons.grafana: unknown key"),
    ],
)
def test_bad_addons_config_names_key_value_and_allowed(addons, expected):
    assert expected in _problem(addons)


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_stack_files_turn_on_the_addons_a_team_uses(stack):
    config = yaml.safe_load((REPO / f"Pulumi.{stack}.yaml").read_text())["config"]
    addons = PlatformConfig.from_mapping(config).addons
    assert addons.karpenter.enabled and addons.karpenter.gpu_pools
    assert addons.observability.enabled and addons.kubecost.enabled and addons.metrics_server.enabled
    assert addons.training.trainer
    if stack == "prod":
        assert all(p.capacity_types == ["on-demand"] for p in addons.karpenter.gpu_pools)
