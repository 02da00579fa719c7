"""Training operators: Kubeflow Trainer 2.3 (TrainJob, with JobSet) and its `torch-distributed`
ClusterTrainingRuntime; optionally Training Operator v1.9 (PyTorchJob, MPIJob) from its kustomize overlay,
and a gang scheduler with team queues (Kueue ClusterQueues or Volcano Queues).

The runtime is a Pulumi resource rendered here (from the upstream v2.3.0 manifest) rather than the chart's
`runtimes.torchDistributed` switch: the chart applies its runtimes from a post-install hook Job that
downloads kubectl at run time and leaves the objects outside Pulumi's state.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from infra.accelerators import CATALOG
from infra.addons_config import TeamQueue, TrainingConfig
from infra.charts import TRAINING_OPERATOR_V1_KUSTOMIZE, release
from infra.manifests import custom_resource

TRAINER_NAMESPACE = "kubeflow-system"
TORCH_RUNTIME = "torch-distributed"
# The upstream runtime's default image; every TrainJob of ours sets its own (spec.trainer.image).
TORCH_RUNTIME_IMAGE = "pytorch/pytorch:2.13.0-cuda13.0-cudnn9-runtime"
CPU_FLAVOR = "cpu"


def trainer_values() -> dict[str, Any]:
    return {
        "jobset": {"install": True},
        "runtimes": {"defaultEnabled": False, "torchDistributed": {"enabled": False}},
        "manager": {
            "resources": {"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"memory": "1Gi"}}
        },
    }


def torch_distributed_runtime() -> dict[str, Any]:
    """Kubeflow Trainer v2.3.0's torch-distributed ClusterTrainingRuntime (torchrun; one `node` job)."""
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "ClusterTrainingRuntime",
        "metadata": {"name": TORCH_RUNTIME, "labels": {"trainer.kubeflow.org/framework": "torch"}},
        "spec": {
            "mlPolicy": {"numNodes": 1, "torch": {}},
            "template": {
                "spec": {
                    "replicatedJobs": [
                        {
                            "name": "node",
                            "template": {
                                "metadata": {
                                    "labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}
                                },
                                "spec": {"template": {"spec": _restricted_pod_spec()}},
                            },
                        }
                    ]
                }
            },
        },
    }


def _restricted_pod_spec() -> dict[str, Any]:
    """The runtime's pod: Pod Security "restricted" (non-root, no privilege escalation, no capabilities,
    read-only root with a writable /tmp), and no API token: torchrun needs none. TrainJobs patch in
    their own image, resources and service account."""
    return {
        "automountServiceAccountToken": False,
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": 1000,
            "runAsGroup": 1000,
            "fsGroup": 1000,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "containers": [
            {
                "name": "node",
                "image": TORCH_RUNTIME_IMAGE,
                "securityContext": {
                    "allowPrivilegeEscalation": False,
                    "readOnlyRootFilesystem": True,
                    "capabilities": {"drop": ["ALL"]},
                },
                "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],
            }
        ],
        "volumes": [{"name": "tmp", "emptyDir": {}}],
    }


def kueue_values(*, service_monitor: bool) -> dict[str, Any]:
    return {"enablePrometheus": service_monitor}


def volcano_values() -> dict[str, Any]:
    return {"basic": {"image_pull_policy": "IfNotPresent"}}


def _flavor_name(accelerator: str) -> str:
    return f"gpu-{accelerator}"


def kueue_objects(queues: Sequence[TeamQueue]) -> list[dict[str, Any]]:
    """ResourceFlavors (one per accelerator a queue uses, plus CPU) and one ClusterQueue per team.
    Flavors pin admitted pods to the accelerator's nodes with the catalog's labels and taint."""
    accelerators = sorted({key for q in queues for key in q.gpus})
    flavors = [_resource_flavor(CPU_FLAVOR, {}, [])]
    for key in accelerators:
        acc = CATALOG[key]
        toleration = {
            "key": acc.taint.key,
            "operator": "Equal",
            "value": acc.taint.value,
            "effect": acc.taint.effect,
        }
        flavors.append(_resource_flavor(_flavor_name(key), dict(acc.node_labels), [toleration]))
    cluster_queues = []
    for q in queues:
        groups: list[dict[str, Any]] = [
            {
                "coveredResources": ["cpu", "memory"],
                "flavors": [{"name": CPU_FLAVOR, "resources": [
                    {"name": "cpu", "nominalQuota": str(q.cpu)},
                    {"name": "memory", "nominalQuota": f"{q.memory_gib}Gi"},
                ]}],
            }
        ]  # fmt: skip
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


