"""Karpenter EC2NodeClasses and NodePools rendered from the accelerator catalog and config: plain dicts,
checked against Karpenter's 1.14 CRDs in tests.

One NodePool per `gpuPools` entry with source karpenter. One EC2NodeClass per image family: `nvidia` (the
AL2023 alias; Karpenter picks the NVIDIA variant of the AMI for GPU instance types), one per AMD pool (its
custom AMI by id: the alias would hand g4ad the NVIDIA AMI) and `default` for CPU nodes.
EFA: Karpenter configures every interface of an instance as EFA when the pending pod requests
`vpc.amazonaws.com/efa` (docs.aws.amazon.com/eks/latest/userguide/device-management-efa.html), so an EFA
pool needs no network settings of its own, only the EFA device plugin on its nodes. GPU NodePools carry
exactly the catalog's labels and taint, so the device plugins and the workloads schedule the same way on
Karpenter nodes as on managed node groups.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from infra.accelerators import CATALOG
from infra.config.addons import KarpenterCpuPool
from infra.config.platform import GpuPoolConfig
from infra.contract import PoolTaint, taint_spec

NODE_CLASS_API = "karpenter.k8s.aws/v1"
NODE_POOL_API = "karpenter.sh/v1"
NVIDIA_NODE_CLASS = "nvidia"
CPU_NODE_CLASS = "default"
# Nodes live at most this long (then drain and are replaced), so AMI and security patches reach them.
EXPIRE_AFTER = "720h"
# A training pod gets this long to checkpoint after a disruption signal before it is killed.
GPU_TERMINATION_GRACE = "1h"


@dataclass(frozen=True, kw_only=True)
class NodeClassFacts:
    """What every EC2NodeClass of the cluster shares."""

    cluster_name: str
    node_role_name: str
    # Tags Karpenter finds the private subnets by, and the cluster security group (the one EKS gives
    # managed nodes, so Karpenter nodes reach the control plane and each other the same way).
    subnet_tags: dict[str, str]
    security_group_id: str
    ami_alias: str
    root_volume_gib: int
    tags: dict[str, str]


def ec2_node_class(name: str, facts: NodeClassFacts, *, ami_id: str | None = None) -> dict[str, Any]:
    """An AL2023 node class: by alias (EKS-optimized AMI), or by `ami_id` for a custom image."""
    ami_terms = [{"id": ami_id}] if ami_id else [{"alias": facts.ami_alias}]
    spec: dict[str, Any] = {
        "role": facts.node_role_name,
        "amiSelectorTerms": ami_terms,
        "subnetSelectorTerms": [{"tags": facts.subnet_tags}],
        "securityGroupSelectorTerms": [{"id": facts.security_group_id}],
        # IMDSv2 only, one hop: pods cannot reach the node role's credentials through the metadata service.
        "metadataOptions": {
            "httpEndpoint": "enabled",
            "httpProtocolIPv6": "disabled",
            "httpPutResponseHopLimit": 1,
            "httpTokens": "required",
        },
        "blockDeviceMappings": [
            {
                "deviceName": "/dev/xvda",
                "ebs": {
                    "volumeSize": f"{facts.root_volume_gib}Gi",
                    "volumeType": "gp3",
                    "encrypted": True,
                    "deleteOnTermination": True,
                },
            }
        ],
        "tags": {**facts.tags, "karpenter.sh/discovery": facts.cluster_name},
    }
    if ami_id:
        # A custom AMI needs the family so Karpenter writes nodeadm (AL2023) user data for it.
        spec["amiFamily"] = "AL2023"
    return {"apiVersion": NODE_CLASS_API, "kind": "EC2NodeClass", "metadata": {"name": name}, "spec": spec}


def gpu_node_class_name(pool: GpuPoolConfig) -> str:
    return NVIDIA_NODE_CLASS if CATALOG[pool.accelerator].vendor == "nvidia" else f"amd-{pool.name}"


def gpu_node_pool(pool: GpuPoolConfig, *, startup_taints: Sequence[PoolTaint] = ()) -> dict[str, Any]:
    """`startup_taints`: on every new node until something removes them (the startup GPU check); Karpenter
    provisions for pods that do not tolerate them (karpenter.sh_nodepools CRD, `startupTaints`)."""
    acc = CATALOG[pool.accelerator]
    startup = {"startupTaints": [taint_spec(t) for t in startup_taints]} if startup_taints else {}
    return {
        "apiVersion": NODE_POOL_API,
        "kind": "NodePool",
        "metadata": {"name": f"gpu-{pool.name}"},
        "spec": {
            "template": {
                "metadata": {"labels": dict(acc.node_labels)},
                "spec": {
                    "nodeClassRef": {
                        "group": "karpenter.k8s.aws",
                        "kind": "EC2NodeClass",
                        "name": gpu_node_class_name(pool),
                    },
                    "taints": [taint_spec(acc.taint)],
                    **startup,
                    "requirements": [
                        _requirement("node.kubernetes.io/instance-type", pool.instance_type_names),
                        _requirement("karpenter.sh/capacity-type", pool.capacity_types),
                        _requirement("kubernetes.io/arch", ["amd64"]),
                    ],
                    "expireAfter": EXPIRE_AFTER,
                    "terminationGracePeriod": GPU_TERMINATION_GRACE,
                },
            },
            "limits": {acc.resource_name: str(pool.gpu_limit)},
            "disruption": {
                # Only empty GPU nodes are removed: consolidating a busy node would kill a training job.
                "consolidationPolicy": "WhenEmpty",
                "consolidateAfter": pool.consolidate_after,
                # At most one GPU node of the pool is disrupted at a time, and drift never replaces nodes
                # on working days' hours (a new AMI can wait for the evening).
                "budgets": [
                    {"nodes": "1"},
                    {"nodes": "0", "reasons": ["Drifted"], "schedule": "0 8 * * mon-fri", "duration": "10h"},
                ],
            },
        },
    }


def cpu_node_pool(pool: KarpenterCpuPool) -> dict[str, Any]:
    return {
        "apiVersion": NODE_POOL_API,
        "kind": "NodePool",
        "metadata": {"name": "cpu"},
        "spec": {
            "template": {
                "spec": {
                    "nodeClassRef": {
                        "group": "karpenter.k8s.aws",
                        "kind": "EC2NodeClass",
                        "name": CPU_NODE_CLASS,
                    },
                    "requirements": [
                        _requirement("karpenter.k8s.aws/instance-category", ["c", "m", "r"]),
                        {"key": "karpenter.k8s.aws/instance-generation", "operator": "Gt", "values": ["5"]},
                        _requirement("karpenter.sh/capacity-type", pool.capacity_types),
                        _requirement("kubernetes.io/arch", ["amd64"]),
                    ],
                    "expireAfter": EXPIRE_AFTER,
                },
            },
            "limits": {"cpu": str(pool.cpu_limit)},
            "disruption": {
                "consolidationPolicy": "WhenEmptyOrUnderutilized",
                "consolidateAfter": "1m",
                "budgets": [{"nodes": "10%"}],
            },
        },
    }


def _requirement(key: str, values: Sequence[str]) -> dict[str, Any]:
    return {"key": key, "operator": "In", "values": list(values)}
