"""The platform's exports that workload stacks read, derived from the platform's config alone: the
scheduling contract (accelerator pools, device plugins, queue quotas), the training operators, queues and
PriorityClasses. The platform program exports these (infra/program.py, infra/addons/install.py); offline,
`workloads plan`/`render` derive them from a platform stack file with `platform_facts`, no Pulumi program
run. Pure: no Pulumi import here, so `workloads` may use it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from infra.accelerators import CATALOG, Accelerator, Vendor
from infra.addons.gpu_node_check import startup_taints
from infra.config.addons import GpuSoftwareConfig, TeamQueue, TrainingConfig
from infra.config.placeholders import EXAMPLE_ACCOUNT
from infra.config.platform import PlatformConfig
from infra.contract import (
    EFA_RESOURCE,
    INSTANCE_TYPE_LABEL,
    KUEUE_CPU_FLAVOR,
    KUEUE_EFA_FLAVOR,
    KUEUE_GPU_FLAVOR_PREFIX,
    AcceleratorPool,
    DevicePlugin,
    PoolTaint,
    QueueQuota,
    Toleration,
    kueue_gpu_flavor,
    quantity,
    taint_spec,
    toleration_spec,
)


def gpu_pool_scheduling(acc: Accelerator) -> tuple[dict[str, str], list[dict[str, str]]]:
    """The labels and taints every node of accelerator `acc` carries (from the catalog)."""
    return acc.node_labels, [taint_spec(acc.taint)]


def vendor_node_selector(vendor: Vendor) -> dict[str, str]:
    """The labels every GPU node of `vendor` carries, whatever its accelerator."""
    label_sets = [a.node_labels.items() for a in CATALOG.values() if a.vendor == vendor]
    common = set(label_sets[0]).intersection(*label_sets[1:])
    return dict(sorted(common))


def vendor_toleration(vendor: Vendor) -> dict[str, str]:
    taint = next(a.taint for a in CATALOG.values() if a.vendor == vendor)
    return toleration_spec(taint, any_value=True)


# The chart defaults' own toleration: keep it when we replace the list.
_CRITICAL_ADDONS = {"key": "CriticalAddonsOnly", "operator": "Exists"}


def nvidia_device_plugin_values() -> dict[str, Any]:
    return {
        "nodeSelector": vendor_node_selector("nvidia"),
        "tolerations": [_CRITICAL_ADDONS, vendor_toleration("nvidia")],
        "priorityClassName": "system-node-critical",
    }


# The amd-gpu chart selects nodes only through `node_selector` (a fixed default we cannot extend without
# leaving the chart's declared values): the NFD label for an AMD display controller and the architecture.
# AMD nodes carry that label from the catalog (`extra_labels`), so no NFD is needed.
AMD_CHART_NODE_SELECTOR = {
    "feature.node.kubernetes.io/pci-0300_1002.present": "true",
    "kubernetes.io/arch": "amd64",
}


def amd_device_plugin_values() -> dict[str, Any]:
    return {
        "node_selector_enabled": True,
        "node_selector": AMD_CHART_NODE_SELECTOR,
        "tolerations": [_CRITICAL_ADDONS, vendor_toleration("amd")],
    }


def efa_instance_types() -> list[str]:
    """The catalog's instance types with EFA interfaces."""
    return sorted({t.name for a in CATALOG.values() for t in a.instance_types if t.efa_interfaces})


def efa_device_plugin_values() -> dict[str, Any]:
    """The chart selects nodes by required affinity on `supportedInstanceLabels` (its daemonset template);
    narrowed to the catalog's EFA types. EFA nodes here are GPU nodes: tolerate both GPU taints."""
    return {
        "supportedInstanceLabels": {"keys": [INSTANCE_TYPE_LABEL], "values": efa_instance_types()},
        "tolerations": [vendor_toleration("nvidia"), vendor_toleration("amd")],
    }


def _tolerations(values: dict[str, Any]) -> tuple[Toleration, ...]:
    return tuple(Toleration.model_validate(t) for t in values["tolerations"])


