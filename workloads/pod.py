"""The pieces of a training pod both operators share: command, environment, volumes, scheduling, security.

Pure functions of (spec, placement, bucket). `jobs.py` assembles them into a PyTorchJob pod template,
or splits them between a TrainJob's `trainer` and `runtimePatches` (Trainer 2.3's way to patch a pod).
"""

from __future__ import annotations

import hashlib
import json
import posixpath
from collections.abc import Sequence
from typing import Any

from infra.addons.monitoring.training_metrics import METRICS_PORT, METRICS_PORT_NAME
from infra.contract import (
    ACCELERATOR_LABEL,
    EFA_RESOURCE,
    JOB_LABEL,
    RUN_AS_UID,
    TRAINING_POD_GRACE_SECONDS,
    job_prefix,
    toleration_spec,
)
from workloads.placement import Placement
from workloads.spec import Storage, TrainingJobSpec

TRAINER_CONFIG_DIR = "/etc/trainer"
TRAINER_CONFIG_PATH = f"{TRAINER_CONFIG_DIR}/config.yaml"
PROGRAM_DIR = "/opt/program"
# The Spot interruption notice comes 2 minutes before the instance is reclaimed; the kubelet must not
# SIGKILL the trainer before its SIGTERM checkpoint is written.
TERMINATION_GRACE_SECONDS = TRAINING_POD_GRACE_SECONDS
# torchrun forwards SIGTERM to its workers, then SIGKILLs them after --shutdown-timeout (default 30 s,
# too short for a checkpoint upload); it must still end before the kubelet's own SIGKILL.
LAUNCHER_SHUTDOWN_SECONDS = TERMINATION_GRACE_SECONDS - 20
# /dev/kfd and /dev/dri belong to these groups on the ROCm hosts (video, render on Ubuntu-based AMIs):
# a non-root process needs them to open the GPU. Check `getent group video render` on a custom AMI.
AMD_DEVICE_GROUPS = (44, 109)
# GPUs without NVLink sit behind the hypervisor's PCIe on g4dn/g5/g6; NCCL's P2P transport there hangs or
# is slower than its shared-memory transport, so it is switched off (override through `env`).
PCIE_ONLY = {"t4", "a10g", "l4"}
ROLES = ("data", "checkpoint", "output")
HUB_TOKEN_KEY = "token"  # the key of the job's Hub token Secret
MLFLOW_CREDENTIAL_KEY = "credential"  # and of its MLflow Secret: the token or the password
CONFIG_DIGEST_ANNOTATION = "mlops-eks.io/config-sha256"
# On a pod, Karpenter's do-not-disrupt keeps its node from consolidation and drift (the GPU NodePools set no
# terminationGracePeriod, which would override it), and Karpenter never evicts it when the node goes anyway
# (expiry, a Spot interruption: the drain waits for it; core pkg/utils/pod/scheduling.go IsEvictable); node
# repair deletes it at once. A training pod evicted mid-run loses its steps since the last checkpoint and
# restarts its whole gang.
DO_NOT_DISRUPT = {"karpenter.sh/do-not-disrupt": "true"}


def labels(spec: TrainingJobSpec) -> dict[str, str]:
    return {JOB_LABEL: spec.name, ACCELERATOR_LABEL: spec.accelerator}


def config_digest(config_maps: list[dict[str, Any]]) -> str | None:
    """A digest of what the pods read from ConfigMaps (trainer config, program), or None without any."""
    if not config_maps:
        return None
    data = [(m["metadata"]["name"], m["data"]) for m in config_maps]
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()


def template_metadata(spec: TrainingJobSpec, digest: str | None) -> dict[str, Any]:
    """A pod template's metadata: not to be disrupted by Karpenter while it runs, and the digest of its
    ConfigMaps. The trainer reads its config (and a ConfigMap program is loaded) once, at start: with the
    digest in the template a changed config is a changed job, which is replaced (jobs.REPLACE_ON_CHANGES),
    so the new config takes effect at once and never in one pod of a gang only."""
    annotations = DO_NOT_DISRUPT | ({CONFIG_DIGEST_ANNOTATION: digest} if digest else {})
    return {"labels": labels(spec), "annotations": annotations}


def metadata(spec: TrainingJobSpec, name: str, *, namespaced: bool = True) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": labels(spec)}
    if namespaced:
        meta["namespace"] = spec.namespace_name
    return meta


def s3_prefix(spec: TrainingJobSpec) -> str:
    """The job's own prefix in the platform bucket; its IAM role reaches nothing else."""
    return job_prefix(spec.name)


def location(spec: TrainingJobSpec, role: str, bucket: str) -> str | None:
    """Where the trainer finds `role` (data, checkpoint, output): an s3:// URL or a path in the pod."""
    storage: Storage | None = getattr(spec, role)
    if storage is None:
        return None
    if storage.s3 is not None:
        return f"s3://{bucket}/{s3_prefix(spec)}/{storage.s3.strip('/')}"
    return posixpath.join(f"/mnt/{role}", storage.path).rstrip("/")


