"""The accelerator catalog: consistent with itself and with the AWS API models in botocore."""

from __future__ import annotations

import re

import botocore.session
import pytest

from infra.accelerators import (
    ACCELERATOR_LABEL,
    CATALOG,
    SYSTEM_INSTANCE_USD_PER_HOUR,
    NodeImage,
    accelerator,
)
from infra.platform.node_groups import SYSTEM_AMI_TYPE

_session = botocore.session.get_session()
EC2_INSTANCE_TYPES = set(_session.get_service_model("ec2").shape_for("InstanceType").enum)
EKS_AMI_TYPES = set(_session.get_service_model("eks").shape_for("AMITypes").enum)


@pytest.mark.parametrize("key", ["t4", "a10g", "l4", "a100", "h100", "amd-v520"])
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
    target = r"sm_\d{2}" if acc.vendor == "nvidia" else r"gfx\d{3,4}"
    assert re.fullmatch(target, acc.compute_target)
    # AMD has no EKS-optimized AMI; NVIDIA never needs a custom one.
    assert (acc.node_image is NodeImage.CUSTOM) == (acc.vendor == "amd")


@pytest.mark.parametrize("acc", CATALOG.values(), ids=list(CATALOG))
def test_instance_types_exist_in_ec2_and_are_sane(acc):
    for t in acc.instance_types:
        assert t.name in EC2_INSTANCE_TYPES, t.name
        assert t.gpus >= 1 and t.vcpus >= 4 and t.memory_gib >= 16 and t.usd_per_hour > 0, t
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
