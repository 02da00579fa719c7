"""What the fields of a job spec must agree on, beyond each field's own type: the image and the settings
of the trainer against the accelerator's vendor, the environment against what the operators and torchrun
set, the metrics port against the operator's ports, where the trainer may write inside the pod, and
MLflow against the image and the trainer's config.

Each function returns problems as `<key>: <what is wrong>; got <value>; allowed: <what>` lines, the key
relative to `mlops-eks:job` (TrainingJobSpec adds the prefix). Pure: the catalog and the spec only.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from infra.accelerators import CATALOG, CUDA_IMAGE_CUDA, Accelerator

if TYPE_CHECKING:
    from workloads.spec import TrainingJobSpec

# The image repository built for each GPU vendor (docker/cuda, docker/rocm); docker/cpu has no GPU torch.
VENDOR_REPOSITORY = {"nvidia": "cuda", "amd": "rocm"}
_BUILT_FOR = {"cuda": "NVIDIA (CUDA)", "rocm": "AMD (ROCm)"}
# The CUDA version an image's tag names, as PyTorch's images and wheels spell it (`2.13.0-cuda12.6-...`,
# `cu128`); a tag that names none is taken on the user's word.
_TAG_CUDA = re.compile(r"(?:cuda-?|cu)(\d{2})\.?(\d)(?!\d)")

# Environment the job's processes get from torchrun, the operators or the platform: a value in `env`
# would fight them (the last duplicate wins in Kubernetes, and torchrun overwrites the rest per process).
RESERVED_ENV = {
    **dict.fromkeys(
        (
            "RANK",
            "LOCAL_RANK",
            "WORLD_SIZE",
            "LOCAL_WORLD_SIZE",
            "GROUP_RANK",
            "GROUP_WORLD_SIZE",
            "ROLE_RANK",
            "ROLE_WORLD_SIZE",
            "NODE_RANK",
            "MASTER_ADDR",
            "MASTER_PORT",
        ),
        "torchrun and the operator set it for every process",
    ),
    "JOB_COMPLETION_INDEX": "the Job controller sets it (a TrainJob's node index)",
    **dict.fromkeys(
        (
            "RAY_ADDRESS",
            "RAY_IP",
            "FQ_RAY_IP",
            "RAY_PORT",
            "RAY_CLUSTER_NAME",
            "RAY_CLUSTER_NAMESPACE",
            "RAY_NODE_TYPE_NAME",
            "RAY_JOB_SUBMISSION_ID",
            "RAY_DASHBOARD_ADDRESS",
            "RAY_CLOUD_INSTANCE_ID",
            "KUBERAY_GEN_RAY_START_CMD",
            "RAY_USAGE_STATS_KUBERAY_IN_USE",
            "RAY_DASHBOARD_ENABLE_K8S_DISK_USAGE",
        ),
        "KubeRay sets it to join the pod to its Ray cluster",
    ),
    **dict.fromkeys(
        (
            "OMPI_MCA_plm_rsh_agent",
            "OMPI_MCA_orte_default_hostfile",
            "I_MPI_HYDRA_BOOTSTRAP",
            "I_MPI_HYDRA_BOOTSTRAP_EXEC",
        ),
        "the MPIJob's launcher needs it to start the workers through kubectl exec",
    ),
    **dict.fromkeys(
        ("NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES"),
        "the device plugin and the operator choose which GPUs the container sees",
    ),
    "HOME": "the root filesystem is read-only: the platform points it at /tmp",
    "XDG_CACHE_HOME": "the root filesystem is read-only: the platform points it at /tmp/.cache",
    **dict.fromkeys(
        (
            "AWS_ACCESS_KEY_ID",
            "AWS_SECRET_ACCESS_KEY",
            "AWS_SESSION_TOKEN",
            "AWS_CONTAINER_CREDENTIALS_FULL_URI",
            "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE",
        ),
        "a credential in a stack file is in git; the job's IAM role reaches its pods through Pod Identity",
    ),
    **dict.fromkeys(
        ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"),
        "a credential in a stack file is in git; set `hubToken: true` and `pulumi config set --secret "
        "hfToken`",
    ),
    **dict.fromkeys(
        ("MLFLOW_TRACKING_TOKEN", "MLFLOW_TRACKING_PASSWORD", "MLFLOW_TRACKING_USERNAME"),
        "a credential in a stack file is in git; set `mlflow.auth` and `pulumi config set --secret "
        "mlflowCredential`",
    ),
    "MLFLOW_TRACKING_URI": "the trainer sends to the job's `mlflow.trackingUri`, which also opens its egress",
}
RESERVED_ENV_PREFIXES = {
    "PET_": "Kubeflow's torchrun settings (nodes, rank, rendezvous), set by the operator",
    "TORCHELASTIC_": "torchrun's own",
    "MLOPS_EKS_": "the platform's restart ledger",
}

# Ports the operator's pods already listen on (sim/operators/pods.py models them; a test keeps the two
# equal): the trainer's metrics server may not take one.
OPERATOR_PORTS: dict[str, dict[int, str]] = {
    "trainjob": {29500: "torchrun's rendezvous (Kubeflow Trainer's PET_MASTER_PORT)"},
    "pytorchjob": {23456: "torchrun's rendezvous (the PyTorchJob master port)"},
    "mpijob": {29500: "torch.distributed's MASTER_PORT under mpirun (trainer/mpi_env.py)"},
    "rayjob": {
        6379: "Ray's GCS server",
        8265: "Ray's dashboard (KubeRay reads job status from it)",
        10001: "Ray's client server",
        8080: "Ray's own metrics export",
    },
}

# In the pod the root filesystem is read-only; /tmp is an emptyDir that goes with the pod.
POD_SCRATCH = ("/tmp", "/dev/shm")


def _train(spec: TrainingJobSpec, section: str) -> dict[str, Any]:
    value = spec.trainer_config.get(section)
    return value if isinstance(value, dict) else {}


def vendor_problems(spec: TrainingJobSpec) -> list[str]:
    """The image repository and the trainer's device and precision against the accelerator."""
    acc = CATALOG.get(spec.accelerator)
    if acc is None:  # placement names the accelerators the platform offers
        return []
    native = VENDOR_REPOSITORY[acc.vendor]
    gpus = f"{spec.gpus_per_node} {acc.gpu_model} GPU(s) per node"
    problems = []
    repo = spec.image_repository
    if repo is not None and repo in VENDOR_REPOSITORY.values() and repo != native:
        problems.append(
            f"imageRepository: the {repo} image is built for {_BUILT_FOR[repo]} GPUs and accelerator "
            f"{acc.key} is {acc.gpu_model}: its torch would find no GPU; got {repo!r}; allowed: {native} "
            f"(the default for {acc.key}: leave it unset)"
        )
    if repo == "cpu" and spec.operator != "mpijob":
        problems.append(
            f"imageRepository: the cpu image's torch has no GPU support, so the job's {gpus} would sit "
            f"idle; got 'cpu'; allowed: {native} (the default for {acc.key}: leave it unset)"
        )
    problems += _cuda_build_problems(spec, acc)
    if not spec.program.runs_trainer or spec.operator == "mpijob":
        return problems  # an MPIJob trains on the cpu image's CPUs by design (workloads/mpijob.py)

    train = _train(spec, "train")
    if train.get("device") == "cpu":
        problems.append(
            f"trainerConfig.train.device: 'cpu' leaves the job's {gpus} idle; got 'cpu'; allowed: auto or "
            "cuda (ROCm's torch calls AMD GPUs cuda too); a CPU run is `python -m workloads run-local`"
        )
    if train.get("precision") == "bf16" and acc.native_precision != "bf16":
        problems.append(
            f"trainerConfig.train.precision: {acc.gpu_model} ({acc.compute_target}) has no bf16 units, so "
            f"bf16 is emulated and slow; got 'bf16'; allowed: auto (picks {acc.native_precision} with loss "
            f"scaling there), {acc.native_precision} or fp32"
        )
    return problems