def volcano_queues(queues: Sequence[TeamQueue]) -> list[dict[str, Any]]:
    objects = []
    for q in queues:
        capability = {"cpu": str(q.cpu), "memory": f"{q.memory_gib}Gi"}
        for key, count in q.gpus.items():
            resource = CATALOG[key].resource_name
            capability[resource] = str(int(capability.get(resource, "0")) + count)
        objects.append(
            {
                "apiVersion": "scheduling.volcano.sh/v1beta1",
                "kind": "Queue",
                "metadata": {"name": q.name},
                "spec": {"capability": capability, "reclaimable": True, "weight": 1},
            }
        )
    return objects


@dataclass(frozen=True, kw_only=True)
class TrainingArgs:
    config: TrainingConfig
    k8s_provider: k8s.Provider
    service_monitor_after: pulumi.Resource | None = None
    depends_on: Sequence[pulumi.Resource] = ()


class Training(pulumi.ComponentResource):
    operators: dict[str, bool]
    runtimes: list[str]
    queues: list[str]
    # Every release, kustomization and custom resource this component registered.
    installed: list[pulumi.Resource]

    def __init__(self, name: str, args: TrainingArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("mlops-eks:infra:Training", name, None, opts)
        cfg = args.config
        base = pulumi.ResourceOptions(
            parent=self, provider=args.k8s_provider, depends_on=list(args.depends_on)
        )
        self.runtimes = []
        self.installed = []
        if cfg.trainer:
            trainer = release(
                "kubeflow-trainer", "kubeflow-trainer", TRAINER_NAMESPACE, trainer_values(), base
            )
            # After the release: its CRD and validating webhook must serve; deleted before it.
            runtime = custom_resource(
                f"{name}-{TORCH_RUNTIME}",
                torch_distributed_runtime(),
                pulumi.ResourceOptions.merge(base, pulumi.ResourceOptions(depends_on=[trainer])),
            )
            self.installed += [trainer, runtime]
            self.runtimes.append(TORCH_RUNTIME)
        if cfg.training_operator_v1:
            operator_v1 = k8s.kustomize.v2.Directory(
                f"{name}-training-operator-v1", directory=TRAINING_OPERATOR_V1_KUSTOMIZE, opts=base
            )
            self.installed.append(operator_v1)
        self.operators = {"trainjob": cfg.trainer, "pytorchjob": cfg.training_operator_v1}

        self.queues = []
        if cfg.gang_scheduler == "kueue":
            monitored = args.service_monitor_after is not None
            after = [args.service_monitor_after] if args.service_monitor_after else []
            kueue = release(
                "kueue",
                "kueue",
                "kueue-system",
                kueue_values(service_monitor=monitored),
                pulumi.ResourceOptions.merge(base, pulumi.ResourceOptions(depends_on=after)),
            )
            self._objects(name, kueue_objects(cfg.queues), base, kueue)
            self.installed.append(kueue)
            self.queues = [q.name for q in cfg.queues]
        elif cfg.gang_scheduler == "volcano":
            volcano = release("volcano", "volcano", "volcano-system", volcano_values(), base)
            self._objects(name, volcano_queues(cfg.queues), base, volcano)
            self.installed.append(volcano)
        self.register_outputs(
            {"operators": self.operators, "runtimes": self.runtimes, "gang_scheduler": cfg.gang_scheduler}
        )

    def _objects(
        self, name: str, objects: list[dict[str, Any]], base: pulumi.ResourceOptions, after: pulumi.Resource
    ) -> None:
        opts = pulumi.ResourceOptions.merge(base, pulumi.ResourceOptions(depends_on=[after]))
        for body in objects:
            resource_name = f"{name}-{body['kind'].lower()}-{body['metadata']['name']}"
            self.installed.append(custom_resource(resource_name, body, opts))