def claim_name(spec: TrainingJobSpec, role: str) -> str:
    storage: Storage = getattr(spec, role)
    assert storage.pvc is not None
    return storage.pvc.claim or f"{spec.name}-{role}"


def command(spec: TrainingJobSpec) -> list[str]:
    """The launcher and the program. The trainer runs under `python -m trainer.launch`: torchrun with
    the same flags, but exiting with the failing worker's code (2 permanent, 143 retryable after a Spot
    checkpoint) where plain torchrun exits 1 for everything. Other programs run under torchrun itself.

    On one node torchrun's own rendezvous suffices (`--standalone`); on several, both operators inject
    PET_NNODES, PET_NODE_RANK, PET_MASTER_ADDR and PET_MASTER_PORT, which torchrun reads as the defaults
    of its flags (so an elastic job's `min:max` nnodes works too)."""
    program = spec.program
    launcher = ["python", "-m", "trainer.launch"] if program.runs_trainer else ["torchrun"]
    if spec.max_nodes == 1:
        launcher.append("--standalone")
    launcher.append(f"--nproc_per_node={spec.processes_per_node}")
    launcher.append(f"--shutdown-timeout={LAUNCHER_SHUTDOWN_SECONDS}")
    if program.delivery == "image":
        target = ["-m", program.module]
    elif program.delivery == "configmap":
        target = [posixpath.join(PROGRAM_DIR, posixpath.basename(program.file or ""))]
    else:
        target = [posixpath.join(PROGRAM_DIR, program.file or "")]
    config = ["--config", TRAINER_CONFIG_PATH] if program.runs_trainer else []
    return [*launcher, *target, *config, *program.args]


def ports(spec: TrainingJobSpec) -> list[dict[str, Any]]:
    """The trainer's Prometheus endpoint, named for the platform's PodMonitor
    (infra/addons/monitoring/training_metrics.py)."""
    if not spec.program.runs_trainer:
        return []
    port = int(spec.trainer_config.get("output", {}).get("metrics_port", METRICS_PORT))
    return [{"name": METRICS_PORT_NAME, "containerPort": port, "protocol": "TCP"}] if port else []


# Read by the trainer's fabric check (trainer/fabric.py EXPECTED_DEVICES_ENV: the Pulumi program renders
# pods and imports of the trainer only its config schema; a test keeps the two spellings equal).
EFA_DEVICES_ENV = "MLOPS_EKS_EFA_DEVICES"
NCCL_DEBUG_FILE = "/tmp/nccl-%h-%p.log"  # NCCL expands %h (host) and %p (pid)


def nccl_env(placement: Placement) -> dict[str, str]:
    env = {
        # Pods have eth0 only; excluding loopback keeps NCCL/RCCL off `lo` when it guesses.
        "NCCL_SOCKET_IFNAME": "^lo",
        "NCCL_DEBUG": "WARN",
    }
    if placement.accelerator.key in PCIE_ONLY:
        env["NCCL_P2P_DISABLE"] = "1"
    if placement.efa_interfaces:
        # aws-ofi-nccl (in the CUDA image) carries NCCL over EFA with GPUDirect RDMA on p4d/p5.
        env |= {"FI_PROVIDER": "efa", "FI_EFA_USE_DEVICE_RDMA": "1", "NCCL_NET_GDR_LEVEL": "SYS"}
        # The trainer's fabric check (trainer/fabric.py) reads NCCL's own report of the network it chose and
        # the EFA devices it found, and exits 2 on a socket fallback. NCCL's WARN lines go to the same file
        # (one per process, in the /tmp emptyDir); the check quotes its path.
        env |= {
            "NCCL_DEBUG": "INFO",
            "NCCL_DEBUG_SUBSYS": "INIT,NET",
            "NCCL_DEBUG_FILE": NCCL_DEBUG_FILE,
            EFA_DEVICES_ENV: str(placement.efa_interfaces),
        }
    return env


def env(spec: TrainingJobSpec, placement: Placement, region: str) -> list[dict[str, Any]]:
    values = {
        "PYTHONUNBUFFERED": "1",
        # The root filesystem is read-only: caches (torch, triton, HF) go to the /tmp emptyDir.
        "HOME": "/tmp",
        "XDG_CACHE_HOME": "/tmp/.cache",
        "AWS_REGION": region,
        **nccl_env(placement),
        **spec.env,  # the spec's own settings win: the documented way to override the derived NCCL ones
    }
    variables: list[dict[str, Any]] = [{"name": k, "value": v} for k, v in values.items()]
    if spec.hub_token:  # from the Secret workloads.program makes of the stack's secret config
        ref = {"name": hub_token_secret(spec), "key": HUB_TOKEN_KEY}
        variables.append({"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": ref}})
    return variables + mlflow_env(spec)


def mlflow_env(spec: TrainingJobSpec) -> list[dict[str, Any]]:
    """The MLflow client's credential (it reads these variables), from the job's MLflow Secret."""
    if spec.mlflow is None or spec.mlflow.auth == "none":
        return []
    credential = {"secretKeyRef": {"name": mlflow_secret(spec), "key": MLFLOW_CREDENTIAL_KEY}}
    if spec.mlflow.auth == "token":
        return [{"name": "MLFLOW_TRACKING_TOKEN", "valueFrom": credential}]
    return [
        {"name": "MLFLOW_TRACKING_USERNAME", "value": spec.mlflow.username},
        {"name": "MLFLOW_TRACKING_PASSWORD", "valueFrom": credential},
    ]


