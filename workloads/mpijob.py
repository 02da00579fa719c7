"""The MPIJob (Training Operator v1.9, kubeflow.org/v1): the trainer under Open MPI's `mpirun`.

The operator (pkg/controller.v1/mpi/mpijob_controller.go at v1.9.2) adds a `<job>-config` ConfigMap with
the hostfile and kubexec.sh (`kubectl exec` as the remote shell), a kubectl-delivery init container and a
Role to exec into the workers on the launcher: no sshd, no root, no port 22, so the workers stay
`restricted`. The launcher cannot (its init container has no securityContext): its namespace enforces
`baseline` (NAMESPACE_POD_SECURITY), and it alone keeps its API token and reaches the API server
(launcher_api_policy). Launcher and workers run one image (Open MPI does not mix versions): the launcher
`python -m trainer.mpi_launch`, the workers `python -m trainer.mpi_worker`.

Both replicas use `OnFailure`: the operator never recreates a finished launcher and `ExitCode` on an MPIJob
only sets a Restarting condition, so the kubelet restarts containers in place up to
runPolicy.backoffLimit. A Failed pod (as node repair leaves it) fails the job: docs/workloads.md "MPI jobs".
"""

from __future__ import annotations

import posixpath
from typing import Any

from infra.addons.network_policies import PRIVATE_RANGES, network_policy
from infra.contract import JOB_LABEL
from workloads import jobs, pod
from workloads.placement import Placement
from workloads.platform import PlatformFacts
from workloads.spec import TrainingJobSpec

MPI_API = "kubeflow.org/v1"
CONTAINER = "mpi"  # the operator's default container name; kubexec.sh targets it (mainContainer)
# The operator labels the pods it creates with their replica type (kubeflow.org/v1 ReplicaTypeLabel).
REPLICA_TYPE_LABEL = "training.kubeflow.org/replica-type"
API_SERVER_PORT = 443
LAUNCHER_CPU = 1
LAUNCHER_MEMORY_GIB = 2
# What `pod-security.kubernetes.io/*` an MPIJob's own namespace gets (see the module docstring).
NAMESPACE_POD_SECURITY = {
    "pod-security.kubernetes.io/enforce": "baseline",
    "pod-security.kubernetes.io/warn": "restricted",
    "pod-security.kubernetes.io/audit": "restricted",
}


def program_command(spec: TrainingJobSpec) -> list[str]:
    """What every rank runs: the same program and arguments as under torchrun, started by Python."""
    program = spec.program
    if program.delivery == "image":
        target = ["-m", program.module]
    elif program.delivery == "configmap":
        target = [posixpath.join(pod.PROGRAM_DIR, posixpath.basename(program.file or ""))]
    else:
        target = [posixpath.join(pod.PROGRAM_DIR, program.file or "")]
    config = ["--config", pod.TRAINER_CONFIG_PATH] if program.runs_trainer else []
    return ["python", *target, *config, *program.args]


def launcher_command(spec: TrainingJobSpec) -> list[str]:
    return ["python", "-m", "trainer.mpi_launch", "--container", CONTAINER, "--", *program_command(spec)]


WORKER_COMMAND = ["python", "-m", "trainer.mpi_worker"]


def _scheduling(spec: TrainingJobSpec, placement: Placement) -> dict[str, Any]:
    return {
        "nodeSelector": pod.node_selector(placement),
        "affinity": pod.affinity(placement),
        "tolerations": pod.tolerations(placement),
        "securityContext": pod.pod_security(placement),
        "terminationGracePeriodSeconds": pod.TERMINATION_GRACE_SECONDS,
        **({"priorityClassName": spec.priority} if spec.priority else {}),
    }


def worker_template(
    spec: TrainingJobSpec, placement: Placement, platform: PlatformFacts, digest: str | None
) -> dict[str, Any]:
    """A worker: the job's GPUs, volumes, identity and environment, as a PyTorchJob's pod has them."""
    container = pod.training_container(
        spec, placement, platform.region, name=CONTAINER, command=WORKER_COMMAND
    )
    pod_spec = {
        "automountServiceAccountToken": False,
        "serviceAccountName": spec.name,  # Pod Identity: the ranks read and write the job's S3 prefix
        **_scheduling(spec, placement),
        "volumes": pod.volumes(spec, placement),
        "containers": [container],
    }
    return {"metadata": pod.template_metadata(spec, digest), "spec": pod_spec}


def launcher_template(spec: TrainingJobSpec, placement: Placement, digest: str | None) -> dict[str, Any]:
    """The launcher: no GPU and no S3 access, on a node of the job's pool (the image is there already)."""
    container = {
        "name": CONTAINER,
        "image": placement.image,
        "command": launcher_command(spec),
        "env": [{"name": "PYTHONUNBUFFERED", "value": "1"}, {"name": "HOME", "value": "/tmp"}],
        "resources": {
            "requests": {"cpu": str(LAUNCHER_CPU), "memory": f"{LAUNCHER_MEMORY_GIB}Gi"},
            "limits": {"memory": f"{LAUNCHER_MEMORY_GIB}Gi"},
        },
        "securityContext": pod.container_security(),
        # /tmp: the launcher's state across in-place restarts (trainer/mpi_launch.py).
        "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],
    }
    pod_spec = {
        # No serviceAccountName: the operator makes `<job>-launcher`, bound to its exec Role; kubectl in
        # the launcher needs that account's token.
        "automountServiceAccountToken": True,
        **_scheduling(spec, placement),
        "volumes": [{"name": "tmp", "emptyDir": {}}],
        "containers": [container],
    }
    return {"metadata": pod.template_metadata(spec, digest), "spec": pod_spec}


def launcher_api_policy(spec: TrainingJobSpec) -> dict[str, Any]:
    """The launcher's way to the API server, which job pods otherwise never reach (infra/addons/
    network_policies.py): kubectl reads the workers' state and execs into them. In-cluster kubectl dials
    the `kubernetes` Service's ClusterIP, which the VPC CNI's policy agent sees before it is translated to
    the control plane's ENIs in the VPC: both are private addresses, so 443 to private ranges. The API
    server's RBAC (the operator's Role: get/list/watch pods, exec into this job's workers) bounds the rest."""
    launcher = {"matchLabels": {JOB_LABEL: spec.name, REPLICA_TYPE_LABEL: "launcher"}}
    egress = [
        {
            "to": [{"ipBlock": {"cidr": cidr}} for cidr in PRIVATE_RANGES],
            "ports": [{"port": API_SERVER_PORT, "protocol": "TCP"}],
        }
    ]
    name = f"{spec.name}-launcher-api"
    return network_policy(name, spec.namespace_name, launcher, ["Egress"], pod.labels(spec), egress=egress)


def mpi_job(
    spec: TrainingJobSpec,
    placement: Placement,
    platform: PlatformFacts,
    config_digest: str | None = None,
) -> dict[str, Any]:
    def replica(count: int, template: dict[str, Any]) -> dict[str, Any]:
        return {"replicas": count, "restartPolicy": "OnFailure", "template": template}

    return {
        "apiVersion": MPI_API,
        "kind": "MPIJob",
        "metadata": pod.metadata(spec, spec.name),
        "spec": {
            "slotsPerWorker": spec.processes_per_node,
            "mainContainer": CONTAINER,
            "runPolicy": jobs.run_policy(spec, platform, spec.nodes + 1),  # the launcher is in the gang
            "mpiReplicaSpecs": {
                "Launcher": replica(1, launcher_template(spec, placement, config_digest)),
                "Worker": replica(spec.nodes, worker_template(spec, placement, platform, config_digest)),
            },
        },
    }
