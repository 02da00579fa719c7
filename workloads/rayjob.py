"""The RayJob (KubeRay 1.7, ray.io/v1) of a job spec with `operator: rayjob`. Pure functions of the spec and
its placement; pod pieces come from pod.py, exactly as for the TrainJob and the PyTorchJob.

The job's Ray cluster is its gang: the head is node 0, a fixed-size worker group holds the other
`nodes - 1`. The head runs `python -m trainer.ray_train` as the driver (Ray Train's TorchTrainer, one
worker per process). KubeRay retries a failed RayJob whatever failed (rayjob_controller.go v1.7.0), so the
exit-code split lives in the driver; submission is K8sJobMode with our own `restricted` submitter pod.
docs/workloads.md "Ray jobs" has the details.
"""

from __future__ import annotations

import copy
import shlex
from collections.abc import Mapping
from typing import Any

from infra.addons.kuberay import NAMESPACE as KUBERAY_NAMESPACE
from infra.addons.kuberay import OPERATOR_POD
from infra.addons.network_policies import network_policy
from infra.contract import JOB_LABEL
from workloads import jobs, pod
from workloads.placement import Placement
from workloads.platform import PlatformFacts
from workloads.spec import TrainingJobSpec

RAY_API = "ray.io/v1"
# The ray the images install (pyproject.toml, extra `ray`); KubeRay reads it to pick version-dependent
# behaviour (health checks, `ray job submit` flags).
RAY_VERSION = "2.60.0"
HEAD_CONTAINER, WORKER_CONTAINER, SUBMITTER_CONTAINER = "ray-head", "ray-worker", "ray-job-submitter"
WORKER_GROUP = "gpu"
# Ray's ports on the head (KubeRay's defaults, utils/constant.go); the operator reads job status from the
# dashboard, the submitter submits there, workers join the GCS.
HEAD_PORTS = {"gcs-server": 6379, "dashboard": 8265, "client": 10001}
NODE_TYPE_LABEL = "ray.io/node-type"
RAY_CLUSTER_TTL_SECONDS = 60
# The submitter runs `ray job submit` and then follows the driver's log: a CLI, no GPU.
# Whole GiB: the namespace quota (workloads/render.py) adds the submitter's to each gang's.
SUBMITTER_CPU, SUBMITTER_MEMORY_GIB = 0.5, 1
SUBMITTER_RESOURCES = {
    "requests": {"cpu": f"{SUBMITTER_CPU:g}", "memory": f"{SUBMITTER_MEMORY_GIB}Gi"},
    "limits": {"memory": f"{SUBMITTER_MEMORY_GIB}Gi"},
}
# KubeRay's own default (rayjob_controller.go createNewK8sJob): a lost log stream reattaches, twice.
SUBMITTER_BACKOFF_LIMIT = 2
STORAGE_DIR = "ray"  # Ray Train's run directory, under the job's checkpoint location


def program(spec: TrainingJobSpec) -> list[str]:
    """What torchrun runs in the other kinds (pod.command after the launcher's flags): the trainer with its
    config, a module or a script, with the program's arguments."""
    command = pod.command(spec)
    launcher_end = next(i for i, arg in enumerate(command) if arg.startswith("--shutdown-timeout=")) + 1
    return command[launcher_end:]


def storage_path(spec: TrainingJobSpec, bucket: str) -> str | None:
    """Ray Train's run directory: beside the checkpoints (S3 under the job's prefix, through its Pod Identity
    role, or the shared checkpoint volume); None without checkpoints (Ray's default, on the head)."""
    where = pod.location(spec, "checkpoint", bucket)
    return (
        f"{where.rsplit('/', 1)[0] if where.startswith('s3://') else where}/{STORAGE_DIR}" if where else None
    )


def entrypoint(spec: TrainingJobSpec, bucket: str) -> str:
    gpus_per_worker = spec.gpus_per_node / spec.processes_per_node
    argv = [
        "python",
        "-m",
        "trainer.ray_train",
        "--workers",
        str(spec.nodes * spec.processes_per_node),
        "--gpus-per-worker",
        f"{gpus_per_worker:g}",
        "--restart-budget",
        str(spec.restart_budget),
        "--name",
        spec.name,
    ]
    storage = storage_path(spec, bucket)
    if storage:
        argv += ["--storage-path", storage]
    return shlex.join([*argv, "--", *program(spec)])


def _ray_pod(
    spec: TrainingJobSpec,
    placement: Placement,
    platform: PlatformFacts,
    container: str,
    digest: str | None,
    ports: list[dict[str, Any]],
) -> dict[str, Any]:
    """A Ray node's pod template: the job's pod (pod.py) running `ray start`, which KubeRay writes as the
    container's command from rayStartParams and the container's GPU limit (num-gpus)."""
    # The trainer's metrics port is named `metrics`, the name KubeRay reserves for Ray's own metrics
    # (common/pod.go): KubeRay then adds no second port and the platform's PodMonitor scrapes the
    # trainer's, as for the other kinds.
    ray_container = pod.training_container(
        spec, placement, platform.region, name=container, extra_ports=ports
    )
    pod_spec = jobs.job_pod_security(placement) | jobs.job_pod_placement(spec, placement)
    pod_spec["containers"] = [ray_container]
    if spec.priority:
        pod_spec["priorityClassName"] = spec.priority
    return {"metadata": pod.template_metadata(spec, digest), "spec": pod_spec}