def hub_token_secret(spec: TrainingJobSpec) -> str:
    return f"{spec.name}-hf-token"


def mlflow_secret(spec: TrainingJobSpec) -> str:
    return f"{spec.name}-mlflow"


def resources(spec: TrainingJobSpec, placement: Placement) -> dict[str, Any]:
    gpus = {placement.pool.resource_name: str(spec.gpus_per_node)}
    if placement.efa_interfaces:
        # Without this request the pod gets no EFA device and NCCL silently falls back to TCP sockets.
        gpus[EFA_RESOURCE] = str(placement.efa_interfaces)
    memory = f"{placement.memory_gib}Gi"
    # No CPU limit: CFS throttling stalls data loaders and NCCL progress threads for no benefit.
    return {
        "requests": {"cpu": str(placement.cpu), "memory": memory, **gpus},
        "limits": {"memory": memory, **gpus},
    }


def volumes(spec: TrainingJobSpec, placement: Placement) -> list[dict[str, Any]]:
    vols: list[dict[str, Any]] = [
        # NCCL and DataLoader workers share tensors through /dev/shm; the container default is 64 MiB.
        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": f"{placement.shm_gib}Gi"}},
        {"name": "tmp", "emptyDir": {}},
    ]
    if spec.program.runs_trainer:
        vols.append({"name": "trainer-config", "configMap": {"name": f"{spec.name}-trainer-config"}})
    if spec.program.delivery == "configmap":
        vols.append({"name": "program", "configMap": {"name": f"{spec.name}-program"}})
    if spec.program.delivery == "volume":
        claim = {"claimName": spec.program.claim, "readOnly": True}
        vols.append({"name": "program", "persistentVolumeClaim": claim})
    for role in ROLES:
        storage = getattr(spec, role)
        if storage is not None and storage.pvc is not None:
            source = {"claimName": claim_name(spec, role), "readOnly": role == "data"}
            vols.append({"name": role, "persistentVolumeClaim": source})
    return vols


def volume_mounts(spec: TrainingJobSpec) -> list[dict[str, Any]]:
    mounts: list[dict[str, Any]] = [
        {"name": "dshm", "mountPath": "/dev/shm"},
        {"name": "tmp", "mountPath": "/tmp"},
    ]
    if spec.program.runs_trainer:
        mounts.append({"name": "trainer-config", "mountPath": TRAINER_CONFIG_DIR, "readOnly": True})
    if spec.program.delivery in ("configmap", "volume"):
        mounts.append({"name": "program", "mountPath": PROGRAM_DIR, "readOnly": True})
    for role in ROLES:
        storage = getattr(spec, role)
        if storage is not None and storage.pvc is not None:
            mounts.append({"name": role, "mountPath": f"/mnt/{role}", "readOnly": role == "data"})
    return mounts


def training_container(
    spec: TrainingJobSpec,
    placement: Placement,
    region: str,
    *,
    name: str,
    command: list[str] | None = None,
    extra_ports: Sequence[dict[str, Any]] = (),
) -> dict[str, Any]:
    """The container that trains, as every job kind runs it: image, environment, the node's GPUs,
    restricted security, the job's volumes and the metrics port. `command` None: the image's or the
    operator's (KubeRay writes `ray start`)."""
    container: dict[str, Any] = {"name": name, "image": placement.image}
    if command is not None:
        container["command"] = command
    container |= {
        "env": env(spec, placement, region),
        "resources": resources(spec, placement),
        "securityContext": container_security(),
        "volumeMounts": volume_mounts(spec),
    }
    if all_ports := [*extra_ports, *ports(spec)]:
        container["ports"] = all_ports
    return container


def container_security() -> dict[str, Any]:
    return {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "runAsNonRoot": True,
        "capabilities": {"drop": ["ALL"]},
    }


def pod_security(placement: Placement) -> dict[str, Any]:
    ctx: dict[str, Any] = {
        "runAsNonRoot": True,
        "runAsUser": RUN_AS_UID,
        "runAsGroup": RUN_AS_UID,
        "fsGroup": RUN_AS_UID,  # new PVCs are writable by the job's user
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    if placement.accelerator.vendor == "amd":
        ctx["supplementalGroups"] = list(AMD_DEVICE_GROUPS)
    return ctx


def node_selector(placement: Placement) -> dict[str, str]:
    return dict(placement.pool.node_labels)


def tolerations(placement: Placement) -> list[dict[str, str]]:
    return [toleration_spec(t) for t in placement.pool.taints]


def affinity(placement: Placement) -> dict[str, Any]:
    """Only instance types with enough GPUs: Karpenter then never launches a node the pod cannot use."""
    term = {
        "key": "node.kubernetes.io/instance-type",
        "operator": "In",
        "values": [t.name for t in placement.instance_types],
    }
    required = {"nodeSelectorTerms": [{"matchExpressions": [term]}]}
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": required}}
