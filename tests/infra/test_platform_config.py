"""PlatformConfig validation, without the Pulumi runtime: every bad input names its key, value and fix."""

from __future__ import annotations

import json
from pathlib import Path

import pulumi
import pytest
import yaml

from infra.config import REGION_KEY, ConfigError, PlatformConfig
from infra.synth import stack_config

REPO = Path(__file__).resolve().parents[2]
BASE = {REGION_KEY: "us-east-1"}
T4 = {"name": "t4", "accelerator": "t4"}


def error_of(values: dict) -> str:
    with pytest.raises(ConfigError) as e:
        PlatformConfig.from_mapping({**BASE, **values})
    return str(e.value)


def test_dev_and_prod_stack_files_load():
    dev = PlatformConfig.from_mapping(stack_config("dev"))
    prod = PlatformConfig.from_mapping(stack_config("prod"))
    assert (dev.environment, dev.nat_gateways, dev.endpoint_public_access) == ("dev", "single", True)
    assert (prod.environment, prod.nat_gateways, prod.endpoint_public_access) == ("prod", "per-az", False)
    assert {p.accelerator for p in dev.gpu_pools} == {"t4", "amd-v520"}
    assert {p.accelerator for p in prod.gpu_pools} == {"t4", "a100"}


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        pytest.param(
            {"mlops-eks:gpuPools": [{"name": "x", "accelerator": "v100"}]},
            ["mlops-eks:gpuPools[0].accelerator", "'v100'", "t4, a10g, l4, a100, h100, amd-v520"],
            id="unknown-accelerator",
        ),
        pytest.param(
            {"mlops-eks:gpuPools": [T4, {"name": "amd", "accelerator": "amd-v520"}]},
            ["mlops-eks:gpuPools[1].amiId", "got None", "ami-0123456789abcdef0"],
            id="amd-without-ami",
        ),
        pytest.param(
            {"mlops-eks:gpuPools": [{**T4, "amiId": "ami-0123456789abcdef0"}]},
            ["mlops-eks:gpuPools[0].amiId", "EKS-optimized AL2023_x86_64_NVIDIA", "no amiId"],
            id="ami-on-nvidia",
        ),
        pytest.param(
            {"mlops-eks:gpuPools": [{**T4, "minSize": 3, "maxSize": 2}]},
            ["mlops-eks:gpuPools[0].maxSize", "got 2", ">= minSize (3)"],
            id="min-above-max",
        ),
        pytest.param(
            {"mlops-eks:gpuPools": [{**T4, "minSize": 0, "maxSize": 2, "desiredSize": 5}]},
            ["mlops-eks:gpuPools[0].desiredSize", "got 5", "between minSize (0) and maxSize (2)"],
            id="desired-outside",
        ),
        pytest.param(
            {"mlops-eks:systemNodes": {"minSize": 2, "maxSize": 3, "desiredSize": 1}},
            ["mlops-eks:systemNodes.desiredSize", "got 1"],
            id="system-desired-outside",
        ),
        pytest.param(
            {"mlops-eks:gpuPools": [{**T4, "instanceTypes": ["p4d.24xlarge"]}]},
            ["mlops-eks:gpuPools[0].instanceTypes[0]", "'p4d.24xlarge'", "g4dn.xlarge"],
            id="instance-of-other-accelerator",
        ),
        pytest.param(
            {"mlops-eks:gpuPools": [{**T4, "instanceTypes": ["g4dn.xlarge", "g4dn.12xlarge"]}]},
            ["mlops-eks:gpuPools[0].instanceTypes", "same GPU count"],
            id="mixed-gpu-counts",
        ),
        pytest.param(
            {"mlops-eks:gpuPools": [{**T4, "efa": True}]},
            ["mlops-eks:gpuPools[0].efa", "g4dn.8xlarge"],
            id="efa-without-efa-instances",
        ),
        pytest.param(
            {"mlops-eks:gpuPools": [T4, T4]},
            ["mlops-eks:gpuPools[1].name", "'t4'"],
            id="duplicate-pool-name",
        ),
        pytest.param(
            {"mlops-eks:privateSubnetCidrs": ["10.0.0.0/19", "10.0.16.0/20", "10.0.64.0/19"]},
            ["mlops-eks:privateSubnetCidrs[1]", "'10.0.16.0/20'", "does not overlap privateSubnetCidrs[0]"],
            id="overlapping-cidrs",
        ),
        pytest.param(
            {"mlops-eks:publicSubnetCidrs": ["10.0.128.0/22", "10.0.132.0/22", "10.1.0.0/22"]},
            ["mlops-eks:publicSubnetCidrs[2]", "'10.1.0.0/22'", "inside vpcCidr 10.0.0.0/16"],
            id="cidr-outside-vpc",
        ),
        pytest.param(
            {"mlops-eks:privateSubnetCidrs": ["10.0.0.0/19"]},
            ["mlops-eks:privateSubnetCidrs", "one CIDR per AZ (3)"],
            id="cidr-count",
        ),
        pytest.param(
            {"mlops-eks:vpcCidr": "10.0.0.0/8"}, ["mlops-eks:vpcCidr", "/16 to /24"], id="vpc-too-big"
        ),
        pytest.param(
            {"mlops-eks:vpcCidr": "10.0.0/16"}, ["mlops-eks:vpcCidr", "CIDR notation"], id="bad-cidr"
        ),
        pytest.param(
            {"mlops-eks:endpointPublicAccess": True, "mlops-eks:publicAccessCidrs": ["0.0.0.0/0"]},
            ["mlops-eks:publicAccessCidrs[0]", "'0.0.0.0/0'", "prod must not expose"],
            id="prod-public-to-world",
        ),
        pytest.param(
            {"mlops-eks:endpointPublicAccess": True},
            ["mlops-eks:publicAccessCidrs", "0.0.0.0/0"],
            id="public-without-cidrs",
        ),
        pytest.param(
            {"mlops-eks:systemNodes": {"capacityType": "SPOT"}},
            ["mlops-eks:systemNodes.capacityType", "'SPOT'", "ON_DEMAND in prod"],
            id="prod-spot-system",
        ),
        pytest.param(
            {"mlops-eks:availabilityZoneCount": 0},
            ["mlops-eks:availabilityZoneCount", "got 0", "2, 3 or 4"],
            id="zero-azs",
        ),
        pytest.param(
            {"mlops-eks:availabilityZones": ["us-east-1a", "us-west-2b", "us-east-1c"]},
            ["mlops-eks:availabilityZones[1]", "'us-west-2b'", "AZ of us-east-1"],
            id="az-of-another-region",
        ),
        pytest.param(
            {"mlops-eks:availabilityZones": ["us-east-1a"]},
            ["mlops-eks:availabilityZones", "[] or 3 AZ names"],
            id="az-count",
        ),
        pytest.param({REGION_KEY: "US-East"}, ["aws:region", "'US-East'", "us-east-1"], id="bad-region"),
        pytest.param({REGION_KEY: None}, ["aws:region"], id="no-region"),
        pytest.param(
            {"mlops-eks:kubernetesVersion": "1.29"},
            ["mlops-eks:kubernetesVersion", "'1.29'", '"1.33" or newer'],
            id="old-k8s",
        ),
        pytest.param(
            {"mlops-eks:adminPrincipalArns": ["admin"]},
            ["mlops-eks:adminPrincipalArns[0]", "IAM role"],
            id="bad-arn",
        ),
        pytest.param(
            {"mlops-eks:gpuPool": []}, ["mlops-eks:gpuPool", "unknown key", "gpuPools"], id="unknown-key-typo"
        ),
        pytest.param(
            {"mlops-eks:gpuPools": [{**T4, "minSize": "two"}]},
            ["mlops-eks:gpuPools[0].minSize", "'two'", "valid integer"],
            id="wrong-type",
        ),
        pytest.param(
            {"mlops-eks:gpuPools": [{**T4, "capacityType": "spot"}]},
            ["mlops-eks:gpuPools[0].capacityType", "'ON_DEMAND' or 'SPOT'"],
            id="capacity-type",
        ),
    ],
)
def test_invalid_config_names_key_value_and_allowed(values, expected):
    message = error_of(values)
    for part in expected:
        assert part in message, f"{part!r} not in {message!r}"


