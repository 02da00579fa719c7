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
Reserved pools (capacityTypes with `reserved`) get a node class of their own whose
`capacityReservationSelectorTerms` select the pool's reservations (one term per id, one for the tags):
Karpenter 1.14 (ReservedCapacity gate, beta and on by default) lists the active reservations they select
(provider pkg/providers/capacityreservation, DescribeCapacityReservations state=active), offers each as a
`reserved` offering of its instance type and AZ with as many instances as EC2 says are available, and
launches into them before any on-demand or Spot offering the NodePool also allows.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import yaml

from infra.accelerators import CATALOG
from infra.config.addons import KarpenterCpuPool
from infra.config.platform import GpuPoolConfig
from infra.contract import TRAINING_POD_GRACE_SECONDS, PoolReservation, PoolTaint, taint_spec

NODE_CLASS_API = "karpenter.k8s.aws/v1"
NODE_POOL_API = "karpenter.sh/v1"
NVIDIA_NODE_CLASS = "nvidia"
CPU_NODE_CLASS = "default"
# Nodes live at most this long (then drain and are replaced), so AMI and security patches reach them. A GPU
# node under a running training pod (karpenter.sh/do-not-disrupt) drains only once the pod ends: GPU pools
# set no terminationGracePeriod, so drift and expiry wait for the job (at most its activeDeadlineSeconds)
# instead of deleting its pods. With one, Karpenter would take drifted nodes under running jobs
# (core pkg/controllers/disruption/types.go NewCandidate: the eventual class, drift, ignores blocking pods
# when the NodeClaim has a terminationGracePeriod) and delete the training pods at the grace period's end
# (node/termination/terminator DeleteExpiringPods), without a DisruptionTarget condition.
EXPIRE_AFTER = "720h"
# Graceful node shutdown on every Karpenter node, whatever the Kubernetes version: a Spot reclaim or an EC2
# stop reaches a training pod only as the kubelet's SIGTERM when the instance shuts down (Karpenter never
# evicts a karpenter.sh/do-not-disrupt pod: core pkg/utils/pod/scheduling.go IsEvictable). The EKS AL2023
# AMIs turn it on only from 1.34, with 150 s of which 30 s for critical pods (awslabs/amazon-eks-ami nodeadm
# internal/kubelet/config.go withVersionToggles), less than a training pod's grace. Here: the training pod's
# full grace, then 30 s for critical pods. Karpenter merges this NodeConfig with its own (provider
# pkg/providers/amifamily/bootstrap/nodeadm.go parseUserData); the kubelet sets logind's InhibitDelayMaxSec.
CRITICAL_POD_SHUTDOWN_SECONDS = 30
# EFA: libfabric's EFA provider registers (pins) its buffers, which the kernel counts against the process's
# RLIMIT_MEMLOCK ("Libfabric error: (-12) Cannot allocate memory" when it is low: the EFA provider's docs
# ask for unlimited). CAP_IPC_LOCK would lift the limit only for a process that has it effective, which a
# non-root process (our pods run as RUN_AS_UID) never has without ambient capabilities, and `restricted`
# refuses adding it. So the node gives containers the limit: nodeadm merges baseRuntimeSpec into containerd's
# base OCI spec (internal/containerd/base_runtime_spec.go; mergo with override: a list replaces the default's,
# so RLIMIT_NOFILE keeps its default values here). The value is 2**53, not RLIM_INFINITY: nodeadm's merge
# round-trips numbers through float64, which would turn 2**64-1 into 2**64, out of the OCI spec's uint64.
MEMLOCK_BYTES = 2**53
DEFAULT_NOFILE = {"type": "RLIMIT_NOFILE", "soft": 65536, "hard": 1048576}