def _cuda_build_problems(spec: TrainingJobSpec, acc: Accelerator) -> list[str]:
    """A GPU newer than the platform's cuda image (B200: sm_100, CUDA >= 12.8) on that image, or on an
    `image` whose tag names an older CUDA: torch would find no kernel for it and fail at the first op."""
    if acc.vendor != "nvidia" or acc.min_cuda is None:
        return []
    need = ".".join(map(str, acc.min_cuda))
    allowed = (
        f"`image`: a full reference to a build with CUDA >= {need} whose torch has {acc.compute_target} "
        f"kernels (torch's cu128 or cu130 wheels; docs/images.md)"
    )
    repo = spec.image_repository or ("cpu" if spec.operator == "mpijob" else "cuda")
    if not spec.image and repo != "cuda":
        return []  # the cpu image's torch has no CUDA at all: the rules above and spec.py say so
    if not spec.image:
        have = ".".join(map(str, CUDA_IMAGE_CUDA))
        return [
            f"imageTag: accelerator {acc.key} ({acc.gpu_model}, {acc.compute_target}) needs a CUDA >= {need} "
            f"build, and the platform's cuda image is CUDA {have} with no {acc.compute_target} kernels "
            f"(docker/cuda/Dockerfile); got imageTag {spec.image_tag!r}; allowed: {allowed}"
        ]
    tag = spec.image.split("@", 1)[0].rsplit("/", 1)[-1].partition(":")[2]
    named = _TAG_CUDA.search(tag)
    if named and (int(named[1]), int(named[2])) < acc.min_cuda:
        return [
            f"image: accelerator {acc.key} ({acc.gpu_model}, {acc.compute_target}) needs a CUDA >= {need} "
            f"build and this image's tag says CUDA {named[1]}.{named[2]}; got {spec.image!r}; "
            f"allowed: {allowed}"
        ]
    return []


