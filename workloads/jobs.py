"""The training job objects: a TrainJob with its TrainingRuntime (Kubeflow Trainer 2.3), or a PyTorchJob
(Training Operator v1). Pure functions of the spec and its placement; pod pieces come from pod.py.

A running job cannot be changed in place: the CRDs refuse updates of `TrainJob.spec.trainer`, its
`runtimeRef`, its patched containers and volumes, and of the TrainingRuntime's `failurePolicy` (CEL
`self == oldSelf`), and the Training Operator never rebuilds a PyTorchJob's running pods from a changed
template (it only creates missing ones: ReconcilePods, training-operator pkg/controller.v1/common/pod.go).
So `REPLACE_ON_CHANGES` lists, per kind, the spec fields whose change makes Pulumi replace the object
(delete it, then create it: the job restarts from its last checkpoint); what the API server and the
operators do take in place (`suspend`, the PyTorchJob's backoffLimit and TTL) stays an update.
"""

from __future__ import annotations

import copy
import hashlib
import json
from typing import Any

from workloads import pod
from workloads.placement import Placement
from workloads.platform import PlatformFacts
from workloads.spec import TrainingJobSpec

TRAINER_API = "trainer.kubeflow.org/v1alpha1"
RUNTIME_PATCH_MANAGER = "mlops-eks.io/workloads"
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
# Exit codes 1-127 are the trainer's permanent failures (2: invalid config); 128+ (143 after a SIGTERM
# checkpoint) are retryable — PyTorchJob's `restartPolicy: ExitCode` semantics, rebuilt for TrainJob.
PERMANENT_EXIT_CODES = list(range(1, 128))
# A rank whose peer went away exits 202 (trainer/faults.py PEER_LOST): the peer's own pod says why (a node
# disruption, DisruptionTarget: ignored; a failure: counted). Its peers are replaced without counting, so a
# lost node costs the gang nothing beyond the lost pod.
PEER_LOST_EXIT_CODES = [202]
# The JobSet failure-policy rule that fails the whole job on a permanent exit code. JobSet's webhook refuses
# any other shape of name: ^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$ (kubernetes-sigs/jobset v0.12.0
# pkg/webhooks/jobset_webhook.go validateFailurePolicy): with a hyphen in it no TrainJob would get a pod.
PERMANENT_FAILURE_RULE = "PermanentExitCode"
# The pod template annotation that says which creation of a PyTorchJob its pods belong to; program.py sets
# it to a random id that lives as long as the job object (trainer/attempts.py keys the restart count on it).
CREATION_ANNOTATION = "mlops-eks.io/creation"
# Pulumi property paths (of the resource's inputs) whose change replaces the object instead of updating it.
REPLACE_ON_CHANGES = {
    # activeDeadlineSeconds: immutable in the TrainJob CRD (CEL self == oldSelf). The queue label: Kueue's
    # webhook refuses changing it on a job that is not suspended (kueue 0.19.2 pkg/controller/jobframework/
    # validation.go validateUpdateForQueueName), so a running job moves to another queue by replacement.
    "TrainJob": [
        "spec.trainer",
        "spec.runtimeRef",
        "spec.runtimePatches",
        "spec.activeDeadlineSeconds",
        f'metadata.labels["{KUEUE_QUEUE_LABEL}"]',
    ],
    # Named after its spec (below): a changed runtime is a new object, created before the old one goes.
    "TrainingRuntime": ["spec"],
    "PyTorchJob": [
        "spec.pytorchReplicaSpecs",
        "spec.nprocPerNode",
        "spec.elasticPolicy",
        "spec.runPolicy.schedulingPolicy",
    ],
    # The operator only creates missing pods; schedulingPolicy.queue is immutable (CEL self == oldSelf).
    "MPIJob": [
        "spec.mpiReplicaSpecs",
        "spec.slotsPerWorker",
        "spec.mainContainer",
        "spec.runPolicy.schedulingPolicy",
    ],
    # KubeRay builds the RayCluster from rayClusterSpec once ("Disregard changes in RayClusterSpec of
    # RayJob", rayjob_controller.go getOrCreateRayClusterInstance) and submits the entry point once.
    "RayJob": ["spec.rayClusterSpec", "spec.entrypoint", "spec.submitterPodTemplate", "spec.submissionMode"],
}
# Jobs keep their name (the job's identity in logs, dashboards and its S3 prefix), so the old one must go
# before the new one can be created. pulumi-kubernetes deletes in the foreground (pulumi-kubernetes#2529):
# the old job is gone only once its pods are, after their SIGTERM checkpoint. Not the runtime: Trainer's
# webhook refuses a TrainJob whose runtime does not exist yet (v2.3.0 pkg/runtime/core/trainingruntime.go
# ValidateObjects), so a changed runtime is created first under a new name and the old one is deleted at
# the end of the update. (A running TrainJob keeps a snapshot of its runtime, the ConfigMap
# `<job>-runtime-snapshot` (core/snapshot.go); Trainer 2.3.0 only removes the old `resource-in-use`
# finalizer from runtimes, trainingruntime_controller.go.)
DELETE_BEFORE_REPLACE = {"TrainJob", "PyTorchJob", "MPIJob", "RayJob"}


