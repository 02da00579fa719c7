"""Malformed platform config: the real program runs under Pulumi mocks with one bad value in the dev
stack file; it must stop before registering any resource, with a message naming the key."""

from __future__ import annotations

import copy

import pytest

from infra.tools.synth import PlatformMocks, RecordingMonitor, stack_config

DELETE = object()
# (case, path into the config mapping, bad value, the key the message must name)
CASES = [
    ("az-count-wrong-type", ("mlops-eks:availabilityZoneCount",), "three", "mlops-eks:availabilityZoneCount"),
    ("az-count-zero", ("mlops-eks:availabilityZoneCount",), 0, "mlops-eks:availabilityZoneCount"),
    ("system-min-negative", ("mlops-eks:systemNodes", "minSize"), -1, "mlops-eks:systemNodes.minSize"),
    (
        "system-types-wrong-type",
        ("mlops-eks:systemNodes", "instanceTypes"),
        "t3.large",
        "mlops-eks:systemNodes.instanceTypes",
    ),
    ("gpu-limit-negative", ("mlops-eks:gpuPools", 0, "gpuLimit"), -2, "mlops-eks:gpuPools[0].gpuLimit"),
    ("gpu-limit-below-a-node", ("mlops-eks:gpuPools", 0, "gpuLimit"), 3, "mlops-eks:gpuPools[0].gpuLimit"),
    (
        "gpu-disk-negative",
        ("mlops-eks:gpuPools", 0, "diskSizeGiB"),
        -100,
        "mlops-eks:gpuPools[0].diskSizeGiB",
    ),
    (
        "gpu-capacity-eks-spelling",
        ("mlops-eks:gpuPools", 0, "capacityTypes"),
        ["SPOT"],
        "mlops-eks:gpuPools[0].capacityTypes[0]",
    ),
    ("gpu-size-on-karpenter", ("mlops-eks:gpuPools", 0, "size"), 2, "mlops-eks:gpuPools[0].size"),
    (
        "gpu-unknown-accelerator",
        ("mlops-eks:gpuPools", 0, "accelerator"),
        "v100",
        "mlops-eks:gpuPools[0].accelerator",
    ),
    ("gpu-unknown-key", ("mlops-eks:gpuPools", 0, "gpuCount"), 8, "mlops-eks:gpuPools[0].gpuCount"),
    ("gpu-pools-not-a-list", ("mlops-eks:gpuPools",), "t4", "mlops-eks:gpuPools"),
    ("amd-without-ami", ("mlops-eks:gpuPools", 1, "amiId"), DELETE, "mlops-eks:gpuPools[1].amiId"),
    ("unknown-top-level-key", ("mlops-eks:enableMagic",), True, "mlops-eks:enableMagic"),
    (
        "public-endpoint-wrong-type",
        ("mlops-eks:endpointPublicAccess",),
        "yes please",
        "mlops-eks:endpointPublicAccess",
    ),
    (
        "noncurrent-days-negative",
        ("mlops-eks:checkpointNoncurrentDays",),
        -5,
        "mlops-eks:checkpointNoncurrentDays",
    ),
    ("ecr-keep-wrong-type", ("mlops-eks:ecrKeepImages",), "many", "mlops-eks:ecrKeepImages"),
    ("kubernetes-too-old", ("mlops-eks:kubernetesVersion",), "1.21", "mlops-eks:kubernetesVersion"),
    ("vpc-cidr-invalid", ("mlops-eks:vpcCidr",), "10.0.0.0/33", "mlops-eks:vpcCidr"),
    ("region-invalid", ("aws:region",), "mars-north-1", "aws:region"),
    ("open-endpoint-in-prod", ("mlops-eks:environment",), "prod", "mlops-eks:publicAccessCidrs[0]"),
    ("vpc-in-a-public-range", ("mlops-eks:vpcCidr",), "8.8.0.0/16", "mlops-eks:vpcCidr"),
    ("region-without-eks", ("aws:region",), "us-east-9", "aws:region"),
]


def with_value(config: dict, path: tuple, value: object) -> dict:
    config = copy.deepcopy(config)
    target = config
    for part in path[:-1]:
        target = target[part]
    if value is DELETE:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return config


def run_program(pulumi_mocks, program_error, values: dict) -> tuple[str | None, int]:
    """(error message or None, resources registered) for the platform program under mocks."""
    from infra.program import program

    mocks = PlatformMocks("us-east-1")
    monitor = RecordingMonitor(mocks)
    pulumi_mocks(mocks, config=values, monitor=monitor)
    error = program_error(lambda: program(placeholders="warn"))  # offline, as `infra synth`
    # The root stack is registered once per process by whichever program ran first: not a resource.
    return error, sum(r.type != "pulumi:pulumi:Stack" for r in monitor.registered)


@pytest.fixture(scope="module")
def dev_config() -> dict:
    config = stack_config("dev")
    # Make the last case a real one: dev admits an office /20; prod admits only /24 or narrower.
    config["mlops-eks:publicAccessCidrs"] = ["203.0.112.0/20"]
    return config


def test_the_unmodified_config_creates_resources(pulumi_mocks, program_error, dev_config):
    """Control: the same harness with the dev stack file (a /20 is allowed in dev) registers the
    platform, so a zero below means the config was refused, not that nothing ever registers."""
    error, created = run_program(pulumi_mocks, program_error, dev_config)
    assert error is None and created > 20


@pytest.mark.parametrize(("case", "path", "value", "key"), CASES, ids=[c[0] for c in CASES])
def test_malformed_config_creates_nothing_and_names_the_key(
    pulumi_mocks, program_error, dev_config, ledger, case, path, value, key
):
    error, created = run_program(pulumi_mocks, program_error, with_value(dev_config, path, value))
    entry = ledger("platform config", case, error=error, names=f"{key}:", created=created)
    assert error is not None, f"{case}: accepted"
    assert created == 0, f"{case}: {created} resources registered before the error"
    assert entry.clear, f"{case}: message does not name {key}: {error}"