def env_problems(spec: TrainingJobSpec) -> list[str]:
    problems = []
    for name in spec.env:
        if not name or "=" in name or not name.isprintable() or not name.isascii():
            problems.append(
                f"env.{name}: not an environment variable name; got {name!r}; allowed: printable ASCII "
                "without '=' (letters, digits and _ by convention)"
            )
            continue
        why = RESERVED_ENV.get(name) or next(
            (w for p, w in RESERVED_ENV_PREFIXES.items() if name.startswith(p)), None
        )
        if why:
            # A credential is not repeated into the deployer's terminal or CI log.
            shown = "<redacted>" if why.startswith("a credential") else repr(spec.env[name])
            problems.append(
                f"env.{name}: {why}; got {name}={shown}; allowed: any other name (NCCL_*, "
                "FI_*, OMP_NUM_THREADS ... override the platform's defaults)"
            )
    return problems


def port_problems(spec: TrainingJobSpec) -> list[str]:
    port = _train(spec, "output").get("metrics_port")
    taken = OPERATOR_PORTS.get(spec.operator, {})
    if not spec.program.runs_trainer or not isinstance(port, int) or port not in taken:
        return []
    free = sorted(set(range(9464, 9470)) - set(taken))
    return [
        f"trainerConfig.output.metrics_port: {port} is {taken[port]} in the {spec.operator} pods; got "
        f"{port}; allowed: a port none of them uses, e.g. {free[0]} (the default), or 0 for no metrics"
    ]


def pod_path_problems(spec: TrainingJobSpec) -> list[str]:
    """Checkpoint and output directories the trainer cannot keep inside the pod: the root filesystem is
    read-only and /tmp goes with the pod, so a local path there is lost (or refused) at the first write."""
    if not spec.program.runs_trainer:
        return []
    problems = []
    for role in ("checkpoint", "output"):
        path = _train(spec, role).get("dir")
        if not isinstance(path, str) or not path or path.startswith("s3://"):
            continue
        where = (
            "in the pod's /tmp or /dev/shm, which go with the pod"
            if path.startswith(POD_SCRATCH)
            else "on the pod's read-only root filesystem"
        )
        problems.append(
            f"trainerConfig.{role}.dir: {path!r} is {where}; got {path!r}; allowed: `{role}: {{s3: <path>}}` "
            f"(under the job's prefix) or `{role}: {{pvc: ...}}` instead of trainerConfig.{role}.dir"
        )
    return problems


def mlflow_problems(spec: TrainingJobSpec) -> list[str]:
    """The MLflow server comes with the job's `mlflow` (its egress, its credential), and only the trainer
    of an image with the MLflow client (the cuda image; trainer/tracking.py) sends to it."""
    problems = []
    for key in ("tracking_uri", "experiment"):
        if key in _train(spec, "mlflow"):
            problems.append(
                f"trainerConfig.mlflow.{key}: the job's `mlflow` sets it, with the NetworkPolicy egress and "
                f"the credential it needs; got {_train(spec, 'mlflow')[key]!r}; allowed: `mlflow: "
                "{trackingUri: ..., experiment: ...}` instead"
            )
    if spec.mlflow is None:
        return problems
    if not spec.program.runs_trainer:
        problems.append(
            f"mlflow: only the image's `trainer` module sends runs to MLflow; got a job running "
            f"{spec.program.file or spec.program.module}; allowed: remove `mlflow`, or run the trainer"
        )
    acc = CATALOG.get(spec.accelerator)
    if spec.image is None and acc is not None:
        default = "cpu" if spec.operator == "mpijob" else VENDOR_REPOSITORY[acc.vendor]
        repo = spec.image_repository or default
        if repo != "cuda":
            problems.append(
                f"mlflow: the {repo} image has no MLflow client (only the cuda image installs the mlflow "
                f"extra); got imageRepository {repo!r}; allowed: an NVIDIA accelerator's cuda image, or "
                "`image` built with mlops-eks[mlflow]"
            )
    return problems


def consistency_problems(spec: TrainingJobSpec) -> list[str]:
    return [
        *vendor_problems(spec),
        *env_problems(spec),
        *port_problems(spec),
        *pod_path_problems(spec),
        *mlflow_problems(spec),
    ]
