"""Training operators: Kubeflow Trainer 2.3 (TrainJob, with JobSet) and its `torch-distributed`
ClusterTrainingRuntime; optionally Training Operator v1.9 (PyTorchJob, MPIJob) from its kustomize overlay,
and a gang scheduler with team queues (Kueue ClusterQueues or Volcano Queues).

The runtime is a Pulumi resource rendered here (from the upstream v2.3.0 manifest) rather than the chart's
`runtimes.torchDistributed` switch: the chart applies its runtimes from a post-install hook Job that
downloads kubectl at run time and leaves the objects outside Pulumi's state.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pulumi
import pulumi_kubernetes as k8s
import yaml

from infra.addons import kuberay, training_operator_v1
from infra.addons.manifests import custom_resource
from infra.charts import release
from infra.component_args import ComponentArgs, child_options
from infra.config.addons import TrainingConfig
from infra.contract import (
    KUEUE_NAMESPACE_LABEL,
    RUN_AS_UID,
)
from infra.exports import kueue_objects, training_operators, volcano_queues
from infra.pins import IMAGES
from infra.platform.image_cache import ImageCache

TRAINER_NAMESPACE = "kubeflow-system"
TORCH_RUNTIME = "torch-distributed"
# The upstream runtime's default image (pinned in infra/pins.py); every TrainJob sets its own.
TORCH_RUNTIME_IMAGE = IMAGES["torch-runtime"].ref


def trainer_values() -> dict[str, Any]:
    return {
        # Its image: infra/addons/chart_images.py (the promoted release image, not the staging one).
        "jobset": {"install": True},
        "runtimes": {"defaultEnabled": False, "torchDistributed": {"enabled": False}},
        "manager": {
            "resources": {"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"memory": "1Gi"}}
        },
    }


def torch_distributed_runtime(image: str = TORCH_RUNTIME_IMAGE) -> dict[str, Any]:
    """Kubeflow Trainer v2.3.0's torch-distributed ClusterTrainingRuntime (torchrun; one `node` job), whose
    pods default to `image` (upstream's, through the platform's registry)."""
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
                                "spec": {"template": {"spec": _restricted_pod_spec(image)}},
                            },
                        }
                    ]
                }
            },
        },
    }


def _restricted_pod_spec(image: str) -> dict[str, Any]:
    """The runtime's pod: Pod Security "restricted" (non-root, no privilege escalation, no capabilities,
    read-only root with a writable /tmp), and no API token: torchrun needs none. TrainJobs patch in
    their own image, resources and service account."""
    return {
        "automountServiceAccountToken": False,
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": RUN_AS_UID,
            "runAsGroup": RUN_AS_UID,
            "fsGroup": RUN_AS_UID,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "containers": [
            {
                "name": "node",
                "image": image,
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


# The job kinds Kueue manages: TrainJob (and the JobSet it creates). The chart's default list also
# turns on batch/job and the pod, deployment and statefulset integrations, whose webhooks the chart
# renders with failurePolicy Fail for every namespace but kube-system and kueue-system (templates/webhook/
# manifests.yaml: `{{- if has "deployment" $integrationsConfig.frameworks }} failurePolicy: Fail`, else
# Ignore): while Kueue is not serving, every other release's Deployments and Jobs would be refused.
KUEUE_FRAMEWORKS = ("trainer.kubeflow.org/trainjob", "jobset.x-k8s.io/jobset")


KUEUE_NAMESPACE = "kueue-system"
VOLCANO_NAMESPACE = "volcano-system"


def kueue_manager_config(platform_namespaces: Sequence[str] = ()) -> dict[str, Any]:
    """The chart's default controller_manager_config.yaml (kueue 0.19.2 values.yaml) with our frameworks.

    The chart still renders Fail webhooks for every framework's kind (batch Jobs included: Helm hooks, a
    JobSet's Jobs, a RayJob's submitter; RayClusters, PyTorchJobs, MPIJobs) with
    `managedJobsNamespaceSelector` as their namespaceSelector (default: all but kube-system and
    kueue-system). While no Kueue replica serves, such a webhook refuses the object: a JobSet could not
    recreate its Jobs to restart, KubeRay could not create a cluster. So Kueue manages only the
    namespaces that opt in (KUEUE_NAMESPACE_LABEL: the workload renderer sets it on a namespace whose job
    names a queue), never a platform namespace: an outage touches queued jobs alone, and two replicas make
    one rare (kueue_values)."""
    exempt = sorted({"kube-system", KUEUE_NAMESPACE, *platform_namespaces})
    return {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "health": {"healthProbeBindAddress": ":8081"},
        "metrics": {"bindAddress": ":8443"},
        "webhook": {"port": 9443},
        "leaderElection": {"leaderElect": True, "resourceName": "c1f6bfd2.kueue.x-k8s.io"},
        "controller": {
            "groupKindConcurrency": {
                "Job.batch": 5,
                "Pod": 5,
                "Workload.kueue.x-k8s.io": 10,
                "LocalQueue.kueue.x-k8s.io": 5,
                "ClusterQueue.kueue.x-k8s.io": 5,
                "ResourceFlavor.kueue.x-k8s.io": 1,
            }
        },
        "clientConnection": {"qps": 300, "burst": 500},
        "integrations": {"frameworks": list(KUEUE_FRAMEWORKS)},
        "managedJobsNamespaceSelector": {
            "matchLabels": {KUEUE_NAMESPACE_LABEL: "true"},
            "matchExpressions": [
                {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": exempt}
            ],
        },
    }


# The manager pods (kueue 0.19.2 templates/_helpers.tpl kueue.selectorLabels for release "kueue").
KUEUE_MANAGER_POD = {
    "app.kubernetes.io/name": "kueue",
    "app.kubernetes.io/instance": "kueue",
    "control-plane": "controller-manager",
}


def kueue_values(*, service_monitor: bool, platform_namespaces: Sequence[str] = ()) -> dict[str, Any]:
    """Two replicas on two nodes, one kept through a drain: both serve the webhooks (controller-runtime's
    webhook server runs in every replica), one leads the controllers (leader election; the others keep
    their caches warm, pkg/controller/core/leader_aware_reconciler.go)."""
    config = kueue_manager_config(platform_namespaces)
    spread = {
        "maxSkew": 1,
        "topologyKey": "kubernetes.io/hostname",
        "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": {"matchLabels": dict(KUEUE_MANAGER_POD)},
    }
    return {
        "controllerManager": {
            "replicas": 2,
            "podDisruptionBudget": {"enabled": True, "minAvailable": 1},
            "topologySpreadConstraints": [spread],
        },
        "enablePrometheus": service_monitor,
        # The chart parses this string with fromYaml (templates/manager/manager-config.yaml).
        "managerConfig": {"controllerManagerConfigYaml": yaml.safe_dump(config)},
    }


def volcano_values() -> dict[str, Any]:
    return {"basic": {"image_pull_policy": "IfNotPresent"}}


class TrainingArgs(ComponentArgs):
    config: TrainingConfig
    k8s_provider: k8s.Provider
    service_monitor_after: pulumi.Resource | None = None
    # Every other add-on release: Kueue goes after them (see `kueue` below), and their namespaces.
    kueue_after: Sequence[pulumi.Resource] = ()
    platform_namespaces: Sequence[str] = ()
    images: ImageCache


class Training(pulumi.ComponentResource):
    operators: dict[str, bool]
    runtimes: list[str]
    queues: list[str]
    priority_classes: list[str]
    # Every release, kustomization and custom resource this component registered.
    installed: list[pulumi.Resource]

    def __init__(self, name: str, args: TrainingArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("mlops-eks:infra:Training", name, None, opts)
        cfg = args.config
        base = child_options(self, opts, provider=args.k8s_provider)
        self.runtimes = []
        self.installed = []
        if cfg.trainer:
            trainer = release(
                "kubeflow-trainer",
                "kubeflow-trainer",
                TRAINER_NAMESPACE,
                trainer_values(),
                base,
                images=args.images,
            )
            # After the release: its CRD and validating webhook must serve; deleted before it.
            runtime = custom_resource(
                f"{name}-{TORCH_RUNTIME}",
                torch_distributed_runtime(args.images.path.ref(TORCH_RUNTIME_IMAGE)),
                pulumi.ResourceOptions.merge(base, pulumi.ResourceOptions(depends_on=[trainer])),
            )
            self.installed += [trainer, runtime]
            self.runtimes.append(TORCH_RUNTIME)
        volcano = None
        if cfg.gang_scheduler == "volcano":
            volcano = release(
                "volcano", "volcano", VOLCANO_NAMESPACE, volcano_values(), base, images=args.images
            )
        if cfg.training_operator_v1:
            # Under Volcano the operator must create the PodGroups that gang a job's pods, and it watches
            # them only if their CRD is served when it starts (v1.9.2 mpijob_controller.go SetupWithManager,
            # "skip watching volcano PodGroup if volcano PodGroup is not installed"): after Volcano.
            # Its own overlay either way: the PyTorchJob init container from our restricted template
            # (infra/addons/training_operator_v1.py), and Volcano as gang scheduler when it is installed.
            # Installed under the stack's layer: every image it runs or puts into job pods from the
            # stack's ECR, checked there first.
            directory = training_operator_v1.write_stack_layer(
                training_operator_v1.overlay(volcano=volcano is not None), args.images.path
            )
            pins = [IMAGES[training_operator_v1.OPERATOR_IMAGE]]
            pins += [IMAGES[key] for key in training_operator_v1.JOB_IMAGE_FLAGS.values()]
            primed = args.images.primed("training-operator-v1", pins, pulumi.ResourceOptions(parent=self))
            operator_after = pulumi.ResourceOptions(depends_on=[*primed, *([volcano] if volcano else [])])
            operator_v1 = k8s.kustomize.v2.Directory(
                f"{name}-training-operator-v1",
                directory=directory,
                opts=pulumi.ResourceOptions.merge(base, operator_after),
            )
            self.installed.append(operator_v1)
        if cfg.kuberay:
            monitored = args.service_monitor_after is not None
            after = [args.service_monitor_after] if args.service_monitor_after else []
            values = kuberay.kuberay_values(service_monitor=monitored)
            ray_opts = pulumi.ResourceOptions.merge(base, pulumi.ResourceOptions(depends_on=after))
            ray = release(
                kuberay.RELEASE, kuberay.CHART_KEY, kuberay.NAMESPACE, values, ray_opts, images=args.images
            )
            self.installed.append(ray)
        self.operators = training_operators(cfg)

        self.priority_classes = [c.name for c in cfg.priority_classes]
        for c in cfg.priority_classes:
            self.installed.append(
                k8s.scheduling.v1.PriorityClass(
                    f"{name}-priorityclass-{c.name}",
                    metadata={"name": c.name},
                    value=c.value,
                    preemption_policy=c.preemption_policy,
                    description=f"mlops-eks job priority {c.name} (addons.training.priorityClasses)",
                    opts=base,
                )
            )

        self.queues = []
        if cfg.gang_scheduler == "kueue":
            monitored = args.service_monitor_after is not None
            # Installed last: its remaining Fail webhooks (JobSet, TrainJob, its own CRDs) cannot race
            # another release's objects on first install, and on destroy it goes first.
            after = [
                *([args.service_monitor_after] if args.service_monitor_after else []),
                *self.installed,
                *args.kueue_after,
            ]
            kueue = release(
                "kueue",
                "kueue",
                KUEUE_NAMESPACE,
                kueue_values(
                    service_monitor=monitored,
                    platform_namespaces=[TRAINER_NAMESPACE, *args.platform_namespaces],
                ),
                pulumi.ResourceOptions.merge(base, pulumi.ResourceOptions(depends_on=after)),
                images=args.images,
            )
            self._objects(name, kueue_objects(cfg.queues), base, kueue)
            self.installed.append(kueue)
            self.queues = [q.name for q in cfg.queues]
        elif volcano:
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
