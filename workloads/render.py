"""A job spec + the platform's facts -> the Kubernetes objects of a workload stack. Pure functions.

`render` returns plain dicts, in creation order: Namespace, ResourceQuota, ServiceAccount, ConfigMaps,
PVCs, (LocalQueue), then the job — a TrainJob with its TrainingRuntime, or a PyTorchJob. The same dicts
are what `python -m workloads render` prints and what workloads.program creates.
"""

from __future__ import annotations

import copy
from typing import Any

import yaml

from workloads import pod
from workloads.placement import Placement, place
from workloads.platform import PlatformFacts
from workloads.spec import TrainingJobSpec

TRAINER_API = "trainer.kubeflow.org/v1alpha1"
RUNTIME_PATCH_MANAGER = "mlops-eks.io/workloads"
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
# Quota room for two gangs: a restarted gang's pods start while the previous ones still terminate
# (up to their grace period); a namespace quota of exactly one gang would stall every restart.
QUOTA_GANGS = 2
# Exit codes 1-127 are the trainer's permanent failures (2: invalid config); 128+ (143 after a SIGTERM
# checkpoint) are retryable — PyTorchJob's `restartPolicy: ExitCode` semantics, rebuilt for TrainJob.
PERMANENT_EXIT_CODES = list(range(1, 128))


def _meta(spec: TrainingJobSpec, name: str, *, namespaced: bool = True) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": pod.labels(spec)}
    if namespaced:
        meta["namespace"] = spec.namespace_name
    return meta


def _quantity(value: float) -> str:
    return f"{value:g}"


def trainer_config(spec: TrainingJobSpec, bucket: str) -> dict[str, Any]:
    """The spec's trainer config plus where data, checkpoints and outputs live."""
    config = {section: dict(values) for section, values in spec.trainer_config.items()}
    for role, key in (("data", "source"), ("checkpoint", "dir"), ("output", "dir")):
        where = pod.location(spec, role, bucket)
        if where is not None:
            config.setdefault(role, {})[key] = where
    return config


def namespace(spec: TrainingJobSpec) -> list[dict[str, Any]]:
    meta = _meta(spec, spec.namespace_name, namespaced=False)
    # The jobs' pods meet the `restricted` Pod Security Standard; enforcing it keeps it that way.
    meta["labels"] |= {"pod-security.kubernetes.io/enforce": "restricted"}
    return [{"apiVersion": "v1", "kind": "Namespace", "metadata": meta}]


def resource_quota(spec: TrainingJobSpec, placement: Placement) -> dict[str, Any]:
    pods = spec.max_nodes * QUOTA_GANGS
    hard = {
        "pods": str(pods),
        "requests.cpu": _quantity(placement.cpu * pods),
        "requests.memory": f"{placement.memory_gib * pods}Gi",
        "limits.memory": f"{placement.memory_gib * pods}Gi",
        f"requests.{placement.pool.resource_name}": str(spec.gpus_per_node * pods),
    }
    if placement.efa_interfaces:
        hard[f"requests.{pod.EFA_RESOURCE}"] = str(placement.efa_interfaces * pods)
    return {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": _meta(spec, spec.name),
        "spec": {"hard": hard},
    }


def service_account(spec: TrainingJobSpec) -> dict[str, Any]:
    # No Kubernetes API token in the pods: the trainer never calls the API server, and S3 credentials
    # come from the EKS Pod Identity agent through its own projected token, not this one.
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": _meta(spec, spec.name),
        "automountServiceAccountToken": False,
    }


def config_maps(spec: TrainingJobSpec, bucket: str, program_text: str | None) -> list[dict[str, Any]]:
    maps = []
    if spec.program.runs_trainer:
        text = yaml.safe_dump(trainer_config(spec, bucket), sort_keys=True)
        data = {"config.yaml": text}
        maps.append(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": _meta(spec, f"{spec.name}-trainer-config"),
                "data": data,
            }
        )
    if spec.program.delivery == "configmap":
        if program_text is None:
            raise ValueError(
                f"program.file {spec.program.file!r}: its text is needed to render the ConfigMap"
            )
        key = spec.program.file.rsplit("/", 1)[-1] if spec.program.file else "program.py"
        maps.append(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": _meta(spec, f"{spec.name}-program"),
                "data": {key: program_text},
            }
        )
    return maps


