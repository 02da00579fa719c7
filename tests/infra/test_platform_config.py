"""PlatformConfig validation, without the Pulumi runtime: every bad input names its key, value and fix."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from stack_variants import without_the_amd_pool

from infra.config.platform import REGION_KEY, ConfigError, PlatformConfig
from infra.tools.synth import stack_config
from sim.pulumi.language_host import engine_values

REPO = Path(__file__).resolve().parents[2]
BASE = {REGION_KEY: "us-east-1"}
T4 = {"name": "t4", "accelerator": "t4", "gpuLimit": 4}
RESERVATION = {"ids": ["cr-0a1b2c3d4e5f60718"], "availabilityZone": "us-east-1a"}


def error_of(values: dict) -> str:
    with pytest.raises(ConfigError) as e:
        PlatformConfig.from_mapping({**BASE, **values})
    return str(e.value)


@pytest.mark.parametrize("key", ["grafanaAdminPassword", "alertReceiverSecret", "grafanaAdminPasword"])
def test_a_refused_secret_value_is_masked_in_the_message(key):
    with pytest.raises(ConfigError) as e:
        PlatformConfig.from_mapping({**BASE, f"mlops-eks:{key}": ["hunter2-do-not-print"]}, decrypted=True)
    assert f"mlops-eks:{key}: " in str(e.value) and "(got ********)" in str(e.value)
    assert "hunter2" not in str(e.value)


def test_dev_and_prod_stack_files_load():
    dev = PlatformConfig.from_mapping(stack_config("dev"))
    prod = PlatformConfig.from_mapping(stack_config("prod"))
    assert (dev.environment, dev.nat_gateways, dev.endpoint_public_access) == ("dev", "single", True)
    assert (prod.environment, prod.nat_gateways, prod.endpoint_public_access) == ("prod", "per-az", True)
    assert {p.accelerator for p in dev.gpu_pools} == {"t4", "amd-v520"}
    assert {p.accelerator for p in prod.gpu_pools} == {"t4", "a100", "h100"}


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        pytest.param(
            {"mlops-eks:gpuPools": [{"name": "x", "accelerator": "v100"}]},
            [
                "mlops-eks:gpuPools[0].accelerator",
                "'v100'",
                "t4, a10g, l4, a100, l40s, h100, h200, b200, amd-v520",
            ],
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
            {"mlops-eks:gpuPools": [{**T4, "instanceTypes": ["g4dn.12xlarge"], "gpuLimit": 2}]},
            ["mlops-eks:gpuPools[0].gpuLimit", "got 2", ">= 4 (the GPUs of one g4dn.12xlarge)"],
            id="gpu-limit-below-one-node",
        ),
        pytest.param(
            {"mlops-eks:gpuPools": [{"name": "t4", "accelerator": "t4"}]},
            ["mlops-eks:gpuPools[0].gpuLimit", "got None", "1-1024 GPUs"],
            id="karpenter-without-limit",
        ),
        pytest.param(
            {"mlops-eks:gpuPools": [{"name": "r", "accelerator": "t4", "source": "managed"}]},
            ["mlops-eks:gpuPools[0].size", "got None", "1-100 nodes", "fixed size"],
            id="managed-without-size",
        ),
        pytest.param(
            {"mlops-eks:gpuPools": [{**T4, "size": 2}]},
            ["mlops-eks:gpuPools[0].size", "got 2", "unset for source karpenter"],
            id="size-on-karpenter",
        ),
        pytest.param(
            {
                "mlops-eks:gpuPools": [
                    {
                        "name": "r",
                        "accelerator": "t4",
                        "source": "managed",
                        "size": 1,
                        "capacityTypes": ["spot", "on-demand"],
                    }
                ]
            },
            ["mlops-eks:gpuPools[0].capacityTypes", "exactly one of spot, on-demand, reserved"],
            id="managed-two-capacity-types",
        ),
        pytest.param(
            {"mlops-eks:gpuPools": [{**T4, "capacityTypes": ["reserved"]}]},
            ["mlops-eks:gpuPools[0].reservation", "capacityTypes includes reserved", "availabilityZone"],
            id="reserved-without-reservation",
        ),
        pytest.param(
            {"mlops-eks:gpuPools": [{**T4, "reservation": RESERVATION}]},
            ["mlops-eks:gpuPools[0].capacityTypes", "a list including reserved"],
            id="reservation-without-reserved",
        ),
        pytest.param(
            {
                "mlops-eks:gpuPools": [
                    {**T4, "capacityTypes": ["reserved"], "reservation": {**RESERVATION, "ids": ["cr_1"]}}
                ]
            },
            ["mlops-eks:gpuPools[0].reservation.ids[0]", "'cr_1'", "cr-0123456789abcdef0"],
            id="reservation-id-shape",
        ),
        pytest.param(
            {
                "mlops-eks:gpuPools": [
                    {
                        **T4,
                        "capacityTypes": ["reserved"],
                        "reservation": {"tags": {"team": ""}, "availabilityZone": "us-east-1a"},
                    }
                ]
            },
            ["mlops-eks:gpuPools[0].reservation.tags.team", "non-empty keys and values"],
            id="reservation-empty-tag",
        ),
        pytest.param(
            {
                "mlops-eks:gpuPools": [
                    {**T4, "capacityTypes": ["reserved"], "reservation": {"ids": ["cr-0a1b2c3d4e5f60718"]}}
                ]
            },
            ["mlops-eks:gpuPools[0].reservation.availabilityZone", "required"],
            id="reservation-without-az",
        ),
        pytest.param(
            {
                "mlops-eks:gpuPools": [
                    {
                        "name": "r",
                        "accelerator": "t4",
                        "source": "managed",
                        "size": 1,
                        "capacityTypes": ["reserved"],
                        "reservation": {"tags": {"team": "ml"}, "availabilityZone": "us-east-1a"},
                    }
                ]
            },
            ["mlops-eks:gpuPools[0].reservation.ids", "exactly one Capacity Block id and no tags"],
            id="capacity-block-group-by-tags",
        ),
        pytest.param(
            {"mlops-eks:gpuPools": [{**T4, "source": "autoscaler"}]},
            ["mlops-eks:gpuPools[0].source", "'autoscaler'", "'karpenter' or 'managed'"],
            id="unknown-source",
        ),
        pytest.param(
            {"mlops-eks:gpuPools": [T4], "mlops-eks:addons": {"karpenter": {"enabled": False}}},
            ["mlops-eks:gpuPools[0].source", "Karpenter pools need the Karpenter add-on"],
            id="karpenter-pool-without-karpenter",
        ),
        pytest.param(
            {"mlops-eks:gpuPools": [{**T4, "instanceTypes": ["g4dn.12xlarge"], "efa": True}]},
            ["mlops-eks:addons.gpu.efaDevicePlugin", "vpc.amazonaws.com/efa is never allocatable"],
            id="efa-without-plugin",
        ),
        pytest.param(
            {"mlops-eks:gpuPools": [T4], "mlops-eks:addons": {"karpenter": {"amiAlias": "al2023@latest"}}},
            ["mlops-eks:addons.karpenter.amiAlias", "'al2023@latest'", "pinned release"],
            id="prod-latest-ami",
        ),
        pytest.param(
            {"mlops-eks:gpuPools": [{**T4, "consolidateAfter": "soon"}]},
            ["mlops-eks:gpuPools[0].consolidateAfter", "got 'soon'", "a duration"],
            id="bad-consolidate-after",
        ),
        pytest.param(
            {"mlops-eks:gpuPools": [T4], "mlops-eks:addons": {"gpu": {"nvidiaDevicePlugin": False}}},
            ["mlops-eks:addons.gpu.nvidiaDevicePlugin", "gpuPools[0] (t4) needs it"],
            id="pool-without-device-plugin",
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
            ["mlops-eks:publicAccessCidrs[0]", "'0.0.0.0/0'", "the whole internet"],
            id="prod-public-to-world",
        ),
        pytest.param(
            {"mlops-eks:endpointPublicAccess": True},
            ["mlops-eks:publicAccessCidrs", "0.0.0.0/0"],
            id="public-without-cidrs",
        ),
        pytest.param(
            {"mlops-eks:systemNodes": {"capacityType": "spot"}},
            ["mlops-eks:systemNodes.capacityType", "'spot'", "on-demand in prod"],
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
            ["mlops-eks:kubernetesVersion", "'1.29'", '"1.33", "1.34", "1.35"'],
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
            {"mlops-eks:gpuPools": [{**T4, "gpuLimit": "two"}]},
            ["mlops-eks:gpuPools[0].gpuLimit", "'two'", "valid integer"],
            id="wrong-type",
        ),
        pytest.param(
            {"mlops-eks:gpuPools": [{**T4, "capacityTypes": ["SPOT"]}]},
            ["mlops-eks:gpuPools[0].capacityTypes[0]", "'spot', 'on-demand' or 'reserved'"],
            id="capacity-type-eks-spelling",
        ),
    ],
)
def test_invalid_config_names_key_value_and_allowed(values, expected):
    message = error_of(values)
    for part in expected:
        assert part in message, f"{part!r} not in {message!r}"


# A dev stack with nothing else to refuse; prod also pins the Karpenter AMI, as prod must.
DEV = {**BASE, "mlops-eks:environment": "dev"}
FROM_VPC = {"mlops-eks:deployFromVpc": True, "mlops-eks:deployerCidrs": ["10.0.0.0/19"]}
PINNED_AMI = {"mlops-eks:addons": {"karpenter": {"amiAlias": "al2023@v20260818"}}}


def test_public_endpoint_cidrs_dev_admits_an_office_block_prod_only_the_deployer():
    def cidrs(environment: str, cidr: str) -> dict:
        return {
            **PINNED_AMI,
            "mlops-eks:environment": environment,
            "mlops-eks:endpointPublicAccess": True,
            "mlops-eks:publicAccessCidrs": [cidr],
        }

    assert PlatformConfig.from_mapping({**BASE, **cidrs("dev", "203.0.112.0/20")}).public_access_cidrs
    assert PlatformConfig.from_mapping({**BASE, **cidrs("prod", "198.51.100.0/24")}).public_access_cidrs
    assert "wider than /24" in error_of(cidrs("prod", "203.0.112.0/20"))
    assert "wider than /16" in error_of(cidrs("dev", "100.0.0.0/8"))
    for environment in ("dev", "prod"):
        assert "the whole internet" in error_of(cidrs(environment, "0.0.0.0/0"))


@pytest.mark.parametrize("environment", ["dev", "prod"])
def test_a_bare_ip_in_public_access_cidrs_is_refused_before_eks_refuses_it(environment):
    values = {
        **BASE,
        **PINNED_AMI,
        "mlops-eks:environment": environment,
        "mlops-eks:endpointPublicAccess": True,
        "mlops-eks:publicAccessCidrs": ["52.94.76.10"],
    }
    message = error_of(values)
    assert "mlops-eks:publicAccessCidrs[0]" in message and "'52.94.76.10'" in message
    assert "bare IP address" in message and "/32" in message
    # The policy pack applies the same rule to the cluster it is shown.
    from policy.core import Resource, evaluate
    from policy.pack import RULES

    cluster = {"endpointPublicAccess": True, "publicAccessCidrs": ["52.94.76.10"], "name": "c"}
    findings = evaluate([Resource(type="eks:index:Cluster", name="c", inputs=cluster)], RULES, prod=True)
    assert any("bare IP address" in f.message for f in findings), findings


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"mlops-eks:deployFromVpc": True}, "mlops-eks:deployerCidrs"),
        ({"mlops-eks:deployerCidrs": ["10.0.0.0/19"]}, "[] when deployFromVpc is false"),
        ({**FROM_VPC, "mlops-eks:deployerCidrs": ["52.94.76.0/24"]}, "a private network"),
        ({**FROM_VPC, "mlops-eks:deployerCidrs": ["10.0.0.7"]}, "a private network"),
    ],
)
def test_a_runner_inside_the_vpc_is_named_by_its_subnets_cidr(values, message):
    assert message in error_of({**DEV, **values})


def test_deploying_from_the_vpc_is_refused_on_the_first_deploy_that_creates_it():
    config = PlatformConfig.from_mapping(
        {**DEV, "mlops-eks:deployFromVpc": True, "mlops-eks:deployerCidrs": ["10.0.0.0/19"]}
    )
    config.check_deployable(first_deploy=False)
    with pytest.raises(ConfigError) as e:
        config.check_deployable(first_deploy=True)
    assert "mlops-eks:deployFromVpc" in str(e.value) and "first deploy" in str(e.value)
    assert "endpointPublicAccess true" in str(e.value)


def test_private_only_endpoint_needs_the_deployer_inside_the_vpc():
    private = PlatformConfig.from_mapping(DEV)
    with pytest.raises(ConfigError) as e:
        private.check_deployable()
    assert "mlops-eks:endpointPublicAccess" in str(e.value) and "deployFromVpc true" in str(e.value)
    assert "installs the Helm releases" in str(e.value)
    PlatformConfig.from_mapping({**DEV, **FROM_VPC}).check_deployable()
    public = {"mlops-eks:endpointPublicAccess": True, "mlops-eks:publicAccessCidrs": ["198.51.100.7/32"]}
    PlatformConfig.from_mapping({**DEV, **public}).check_deployable()


ADMIN = "arn:aws:iam::123456789012:role/platform-admin"


@pytest.mark.parametrize(
    ("admin", "caller", "collides"),
    [
        (ADMIN, "arn:aws:sts::123456789012:assumed-role/platform-admin/alice", True),
        (ADMIN, ADMIN, True),
        # SSO roles live under a path that STS session ARNs omit.
        (
            "arn:aws:iam::123456789012:role/aws-reserved/sso.amazonaws.com/AWSReservedSSO_Admin_0a1b",
            "arn:aws:sts::123456789012:assumed-role/AWSReservedSSO_Admin_0a1b/alice@example.com",
            True,
        ),
        ("arn:aws:iam::123456789012:user/ci/deployer", "arn:aws:iam::123456789012:user/deployer", True),
        (ADMIN, "arn:aws:sts::123456789012:assumed-role/ci-deployer/run-42", False),
        (ADMIN, "arn:aws:sts::210987654321:assumed-role/platform-admin/alice", False),
        ("arn:aws:iam::123456789012:user/platform-admin", ADMIN, False),
    ],
)
def test_an_admin_entry_for_the_deploying_identity_is_refused(admin, caller, collides):
    config = PlatformConfig.from_mapping({**DEV, **FROM_VPC, "mlops-eks:adminPrincipalArns": [admin]})
    if not collides:
        config.check_deployable(caller)
        return
    with pytest.raises(ConfigError) as e:
        config.check_deployable(caller)
    assert "mlops-eks:adminPrincipalArns[0]" in str(
        e.value
    ) and "bootstrapClusterCreatorAdminPermissions" in str(e.value)


def test_an_sts_session_is_not_an_access_entry_principal():
    message = error_of(
        {"mlops-eks:adminPrincipalArns": ["arn:aws:sts::123456789012:assumed-role/admin/alice"]}
    )
    assert "mlops-eks:adminPrincipalArns[0]" in message and "give its role's ARN" in message


def test_defaults_are_secure_and_pools_scale_from_zero():
    config = PlatformConfig.from_mapping({**BASE, "mlops-eks:gpuPools": [T4], **PINNED_AMI})
    assert config.environment == "prod" and not config.endpoint_public_access
    assert config.nat_gateways == "per-az" and config.system_nodes.capacity_type == "on-demand"
    assert config.system_nodes.eks_capacity_type == "ON_DEMAND"
    pool = config.gpu_pools[0]
    assert (pool.source, pool.max_nodes, pool.capacity_types) == ("karpenter", 4, ["on-demand"])
    assert pool.instance_type_names == ["g4dn.xlarge"]
    assert config.private_subnets == ["10.0.0.0/19", "10.0.32.0/19", "10.0.64.0/19"]
    assert config.public_subnets == ["10.0.128.0/22", "10.0.132.0/22", "10.0.136.0/22"]


def test_config_is_frozen():
    config = PlatformConfig.from_mapping(BASE)
    with pytest.raises(ValueError):
        config.vpc_cidr = "10.1.0.0/16"


def test_from_pulumi_parses_structured_values_passed_as_json(pulumi_mocks, monkeypatch):
    """The language host passes every value as a string, lists and objects as JSON, in PULUMI_CONFIG (the
    program's environment): read from there even where the SDK's runtime config was never filled."""
    values = stack_config("dev")
    monkeypatch.setattr("pulumi.log.warn", lambda message, *a, **k: None)  # the placeholders' warnings
    pulumi_mocks()
    monkeypatch.setenv("PULUMI_CONFIG", json.dumps(engine_values(values)[0]))
    # Offline, as under `infra synth`: the committed dev file's placeholders are only warned about.
    assert PlatformConfig.from_pulumi("warn") == PlatformConfig.from_mapping(values)


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


def test_kubernetes_version_defaults_to_the_newest_minor_validated_with_the_add_ons():
    from infra.config.cluster_rules import EKS_STANDARD_SUPPORT_END

    newest = max(EKS_STANDARD_SUPPORT_END, key=lambda v: int(v.split(".")[1]))
    assert PlatformConfig.from_mapping(DEV).kubernetes_version == newest == "1.35"
    message = error_of({**DEV, "mlops-eks:kubernetesVersion": "1.36"})
    assert "mlops-eks:kubernetesVersion" in message and "'1.36'" in message and '"1.35"' in message


def test_a_managed_pool_without_a_disk_size_gets_the_root_volume_of_karpenters_gpu_nodes():
    managed = {"name": "reserved", "accelerator": "t4", "source": "managed", "size": 1}
    config = PlatformConfig.from_mapping(
        {**BASE, "mlops-eks:gpuPools": [managed, {**managed, "name": "big", "diskSizeGiB": 500}]}
    )
    default, explicit = config.gpu_pools
    assert default.managed_disk_size_gib == config.addons.karpenter.root_volume_gib == 200
    assert explicit.managed_disk_size_gib == 500


def test_dropping_the_amd_pool_is_one_edit_its_quota_left_out_of_the_queue_and_said(tmp_path):
    config = PlatformConfig.from_mapping(stack_config("dev", without_the_amd_pool(tmp_path)))
    (queue,) = config.addons_as_deployed.training.queues
    assert queue.name == "ml-team" and queue.gpus == {"t4": 8}
    assert config.addons.training.queues[0].gpus == {"t4": 8, "amd-v520": 1}  # the file is unchanged
    assert config.idle_quotas == [
        "mlops-eks:addons.training.queues[0].gpus.amd-v520: 1 GPU(s) left out of queue 'ml-team': no GPU "
        "pool offers amd-v520 (gpuPools: t4)"
    ]


def test_with_every_pool_there_no_quota_is_idle():
    for stack in ("dev", "prod"):
        config = PlatformConfig.from_mapping(stack_config(stack))
        assert config.idle_quotas == []
        assert config.addons_as_deployed == config.addons
