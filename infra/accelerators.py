"""The accelerator catalog: the one source of truth for GPU node facts.

Pure data (no Pulumi import): node groups, Karpenter NodePools, workload rendering and the image
builds all read it. Prices are indicative AWS list prices (us-east-1, Linux, on-demand) as published
on the date in PRICES_READ; they feed the idle-cost estimate of `infra synth` and `plan`'s cost lines,
never a decision. An instance type with no published on-demand price (p5e: none in the AWS Pricing API)
has None, and those lines say "price unknown" instead of a figure. Check current prices with
`aws pricing get-products --service-code AmazonEC2` before budgeting.

Sources of the rows added for H200, B200 and L40S (p5e, p5en, p6-b200, g6e): GPUs, GPU memory, vCPUs,
memory and EFA interfaces are EC2 DescribeInstanceTypes as Karpenter's generated reference lists them
(aws/karpenter-provider-aws@1d927085dd81a9df9301e613f371dac5b4d16bfe
website/content/en/docs/reference/instance-types.md: instance-gpu-count, instance-gpu-memory in MiB per
GPU, instance-cpu, instance-memory, vpc.amazonaws.com/efa), their prices the us-east-1 on-demand table
generated from the AWS Pricing API on 2026-07-20 (same commit,
pkg/providers/pricing/zz_generated.pricing_aws.go).
Compute capabilities: developer.nvidia.com/cuda-gpus (B200 10.0, H200 9.0, L40S 8.9).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal
from enum import StrEnum
from types import MappingProxyType
from typing import Literal

PRICES_READ = "2025-06-05"  # after the June 2025 P4/P5 price reduction; p5en, p6-b200, g6e: 2026-07-20
PRICE_REGION = "us-east-1"

# Label every GPU node carries (managed node groups and Karpenter NodePools alike), so a job's
# nodeSelector does not care which of the two launched the node.
ACCELERATOR_LABEL = "mlops-eks.io/accelerator"

EKS_CONTROL_PLANE_USD_PER_HOUR = 0.10
# A cluster on a Kubernetes version past its EKS standard support (infra/config/cluster_rules.py) is billed
# extended support instead: six times the fee (Amazon EKS pricing, "Extended support").
EKS_EXTENDED_SUPPORT_USD_PER_HOUR = 0.60
NAT_GATEWAY_USD_PER_HOUR = 0.045
# System (non-GPU) node instance types the platform may use, with their indicative prices.
SYSTEM_INSTANCE_USD_PER_HOUR = MappingProxyType(
    {
        "m6i.large": 0.096,
        "m6i.xlarge": 0.192,
        "m7i.large": 0.1008,
        "m7i.xlarge": 0.2016,
        "t3.large": 0.0832,
    }
)


# What a node can allocate to pods is its capacity less the kubelet's reservations and the platform's
# per-node DaemonSets. The EKS AL2023 AMI (nodeadm) reserves CPU by the GKE-style ladder and memory as
# 11 MiB per pod + 255 MiB, with eviction-hard memory.available=100Mi (awslabs/amazon-eks-ami,
# nodeadm/internal/kubelet/config.go: getCPUMillicoresToReserve, getMemoryMebibytesToReserve).
# MAX_PODS_ASSUMED: the EKS max-pods calculator's ceiling for instances above 30 vCPUs; assuming it for
# every size over-reserves a little on small instances (by at most 11 MiB x 140), never under-reserves.
MAX_PODS_ASSUMED = 250
EVICTION_HARD_MIB = 100
# Requests of the DaemonSets on every GPU node (aws-node, kube-proxy, eks-pod-identity-agent, EBS CSI node,
# the GPU and EFA device plugins, DCGM and node exporters, the log agent): their chart defaults sum to well
# below this; stated conservatively so an estimate that fits here fits the real node.
DAEMONSET_CPU_MILLI = 1000
DAEMONSET_MEMORY_MIB = 2048


def _kube_reserved_cpu_milli(vcpus: int) -> Decimal:
    """6% of the first core, 1% of the second, 0.5% of the next two, 0.25% of the rest."""
    ladder = ((1, Decimal(60)), (1, Decimal(10)), (2, Decimal(5)), (vcpus, Decimal("2.5")))
    left, total = vcpus, Decimal(0)
    for cores, milli in ladder:
        used = min(left, cores)
        total += used * milli
        left -= used
    return total


class NodeImage(StrEnum):
    """EKS managed node group AMI types (botocore's eks AMITypes) plus CUSTOM for a user AMI."""

    AL2023_NVIDIA = "AL2023_x86_64_NVIDIA"
    CUSTOM = "CUSTOM"


Vendor = Literal["nvidia", "amd"]

# The CUDA build of the platform's `cuda` image (docker/cuda/Dockerfile; tests/docker check they agree).
# An NVIDIA accelerator whose `min_cuda` is newer cannot run on it: its torch has no kernels for the GPU.
CUDA_IMAGE_CUDA = (12, 6)

_RESOURCE_NAME: dict[str, str] = {"nvidia": "nvidia.com/gpu", "amd": "amd.com/gpu"}


@dataclass(frozen=True, kw_only=True)
class InstanceType:
    name: str
    gpus: int
    vcpus: int
    memory_gib: int
    efa_interfaces: int  # 0: no EFA on this size
    usd_per_hour: float | None  # None: no published on-demand price (cost lines say so)

    @property
    def family(self) -> str:
        return self.name.split(".", 1)[0]

    @property
    def allocatable_cpu(self) -> Decimal:
        """vCPUs left for a job's pod: capacity less kube-reserved and the platform's DaemonSets."""
        reserved = _kube_reserved_cpu_milli(self.vcpus) + DAEMONSET_CPU_MILLI
        return Decimal(self.vcpus) - reserved / 1000

    @property
    def allocatable_memory(self) -> Decimal:
        """Bytes left for a job's pod: capacity less kube-reserved, eviction-hard and the DaemonSets."""
        reserved_mib = 11 * MAX_PODS_ASSUMED + 255 + EVICTION_HARD_MIB + DAEMONSET_MEMORY_MIB
        return Decimal(self.memory_gib) * 2**30 - reserved_mib * 2**20


@dataclass(frozen=True, kw_only=True)
class Taint:
    key: str
    value: str
    effect: Literal["NoSchedule", "NoExecute", "PreferNoSchedule"]


@dataclass(frozen=True, kw_only=True)
class Accelerator:
    key: str
    vendor: Vendor
    gpu_model: str
    gpu_memory_gib: int
    instance_types: tuple[InstanceType, ...]
    node_image: NodeImage
    # CUDA compute capability (sm_XY) for NVIDIA, LLVM gfx target for AMD: what images must be built for.
    compute_target: str
    # The format its tensor/matrix units compute in: "bf16" (sm_80+, CDNA2+/RDNA3+) or "fp16" (sm_70/75,
    # RDNA1/2). trainer/precision.py picks the same from the GPU it runs on; bf16 elsewhere is emulated.
    native_precision: Literal["bf16", "fp16"]
    # The oldest CUDA toolkit that builds kernels for compute_target; None: every CUDA 12 build does
    # (sm_75 to sm_90). Blackwell sm_100 needs 12.8 (NVIDIA's Blackwell Compatibility Guide, "Building
    # Applications Using CUDA Toolkit 12.8"; 12.7 and earlier have no sm_100 cubin).
    min_cuda: tuple[int, int] | None = None
    notes: str = ""
    extra_labels: MappingProxyType = field(default_factory=lambda: MappingProxyType({}))

    @property
    def resource_name(self) -> str:
        """The extended resource the device plugin advertises and pods request."""
        return _RESOURCE_NAME[self.vendor]

    @property
    def taint(self) -> Taint:
        """Keeps non-GPU pods off GPU nodes; GPU pods tolerate it."""
        return Taint(key=self.resource_name, value="true", effect="NoSchedule")

    @property
    def node_labels(self) -> dict[str, str]:
        """Labels on every node of this accelerator. `<vendor>/gpu.present` is what the device
        plugins' node affinity keys on (the NVIDIA plugin is otherwise only scheduled where NFD
        has labelled the PCI device, which AL2023 nodes lack)."""
        vendor_domain = "nvidia.com" if self.vendor == "nvidia" else "amd.com"
        return {
            ACCELERATOR_LABEL: self.key,
            f"{vendor_domain}/gpu.present": "true",
            **dict(self.extra_labels),
        }

    @property
    def fp8(self) -> bool:
        """Tensor cores that compute in FP8: NVIDIA compute capability 8.9 and newer (Ada, Hopper,
        Blackwell), as NVIDIA's Transformer Engine support matrix states (nvidia.github.io/
        TransformerEngine/support_matrix.html: "FP8 (per tensor) ... requires compute capability 8.9 or
        higher"). None of the catalog's AMD GPUs has FP8 units."""
        return self.vendor == "nvidia" and int(self.compute_target.removeprefix("sm_")) >= 89

    @property
    def runs_on_cuda_image(self) -> bool:
        """Whether the platform's `cuda` image has kernels for this GPU (AMD: never, it is `rocm`'s)."""
        return self.vendor == "nvidia" and (self.min_cuda or (12, 0)) <= CUDA_IMAGE_CUDA

    @property
    def instance_families(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(t.family for t in self.instance_types))

    @property
    def efa_capable(self) -> bool:
        return any(t.efa_interfaces > 0 for t in self.instance_types)

    @property
    def max_gpus_per_node(self) -> int:
        return max(t.gpus for t in self.instance_types)

    def instance(self, name: str) -> InstanceType:
        for t in self.instance_types:
            if t.name == name:
                return t
        allowed = ", ".join(t.name for t in self.instance_types)
        raise KeyError(f"instance type {name!r} is not a {self.key} instance; allowed: {allowed}")


def _types(*rows: tuple[str, int, int, int, int, float | None]) -> tuple[InstanceType, ...]:
    return tuple(
        InstanceType(name=n, gpus=g, vcpus=c, memory_gib=m, efa_interfaces=e, usd_per_hour=p)
        for n, g, c, m, e, p in rows
    )


# Rows: name, GPUs, vCPUs, memory GiB, EFA interfaces, USD/hour (PRICES_READ, PRICE_REGION; None: none
# published). GPU memory: GiB per GPU.
CATALOG: MappingProxyType[str, Accelerator] = MappingProxyType(
    {
        a.key: a
        for a in (
            Accelerator(
                key="t4",
                vendor="nvidia",
                gpu_model="NVIDIA T4",
                gpu_memory_gib=16,
                compute_target="sm_75",
                native_precision="fp16",
                node_image=NodeImage.AL2023_NVIDIA,
                instance_types=_types(
                    ("g4dn.xlarge", 1, 4, 16, 0, 0.526),
                    ("g4dn.2xlarge", 1, 8, 32, 0, 0.752),
                    ("g4dn.4xlarge", 1, 16, 64, 0, 1.204),
                    ("g4dn.8xlarge", 1, 32, 128, 1, 2.176),
                    ("g4dn.12xlarge", 4, 48, 192, 1, 3.912),
                    ("g4dn.16xlarge", 1, 64, 256, 1, 4.352),
                ),
                notes="fp16 tensor cores, no bf16: AMP uses fp16 with a GradScaler.",
            ),
            Accelerator(
                key="a10g",
                vendor="nvidia",
                gpu_model="NVIDIA A10G",
                gpu_memory_gib=24,
                compute_target="sm_86",
                native_precision="bf16",
                node_image=NodeImage.AL2023_NVIDIA,
                instance_types=_types(
                    ("g5.xlarge", 1, 4, 16, 0, 1.006),
                    ("g5.2xlarge", 1, 8, 32, 0, 1.212),
                    ("g5.4xlarge", 1, 16, 64, 0, 1.624),
                    ("g5.8xlarge", 1, 32, 128, 1, 2.448),
                    ("g5.12xlarge", 4, 48, 192, 1, 5.672),
                    ("g5.24xlarge", 4, 96, 384, 1, 8.144),
                    ("g5.48xlarge", 8, 192, 768, 1, 16.288),
                ),
            ),
            Accelerator(
                key="l4",
                vendor="nvidia",
                gpu_model="NVIDIA L4",
                gpu_memory_gib=24,
                compute_target="sm_89",
                native_precision="bf16",
                node_image=NodeImage.AL2023_NVIDIA,
                instance_types=_types(
                    ("g6.xlarge", 1, 4, 16, 0, 0.8048),
                    ("g6.2xlarge", 1, 8, 32, 0, 0.9776),
                    ("g6.4xlarge", 1, 16, 64, 0, 1.3232),
                    ("g6.8xlarge", 1, 32, 128, 1, 2.0144),
                    ("g6.12xlarge", 4, 48, 192, 1, 4.6016),
                    ("g6.24xlarge", 4, 96, 384, 1, 6.6752),
                    ("g6.48xlarge", 8, 192, 768, 1, 13.3504),
                ),
            ),
            Accelerator(
                key="a100",
                vendor="nvidia",
                gpu_model="NVIDIA A100",
                gpu_memory_gib=40,
                compute_target="sm_80",
                native_precision="bf16",
                node_image=NodeImage.AL2023_NVIDIA,
                instance_types=_types(
                    ("p4d.24xlarge", 8, 96, 1152, 4, 21.96),
                    ("p4de.24xlarge", 8, 96, 1152, 4, 27.45),
                ),
                notes="p4de has the 80 GB A100. Use EFA, a cluster placement group and on-demand or "
                "capacity reservations: Spot capacity for p4d is rare.",
            ),
            Accelerator(
                key="l40s",
                vendor="nvidia",
                gpu_model="NVIDIA L40S",
                gpu_memory_gib=44,  # 45776 MiB per GPU as EC2 reports it (NVIDIA sells it as 48 GB)
                compute_target="sm_89",
                native_precision="bf16",
                node_image=NodeImage.AL2023_NVIDIA,
                instance_types=_types(
                    ("g6e.xlarge", 1, 4, 32, 0, 1.861),
                    ("g6e.2xlarge", 1, 8, 64, 0, 2.24208),
                    ("g6e.4xlarge", 1, 16, 128, 0, 3.00424),
                    ("g6e.8xlarge", 1, 32, 256, 1, 4.52856),
                    ("g6e.12xlarge", 4, 48, 384, 1, 10.49264),
                    ("g6e.16xlarge", 1, 64, 512, 1, 7.57719),
                    ("g6e.24xlarge", 4, 96, 768, 2, 15.06559),
                    ("g6e.48xlarge", 8, 192, 1536, 4, 30.13118),
                ),
                notes="FP8 tensor cores (sm_89). EFA from g6e.8xlarge up.",
            ),
            Accelerator(
                key="h100",
                vendor="nvidia",
                gpu_model="NVIDIA H100",
                gpu_memory_gib=80,
                compute_target="sm_90",
                native_precision="bf16",
                node_image=NodeImage.AL2023_NVIDIA,
                instance_types=_types(("p5.48xlarge", 8, 192, 2048, 32, 55.04)),
            ),
            Accelerator(
                key="h200",
                vendor="nvidia",
                gpu_model="NVIDIA H200",
                gpu_memory_gib=141,  # 144384 MiB per GPU
                compute_target="sm_90",
                native_precision="bf16",
                node_image=NodeImage.AL2023_NVIDIA,
                instance_types=_types(
                    ("p5e.48xlarge", 8, 192, 2048, 32, None),
                    ("p5en.48xlarge", 8, 192, 2048, 16, 63.296),
                ),
                notes="p5e has no published on-demand price (none in the AWS Pricing API's table): plan "
                "prices only p5en. p5en has half p5e's EFA interfaces (16 vs 32), "
                "the same 3200 Gbps. Use EFA, a placement group and reserved capacity.",
            ),
            Accelerator(
                key="b200",
                vendor="nvidia",
                gpu_model="NVIDIA B200",
                gpu_memory_gib=179,  # 183359 MiB per GPU
                compute_target="sm_100",
                native_precision="bf16",
                min_cuda=(12, 8),
                node_image=NodeImage.AL2023_NVIDIA,
                instance_types=_types(("p6-b200.48xlarge", 8, 192, 2048, 8, 113.9328)),
                notes="Needs an image built with CUDA >= 12.8 and sm_100 kernels (torch's cu128/cu130 "
                "wheels): the platform's cuda image (CUDA 12.6, to sm_90) cannot run it, so a job sets "
                "`image` to such a build and the spec check refuses the cuda image. 8 EFA interfaces, "
                "3200 Gbps.",
            ),
            Accelerator(
                key="amd-v520",
                vendor="amd",
                gpu_model="AMD Radeon Pro V520",
                gpu_memory_gib=8,
                compute_target="gfx1011",
                native_precision="fp16",
                node_image=NodeImage.CUSTOM,
                instance_types=_types(
                    ("g4ad.xlarge", 1, 4, 16, 0, 0.37853),
                    ("g4ad.2xlarge", 1, 8, 32, 0, 0.54117),
                    ("g4ad.4xlarge", 1, 16, 64, 0, 0.867),
                    ("g4ad.8xlarge", 2, 32, 128, 0, 1.734),
                    ("g4ad.16xlarge", 4, 64, 256, 0, 3.468),
                ),
                notes="No EKS-optimized AMD AMI exists: pools need a custom AMI with the amdgpu driver. "
                "ROCm's prebuilt PyTorch does not target gfx1011.",
                # The NFD label of an AMD display controller (PCI class 0300, vendor 1002): the amd-gpu
                # chart's device plugin selects nodes by it, and these nodes run no NFD to set it.
                extra_labels=MappingProxyType({"feature.node.kubernetes.io/pci-0300_1002.present": "true"}),
            ),
        )
    }
)


def accelerator(key: str) -> Accelerator:
    """The catalog entry for `key`, or a KeyError that lists the keys there are."""
    try:
        return CATALOG[key]
    except KeyError:
        raise KeyError(f"unknown accelerator {key!r}; allowed: {', '.join(CATALOG)}") from None