def volume_claims(spec: TrainingJobSpec) -> list[dict[str, Any]]:
    claims = []
    for role in pod.ROLES:
        storage = getattr(spec, role)
        if storage is None or storage.pvc is None or storage.pvc.size is None:
            continue  # S3, or an existing claim
        # One node: an EBS volume (ReadWriteOnce). Several nodes share it: that needs an RWX class (EFS).
        access = "ReadWriteOnce" if spec.max_nodes == 1 else "ReadWriteMany"
        claim_spec: dict[str, Any] = {
            "accessModes": [access],
            "resources": {"requests": {"storage": storage.pvc.size}},
        }
        if storage.pvc.storage_class:
            claim_spec["storageClassName"] = storage.pvc.storage_class
        claims.append(
            {
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "metadata": _meta(spec, pod.claim_name(spec, role)),
                "spec": claim_spec,
            }
        )
    return claims


def local_queue(spec: TrainingJobSpec, platform: PlatformFacts) -> list[dict[str, Any]]:
    if spec.queue is None or platform.gang_scheduler != "kueue":
        return []
    return [
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "LocalQueue",
            "metadata": _meta(spec, spec.queue),
            "spec": {"clusterQueue": spec.queue},
        }
    ]


def _job_labels(spec: TrainingJobSpec, platform: PlatformFacts) -> dict[str, str]:
    extra = {KUEUE_QUEUE_LABEL: spec.queue} if spec.queue and platform.gang_scheduler == "kueue" else {}
    return pod.labels(spec) | extra


def _pod_spec_common(spec: TrainingJobSpec, placement: Placement) -> dict[str, Any]:
    return {
        "serviceAccountName": spec.name,
        "securityContext": pod.pod_security(placement),
        "terminationGracePeriodSeconds": pod.TERMINATION_GRACE_SECONDS,
        "nodeSelector": pod.node_selector(placement),
        "affinity": pod.affinity(placement),
        "tolerations": pod.tolerations(placement),
        "volumes": pod.volumes(spec, placement),
    }


