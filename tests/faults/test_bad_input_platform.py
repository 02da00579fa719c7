"""Bad platform stack config a user types: network values in the wrong form, names that must exist
elsewhere, units and YAML numbers, typos of values that differ only in case. Each is refused by
PlatformConfig before the program registers anything (the program reads its config first:
tests/faults/test_config_faults.py runs that path under mocks), with a message that names the key, the
value and what is allowed. Recorded in the fault ledger ("bad input: platform")."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from infra.config.platform import ConfigError, PlatformConfig
from infra.tools.synth import stack_config

DEV = stack_config("dev")
PROD = stack_config("prod")
DELETE = object()
QUEUE = ("mlops-eks:addons", "training", "queues", 0)
PRIORITY = {"name": "training-high", "value": 1000}


def changed(base: dict, path: tuple, value: Any) -> dict:
    config = copy.deepcopy(base)
    node = config
    for part in path[:-1]:
        node = node.setdefault(part, {}) if isinstance(node, dict) else node[part]
    if value is DELETE:
        del node[path[-1]]
    else:
        node[path[-1]] = value
    return config


# (case, path into the dev stack's config, bad value, key the message names, what it shows of the value,
#  what else it says)
CASES = [
    ("vpc-cidr-host-bits", ("mlops-eks:vpcCidr",), "10.20.0.1/16", "mlops-eks:vpcCidr", "'10.20.0.1/16'",
     "no host bits"),
    ("vpc-cidr-bare-address", ("mlops-eks:vpcCidr",), "10.20.0.0", "mlops-eks:vpcCidr", "'10.20.0.0'",
     "with its prefix length"),
    ("vpc-cidr-public-range", ("mlops-eks:vpcCidr",), "8.8.0.0/16", "mlops-eks:vpcCidr", "'8.8.0.0/16'",
     "inside 10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16"),
    ("vpc-cidr-trailing-space", ("mlops-eks:vpcCidr",), "10.20.0.0/16 ", "mlops-eks:vpcCidr",
     "'10.20.0.0/16 '", "CIDR notation"),
    ("vpc-cidr-ipv6", ("mlops-eks:vpcCidr",), "fd00::/48", "mlops-eks:vpcCidr", "'fd00::/48'", "IPv4"),
    ("vpc-cidr-unquoted-number", ("mlops-eks:vpcCidr",), 10, "mlops-eks:vpcCidr", "'10'", "quote it"),
    ("vpc-cidr-too-small", ("mlops-eks:vpcCidr",), "10.20.0.0/26", "mlops-eks:vpcCidr", "'10.20.0.0/26'",
     "from /16 to /24"),
    ("public-cidr-bare-address", ("mlops-eks:publicAccessCidrs",), ["203.0.113.7"],
     "mlops-eks:publicAccessCidrs[0]", "'203.0.113.7'", "198.51.100.7/32"),
    ("public-cidr-host-bits", ("mlops-eks:publicAccessCidrs",), ["203.0.113.5/24"],
     "mlops-eks:publicAccessCidrs[0]", "'203.0.113.5/24'", "no host bits"),
    ("public-cidrs-not-a-list", ("mlops-eks:publicAccessCidrs",), "203.0.113.0/24",
     "mlops-eks:publicAccessCidrs", "'203.0.113.0/24'", "valid list"),
    ("public-cidr-private-range", ("mlops-eks:publicAccessCidrs",), ["10.1.0.0/16"],
     "mlops-eks:publicAccessCidrs[0]", "'10.1.0.0/16'", "never reaches the public endpoint"),
    ("public-cidr-loopback", ("mlops-eks:publicAccessCidrs",), ["127.0.0.1/32"],
     "mlops-eks:publicAccessCidrs[0]", "'127.0.0.1/32'", "public egress CIDRs"),
    ("public-cidr-twice", ("mlops-eks:publicAccessCidrs",), ["203.0.113.0/24", "203.0.113.0/24"],
     "mlops-eks:publicAccessCidrs[1]", "'203.0.113.0/24'", "each CIDR once"),
    ("public-cidr-ipv6", ("mlops-eks:publicAccessCidrs",), ["2001:db8::/32"],
     "mlops-eks:publicAccessCidrs[0]", "'2001:db8::/32'", "IPv4"),
    ("private-subnet-host-bits", ("mlops-eks:privateSubnetCidrs",),
     ["10.20.0.1/19", "10.20.32.0/19", "10.20.64.0/19"], "mlops-eks:privateSubnetCidrs[0]",
     "'10.20.0.1/19'", "no host bits"),
    ("private-subnets-one-for-three-azs", ("mlops-eks:privateSubnetCidrs",), ["10.20.0.0/19"],
     "mlops-eks:privateSubnetCidrs", "['10.20.0.0/19']", "one CIDR per AZ (3)"),
    ("private-subnet-outside-vpc", ("mlops-eks:privateSubnetCidrs",),
     ["10.99.0.0/19", "10.20.32.0/19", "10.20.64.0/19"], "mlops-eks:privateSubnetCidrs[0]",
     "'10.99.0.0/19'", "inside vpcCidr 10.20.0.0/16"),
    ("region-unknown", ("aws:region",), "us-east-9", "aws:region", "'us-east-9'", "closest: us-east-2"),
    ("region-an-az", ("aws:region",), "us-east-1a", "aws:region", "'us-east-1a'", "such as us-east-1"),
    ("region-upper-case", ("aws:region",), "US-EAST-1", "aws:region", "'US-EAST-1'", "such as us-east-1"),
    ("azs-zone-ids", ("mlops-eks:availabilityZones",), ["use1-az1", "use1-az2", "use1-az4"],
     "mlops-eks:availabilityZones[0]", "'use1-az1'", "e.g. us-east-1a"),
    ("azs-of-another-region", ("mlops-eks:availabilityZones",), ["us-west-2a", "us-west-2b", "us-west-2c"],
     "mlops-eks:availabilityZones[0]", "'us-west-2a'", "a distinct AZ of us-east-1"),
    ("azs-twice", ("mlops-eks:availabilityZones",), ["us-east-1a", "us-east-1a", "us-east-1b"],
     "mlops-eks:availabilityZones[1]", "'us-east-1a'", "a distinct AZ"),
    ("az-count-fraction", ("mlops-eks:availabilityZoneCount",), 2.5, "mlops-eks:availabilityZoneCount",
     "2.5", "valid integer"),
    ("kubernetes-version-unquoted-1.30", ("mlops-eks:kubernetesVersion",), 1.3,
     "mlops-eks:kubernetesVersion", "'1.3'", 'quote it'),
    ("kubernetes-version-v-prefix", ("mlops-eks:kubernetesVersion",), "v1.35", "mlops-eks:kubernetesVersion",
     "'v1.35'", '"1.35"'),
    ("kubernetes-version-no-dot", ("mlops-eks:kubernetesVersion",), 135, "mlops-eks:kubernetesVersion",
     "'135'", '"1.35"'),
    ("nat-gateways-case", ("mlops-eks:natGateways",), "Single", "mlops-eks:natGateways", "'Single'",
     "did you mean 'single'?"),
    ("environment-case", ("mlops-eks:environment",), "Dev", "mlops-eks:environment", "'Dev'",
     "did you mean 'dev'?"),
    ("environment-word", ("mlops-eks:environment",), "production", "mlops-eks:environment", "'production'",
     "'dev' or 'prod'"),
    ("system-types-not-a-list", ("mlops-eks:systemNodes", "instanceTypes"), "t3.large",
     "mlops-eks:systemNodes.instanceTypes", "'t3.large'", "valid list"),
    ("system-type-unknown", ("mlops-eks:systemNodes", "instanceTypes"), ["m5.large"],
     "mlops-eks:systemNodes.instanceTypes[0]", "'m5.large'", "m6i.large"),
    ("system-capacity-eks-spelling", ("mlops-eks:systemNodes", "capacityType"), "SPOT",
     "mlops-eks:systemNodes.capacityType", "'SPOT'", "did you mean 'spot'?"),
    ("system-desired-above-max", ("mlops-eks:systemNodes", "desiredSize"), 9,
     "mlops-eks:systemNodes.desiredSize", "9", "between minSize (2) and maxSize (3)"),
    ("system-disk-with-unit", ("mlops-eks:systemNodes", "diskSizeGiB"), "50Gi",
     "mlops-eks:systemNodes.diskSizeGiB", "'50Gi'", "in GiB as the key diskSizeGiB says"),
    ("system-disk-fraction", ("mlops-eks:systemNodes", "diskSizeGiB"), 50.5,
     "mlops-eks:systemNodes.diskSizeGiB", "50.5", "valid integer"),
    ("system-min-zero", ("mlops-eks:systemNodes", "minSize"), 0, "mlops-eks:systemNodes.minSize", "0",
     ">= 1"),
    ("prometheus-storage-with-unit", ("mlops-eks:addons", "observability", "prometheusStorageGiB"), "20Gi",
     "mlops-eks:addons.observability.prometheusStorageGiB", "'20Gi'", "in GiB"),
    ("retention-in-words", ("mlops-eks:addons", "observability", "retention"), "15 days",
     "mlops-eks:addons.observability.retention", "'15 days'", 'e.g. "15d"'),
    ("retention-unquoted-number", ("mlops-eks:addons", "observability", "retention"), 15,
     "mlops-eks:addons.observability.retention", "15", "written as quoted text"),
    ("root-volume-in-gb", ("mlops-eks:addons", "karpenter", "rootVolumeGiB"), "200GB",
     "mlops-eks:addons.karpenter.rootVolumeGiB", "'200GB'", "no 'GB'"),
    ("consolidate-unquoted-number", ("mlops-eks:gpuPools", 0, "consolidateAfter"), 10,
     "mlops-eks:gpuPools[0].consolidateAfter", "10", 'a duration like "10m"'),
    ("consolidate-in-words", ("mlops-eks:gpuPools", 0, "consolidateAfter"), "10 minutes",
     "mlops-eks:gpuPools[0].consolidateAfter", "'10 minutes'", 'a duration like "10m"'),
    ("consolidate-in-days", ("mlops-eks:gpuPools", 0, "consolidateAfter"), "1d",
     "mlops-eks:gpuPools[0].consolidateAfter", "'1d'", '"1h" or "Never"'),
    ("gpu-limit-in-words", ("mlops-eks:gpuPools", 0, "gpuLimit"), "8 GPUs", "mlops-eks:gpuPools[0].gpuLimit",
     "'8 GPUs'", "in GPUs"),
    ("instance-type-case", ("mlops-eks:gpuPools", 0, "instanceTypes"), ["g4dn.12XLarge"],
     "mlops-eks:gpuPools[0].instanceTypes[0]", "'g4dn.12XLarge'", "g4dn.12xlarge"),
    ("accelerator-case", ("mlops-eks:gpuPools", 0, "accelerator"), "T4", "mlops-eks:gpuPools[0].accelerator",
     "'T4'", "allowed: t4,"),
    ("pool-name-upper-case", ("mlops-eks:gpuPools", 0, "name"), "T4", "mlops-eks:gpuPools[0].name", "'T4'",
     "lowercase letters"),
    ("pool-name-unquoted-number", ("mlops-eks:gpuPools", 0, "name"), 4, "mlops-eks:gpuPools[0].name", "4",
     "quoted text"),
    ("pool-ami-id-short", ("mlops-eks:gpuPools", 1, "amiId"), "ami-123", "mlops-eks:gpuPools[1].amiId",
     "'ami-123'", "ami-0123456789abcdef0"),
    ("pool-capacity-not-a-list", ("mlops-eks:gpuPools", 0, "capacityTypes"), "spot",
     "mlops-eks:gpuPools[0].capacityTypes", "'spot'", "valid list"),
    ("pool-source-case", ("mlops-eks:gpuPools", 0, "source"), "Karpenter", "mlops-eks:gpuPools[0].source",
     "'Karpenter'", "did you mean 'karpenter'?"),
    ("pool-a-string", ("mlops-eks:gpuPools", 0), "t4", "mlops-eks:gpuPools[0]", "'t4'", "valid dictionary"),
    ("pool-efa-on-types-without-efa", ("mlops-eks:gpuPools", 1, "efa"), True, "mlops-eks:gpuPools[1].efa",
     "True", "instance types with EFA"),
    ("pool-efa-without-its-plugin", ("mlops-eks:gpuPools", 0, "efa"), True,
     "mlops-eks:addons.gpu.efaDevicePlugin", "False", "gpuPools[0] has efa: true"),
    ("gang-scheduler-case", ("mlops-eks:addons", "training", "gangScheduler"), "Kueue",
     "mlops-eks:addons.training.gangScheduler", "'Kueue'", "did you mean 'kueue'?"),
    ("queue-gpus-unknown-accelerator", (*QUEUE, "gpus"), {"v100": 8},
     "mlops-eks:addons.training.queues[0].gpus.v100", "'v100'", "unknown accelerator"),
    ("queue-memory-with-unit", (*QUEUE, "memoryGiB"), "256Gi",
     "mlops-eks:addons.training.queues[0].memoryGiB", "'256Gi'", "in GiB"),
    ("queue-cpu-in-words", (*QUEUE, "cpu"), "64 cores", "mlops-eks:addons.training.queues[0].cpu",
     "'64 cores'", "in vCPUs"),
    ("queue-name-upper-case", (*QUEUE, "name"), "ML-Team", "mlops-eks:addons.training.queues[0].name",
     "'ML-Team'", "lowercase letters"),
    ("queue-gpus-a-list", (*QUEUE, "gpus"), ["t4"], "mlops-eks:addons.training.queues[0].gpus", "['t4']",
     "valid dictionary"),
    ("queues-without-gang-scheduler", ("mlops-eks:addons", "training", "gangScheduler"), None,
     "mlops-eks:addons.training.queues", "['ml-team']", "unless gangScheduler is set"),
    ("priority-class-system-name", ("mlops-eks:addons", "training", "priorityClasses"),
     [{"name": "system-high", "value": 10}], "mlops-eks:addons.training.priorityClasses[0].name",
     "'system-high'", "not starting with system-"),
    ("priority-class-above-a-billion", ("mlops-eks:addons", "training", "priorityClasses"),
     [{"name": "urgent", "value": 2_000_000_000}], "mlops-eks:addons.training.priorityClasses[0].value",
     "2000000000", "less than or equal to 1000000000"),
    ("priority-class-twice", ("mlops-eks:addons", "training", "priorityClasses"), [PRIORITY, PRIORITY],
     "mlops-eks:addons.training.priorityClasses[1].name", "'training-high'", "a name no other entry has"),
    ("priority-class-policy-case", ("mlops-eks:addons", "training", "priorityClasses"),
     [{**PRIORITY, "preemptionPolicy": "never"}],
     "mlops-eks:addons.training.priorityClasses[0].preemptionPolicy", "'never'", "did you mean 'Never'?"),
    ("kubecost-quoted-bool", ("mlops-eks:addons", "kubecost", "enabled"), "yes",
     "mlops-eks:addons.kubecost.enabled", "'yes'", "a YAML boolean, unquoted"),
    ("log-retention-with-unit", ("mlops-eks:logRetentionDays",), "14d", "mlops-eks:logRetentionDays",
     "'14d'", "in days"),
    ("log-retention-not-cloudwatch", ("mlops-eks:logRetentionDays",), 100, "mlops-eks:logRetentionDays",
     "100", "the values CloudWatch Logs accepts"),
    ("noncurrent-days-with-unit", ("mlops-eks:checkpointNoncurrentDays",), "7d",
     "mlops-eks:checkpointNoncurrentDays", "'7d'", "in days"),
    ("ecr-keep-zero", ("mlops-eks:ecrKeepImages",), 0, "mlops-eks:ecrKeepImages", "0",
     "greater than or equal to 1"),
    ("s3-extra-bucket-url", ("mlops-eks:s3EndpointExtraBuckets",), ["s3://datasets"],
     "mlops-eks:s3EndpointExtraBuckets[0]", "'s3://datasets'", "an S3 bucket name"),
    ("admin-arn-short-account", ("mlops-eks:adminPrincipalArns",), ["arn:aws:iam::123:role/x"],
     "mlops-eks:adminPrincipalArns[0]", "'arn:aws:iam::123:role/x'", "an IAM role or user ARN"),
    ("admin-arns-not-a-list", ("mlops-eks:adminPrincipalArns",), "arn:aws:iam::123456789012:role/x",
     "mlops-eks:adminPrincipalArns", "'arn:aws:iam::123456789012:role/x'", "valid list"),
    ("admin-arn-a-group", ("mlops-eks:adminPrincipalArns",), ["arn:aws:iam::123456789012:group/admins"],
     "mlops-eks:adminPrincipalArns[0]", "group/admins", "an IAM role or user ARN"),
    ("tags-a-list", ("mlops-eks:tags",), ["team=ml"], "mlops-eks:tags", "['team=ml']", "valid dictionary"),
    ("tag-unquoted-number", ("mlops-eks:tags", "costCenter"), 1234, "mlops-eks:tags.costCenter", "1234",
     '"1234" quoted'),
    ("force-destroy-quoted", ("mlops-eks:forceDestroy",), "false", "mlops-eks:forceDestroy", "'false'",
     "a YAML boolean, unquoted"),
    ("alert-receiver-email", ("mlops-eks:addons", "observability", "alertReceiver"), "email",
     "mlops-eks:addons.observability.alertReceiver", "'email'", "'webhook', 'slack' or 'pagerduty'"),
    ("alert-receiver-without-secret", ("mlops-eks:addons", "observability", "alertReceiver"), "slack",
     "mlops-eks:alertReceiverSecret", "''", "pulumi config set --secret alertReceiverSecret"),
    ("ami-alias-short-date", ("mlops-eks:addons", "karpenter", "amiAlias"), "al2023@v2026081",
     "mlops-eks:addons.karpenter.amiAlias", "'al2023@v2026081'", '"al2023@vYYYYMMDD"'),
    ("ami-alias-bottlerocket", ("mlops-eks:addons", "karpenter", "amiAlias"), "bottlerocket@latest",
     "mlops-eks:addons.karpenter.amiAlias", "'bottlerocket@latest'", '"al2023@latest"'),
    ("cpu-limit-in-words", ("mlops-eks:addons", "karpenter", "cpuPool", "cpuLimit"), "32 vCPU",
     "mlops-eks:addons.karpenter.cpuPool.cpuLimit", "'32 vCPU'", "in vCPUs"),
    ("addons-null", ("mlops-eks:addons",), None, "mlops-eks:addons", "None", "valid dictionary"),
    ("gpu-pools-null", ("mlops-eks:gpuPools",), None, "mlops-eks:gpuPools", "None", "valid list"),
]  # fmt: skip


def _error(config: dict) -> str | None:
    try:
        PlatformConfig.from_mapping(config)
    except ConfigError as err:
        return str(err)
    return None


@pytest.mark.parametrize(("case", "path", "value", "key", "shows", "says"), CASES, ids=[c[0] for c in CASES])
def test_bad_platform_value_is_refused_naming_key_value_and_what_is_allowed(
    ledger, case, path, value, key, shows, says
):
    error = _error(changed(DEV, path, value))
    entry = ledger("bad input: platform", case, error=error, names=f"{key}:")
    assert error is not None, f"{case}: accepted"
    line = next((p for p in error.splitlines() if p.strip().startswith(f"{key}:")), "")
    assert entry.clear and shows in line and "allowed" in line and says in line, error


def test_the_committed_platform_stacks_pass_the_same_checks():
    assert _error(DEV) is None and _error(PROD) is None


def test_a_top_level_yaml_number_reaches_the_model_as_the_cli_passes_it_as_text():
    """The Pulumi CLI reads a top-level scalar as text first (pulumi/pulumi sdk/go/common/resource/config/
    value.go unmarshalValue), so `kubernetesVersion: 1.35` unquoted is "1.35" under `pulumi up`: offline
    reading must agree, and only a value YAML changed (1.30 -> 1.3) is refused."""
    unquoted = changed(DEV, ("mlops-eks:kubernetesVersion",), 1.35)
    assert PlatformConfig.from_mapping(unquoted).kubernetes_version == "1.35"
    nested = _error(changed(DEV, ("mlops-eks:gpuPools", 0, "consolidateAfter"), 10))
    assert nested and "an unquoted YAML number where text is wanted; got 10" in nested


def test_the_eks_regions_are_botocores():
    boto3 = pytest.importorskip("boto3")
    from infra.config.cluster_rules import EKS_REGIONS

    session = boto3.Session()
    known = {r for p in ("aws", "aws-us-gov", "aws-cn") for r in session.get_available_regions("eks", p)}
    assert set(EKS_REGIONS) == known
