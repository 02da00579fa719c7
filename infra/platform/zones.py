"""Which AZs the VPC spans, and the one AZ each EFA pool launches in: from what EC2 offers, at preview.

An EFA pool's nodes share one subnet and a cluster placement group (infra/addons/karpenter/node_pools.py
`placement_group_name`), so one AZ, and that AZ must offer every instance type of the pool: EC2 answers
`DescribeInstanceTypeOfferings` (location type availability-zone) per AZ, and `DescribeAvailabilityZones`
with the opt-in filter gives the regular AZs only (a Local Zone or Wavelength Zone the account opted into
is `opted-in`, and sorts before them: us-east-1-bos-1a < us-east-1a). `plan()` is pure; `ask_ec2()` asks EC2
through the AWS provider's data sources, which a preview runs too, so a config that cannot place a pool is
refused before anything is created.

A reserved pool's capacity is where its reservation was bought: the reservation's AZ must be one of the
VPC's (swapped in on a first deploy, as an EFA pool's is), and an EFA pool on a reservation launches there
and nowhere else (its placement group and the reservation share the AZ).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from infra.config.errors import ConfigError
from infra.config.platform import PlatformConfig
from infra.config.stack_files import PROJECT


@dataclass(frozen=True)
class Offerings:
    """What EC2 says about the region: its regular AZs in order, and the AZs offering each instance type."""

    zones: Sequence[str]
    by_type: Mapping[str, frozenset[str]]

    def offering(self, types: Sequence[str]) -> list[str]:
        """The region's AZs that offer every one of `types`, in order."""
        return [z for z in self.zones if all(z in self.by_type.get(t, ()) for t in types)]


@dataclass(frozen=True)
class ZonePlan:
    zones: list[str]  # the VPC's AZs, in subnet order
    efa_zone: dict[str, int] = field(default_factory=dict)  # EFA pool name -> index of its subnet


def _pool(config: PlatformConfig, i: int) -> str:
    pool = config.gpu_pools[i]
    return f"gpuPools[{i}] ({pool.name}, efa: true: one AZ for all its nodes)"


def plan(config: PlatformConfig, ec2: Offerings, *, deployed: bool) -> ZonePlan:
    """The VPC's AZs and each EFA pool's. Unset availabilityZones: the region's first ones, with an AZ that
    offers an EFA pool's types swapped in on the first deploy (later, moving a subnet would replace it:
    refused with the AZs to name instead). ConfigError names the key, the value and the AZs that offer."""
    problems: list[str] = []
    zones = list(config.availability_zones)
    for i, zone in enumerate(zones):
        if zone not in ec2.zones:
            problems.append(
                f"{PROJECT}:availabilityZones[{i}]: {zone!r} is not an available AZ of {config.region} "
                f"(opted-in Local and Wavelength Zones excluded); allowed: {', '.join(ec2.zones)}"
            )
    if problems:
        raise ConfigError(problems)
    if not zones:
        zones = list(ec2.zones[: config.availability_zone_count])
        if len(zones) < config.availability_zone_count:
            raise ConfigError(
                [
                    f"{PROJECT}:availabilityZoneCount: {config.availability_zone_count}, but {config.region} "
                    f"has {len(ec2.zones)} available AZs ({', '.join(ec2.zones)}); allowed: at most "
                    f"{len(ec2.zones)}"
                ]
            )
        if not deployed:
            zones = _swap_in_efa_zones(config, ec2, zones)
    efa_zone = {}
    for i, pool in enumerate(config.gpu_pools):
        types = pool.instance_type_names
        if pool.reservation is not None:
            zone = pool.reservation.availability_zone
            key = f"{PROJECT}:gpuPools[{i}].reservation.availabilityZone"
            if zone not in ec2.zones:
                problems.append(
                    f"{key}: {zone!r} is not an available AZ of {config.region}; allowed: the AZ the "
                    f"reservation was bought in, one of {', '.join(ec2.zones)}"
                )
            elif zone not in zones:
                problems.append(
                    f"{key}: {zone!r} is not one of the VPC's AZs ({', '.join(zones)}), so no node can "
                    "launch into the reservation; allowed: availabilityZones that include it (a deployed "
                    "VPC keeps its subnets: add the AZ to mlops-eks:availabilityZones)"
                )
            elif pool.efa:
                efa_zone[pool.name] = zones.index(zone)
            continue
        if pool.efa:
            inside = [z for z in zones if z in ec2.offering(types)]
            if not inside:
                key = "availabilityZones" if config.availability_zones else "availabilityZones (unset)"
                offering = ", ".join(ec2.offering(types)) or "none"
                problems.append(
                    f"{PROJECT}:{key}: {zones} offer no AZ with all of {', '.join(types)}, which "
                    f"{_pool(config, i)} needs; allowed: {config.availability_zone_count} AZs including one "
                    f"EC2 offers them in: {offering}"
                )
            else:
                efa_zone[pool.name] = zones.index(inside[0])
            continue
        for j, instance_type in enumerate(types):
            where = sorted(ec2.by_type.get(instance_type, frozenset()))
            if not set(where) & set(zones):
                offered = ", ".join(where) or f"no AZ of {config.region}"
                problems.append(
                    f"{PROJECT}:gpuPools[{i}].instanceTypes[{j}]: {instance_type!r} is offered in none of "
                    f"the VPC's AZs ({', '.join(zones)}); EC2 offers it in: {offered}; allowed: another "
                    "instance type, or availabilityZones that include one of those"
                )
    if problems:
        raise ConfigError(problems)
    return ZonePlan(zones=zones, efa_zone=efa_zone)


def _swap_in_efa_zones(config: PlatformConfig, ec2: Offerings, zones: list[str]) -> list[str]:
    """`zones` with, for each EFA pool none of them serves, the region's first AZ that does (for a reserved
    pool: its reservation's AZ) in place of the last AZ no such pool needs; in region order."""
    needed: list[str] = []
    for pool in config.gpu_pools:
        if pool.reservation is not None:
            if pool.reservation.availability_zone in ec2.zones:
                needed.append(pool.reservation.availability_zone)
            continue
        offering = ec2.offering(pool.instance_type_names)
        if not pool.efa or not offering:
            continue  # plan() refuses a pool no AZ serves
        served = [z for z in [*zones, *needed] if z in offering]
        needed.append(served[0] if served else offering[0])
    spare = [z for z in reversed(zones) if z not in needed]
    chosen = list(zones)
    for zone in needed:
        if zone not in chosen and spare:
            chosen[chosen.index(spare.pop(0))] = zone
    return sorted(chosen, key=list(ec2.zones).index)


def ask_ec2(config: PlatformConfig) -> Offerings:
    """The region's regular AZs and the offerings of every GPU pool instance type (data sources: invokes
    a preview runs too)."""
    import pulumi_aws as aws

    regular = aws.get_availability_zones(
        state="available",
        filters=[aws.GetAvailabilityZonesFilterArgs(name="opt-in-status", values=["opt-in-not-required"])],
    )
    types = sorted({t for p in config.gpu_pools for t in p.instance_type_names})
    by_type: dict[str, set[str]] = {t: set() for t in types}
    if types:
        found = aws.ec2.get_instance_type_offerings(
            location_type="availability-zone",
            filters=[aws.ec2.GetInstanceTypeOfferingsFilterArgs(name="instance-type", values=types)],
        )
        for instance_type, location in zip(found.instance_types, found.locations, strict=True):
            by_type.setdefault(instance_type, set()).add(location)
    return Offerings(zones=sorted(regular.names), by_type={t: frozenset(z) for t, z in by_type.items()})