def _job_labels(spec: TrainingJobSpec, platform: PlatformFacts) -> dict[str, str]:
    extra = {KUEUE_QUEUE_LABEL: spec.queue} if spec.queue and platform.gang_scheduler == "kueue" else {}
    return pod.labels(spec) | extra


def job_pod_security(placement: Placement) -> dict[str, Any]:
    """What keeps the pod safe and its Spot checkpoint whole; static per job (the runtime holds it)."""
    return {
        "automountServiceAccountToken": False,
        "securityContext": pod.pod_security(placement),
        "terminationGracePeriodSeconds": pod.TERMINATION_GRACE_SECONDS,
    }


def job_pod_placement(spec: TrainingJobSpec, placement: Placement) -> dict[str, Any]:
    """Where the pod runs, as whom, and what it mounts (TrainJob: through runtimePatches)."""
    return {
        "serviceAccountName": spec.name,
        "nodeSelector": pod.node_selector(placement),
        "affinity": pod.affinity(placement),
        "tolerations": pod.tolerations(placement),
        "volumes": pod.volumes(spec, placement),
    }


def training_runtime(spec: TrainingJobSpec, placement: Placement) -> dict[str, Any]:
    """The job's own TrainingRuntime (namespaced: a workload stack owns nothing cluster-wide), shaped
    like Trainer's `torch-distributed` plus what a TrainJob has no field for: the restart budget with
    ExitCode semantics, the TTL and the priority."""
    # Secure on its own, with or without the TrainJob's patches.
    container: dict[str, Any] = {
        "name": "node",
        "image": placement.image,
        "securityContext": pod.container_security(),
    }
    if pod.ports(spec):  # TrainJob patches cannot add ports: the runtime declares them
        container["ports"] = pod.ports(spec)
    pod_spec: dict[str, Any] = job_pod_security(placement) | {
        "restartPolicy": "Never",  # podFailurePolicy requires it; restarts are the JobSet's
        "containers": [container],
    }
    if spec.priority:
        pod_spec["priorityClassName"] = spec.priority
    failure_rules = [
        # A Spot reclaim or node drain is not the job's fault: the pod is replaced without counting.
        {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
        {
            "action": "Ignore",
            "onExitCodes": {"containerName": "node", "operator": "In", "values": PEER_LOST_EXIT_CODES},
        },
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
                "template": {"metadata": {"annotations": dict(pod.DO_NOT_DISRUPT)}, "spec": pod_spec},
            },
        },
    }
    failure_policy = {
        "maxRestarts": spec.restart_budget,
        # A Job failed by the rule above (a permanent exit code) fails the whole JobSet at once.
        "rules": [
            {
                "name": PERMANENT_FAILURE_RULE,
                "action": "FailJobSet",
                "onJobFailureReasons": ["PodFailurePolicy"],
            }
        ],
    }
    runtime_spec = {
        "mlPolicy": {"numNodes": spec.nodes, "torch": {}},
        "template": {
            "spec": {
                "ttlSecondsAfterFinished": spec.ttl_seconds_after_finished,
                "failurePolicy": failure_policy,
                "replicatedJobs": [node_job],
            }
        },
    }
    return {
        "apiVersion": TRAINER_API,
        "kind": "TrainingRuntime",
        "metadata": pod.metadata(spec, runtime_name(spec, runtime_spec))
        | {"labels": pod.labels(spec) | {"trainer.kubeflow.org/framework": "torch"}},
        "spec": runtime_spec,
    }


