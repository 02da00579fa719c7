"""GPU pools in AZs that have the GPUs (infra/platform/zones.py): the plan from EC2's answers, and the program
asking EC2 through the data sources the offline mocks answer as EC2 does (infra/tools/synth.py
PlatformMocks: DescribeAvailabilityZones with its filters, DescribeInstanceTypeOfferings by AZ)."""

from __future__ import annotations

import pulumi
import pytest

from infra.config.platform import ConfigError, PlatformConfig
from infra.platform.zones import Offerings, plan
from infra.tools.synth import OFFERINGS, stack_config, synth

REGULAR = [f"us-east-1{letter}" for letter in "abcdef"]
P4D_IN_D = {"us-east-1": {"p4d.24xlarge": ["us-east-1d"]}}


def _config(**changes) -> PlatformConfig:
    values = stack_config("prod")
    values.update({f"mlops-eks:{k}": v for k, v in changes.items()})
    return PlatformConfig.from_mapping(values)


def _ec2(p4d: list[str], g4dn: list[str] = REGULAR) -> Offerings:
    by_type = {"p4d.24xlarge": frozenset(p4d), "g4dn.12xlarge": frozenset(g4dn)}
    return Offerings(zones=REGULAR, by_type=by_type)


def test_an_efa_pool_goes_to_the_vpc_az_that_offers_its_instance_types():
    zone_plan = plan(_config(), _ec2(["us-east-1b", "us-east-1d"]), deployed=True)
    assert zone_plan.zones == ["us-east-1a", "us-east-1b", "us-east-1c"]
    # The reserved EFA pool goes where its Capacity Block is (Pulumi.prod.yaml: us-east-1a).
    assert zone_plan.efa_zone == {"a100": 1, "h100-block": 0}


def test_a_first_deploy_takes_an_az_that_offers_the_efa_pool_when_the_first_ones_do_not():
    zone_plan = plan(_config(), _ec2(["us-east-1d"]), deployed=False)
    assert zone_plan.zones == ["us-east-1a", "us-east-1b", "us-east-1d"]
    assert zone_plan.efa_zone == {"a100": 2, "h100-block": 0}


def test_a_deployed_vpc_without_such_an_az_is_refused_naming_the_azs_that_offer_it():
    # Moving a subnet of a deployed VPC would replace it: the user names the AZs instead.
    with pytest.raises(
        ConfigError, match=r"availabilityZones \(unset\).*p4d\.24xlarge.*gpuPools\[1\] \(a100"
    ):
        plan(_config(), _ec2(["us-east-1d", "us-east-1f"]), deployed=True)
    with pytest.raises(ConfigError, match="EC2 offers them in: us-east-1d, us-east-1f"):
        plan(_config(), _ec2(["us-east-1d", "us-east-1f"]), deployed=True)


def test_configured_azs_without_the_offering_are_refused_with_key_value_and_the_azs_that_have_it():
    config = _config(availabilityZones=["us-east-1a", "us-east-1b", "us-east-1c"])
    with pytest.raises(ConfigError) as err:
        plan(config, _ec2(["us-east-1e"]), deployed=False)
    (problem,) = err.value.problems
    assert problem.startswith("mlops-eks:availabilityZones: ['us-east-1a', 'us-east-1b', 'us-east-1c']")
    assert problem.endswith("3 AZs including one EC2 offers them in: us-east-1e")
    config = _config(availabilityZones=["us-east-1a", "us-east-1c", "us-east-1e"])
    assert plan(config, _ec2(["us-east-1e"]), deployed=True).efa_zone == {"a100": 2, "h100-block": 0}


def test_an_instance_type_offered_in_none_of_the_vpcs_azs_is_refused():
    with pytest.raises(ConfigError, match=r"gpuPools\[0\]\.instanceTypes\[0\]: 'g4dn\.12xlarge'.*us-east-1f"):
        plan(_config(), _ec2(["us-east-1b"], g4dn=["us-east-1f"]), deployed=True)


def test_a_configured_az_the_region_does_not_list_is_refused():
    # A Local Zone the account opted into is not an AZ a subnet pair and an EFA pool can rely on.
    config = _config(availabilityZones=["us-east-1a", "us-east-1b", "us-east-1g"])
    with pytest.raises(ConfigError, match=r"availabilityZones\[2\]: 'us-east-1g' is not an available AZ"):
        plan(config, _ec2(["us-east-1b"]), deployed=False)


def test_the_program_asks_ec2_and_launches_the_efa_pool_into_the_subnet_of_the_az_that_offers_it(prod):
    # The mocks answer as EC2 does (OFFERINGS: p4d.24xlarge in us-east-1b and us-east-1d only).
    assert OFFERINGS["us-east-1"]["p4d.24xlarge"] == ["us-east-1b", "us-east-1d"]
    subnets = {
        r.name: r.inputs["availabilityZone"]
        for r in prod.of_type("aws:ec2/subnet:Subnet")
        if "private" in r.name
    }
    # The opt-in filter: the account's Local Zone (us-east-1-bos-1a sorts first) holds no subnet.
    assert list(subnets.values()) == ["us-east-1a", "us-east-1b", "us-east-1c"]
    (efa_class,) = [
        r.inputs
        for r in prod.of_type("kubernetes:karpenter.k8s.aws/v1:EC2NodeClass")
        if r.inputs["metadata"]["name"] == "efa-a100"
    ]
    assert efa_class["spec"]["subnetSelectorTerms"] == [{"id": "network-private-1-id"}]
    assert subnets["network-private-1"] == "us-east-1b"


def test_a_config_that_places_no_efa_pool_is_refused_before_anything_is_registered():
    values = {
        **stack_config("prod"),
        "mlops-eks:availabilityZones": ["us-east-1a", "us-east-1b", "us-east-1c"],
    }
    with pytest.raises(pulumi.RunError, match="availabilityZones.*EC2 offers them in: us-east-1d"):
        synth("prod", values, offerings=P4D_IN_D)


def _reserved_in(zone: str, **changes) -> PlatformConfig:
    values = stack_config("prod")
    pools = values["mlops-eks:gpuPools"]
    (block,) = [p for p in pools if p["name"] == "h100-block"]
    block["reservation"] = {**block["reservation"], "availabilityZone": zone}
    values.update({f"mlops-eks:{k}": v for k, v in changes.items()})
    return PlatformConfig.from_mapping(values)


def test_a_reserved_efa_pool_launches_in_its_reservations_az_and_a_first_deploy_takes_that_az():
    zone_plan = plan(_reserved_in("us-east-1e"), _ec2(["us-east-1b"]), deployed=False)
    assert zone_plan.zones == ["us-east-1a", "us-east-1b", "us-east-1e"]
    assert zone_plan.efa_zone == {"a100": 1, "h100-block": 2}


def test_a_reservation_outside_the_vpcs_azs_is_refused_naming_the_key_and_what_to_do():
    key = r"gpuPools\[2\]\.reservation\.availabilityZone: 'us-east-1e' is not one of the VPC's AZs"
    with pytest.raises(ConfigError, match=key):
        plan(_reserved_in("us-east-1e"), _ec2(["us-east-1b"]), deployed=True)
    configured = _reserved_in("us-east-1e", availabilityZones=["us-east-1a", "us-east-1b", "us-east-1c"])
    with pytest.raises(ConfigError, match=key):
        plan(configured, _ec2(["us-east-1b"]), deployed=False)
    with pytest.raises(ConfigError, match=r"'us-east-1z' is not an available AZ of us-east-1"):
        plan(_reserved_in("us-east-1z"), _ec2(["us-east-1b"]), deployed=False)