def node_config(*, efa: bool) -> str:
    """The NodeConfig (nodeadm) every Karpenter node class adds to Karpenter's own."""
    spec: dict[str, Any] = {
        "kubelet": {
            "config": {
                "shutdownGracePeriod": f"{TRAINING_POD_GRACE_SECONDS + CRITICAL_POD_SHUTDOWN_SECONDS}s",
                "shutdownGracePeriodCriticalPods": f"{CRITICAL_POD_SHUTDOWN_SECONDS}s",
            }
        }
    }
    if efa:
        memlock = {"type": "RLIMIT_MEMLOCK", "soft": MEMLOCK_BYTES, "hard": MEMLOCK_BYTES}
        spec["containerd"] = {"baseRuntimeSpec": {"process": {"rlimits": [DEFAULT_NOFILE, memlock]}}}
    body = {"apiVersion": "node.eks.aws/v1alpha1", "kind": "NodeConfig", "spec": spec}
    return yaml.safe_dump(body, sort_keys=False)


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


def ec2_node_class(
    name: str,
    facts: NodeClassFacts,
    *,
    ami_id: str | None = None,
    subnet_id: str | None = None,
    placement_group: str | None = None,
    reservation: PoolReservation | None = None,
) -> dict[str, Any]:
    """An AL2023 node class: by alias (EKS-optimized AMI), or by `ami_id` for a custom image. An EFA pool's
    class launches into one subnet (`subnet_id`) and a cluster placement group (`placement_group`); a
    reserved pool's into the capacity reservations `reservation` selects."""
    ami_terms = [{"id": ami_id}] if ami_id else [{"alias": facts.ami_alias}]
    subnets = [{"id": subnet_id}] if subnet_id else [{"tags": facts.subnet_tags}]
    spec: dict[str, Any] = {
        "role": facts.node_role_name,
        "amiSelectorTerms": ami_terms,
        "subnetSelectorTerms": subnets,
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
        "userData": node_config(efa=placement_group is not None),
    }
    if placement_group:
        spec["placementGroupSelector"] = {"name": placement_group}
    if reservation is not None:
        spec["capacityReservationSelectorTerms"] = reservation_terms(reservation)
    if ami_id:
        # A custom AMI needs the family so Karpenter writes nodeadm (AL2023) user data for it.
        spec["amiFamily"] = "AL2023"
    return {"apiVersion": NODE_CLASS_API, "kind": "EC2NodeClass", "metadata": {"name": name}, "spec": spec}


def reservation_terms(reservation: PoolReservation) -> list[dict[str, Any]]:
    """Karpenter's capacityReservationSelectorTerms (ORed): an id term may carry nothing else (CRD rule)."""
    terms: list[dict[str, Any]] = [{"id": rid} for rid in reservation.ids]
    if reservation.tags:
        terms.append({"tags": dict(reservation.tags)})
    return terms


def gpu_node_class_name(pool: GpuPoolConfig) -> str:
    if CATALOG[pool.accelerator].vendor == "amd":
        return f"amd-{pool.name}"
    if pool.efa:
        return f"efa-{pool.name}"
    return f"reserved-{pool.name}" if pool.reserved else NVIDIA_NODE_CLASS


def placement_group_name(cluster_name: str, pool: GpuPoolConfig) -> str:
    """An EFA pool's cluster placement group. A gang's EFA traffic (OS bypass) stays inside one subnet and
    its bandwidth needs the instances close: the pool's nodes share one subnet, so one AZ, and the group.
    Karpenter 1.14 resolves the group (placementGroupSelector) but leaves the AZ to EC2: it narrows offerings
    for partition groups only (provider pkg/providers/instancetype/offering/placement_group_resolver.go), so
    a launch in a zone the cluster group is not in would fail; the one subnet keeps every launch in it."""
    return f"{cluster_name}-{pool.name}"


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
                },
            },
            "limits": {acc.resource_name: str(pool.gpu_limit)},
            "disruption": {
                # Only empty GPU nodes are removed: consolidating a busy node would kill a training job.
                "consolidationPolicy": "WhenEmpty",
                "consolidateAfter": pool.consolidate_after,
                # At most one GPU node of the pool is disrupted at a time. Drift and expiry need no time
                # window: they never take a node under a running training pod (EXPIRE_AFTER).
                "budgets": [{"nodes": "1"}],
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