def active_deadline_seconds(spec: TrainingJobSpec) -> int:
    return max(1, round(spec.max_runtime_hours * 3600))


def runtime_name(spec: TrainingJobSpec, runtime_spec: dict[str, Any]) -> str:
    """The job's name and a digest of the runtime's spec: a changed runtime is a new object (its
    failurePolicy cannot be updated), and the TrainJob's runtimeRef changes with it."""
    digest = hashlib.sha256(json.dumps(runtime_spec, sort_keys=True).encode()).hexdigest()[:10]
    return f"{spec.name}-{digest}"


def train_job(
    spec: TrainingJobSpec,
    placement: Placement,
    platform: PlatformFacts,
    runtime: str,
    config_digest: str | None = None,
) -> dict[str, Any]:
    """The TrainJob on the job's own TrainingRuntime named `runtime`; `config_digest`: pod.config_digest."""
    # The security settings again: a patch must not depend on which runtime it lands on (and the
    # policy pack checks every pod template on its own).
    container = {
        "name": "node",
        "securityContext": pod.container_security(),
        "volumeMounts": pod.volume_mounts(spec),
    }
    # Not terminationGracePeriodSeconds, which the runtime holds: Kueue 0.19.2 updates an admitted TrainJob
    # with Trainer v2.2.1's types, which have no such patch field (added in 2.3.0), and would drop it from
    # the live object (sim/admission/kueue_webhooks.py dropped_on_admission).
    pod_patch = (
        job_pod_placement(spec, placement)
        | {"securityContext": pod.pod_security(placement)}
        | {"containers": [container]}
    )
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
                                    "template": {
                                        "metadata": pod.template_metadata(spec, config_digest),
                                        "spec": pod_patch,
                                    }
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
        "metadata": pod.metadata(spec, spec.name) | {"labels": _job_labels(spec, platform)},
        "spec": {
            "runtimeRef": {"apiGroup": "trainer.kubeflow.org", "kind": "TrainingRuntime", "name": runtime},
            "activeDeadlineSeconds": active_deadline_seconds(spec),
            "suspend": spec.suspend,
            "trainer": trainer,
            "runtimePatches": [patch],
        },
    }


def run_policy(spec: TrainingJobSpec, platform: PlatformFacts, min_available: int) -> dict[str, Any]:
    """A Training Operator v1 job's runPolicy (PyTorchJob, MPIJob). Under Volcano the operator makes the
    job's PodGroup from schedulingPolicy (common/job.go ReconcileJobs): minMember from `min_available`
    (the pods that must start together), the queue ("default" when unset) and the priority class."""
    policy: dict[str, Any] = {
        "cleanPodPolicy": "Running",
        "backoffLimit": spec.restart_budget,
        "ttlSecondsAfterFinished": spec.ttl_seconds_after_finished,
        "activeDeadlineSeconds": active_deadline_seconds(spec),
        "suspend": spec.suspend,
    }
    if platform.gang_scheduler == "volcano":
        scheduling: dict[str, Any] = {"minAvailable": min_available}
        if spec.queue:
            scheduling["queue"] = spec.queue
        if spec.priority:
            scheduling["priorityClass"] = spec.priority
        policy["schedulingPolicy"] = scheduling
    return policy