def training_runtime(spec: TrainingJobSpec, placement: Placement) -> dict[str, Any]:
    """The job's own TrainingRuntime (namespaced: a workload stack owns nothing cluster-wide), shaped
    like Trainer's `torch-distributed` plus what a TrainJob has no field for: the restart budget with
    ExitCode semantics, the TTL and the priority."""
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",  # podFailurePolicy requires it; restarts are the JobSet's
        "automountServiceAccountToken": False,
        "containers": [{"name": "node", "image": placement.image}],
    }
    if spec.priority:
        pod_spec["priorityClassName"] = spec.priority
    failure_rules = [
        # A Spot reclaim or node drain is not the job's fault: the pod is replaced without counting.
        {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
        {
            "action": "FailJob",
            "onExitCodes": {"containerName": "node", "operator": "In", "values": PERMANENT_EXIT_CODES},
        },
    ]
    node_job = {
        "name": "node",
        "template": {
            "metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
            "spec": {
                "backoffLimit": 0,
                "podFailurePolicy": {"rules": failure_rules},
                "template": {"spec": pod_spec},
            },
        },
    }
    failure_policy = {
        "maxRestarts": spec.restart_budget,
        # A Job failed by the rule above (a permanent exit code) fails the whole JobSet at once.
        "rules": [
            {
                "name": "permanent-exit-code",
                "action": "FailJobSet",
                "onJobFailureReasons": ["PodFailurePolicy"],
            }
        ],
    }
    return {
        "apiVersion": TRAINER_API,
        "kind": "TrainingRuntime",
        "metadata": _meta(spec, spec.name)
        | {"labels": pod.labels(spec) | {"trainer.kubeflow.org/framework": "torch"}},
        "spec": {
            "mlPolicy": {"numNodes": spec.nodes, "torch": {}},
            "template": {
                "spec": {
                    "ttlSecondsAfterFinished": spec.ttl_seconds_after_finished,
                    "failurePolicy": failure_policy,
                    "replicatedJobs": [node_job],
                }
            },
        },
    }


def train_job(spec: TrainingJobSpec, placement: Placement, platform: PlatformFacts) -> dict[str, Any]:
    pod_patch = _pod_spec_common(spec, placement) | {
        "containers": [
            {
                "name": "node",
                "securityContext": pod.container_security(),
                "volumeMounts": pod.volume_mounts(spec),
            }
        ]
    }
    patch = {
        "manager": RUNTIME_PATCH_MANAGER,
        "trainingRuntimeSpec": {
            "template": {
                "metadata": {"labels": pod.labels(spec)},
                "spec": {
                    "replicatedJobs": [
                        {
                            "name": "node",
                            "template": {
                                "spec": {
                                    "template": {"metadata": {"labels": pod.labels(spec)}, "spec": pod_patch}
                                }
                            },
                        }
                    ]
                },
            }
        },
    }
    trainer = {
        "image": placement.image,
        "command": pod.command(spec),
        "numNodes": spec.nodes,
        "numProcPerNode": spec.processes_per_node,
        "resourcesPerNode": pod.resources(spec, placement),
        "env": pod.env(spec, placement, platform.region),
    }
    return {
        "apiVersion": TRAINER_API,
        "kind": "TrainJob",
        "metadata": _meta(spec, spec.name) | {"labels": _job_labels(spec, platform)},
        "spec": {
            "runtimeRef": {"apiGroup": "trainer.kubeflow.org", "kind": "TrainingRuntime", "name": spec.name},
            "suspend": spec.suspend,
            "trainer": trainer,
            "runtimePatches": [patch],
        },
    }


def pytorch_job(spec: TrainingJobSpec, placement: Placement, platform: PlatformFacts) -> dict[str, Any]:
    container = {
        "name": "pytorch",  # the Training Operator finds the training container by this name
        "image": placement.image,
        "command": pod.command(spec),
        "env": pod.env(spec, placement, platform.region),
        "resources": pod.resources(spec, placement),
        "securityContext": pod.container_security(),
        "volumeMounts": pod.volume_mounts(spec),
    }
    pod_spec = _pod_spec_common(spec, placement) | {
        "automountServiceAccountToken": False,
        "containers": [container],
    }
    if spec.priority:
        pod_spec["priorityClassName"] = spec.priority
    template = {"metadata": {"labels": pod.labels(spec)}, "spec": pod_spec}

    def replicas(count: int) -> dict[str, Any]:
        # ExitCode: 1-127 (e.g. the trainer's 2, invalid config) fail the job; 128+ (143 after a SIGTERM
        # checkpoint, 137 OOM/kill) restart the pod, counted against runPolicy.backoffLimit.
        return {"replicas": count, "restartPolicy": "ExitCode", "template": copy.deepcopy(template)}

    run_policy: dict[str, Any] = {
        "cleanPodPolicy": "Running",
        "backoffLimit": spec.restart_budget,
        "ttlSecondsAfterFinished": spec.ttl_seconds_after_finished,
        "suspend": spec.suspend,
    }
    if platform.gang_scheduler == "volcano":
        scheduling: dict[str, Any] = {"minAvailable": spec.elastic.min_nodes if spec.elastic else spec.nodes}
        if spec.queue:
            scheduling["queue"] = spec.queue
        if spec.priority:
            scheduling["priorityClass"] = spec.priority
        run_policy["schedulingPolicy"] = scheduling
    job_spec: dict[str, Any] = {"nprocPerNode": str(spec.processes_per_node), "runPolicy": run_policy}
    if spec.elastic:
        # Elastic jobs are all workers: torchrun's c10d rendezvous admits between min and max of them.
        job_spec["elasticPolicy"] = {
            "minReplicas": spec.elastic.min_nodes,
            "maxReplicas": spec.elastic.max_nodes,
            "rdzvBackend": "c10d",
            "maxRestarts": spec.restart_budget,
        }
        job_spec["pytorchReplicaSpecs"] = {"Worker": replicas(spec.nodes)}
    else:
        job_spec["pytorchReplicaSpecs"] = {"Master": replicas(1)}
        if spec.nodes > 1:
            job_spec["pytorchReplicaSpecs"]["Worker"] = replicas(spec.nodes - 1)
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": _meta(spec, spec.name) | {"labels": _job_labels(spec, platform)},
        "spec": job_spec,
    }


def render(
    spec: TrainingJobSpec, platform: PlatformFacts, *, program_text: str | None = None
) -> list[dict[str, Any]]:
    """Every object of the workload stack, in creation order. Raises SpecError for a spec that does
    not fit the platform. `program_text` is the script a `configmap`-delivered program ships."""
    placement = place(spec, platform)
    objects = [
        *namespace(spec),
        resource_quota(spec, placement),
        service_account(spec),
        *config_maps(spec, platform.bucket_name, program_text),
        *volume_claims(spec),
        *local_queue(spec, platform),
    ]
    if spec.operator == "trainjob":
        objects += [training_runtime(spec, placement), train_job(spec, placement, platform)]
    else:
        objects.append(pytorch_job(spec, placement, platform))
    return objects