def device_plugins(cfg: GpuSoftwareConfig) -> list[DevicePlugin]:
    """Where each installed device plugin runs, from the values above (the scheduling contract)."""
    plugins = []
    if cfg.nvidia_device_plugin:
        values = nvidia_device_plugin_values()
        plugins.append(
            DevicePlugin(
                name="nvidia-device-plugin",
                resource=CATALOG["t4"].resource_name,
                node_selector=values["nodeSelector"],
                tolerations=_tolerations(values),
            )
        )
    if cfg.amd_device_plugin:
        values = amd_device_plugin_values()
        plugins.append(
            DevicePlugin(
                name="amd-gpu",
                resource=CATALOG["amd-v520"].resource_name,
                node_selector=values["node_selector"],
                tolerations=_tolerations(values),
            )
        )
    if cfg.efa_device_plugin:
        values = efa_device_plugin_values()
        plugins.append(
            DevicePlugin(
                name="aws-efa-k8s-device-plugin",
                resource=EFA_RESOURCE,
                node_affinity={INSTANCE_TYPE_LABEL: tuple(values["supportedInstanceLabels"]["values"])},
                # The chart adds CriticalAddonsOnly before the configured tolerations.
                tolerations=(Toleration(key="CriticalAddonsOnly", operator="Exists"), *_tolerations(values)),
            )
        )
    return plugins


CPU_FLAVOR = KUEUE_CPU_FLAVOR


# EFA interfaces are not tied to an accelerator's nodes (the GPU flavor pins the node): a flavor of its own.
EFA_FLAVOR = KUEUE_EFA_FLAVOR


GPU_FLAVOR_PREFIX = KUEUE_GPU_FLAVOR_PREFIX


def _flavor_name(accelerator: str) -> str:
    return f"{GPU_FLAVOR_PREFIX}{accelerator}"


def kueue_objects(queues: Sequence[TeamQueue]) -> list[dict[str, Any]]:
    """ResourceFlavors (one per accelerator a queue uses, plus CPU) and one ClusterQueue per team.
    Flavors pin admitted pods to the accelerator's nodes with the catalog's labels and taint."""
    accelerators = sorted({key for q in queues for key in q.gpus})
    flavors = [_resource_flavor(CPU_FLAVOR, {}, [])]
    if any(q.efa_interfaces for q in queues):
        flavors.append(_resource_flavor(EFA_FLAVOR, {}, []))
    for key in accelerators:
        name, spec = kueue_gpu_flavor(key)
        flavors.append(
            {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "ResourceFlavor",
                "metadata": {"name": name},
                "spec": spec,
            }
        )
    cluster_queues = []
    for q in queues:
        groups: list[dict[str, Any]] = [
            {
                "coveredResources": ["cpu", "memory"],
                "flavors": [
                    {
                        "name": CPU_FLAVOR,
                        "resources": [
                            {"name": "cpu", "nominalQuota": str(q.cpu)},
                            {"name": "memory", "nominalQuota": f"{q.memory_gib}Gi"},
                        ],
                    }
                ],
            }
        ]
        for resource_name in sorted({CATALOG[k].resource_name for k in q.gpus}):
            keys = sorted(k for k in q.gpus if CATALOG[k].resource_name == resource_name)
            groups.append(
                {
                    "coveredResources": [resource_name],
                    "flavors": [
                        {
                            "name": _flavor_name(k),
                            "resources": [{"name": resource_name, "nominalQuota": str(q.gpus[k])}],
                        }
                        for k in keys
                    ],
                }
            )
        if q.efa_interfaces:
            groups.append(
                {
                    "coveredResources": [EFA_RESOURCE],
                    "flavors": [
                        {
                            "name": EFA_FLAVOR,
                            "resources": [
                                {"name": EFA_RESOURCE, "nominalQuota": str(q.efa_interfaces)},
                            ],
                        }
                    ],
                }
            )
        cluster_queues.append(
            {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "ClusterQueue",
                "metadata": {"name": q.name},
                "spec": {
                    "namespaceSelector": {},
                    "queueingStrategy": "BestEffortFIFO",
                    "resourceGroups": groups,
                },
            }
        )
    return flavors + cluster_queues


def _resource_flavor(name: str, labels: dict[str, str], tolerations: list[dict[str, str]]) -> dict[str, Any]:
    spec: dict[str, Any] = {"nodeLabels": labels} if labels else {}
    if tolerations:
        spec["tolerations"] = tolerations
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ResourceFlavor",
        "metadata": {"name": name},
        "spec": spec,
    }


def queue_quotas(config: TrainingConfig) -> list[QueueQuota]:
    """Each queue's nominal quota per resource, summed over its flavors, read back from the objects
    created above (so the export says what the cluster enforces)."""
    if config.gang_scheduler == "kueue":
        quotas = []
        for obj in kueue_objects(config.queues):
            if obj["kind"] != "ClusterQueue":
                continue
            nominal: dict[str, str] = {}
            gpus: dict[str, int] = {}
            for group in obj["spec"]["resourceGroups"]:
                for flavor in group["flavors"]:
                    for r in flavor["resources"]:
                        key = flavor["name"].removeprefix(GPU_FLAVOR_PREFIX)
                        if flavor["name"].startswith(GPU_FLAVOR_PREFIX):
                            gpus[key] = int(quantity(r["nominalQuota"]))
                        else:
                            nominal[r["name"]] = r["nominalQuota"]
            quotas.append(
                QueueQuota(name=obj["metadata"]["name"], scheduler="kueue", nominal=nominal, gpus=gpus)
            )
        return quotas
    if config.gang_scheduler == "volcano":
        return [
            QueueQuota(name=o["metadata"]["name"], scheduler="volcano", nominal=o["spec"]["capability"])
            for o in volcano_queues(config.queues)
        ]
    return []