def test_dev_may_open_the_endpoint_to_the_world_but_prod_may_not():
    values = {"mlops-eks:endpointPublicAccess": True, "mlops-eks:publicAccessCidrs": ["0.0.0.0/0"]}
    assert PlatformConfig.from_mapping({**BASE, **values, "mlops-eks:environment": "dev"}).public_access_cidrs
    error_of(values)


def test_defaults_are_secure_and_pools_scale_from_zero():
    config = PlatformConfig.from_mapping({**BASE, "mlops-eks:gpuPools": [T4]})
    assert config.environment == "prod" and not config.endpoint_public_access
    assert config.nat_gateways == "per-az" and config.system_nodes.capacity_type == "ON_DEMAND"
    assert config.gpu_pools[0].min_size == 0 and config.gpu_pools[0].instance_type_names == ["g4dn.xlarge"]
    assert config.private_subnets == ["10.0.0.0/19", "10.0.32.0/19", "10.0.64.0/19"]
    assert config.public_subnets == ["10.0.128.0/22", "10.0.132.0/22", "10.0.136.0/22"]


def test_config_is_frozen():
    config = PlatformConfig.from_mapping(BASE)
    with pytest.raises(ValueError):
        config.vpc_cidr = "10.1.0.0/16"


def test_from_pulumi_parses_structured_values_passed_as_json():
    values = stack_config("dev")
    pulumi.runtime.set_all_config({k: v if isinstance(v, str) else json.dumps(v) for k, v in values.items()})
    try:
        assert PlatformConfig.from_pulumi() == PlatformConfig.from_mapping(values)
    finally:
        pulumi.runtime.set_all_config({})


def test_pulumi_yaml_documents_every_key_with_the_models_default():
    project = yaml.safe_load((REPO / "Pulumi.yaml").read_text())
    assert project["name"] == "mlops-eks"
    assert project["runtime"] == {"name": "python", "options": {"toolchain": "pip", "virtualenv": ".venv"}}
    declared = project["config"]
    keys = {f.alias for f in PlatformConfig.model_fields.values()} - {REGION_KEY}
    assert keys <= set(declared), f"undocumented: {keys - set(declared)}"
    for key, decl in declared.items():
        assert decl.get("description"), key
        assert "default" in decl, f"{key}: a key without a default is required in every stack"
        assert decl.get("type", "array") in {"string", "integer", "boolean", "array"}, key
        if decl.get("type") == "array":
            assert "type" in decl["items"], key
    # Secrets have no default worth comparing: "" and unset both mean "not set".
    secrets = {f.alias for f in PlatformConfig.model_fields.values() if "SecretStr" in str(f.annotation)}
    defaults = {f"mlops-eks:{k}": declared[k]["default"] for k in keys - secrets}
    from_yaml = PlatformConfig.from_mapping({**BASE, **defaults})
    assert from_yaml == PlatformConfig.from_mapping(BASE)
