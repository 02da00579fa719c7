"""TrainingJobSpec validation, alone and against the platform: every error names key, value and allowed."""

from __future__ import annotations

import pytest

from infra.contract import KUBERNETES_NAMESPACES, PLATFORM_NAMESPACES
from workloads.placement import place
from workloads.spec import SpecError, parse_spec

BASE = {"name": "zimdb", "accelerator": "t4", "gpusPerNode": 4, "imageTag": "0.1.0"}


def _error(raw: dict, platform=None) -> str:
    with pytest.raises(SpecError) as info:
        spec = parse_spec(raw)
        place(spec, platform)
    return str(info.value)


def test_valid_spec_defaults_to_trainjob_one_process_per_gpu_with_s3_checkpoints():
    spec = parse_spec(BASE)
    assert (spec.operator, spec.processes_per_node, spec.nodes) == ("trainjob", 4, 1)
    assert spec.checkpoint is not None and spec.checkpoint.s3 == "checkpoints"
    assert spec.uses_s3


def test_missing_image_names_the_key_and_both_ways_to_set_it():
    msg = _error({"name": "zimdb", "accelerator": "t4"})
    assert msg.startswith("mlops-eks:job.image: missing")
    assert "`image`" in msg and "`imageTag`" in msg


def test_unknown_key_and_bad_values_are_all_reported_with_their_values():
    msg = _error({**BASE, "name": "Zimdb", "gpusPerNode": 0, "gpus": 4})
    assert "mlops-eks:job.name:" in msg and "(got 'Zimdb')" in msg
    gpus_per_node = "Input should be greater than or equal to 1; allowed: a number >= 1 (got 0)"
    assert f"mlops-eks:job.gpusPerNode: {gpus_per_node}" in msg
    assert "mlops-eks:job.gpus: unknown key; allowed keys: name, namespace" in msg


def test_not_an_object_is_rejected():
    assert _error("zimdb").startswith("mlops-eks:job: expected an object")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"procsPerNode": 8}, "mlops-eks:job.procsPerNode: 8 is more than gpusPerNode (4); allowed: 1-4"),
        ({"elastic": {"minNodes": 1, "maxNodes": 2}}, "mlops-eks:job.elastic: only operator `pytorchjob`"),
        ({"image": "repo/x:1"}, "mlops-eks:job.image: set either `image` or `imageTag`"),
        ({"checkpoint": {"s3": "c", "pvc": {"size": "1Gi"}}}, "mlops-eks:job.checkpoint: set exactly one"),
        ({"data": {"pvc": {"size": "10Gi"}}}, "mlops-eks:job.data: a new, empty volume holds no data"),
        (
            {"trainerConfig": {"checkpoint": {"dir": "/x"}}},
            "mlops-eks:job.trainerConfig.checkpoint.dir: also",
        ),
        ({"program": {"delivery": "configmap"}}, "mlops-eks:job.program: delivery `configmap` needs `file`"),
        ({"operator": "tfjob"}, "mlops-eks:job.operator: Input should be 'trainjob', 'pytorchjob'"),
    ],
)
def test_inconsistent_spec_is_rejected_naming_the_key(change, expected):
    assert expected in _error({**BASE, **change})


def test_shared_new_volume_on_several_nodes_needs_a_readwritemany_class():
    msg = _error({**BASE, "gpusPerNode": 1, "nodes": 2, "checkpoint": {"pvc": {"size": "50Gi"}}})
    assert "mlops-eks:job.checkpoint.pvc.storageClass: a new volume shared by 2 nodes" in msg


def test_accelerator_the_platform_does_not_offer(dev_platform):
    msg = _error({**BASE, "accelerator": "a100"}, dev_platform)
    assert (
        msg
        == "mlops-eks:job.accelerator: 'a100' is not offered by platform mlops-eks-dev; allowed: amd-v520, t4"
    )


def test_more_gpus_per_node_than_the_pools_instance_types_have(dev_platform):
    msg = _error({**BASE, "gpusPerNode": 8}, dev_platform)
    assert msg.startswith("mlops-eks:job.gpusPerNode: 8 is more than the t4 pools' instance types have")
    assert "g4dn.12xlarge" in msg and msg.endswith("allowed: 1-4")


def test_more_pods_than_the_pool_holds_counting_pods_packed_per_instance(dev_platform):
    msg = _error({**BASE, "nodes": 3}, dev_platform)
    assert msg == (
        "mlops-eks:job.nodes: 3 pods of 4 GPU(s) do not fit pool t4: at most 2 nodes (Karpenter gpuLimit 8 "
        "/ 4 GPUs per node) x 1 such pods each = 2; allowed: 1-2"
    )
    assert "allowed: 1-8" in _error({**BASE, "gpusPerNode": 1, "nodes": 9}, dev_platform)
    four_pods = place(parse_spec({**BASE, "gpusPerNode": 1, "nodes": 4}), dev_platform)
    # A quarter of 3/4 of what a g4dn.12xlarge can allocate (46.81 vCPU, 186.97 GiB).
    assert (four_pods.cpu, four_pods.memory_gib) == (8, 35)


def test_spot_intolerant_job_on_a_spot_only_accelerator(dev_platform):
    msg = _error({**BASE, "spotTolerant": False}, dev_platform)
    # dev's t4 pool may launch Spot (capacityTypes [spot, on-demand]): Karpenter would prefer it.
    assert msg.startswith("mlops-eks:job.spotTolerant: false, but every t4 pool of mlops-eks-dev may launch")


def test_cpu_beyond_the_largest_fitting_instance(dev_platform):
    msg = _error({**BASE, "cpuPerNode": 64}, dev_platform)
    assert msg.startswith("mlops-eks:job.cpuPerNode: 64 vCPU")
    assert "g4dn.12xlarge: 48 vCPU, 192 GiB" in msg


