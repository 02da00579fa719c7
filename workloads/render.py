"""A job spec + the platform's facts -> the Kubernetes objects of a workload stack. Pure functions.

`render` returns plain dicts, in creation order: Namespace, ResourceQuota, ServiceAccount,
NetworkPolicies, ConfigMaps, PVCs, (LocalQueue), then the job — a TrainJob with its TrainingRuntime,
or a PyTorchJob. The same dicts are what `python -m workloads render` prints and what
workloads.program creates.
"""

from __future__ import annotations

from typing import Any

import yaml

from infra.addons.network_policies import egress_to, job_policies
from infra.contract import EFA_RESOURCE, JOB_LABEL, KUEUE_NAMESPACE_LABEL
from workloads import jobs, mpijob, pod, rayjob
from workloads.placement import Placement, place
from workloads.platform import PlatformFacts
from workloads.s3_keys import resolve
from workloads.spec import CONFIG_KEY, SpecError, TrainingJobSpec, trainer_config_error

# Quota room for two gangs: a restarted gang's pods start while the previous ones still terminate
# (up to their grace period); a namespace quota of exactly one gang would stall every restart.
QUOTA_GANGS = 2
MODEL_CACHE = "model-cache"  # under the job's S3 prefix: where an hf: model is staged once


def _quantity(value: float) -> str:
    return f"{value:g}"


def trainer_config(spec: TrainingJobSpec, bucket: str) -> dict[str, Any]:
    """The spec's trainer config plus where data, checkpoints and outputs live."""
    # `{s3: <path>}` values (workloads/s3_keys.py) become URLs in the bucket the platform exported.
    config = resolve(spec.trainer_config, bucket, pod.s3_prefix(spec))
    # Every rendered job requests GPUs: one that starts without them must exit (201, retryable), not train
    # on CPU as `auto` would. `run-local` overrides it with --train.device cpu. An MPIJob from the cpu image
    # (the one with Open MPI) has no CUDA torch: it trains on the CPU.
    cpu_image = spec.operator == "mpijob" and not spec.image
    config.setdefault("train", {}).setdefault("device", "cpu" if cpu_image else "cuda")
    for role, key in (("data", "source"), ("checkpoint", "dir"), ("output", "dir")):
        where = pod.location(spec, role, bucket)
        if where is not None:
            config.setdefault(role, {})[key] = where
    llm = config.get("llm")
    hub_model = isinstance(llm, dict) and str(llm.get("model", "")).startswith("hf:")
    if isinstance(llm, dict) and hub_model and "model_cache" not in llm and spec.uses_s3:
        # Staged once into the job's own prefix (trainer/llm/source.py says why S3, not a volume).
        llm["model_cache"] = f"s3://{bucket}/{pod.s3_prefix(spec)}/{MODEL_CACHE}"
    if (tracking := spec.mlflow) is not None:  # run_name, timeouts: from trainerConfig.mlflow if set
        server = {"tracking_uri": tracking.tracking_uri, "experiment": tracking.experiment or spec.name}
        config["mlflow"] = {**config.get("mlflow", {}), **server}
    return config


def namespace(spec: TrainingJobSpec, platform: PlatformFacts) -> list[dict[str, Any]]:
    if not spec.create_namespace:
        return []
    meta = pod.metadata(spec, spec.namespace_name, namespaced=False)
    # The jobs' pods meet the `restricted` Pod Security Standard; enforcing it keeps it that way. Not an
    # MPIJob's launcher: the operator adds an init container `restricted` refuses (workloads/mpijob.py).
    if spec.operator == "mpijob":
        meta["labels"] |= mpijob.NAMESPACE_POD_SECURITY
    else:
        meta["labels"] |= {"pod-security.kubernetes.io/enforce": "restricted"}
    if spec.queue and platform.gang_scheduler == "kueue":
        meta["labels"][KUEUE_NAMESPACE_LABEL] = "true"  # Kueue manages only such namespaces' jobs
    return [{"apiVersion": "v1", "kind": "Namespace", "metadata": meta}]


def resource_quota(spec: TrainingJobSpec, placement: Placement) -> dict[str, Any]:
    pods = spec.max_nodes * QUOTA_GANGS
    cpu, memory_gib = placement.cpu * pods, placement.memory_gib * pods
    launchers = QUOTA_GANGS if spec.operator == "mpijob" else 0  # an MPIJob's gang has its launcher too
    cpu += mpijob.LAUNCHER_CPU * launchers
    memory_gib += mpijob.LAUNCHER_MEMORY_GIB * launchers
    submitters = QUOTA_GANGS if spec.operator == "rayjob" else 0  # a RayJob's gang has its submitter too
    cpu += rayjob.SUBMITTER_CPU * submitters
    memory_gib += rayjob.SUBMITTER_MEMORY_GIB * submitters
    hard = {
        "pods": str(pods + launchers + submitters),
        "requests.cpu": _quantity(cpu),
        "requests.memory": f"{memory_gib}Gi",
        "limits.memory": f"{memory_gib}Gi",
        f"requests.{placement.pool.resource_name}": str(spec.gpus_per_node * pods),
    }
    if placement.efa_interfaces:
        hard[f"requests.{EFA_RESOURCE}"] = str(placement.efa_interfaces * pods)
    return {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": pod.metadata(spec, spec.name),
        "spec": {"hard": hard},
    }


def service_account(spec: TrainingJobSpec) -> dict[str, Any]:
    # No Kubernetes API token in the pods: the trainer never calls the API server, and S3 credentials
    # come from the EKS Pod Identity agent through its own projected token, not this one.
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": pod.metadata(spec, spec.name),
        "automountServiceAccountToken": False,
    }