def _submitter(spec: TrainingJobSpec, placement: Placement) -> dict[str, Any]:
    """The submitter Job's pod: KubeRay fills in its command (`ray job submit` then `ray job logs --follow`
    against the head's dashboard) and keeps the rest (common/job.go GetSubmitterTemplate). On the job's own
    nodes, under the job's labels (its NetworkPolicy lets it reach the head), restricted like the rest."""
    pod_spec = jobs.job_pod_security(placement) | {
        "restartPolicy": "Never",  # a Job's pods; KubeRay's default template has the same
        "nodeSelector": pod.node_selector(placement),
        "affinity": pod.affinity(placement),
        "tolerations": pod.tolerations(placement),
        "volumes": [{"name": "tmp", "emptyDir": {}}],
        "containers": [
            {
                "name": SUBMITTER_CONTAINER,
                "image": placement.image,
                "env": [{"name": "HOME", "value": "/tmp"}, {"name": "PYTHONUNBUFFERED", "value": "1"}],
                "resources": copy.deepcopy(SUBMITTER_RESOURCES),
                "securityContext": pod.container_security(),
                "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],
            }
        ],
    }
    # Not disrupted either: a submitter evicted mid-run ends `ray job logs` and counts as a failed attempt.
    return {
        "metadata": {"labels": pod.labels(spec), "annotations": dict(pod.DO_NOT_DISRUPT)},
        "spec": pod_spec,
    }


def _ray_start_params(placement: Placement) -> dict[str, str]:
    """Ray's object store lives in /dev/shm and takes 30% of the pod's memory by default, more than the
    job's /dev/shm (shmGiB, a quarter of the memory), which NCCL and the DataLoader workers need: a quarter
    of it is enough for what Ray Train passes between driver and workers. (num-cpus and num-gpus: KubeRay
    reads them from the container's resources.)"""
    return {"object-store-memory": str(max(1, placement.shm_gib // 4) * 2**30)}


def ray_job(
    spec: TrainingJobSpec, placement: Placement, platform: PlatformFacts, config_digest: str | None = None
) -> dict[str, Any]:
    head_ports = [{"name": n, "containerPort": p, "protocol": "TCP"} for n, p in HEAD_PORTS.items()]
    # The dashboard listens on localhost unless told otherwise; KubeRay sets 0.0.0.0 by default
    # (common/pod.go setMissingRayStartParams), stated here because the operator and submitter must reach it.
    cluster: dict[str, Any] = {
        "rayVersion": RAY_VERSION,
        "enableInTreeAutoscaling": False,
        "headGroupSpec": {
            "rayStartParams": _ray_start_params(placement) | {"dashboard-host": "0.0.0.0"},
            "template": _ray_pod(spec, placement, platform, HEAD_CONTAINER, config_digest, head_ports),
        },
    }
    workers = spec.nodes - 1
    if workers:
        cluster["workerGroupSpecs"] = [
            {
                "groupName": WORKER_GROUP,
                "replicas": workers,
                "minReplicas": workers,
                "maxReplicas": workers,
                "rayStartParams": _ray_start_params(placement),
                "template": _ray_pod(spec, placement, platform, WORKER_CONTAINER, config_digest, []),
            }
        ]
    return {
        "apiVersion": RAY_API,
        "kind": "RayJob",
        "metadata": pod.metadata(spec, spec.name) | {"labels": pod.labels(spec)},
        "spec": {
            "entrypoint": entrypoint(spec, platform.bucket_name),
            "submissionMode": "K8sJobMode",
            "submitterPodTemplate": _submitter(spec, placement),
            "submitterConfig": {"backoffLimit": SUBMITTER_BACKOFF_LIMIT},
            "backoffLimit": spec.restart_budget,
            "activeDeadlineSeconds": jobs.active_deadline_seconds(spec),
            "shutdownAfterJobFinishes": True,
            "ttlSecondsAfterFinished": RAY_CLUSTER_TTL_SECONDS,
            "suspend": spec.suspend,
            "rayClusterSpec": cluster,
        },
    }


def pod_templates(job: Mapping[str, Any]) -> list[tuple[str, int, dict[str, Any]]]:
    """(role, pod count, pod template) of every pod a RayJob makes: the head, each worker group (at its
    most), and the submitter in K8sJobMode."""
    cluster = job["spec"]["rayClusterSpec"]
    found = [("head", 1, cluster["headGroupSpec"]["template"])]
    for group in cluster.get("workerGroupSpecs", []):
        found.append((group["groupName"], group.get("maxReplicas", group["replicas"]), group["template"]))
    if (
        job["spec"].get("submissionMode", "K8sJobMode") == "K8sJobMode"
        and "submitterPodTemplate" in job["spec"]
    ):
        found.append(("submitter", 1, job["spec"]["submitterPodTemplate"]))
    return found


def pod_specs(job: Mapping[str, Any]) -> list[tuple[str, int, dict[str, Any]]]:
    """(role, pod count, pod spec) of every pod a RayJob makes (pod_templates)."""
    return [(role, count, template["spec"]) for role, count, template in pod_templates(job)]


def network_policies(spec: TrainingJobSpec) -> list[dict[str, Any]]:
    """The KubeRay operator reads the job's status from the head's dashboard (rayjob_controller.go,
    GetJobInfo through the head Service): the only way into a job pod from outside its job."""
    head = {"matchLabels": {JOB_LABEL: spec.name, NODE_TYPE_LABEL: "head"}}
    operator = {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": KUBERAY_NAMESPACE}},
        "podSelector": {"matchLabels": dict(OPERATOR_POD)},
    }
    port = [{"protocol": "TCP", "port": HEAD_PORTS["dashboard"]}]
    return [
        network_policy(
            f"{spec.name}-ray-dashboard",
            spec.namespace_name,
            head,
            ["Ingress"],
            pod.labels(spec),
            ingress=[{"from": [operator], "ports": port}],
        )
    ]