def test_requests_the_instance_has_but_the_node_cannot_allocate_are_refused(dev_platform):
    # 48 vCPU / 190 GiB is below a g4dn.12xlarge's size, but the kubelet's reservations (190m CPU,
    # 11 x 250 + 255 MiB, eviction 100Mi) and the DaemonSets (1 vCPU, 2 GiB) come first.
    msg = _error({**BASE, "cpuPerNode": 48, "memoryGiBPerNode": 190}, dev_platform)
    assert msg.startswith("mlops-eks:job.cpuPerNode: 48 vCPU / 190 GiB does not fit")
    assert "allowed: at most 46.81 vCPU / 187.0 GiB" in msg
    msg = _error({**BASE, "cpuPerNode": 40, "memoryGiBPerNode": 190}, dev_platform)
    assert msg.startswith("mlops-eks:job.memoryGiBPerNode: 40 vCPU / 190 GiB does not fit")
    assert place(parse_spec({**BASE, "cpuPerNode": 46, "memoryGiBPerNode": 186}), dev_platform).cpu == 46


def test_queue_without_a_gang_scheduler_and_unknown_kueue_queue(dev_platform, prod_platform):
    no_kueue = dev_platform.model_copy(update={"gang_scheduler": None})
    assert _error({**BASE, "queue": "ml-team"}, no_kueue).startswith("mlops-eks:job.queue: 'ml-team', but")
    a100 = {**BASE, "accelerator": "a100", "gpusPerNode": 8, "queue": "gpu"}
    assert _error(a100, prod_platform).endswith("allowed: research, reserved, production")


def test_kueue_queue_with_a_pytorchjob_is_refused_rather_than_ignored(prod_platform):
    spec = {**BASE, "accelerator": "a100", "gpusPerNode": 8, "queue": "research", "operator": "pytorchjob"}
    assert _error(spec, prod_platform) == (
        "mlops-eks:job.queue: 'research': Kueue on mlops-eks-prod admits TrainJobs only; "
        "allowed with operator: trainjob"
    )


def test_operator_not_installed_on_the_platform(dev_platform):
    platform = dev_platform.model_copy(update={"training_operators": {"trainjob": True, "pytorchjob": False}})
    msg = _error({**BASE, "operator": "pytorchjob"}, platform)
    assert msg == "mlops-eks:job.operator: 'pytorchjob' is not installed on mlops-eks-dev; allowed: trainjob"


def test_image_from_the_platform_ecr_repository_of_the_vendor(dev_platform):
    amd = place(parse_spec({**BASE, "accelerator": "amd-v520", "gpusPerNode": 1}), dev_platform)
    assert amd.image == "123456789012.dkr.ecr.us-east-1.amazonaws.com/mlops-eks/dev/rocm:0.1.0"
    t4 = place(parse_spec(BASE), dev_platform)
    assert t4.image.endswith("/mlops-eks/dev/cuda:0.1.0")
    assert [t.name for t in t4.instance_types] == ["g4dn.12xlarge"]
    assert (t4.cpu, t4.memory_gib, t4.shm_gib) == (35, 140, 35)


def test_the_reserved_namespaces_are_every_platform_namespace_and_kubernetes_own():
    from infra.addons import namespaces

    installed_into = {
        namespaces.MONITORING_NAMESPACE,
        namespaces.GPU_NAMESPACE,
        namespaces.KUBECOST_NAMESPACE,
        namespaces.TRAINER_NAMESPACE,
        namespaces.KUBERAY_NAMESPACE,
        namespaces.KUEUE_NAMESPACE,
        namespaces.VOLCANO_NAMESPACE,
        namespaces.TRAINING_OPERATOR_V1_NAMESPACE,
    }
    assert installed_into == PLATFORM_NAMESPACES == set(namespaces.POD_SECURITY)
    assert "kube-system" in KUBERNETES_NAMESPACES
    for namespace in sorted(PLATFORM_NAMESPACES | KUBERNETES_NAMESPACES):
        message = _error({**BASE, "namespace": namespace, "createNamespace": False})
        assert message.startswith(f"mlops-eks:job.namespace: {namespace!r} is "), message


B200 = {**BASE, "accelerator": "b200", "gpusPerNode": 8}
B200_IMAGE = "docker.io/pytorch/pytorch:2.13.0-{}-cudnn9-runtime"


def test_a_b200_job_on_the_platforms_cuda_12_6_image_is_refused_naming_what_it_needs():
    msg = _error(B200)
    assert "mlops-eks:job.imageTag: accelerator b200 (NVIDIA B200, sm_100) needs a CUDA >= 12.8" in msg
    assert "the platform's cuda image is CUDA 12.6 with no sm_100 kernels" in msg
    assert "got imageTag '0.1.0'; allowed: `image`" in msg


def test_a_b200_job_on_an_image_whose_tag_says_an_older_cuda_is_refused():
    msg = _error({**B200, "imageTag": None, "image": B200_IMAGE.format("cuda12.6")})
    assert "mlops-eks:job.image: accelerator b200" in msg and "tag says CUDA 12.6" in msg


@pytest.mark.parametrize("cuda", ["cuda12.8", "cuda13.0"])
def test_a_b200_job_on_a_new_enough_image_and_an_h200_job_on_the_cuda_image_pass(cuda):
    assert parse_spec({**B200, "imageTag": None, "image": B200_IMAGE.format(cuda)}).accelerator == "b200"
    assert parse_spec({**BASE, "accelerator": "h200", "gpusPerNode": 8}).accelerator == "h200"