def pytorch_job(
    spec: TrainingJobSpec, placement: Placement, platform: PlatformFacts, config_digest: str | None = None
) -> dict[str, Any]:
    # The Training Operator finds the training container by the name `pytorch`.
    container = pod.training_container(
        spec, placement, platform.region, name="pytorch", command=pod.command(spec)
    )
    pod_spec = job_pod_security(placement) | job_pod_placement(spec, placement) | {"containers": [container]}
    if spec.priority:
        pod_spec["priorityClassName"] = spec.priority
    template = {"metadata": pod.template_metadata(spec, config_digest), "spec": pod_spec}
    # ExitCode: 1-127 (e.g. the trainer's 2, invalid config) fail the job; 128+ (143 after a SIGTERM
    # checkpoint, 137 OOM/kill) make the operator recreate the pod. It never counts them (backoffLimit sums
    # restart counts, 0 on a recreated pod: pkg/core/job.go PastBackoffLimit), so the trainer's launcher
    # keeps the budget, beside the checkpoints (trainer/attempts.py). Without the trainer's launcher or a
    # checkpoint location nothing can: the job runs once (the spec allows it restartBudget 0 only).
    counted = spec.counts_restarts
    restart_policy = "ExitCode" if counted else "Never"

    def replicas(count: int) -> dict[str, Any]:
        return {"replicas": count, "restartPolicy": restart_policy, "template": copy.deepcopy(template)}

    gang = spec.elastic.min_nodes if spec.elastic else spec.nodes
    job_spec: dict[str, Any] = {
        "nprocPerNode": str(spec.processes_per_node),
        "runPolicy": run_policy(spec, platform, gang),
    }
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
    if counted:
        _attempt_ledger(job_spec, spec, platform.bucket_name)
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": pod.metadata(spec, spec.name) | {"labels": _job_labels(spec, platform)},
        "spec": job_spec,
    }


def job_identity(job_spec: dict[str, Any]) -> str:
    """A digest of what makes a different job (its pods' templates, processes and elasticity, its gang):
    not the run policy's suspend, TTL, deadline or backoffLimit, which the operator takes in place."""
    defining = {k: v for k, v in job_spec.items() if k != "runPolicy"}
    defining["schedulingPolicy"] = job_spec["runPolicy"].get("schedulingPolicy")
    return hashlib.sha256(json.dumps(defining, sort_keys=True).encode()).hexdigest()[:16]


def _attempt_ledger(job_spec: dict[str, Any], spec: TrainingJobSpec, bucket: str) -> None:
    """Where the launcher counts the job's failed attempts (trainer/attempts.py): beside its checkpoints,
    with the budget and the creation the pods belong to, read from their template's annotation. Rendered,
    the annotation is the job's identity (job_identity); `pulumi up` replaces it with a random id kept as long
    as that identity (workloads/program.py), so a new creation of the same job starts a new count."""
    where = pod.location(spec, "checkpoint", bucket)
    assert where is not None, "TrainingJobSpec.counts_restarts needs a checkpoint location"
    identity = job_identity(job_spec)
    creation = {"fieldRef": {"fieldPath": f"metadata.annotations['{CREATION_ANNOTATION}']"}}
    env = [
        {"name": "MLOPS_EKS_ATTEMPTS", "value": f"{where}/attempts"},
        {"name": "MLOPS_EKS_RESTART_BUDGET", "value": str(spec.restart_budget)},
        {"name": "MLOPS_EKS_CREATION", "valueFrom": creation},
    ]
    for replica in job_spec["pytorchReplicaSpecs"].values():
        replica["template"]["metadata"]["annotations"][CREATION_ANNOTATION] = identity
        replica["template"]["spec"]["containers"][0]["env"] += copy.deepcopy(env)
