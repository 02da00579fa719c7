"""`mlops-eks:addons` validation: bad values fail before any resource exists, naming key, value and
what is allowed."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import BaseModel

from infra.config import stack_files
from infra.config.addons import AddonsConfig, TeamQueue
from infra.config.nodes import GPU_NODE_DISK_GIB
from infra.config.platform import ConfigError, GpuPoolConfig, PlatformConfig

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
    config = stack_files.read_config(stack_files.stack_file(REPO, stack))
    addons = PlatformConfig.from_mapping(config).addons
    pools = PlatformConfig.from_mapping(config).gpu_pools
    assert addons.karpenter.enabled and pools and all(p.source == "karpenter" for p in pools)
    assert addons.observability.enabled and addons.kubecost.enabled and addons.metrics_server.enabled
    assert addons.training.trainer
    if stack == "prod":
        # On demand, or from a reservation alone: never Spot in prod.
        assert all(p.capacity_types in (["on-demand"], ["reserved"]) for p in pools)
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


def _spelled(value: object) -> str:
    """A default as Pulumi.yaml's descriptions write it (YAML flow style)."""
    if isinstance(value, bool):
        return str(value).lower()
    if value is None:
        return "null"
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, list):
        return "[" + ", ".join(map(str, value)) + "]"
    return str(value)


def _leaves(model: BaseModel) -> list[tuple[str, object]]:
    found = []
    for key, value in model.model_dump(by_alias=True).items():
        field = getattr(model, next(n for n, f in type(model).model_fields.items() if (f.alias or n) == key))
        found += _leaves(field) if isinstance(field, BaseModel) else [(key, value)]
    return found


def test_pulumi_yaml_states_every_add_on_default_as_the_model_has_it():
    """Pulumi.yaml documents the add-ons' defaults in prose (`addons` has `default: {}`): each must be the
    model's, so changing a default in infra/config changes it here or fails."""
    declared = stack_files.read_config(REPO / "Pulumi.yaml")
    text = " ".join(declared["addons"]["description"].split())
    # queues: [] is described by an entry's defaults instead.
    defaults = [(k, v) for k, v in _leaves(AddonsConfig()) if k != "queues"]
    defaults += [(k, v) for k, v in _leaves(TeamQueue(name="team")) if k not in ("name", "gpus")]
    assert len(defaults) == 29  # every leaf of every add-on is seen
    missing = [f"{k}: {_spelled(v)}" for k, v in defaults if f"{k}: {_spelled(v)}" not in text]
    assert missing == []
    pools = " ".join(declared["gpuPools"]["description"].split())
    pool = GpuPoolConfig(name="p", accelerator="t4", gpuLimit=4)
    for key, value in [
        ("consolidateAfter", pool.consolidate_after),
        ("capacityTypes", pool.capacity_types),
        ("efa", pool.efa),
        ("diskSizeGiB", GPU_NODE_DISK_GIB),
    ]:
        assert f"{key} (" in pools and f"default {_spelled(value)}" in pools, key
