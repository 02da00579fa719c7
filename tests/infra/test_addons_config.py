"""`mlops-eks:addons` validation: bad values fail before any resource exists, naming key, value and
what is allowed."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from infra.config.platform import ConfigError, PlatformConfig

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
            # GPU pools are configured once, in mlops-eks:gpuPools (test_platform_config.py).
            {"karpenter": {"gpuPools": []}},
            "mlops-eks:addons.karpenter.gpuPools: unknown key",
        ),
        (
            {"training": {"gangScheduler": "kueue", "queues": [{"name": "a", "efaInterfaces": -1}]}},
            "mlops-eks:addons.training.queues[0].efaInterfaces: Input should be greater than or equal to 0",
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
    pools = PlatformConfig.from_mapping(config).gpu_pools
    assert addons.karpenter.enabled and pools and all(p.source == "karpenter" for p in pools)
    assert addons.observability.enabled and addons.kubecost.enabled and addons.metrics_server.enabled
    assert addons.training.trainer
    if stack == "prod":
        assert all(p.capacity_types == ["on-demand"] for p in pools)
        assert addons.karpenter.ami_alias != "al2023@latest" and addons.gpu.efa_device_plugin


def test_an_alert_receiver_needs_its_secret_and_names_the_key_that_holds_it():
    problem = _problem({"observability": {"alertReceiver": "slack"}})
    assert "mlops-eks:alertReceiverSecret" in problem and "alertReceiver is 'slack'" in problem
    config = PlatformConfig.from_mapping(
        {
            **BASE,
            "mlops-eks:addons": {"observability": {"alertReceiver": "pagerduty"}},
            "mlops-eks:alertReceiverSecret": "R0UTINGKEY",
        },
        decrypted=True,  # as the engine hands it over; a stack file holds {secure: ...}
    )
    assert config.addons.observability.alert_receiver == "pagerduty"
    assert "R0UTINGKEY" not in repr(config)


def test_an_unknown_alert_receiver_names_the_allowed_kinds():
    problem = _problem({"observability": {"alertReceiver": "email"}})
    assert "mlops-eks:addons.observability.alertReceiver" in problem and "slack" in problem


def test_kubecost_needs_more_prometheus_retention_than_its_hourly_etl_window():
    problem = _problem({"observability": {"retention": "2d"}})
    assert "mlops-eks:addons.observability.retention" in problem and "50h" in problem
    assert _load({"observability": {"retention": "2d"}, "kubecost": {"enabled": False}})
    assert _load({"observability": {"retention": "50h"}}).addons.observability.retention_hours == 50
