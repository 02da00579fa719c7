"""The accelerator catalog: consistent with itself and with the AWS API models in botocore."""

from __future__ import annotations

import re

import botocore.session
import pytest

from infra.accelerators import (
    ACCELERATOR_LABEL,
    CATALOG,
    CUDA_IMAGE_CUDA,
    SYSTEM_INSTANCE_USD_PER_HOUR,
    NodeImage,
    accelerator,
)
from infra.platform.node_groups import SYSTEM_AMI_TYPE

_session = botocore.session.get_session()
EC2_INSTANCE_TYPES = set(_session.get_service_model("ec2").shape_for("InstanceType").enum)
EKS_AMI_TYPES = set(_session.get_service_model("eks").shape_for("AMITypes").enum)


@pytest.mark.parametrize("key", ["t4", "a10g", "l4", "l40s", "a100", "h100", "h200", "b200", "amd-v520"])
def test_catalog_has_the_accelerator(key):
    acc = accelerator(key)
    assert acc.key == key and acc.instance_types and acc.gpu_memory_gib > 0


@pytest.mark.parametrize("acc", CATALOG.values(), ids=list(CATALOG))
def test_scheduling_facts_follow_the_vendor(acc):
    expected = {"nvidia": "nvidia.com/gpu", "amd": "amd.com/gpu"}[acc.vendor]
    assert acc.resource_name == expected
    assert (acc.taint.key, acc.taint.value, acc.taint.effect) == (expected, "true", "NoSchedule")
    assert acc.node_labels[ACCELERATOR_LABEL] == acc.key
    assert acc.node_labels[f"{expected.split('/')[0]}/gpu.present"] == "true"
    target = r"sm_\d{2,3}" if acc.vendor == "nvidia" else r"gfx\d{3,4}"
    assert re.fullmatch(target, acc.compute_target)
    # AMD has no EKS-optimized AMI; NVIDIA never needs a custom one.
    assert (acc.node_image is NodeImage.CUSTOM) == (acc.vendor == "amd")


@pytest.mark.parametrize("acc", CATALOG.values(), ids=list(CATALOG))
def test_instance_types_exist_in_ec2_and_are_sane(acc):
    for t in acc.instance_types:
        assert t.name in EC2_INSTANCE_TYPES, t.name
        assert t.gpus >= 1 and t.vcpus >= 4 and t.memory_gib >= 16, t
        assert t.usd_per_hour is None or t.usd_per_hour > 0, t
    assert acc.max_gpus_per_node == max(t.gpus for t in acc.instance_types)
    assert acc.efa_capable == any(t.efa_interfaces for t in acc.instance_types)


def test_known_gpu_counts_and_efa():
    assert accelerator("t4").instance("g4dn.12xlarge").gpus == 4
    assert accelerator("a100").instance("p4d.24xlarge").gpus == 8
    assert accelerator("a100").instance("p4d.24xlarge").efa_interfaces == 4
    assert not accelerator("amd-v520").efa_capable


def test_node_images_and_system_types_exist_in_the_aws_models():
    assert {str(acc.node_image) for acc in CATALOG.values()} <= EKS_AMI_TYPES
    assert SYSTEM_AMI_TYPE in EKS_AMI_TYPES
    assert set(SYSTEM_INSTANCE_USD_PER_HOUR) <= EC2_INSTANCE_TYPES


def test_unknown_keys_list_what_exists():
    with pytest.raises(KeyError, match="allowed: t4, a10g"):
        accelerator("v100")
    with pytest.raises(KeyError, match="g4dn.xlarge"):
        accelerator("t4").instance("p4d.24xlarge")


# EC2 DescribeInstanceTypes as Karpenter's generated reference lists it (aws/karpenter-provider-aws@
# 1d927085dd81a9df9301e613f371dac5b4d16bfe website/content/en/docs/reference/instance-types.md):
# GPUs, instance-gpu-memory MiB per GPU, vCPUs, memory MiB, vpc.amazonaws.com/efa.
DESCRIBED = {
    "p5e.48xlarge": (8, 144384, 192, 2097152, 32),
    "p5en.48xlarge": (8, 144384, 192, 2097152, 16),
    "p6-b200.48xlarge": (8, 183359, 192, 2097152, 8),
    "g6e.xlarge": (1, 45776, 4, 32768, 0),
    "g6e.2xlarge": (1, 45776, 8, 65536, 0),
    "g6e.4xlarge": (1, 45776, 16, 131072, 0),
    "g6e.8xlarge": (1, 45776, 32, 262144, 1),
    "g6e.12xlarge": (4, 45776, 48, 393216, 1),
    "g6e.16xlarge": (1, 45776, 64, 524288, 1),
    "g6e.24xlarge": (4, 45776, 96, 786432, 2),
    "g6e.48xlarge": (8, 45776, 192, 1572864, 4),
}


@pytest.mark.parametrize("name", DESCRIBED)
def test_h200_b200_l40s_rows_are_what_ec2_describes(name):
    gpus, gpu_mib, vcpus, memory_mib, efa = DESCRIBED[name]
    acc = next(a for a in CATALOG.values() if name in {t.name for t in a.instance_types})
    t = acc.instance(name)
    assert (t.gpus, t.vcpus, t.memory_gib * 1024, t.efa_interfaces) == (gpus, vcpus, memory_mib, efa)
    assert acc.gpu_memory_gib == gpu_mib // 1024


def test_p5e_has_no_published_price_and_the_others_do():
    # Karpenter's us-east-1 table from the AWS Pricing API (2026-07-20) lists p5en and p6-b200, not p5e.
    assert accelerator("h200").instance("p5e.48xlarge").usd_per_hour is None
    assert accelerator("h200").instance("p5en.48xlarge").usd_per_hour == 63.296
    assert accelerator("b200").instance("p6-b200.48xlarge").usd_per_hour == 113.9328


def test_fp8_follows_compute_capability_8_9_and_newer():
    assert {a.key for a in CATALOG.values() if a.fp8} == {"l4", "l40s", "h100", "h200", "b200"}


def test_only_gpus_newer_than_the_cuda_image_need_another_image():
    assert accelerator("b200").min_cuda == (12, 8) > CUDA_IMAGE_CUDA
    assert {a.key for a in CATALOG.values() if not a.runs_on_cuda_image} == {"b200", "amd-v520"}