def volcano_queues(queues: Sequence[TeamQueue]) -> list[dict[str, Any]]:
    objects = []
    for q in queues:
        capability = {"cpu": str(q.cpu), "memory": f"{q.memory_gib}Gi"}
        for key, count in q.gpus.items():
            resource = CATALOG[key].resource_name
            capability[resource] = str(int(capability.get(resource, "0")) + count)
        if q.efa_interfaces:
            capability[EFA_RESOURCE] = str(q.efa_interfaces)
        objects.append(
            {
                "apiVersion": "scheduling.volcano.sh/v1beta1",
                "kind": "Queue",
                "metadata": {"name": q.name},
                "spec": {"capability": capability, "reclaimable": True, "weight": 1},
            }
        )
    return objects


def accelerator_pools(config: PlatformConfig) -> dict[str, AcceleratorPool]:
    """Every GPU node source (Karpenter NodePools and managed groups alike), as the contract describes
    it. A Karpenter pool exists only when the Karpenter add-on is on (config validation ensures it)."""
    pools = {}
    for pool in config.gpu_pools:
        acc = pool.catalog_entry
        labels, taints = gpu_pool_scheduling(acc)
        pools[pool.name] = AcceleratorPool(
            source=pool.source,
            accelerator=acc.key,
            instance_types=tuple(pool.instance_type_names),
            gpus_per_node=pool.gpus_per_node,
            resource_name=acc.resource_name,
            node_labels=labels,
            taints=tuple(PoolTaint.model_validate(t) for t in taints),
            startup_taints=startup_taints(acc.key, enabled=config.addons.node_health.gpu_check),
            capacity_types=tuple(pool.capacity_types),
            reservation=pool.reservation.contract() if pool.reservation else None,
            efa_interfaces=pool.efa_interfaces,
            gpu_limit=pool.gpu_limit,
            size=pool.size,
        )
    return pools


def cluster_name_of(stack: str) -> str:
    return f"mlops-eks-{stack}"


def training_operators(cfg: TrainingConfig) -> dict[str, bool]:
    """The job kinds the platform's operators run (Training Operator v1 runs PyTorchJob and MPIJob)."""
    operators = {
        "trainjob": cfg.trainer,
        "pytorchjob": cfg.training_operator_v1,
        "mpijob": cfg.training_operator_v1,
    }
    if cfg.kuberay:  # exported only when on: platforms without it export what they did before
        operators["rayjob"] = True
    return operators


def platform_facts(config: PlatformConfig, stack: str) -> dict[str, Any]:
    """What `workloads` reads of a platform stack's outputs (workloads.platform.PlatformFacts), from its
    config. What only a deployed stack knows (the bucket's generated name, the account's registry) is a
    valid placeholder (`--platform-outputs` of the deployed stack gives the real ones)."""
    training = config.addons_as_deployed.training  # the queues' quotas for the pools it has
    # Valid names (the scanners and the policy pack read them), which a deploy replaces: the example account
    # a real preview refuses, and a bucket name that says so.
    registry = f"{EXAMPLE_ACCOUNT}.dkr.ecr.{config.region}.amazonaws.com/mlops-eks/{stack}"
    return {
        "cluster_name": cluster_name_of(stack),
        "region": config.region,
        "bucket_name": f"mlops-eks-{stack}-known-after-deploy",
        "ecr_repository_urls": {name: f"{registry}/{name}" for name in ("cpu", "cuda", "rocm")},
        "accelerator_pools": {n: p.model_dump(mode="json") for n, p in accelerator_pools(config).items()},
        "device_plugins": [p.model_dump(mode="json") for p in device_plugins(config.addons.gpu)],
        "queue_quotas": [q.model_dump(mode="json") for q in queue_quotas(training)],
        "training_operators": training_operators(training),
        "gang_scheduler": training.gang_scheduler,
        "kueue_queues": [q.name for q in training.queues] if training.gang_scheduler == "kueue" else [],
        "priority_classes": [c.name for c in training.priority_classes],
        "image_path": {"account_id": EXAMPLE_ACCOUNT, "region": config.region, "stack": stack},
    }