def config_maps(spec: TrainingJobSpec, bucket: str, program_text: str | None) -> list[dict[str, Any]]:
    maps = []
    if spec.program.runs_trainer:
        config = trainer_config(spec, bucket)
        # Again with the data, checkpoint and output locations filled in (e.g. the data file's format):
        # the file the trainer reads at start, checked before a node scales up for it.
        error = trainer_config_error(config)
        if error:
            raise SpecError(f"{CONFIG_KEY}.trainerConfig (as rendered for the pod): {error}")
        text = yaml.safe_dump(config, sort_keys=True)
        data = {"config.yaml": text}
        maps.append(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": pod.metadata(spec, f"{spec.name}-trainer-config"),
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
                "metadata": pod.metadata(spec, f"{spec.name}-program"),
                "data": {key: program_text},
            }
        )
    return maps


def hub_token_secret(spec: TrainingJobSpec) -> list[dict[str, Any]]:
    """The Secret HF_TOKEN comes from. Its value is the stack's secret config `hfToken`, which only the
    Pulumi engine decrypts: workloads.program sets it; what `render` prints holds a placeholder."""
    if not spec.hub_token:
        return []
    return [
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": pod.metadata(spec, pod.hub_token_secret(spec)),
            "type": "Opaque",
            "stringData": {pod.HUB_TOKEN_KEY: HUB_TOKEN_PLACEHOLDER},
        }
    ]


HUB_TOKEN_PLACEHOLDER = "<the stack's secret config hfToken>"


def mlflow_secret(spec: TrainingJobSpec) -> list[dict[str, Any]]:
    """The Secret MLFLOW_TRACKING_TOKEN (or _PASSWORD) comes from, like the Hub token's: the stack's secret
    config `mlflowCredential`, which workloads.program sets; `render` prints a placeholder."""
    if spec.mlflow is None or spec.mlflow.auth == "none":
        return []
    return [
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": pod.metadata(spec, pod.mlflow_secret(spec)),
            "type": "Opaque",
            "stringData": {pod.MLFLOW_CREDENTIAL_KEY: MLFLOW_CREDENTIAL_PLACEHOLDER},
        }
    ]


MLFLOW_CREDENTIAL_PLACEHOLDER = "<the stack's secret config mlflowCredential>"


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
                "metadata": pod.metadata(spec, pod.claim_name(spec, role)),
                "spec": claim_spec,
            }
        )
    return claims


def network_policies(spec: TrainingJobSpec) -> list[dict[str, Any]]:
    """Default-deny in the job's own namespace; the job's pods reach only what a run needs
    (infra/addons/network_policies.py). In a shared namespace its owner sets the namespace's default."""
    ports = pod.ports(spec)
    metrics = ports[0]["containerPort"] if ports else None
    selector = {JOB_LABEL: spec.name}
    policies = job_policies(
        spec.name,
        spec.namespace_name,
        selector,
        metrics,
        default_deny=spec.create_namespace,
        labels=pod.labels(spec),
        egress=mlflow_egress(spec),
    )
    return policies + (rayjob.network_policies(spec) if spec.operator == "rayjob" else [])


def mlflow_egress(spec: TrainingJobSpec) -> list[dict[str, Any]]:
    """The job's rule to its MLflow server (`mlflow.egress`); none without MLflow, and none for a server
    on port 443 at a public address, which every job reaches already."""
    if spec.mlflow is None or spec.mlflow.egress is None:
        return []
    peer, port = spec.mlflow.egress, spec.mlflow.egress_port
    return [egress_to(port, cidr=peer.cidr, namespace=peer.namespace, pods=peer.pod_labels)]


def local_queue(spec: TrainingJobSpec, platform: PlatformFacts) -> list[dict[str, Any]]:
    if spec.queue is None or platform.gang_scheduler != "kueue" or not spec.create_namespace:
        return []  # no queue, or the shared namespace's owner creates its LocalQueue
    return [
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "LocalQueue",
            "metadata": pod.metadata(spec, spec.queue),
            "spec": {"clusterQueue": spec.queue},
        }
    ]


def render(
    spec: TrainingJobSpec, platform: PlatformFacts, *, program_text: str | None = None
) -> list[dict[str, Any]]:
    """Every object of the workload stack, in creation order. Raises SpecError for a spec that does
    not fit the platform. `program_text` is the script a `configmap`-delivered program ships."""
    placement = place(spec, platform)
    maps = config_maps(spec, platform.bucket_name, program_text)
    digest = pod.config_digest(maps)
    objects = [
        *namespace(spec, platform),
        resource_quota(spec, placement),
        service_account(spec),
        *network_policies(spec),
        *maps,
        *hub_token_secret(spec),
        *mlflow_secret(spec),
        *volume_claims(spec),
        *local_queue(spec, platform),
    ]
    if spec.operator == "trainjob":
        runtime = jobs.training_runtime(spec, placement)
        objects += [runtime, jobs.train_job(spec, placement, platform, runtime["metadata"]["name"], digest)]
    elif spec.operator == "mpijob":
        objects += [mpijob.launcher_api_policy(spec), mpijob.mpi_job(spec, placement, platform, digest)]
    elif spec.operator == "rayjob":
        objects.append(rayjob.ray_job(spec, placement, platform, digest))
    else:
        objects.append(jobs.pytorch_job(spec, placement, platform, digest))
    return objects
