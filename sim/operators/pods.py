"""The pods of a rendered workload as their controllers create them, not as our templates say.

Each operator adds to the pods it creates: init containers, environment, ports, volumes, labels,
annotations, a restart policy, a scheduler. The checks (Pod Security, NetworkPolicy, the namespace quota,
the scheduling simulation, `workloads plan`) judge these pods. Pure functions of the objects `render`
returns and the platform's facts; each job kind's function cites the controller code it reproduces, at the
version the platform pins (Training Operator v1.9.2, Kubeflow Trainer 2.3.0 with JobSet 0.12.0, KubeRay
1.7.0, Kueue 0.19.2 for the kinds the platform lets it manage).

Names the controllers make random (a RayCluster's suffix, a Job's controller-uid, a generateName's tail)
are written `xxxxx`. tests/sim/test_operator_pods.py checks the constants against the upstream
source (sim/vendored).
"""

from __future__ import annotations

import copy
import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import yaml

from infra.addons import training_operator_v1
from infra.addons.kuberay import kuberay_values
from infra.contract import (
    EFA_RESOURCE,
    KUEUE_CPU_FLAVOR,
    KUEUE_EFA_FLAVOR,
    QueueQuota,
    kueue_gpu_flavor,
)
from sim.admission import jobset_webhook
from workloads.jobs import KUEUE_QUEUE_LABEL
from workloads.platform import PlatformFacts

RANDOM = "xxxxx"
# Training Operator v1.9.2 (pkg/config/config.go, pkg/apis/kubeflow.org/v1/pytorch_types.go, mpi_types.go).
PYTORCH_INIT_TEMPLATE_FILE = "/etc/config/initContainer.yaml"
PYTORCH_INIT_IMAGE = "alpine:3.10"
PYTORCH_INIT_MAX_TRIES = 100
MPI_KUBECTL_DELIVERY_IMAGE = "ghcr.io/kubeflow/training-v1/kubectl-delivery:latest"
PYTORCH_CONTAINER, PYTORCH_PORT_NAME, PYTORCH_PORT = "pytorch", "pytorchjob-port", 23456
# initcontainer.go initContainerTemplate: used when the template file cannot be read.
PYTORCH_INIT_TEMPLATE_BUILTIN = """
- name: init-pytorch
  image: {{.InitContainerImage}}
  imagePullPolicy: IfNotPresent
  resources:
    limits:
      cpu: 100m
      memory: 20Mi
    requests:
      cpu: 50m
      memory: 10Mi
  command: ['sh', '-c', 'err=1;for i in $(seq {{.MaxTries}}); do if nslookup {{.MasterAddr}}; then err=0 && break; fi;echo waiting for master; sleep 2; done; exit $err']"""  # noqa: E501
V1_LABELS = {
    "operator": "training.kubeflow.org/operator-name",
    "job": "training.kubeflow.org/job-name",
    "type": "training.kubeflow.org/replica-type",
    "index": "training.kubeflow.org/replica-index",
    "role": "training.kubeflow.org/job-role",
}
VOLCANO_GROUP_ANNOTATION, VOLCANO_TASK_ANNOTATION = "scheduling.k8s.io/group-name", "volcano.sh/task-spec"
# Kubeflow Trainer 2.3.0 (pkg/constants/constants.go) and JobSet 0.12.0 (api/jobset/v1alpha2/jobset_types.go).
TRAINER_CONTAINER, TRAINER_PORT = "node", 29500
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
JOBSET_LABELS = {
    "jobset": "jobset.sigs.k8s.io/jobset-name",
    "uid": "jobset.sigs.k8s.io/jobset-uid",
    "rjob": "jobset.sigs.k8s.io/replicatedjob-name",
    "restarts": "jobset.sigs.k8s.io/restart-attempt",
    "rjob_replicas": "jobset.sigs.k8s.io/replicatedjob-replicas",
    "global_replicas": "jobset.sigs.k8s.io/global-replicas",
    "index": "jobset.sigs.k8s.io/job-index",
    "key": "jobset.sigs.k8s.io/job-key",
    "global_index": "jobset.sigs.k8s.io/job-global-index",
    "group": "jobset.sigs.k8s.io/group-name",
    "group_replicas": "jobset.sigs.k8s.io/group-replicas",
    "group_index": "jobset.sigs.k8s.io/job-group-index",
}
# KubeRay 1.7.0 (ray-operator/controllers/ray/utils/constant.go, common/pod.go).
RAY_METRICS_PORT = ("metrics", 8080)
RAY_INIT_CONTAINER = "wait-gcs-ready"
RAY_INIT_RESOURCES = {"cpu": "200m", "memory": "256Mi"}
# Kueue 0.19.2 (pkg/constants, pkg/controller/constants, apis/kueue/v1beta2, jobs/trainjob).
KUEUE_POD_LABELS = {
    "podset": "kueue.x-k8s.io/podset",
    "local_queue": "kueue.x-k8s.io/local-queue-name",
    "cluster_queue": "kueue.x-k8s.io/cluster-queue-name",
}
KUEUE_WORKLOAD_ANNOTATION = "kueue.x-k8s.io/workload"
KUEUE_RUNTIME_PATCH_MANAGER = "kueue.x-k8s.io/manager"
# The job kinds whose Kueue integration the platform enables (infra/addons/training.py KUEUE_FRAMEWORKS).
KUEUE_KINDS = {"TrainJob"}


@dataclass(frozen=True)
class OperatorSettings:
    """How the platform configured its operators, where that changes the pods they create."""

    pytorch_init_template: str  # the template text the operator renders for Worker pods
    pytorch_init_image: str
    pytorch_init_max_tries: int
    mpi_kubectl_delivery_image: str
    gang_scheduler: str | None  # Training Operator v1's --gang-scheduler-name
    ray_init_container_injection: bool


def operator_settings(platform: PlatformFacts) -> OperatorSettings:
    """Read from the overlay and Helm values the platform installs (infra/addons/training_operator_v1.py,
    infra/addons/kuberay.py): the overlay under the stack's layer, which names the images the operator puts
    into pods in the platform's ECR (the bare overlay for a platform whose outputs predate the image path:
    upstream's defaults)."""
    operator = training_operator_v1.apply_overlay(
        training_operator_v1.overlay(platform.gang_scheduler == "volcano"),
        platform.image_path.path() if platform.image_path else None,
    )
    flags = operator.flags
    template = operator.read_file(
        flags.get("pytorch-init-container-template-file", PYTORCH_INIT_TEMPLATE_FILE)
    )
    ray_env = {e["name"]: e["value"] for e in kuberay_values(service_monitor=False).get("env") or []}
    return OperatorSettings(
        pytorch_init_template=template if template is not None else PYTORCH_INIT_TEMPLATE_BUILTIN,
        pytorch_init_image=flags.get("pytorch-init-container-image", PYTORCH_INIT_IMAGE),
        pytorch_init_max_tries=int(flags.get("pytorch-init-container-max-tries", PYTORCH_INIT_MAX_TRIES)),
        mpi_kubectl_delivery_image=flags.get("mpi-kubectl-delivery-image", MPI_KUBECTL_DELIVERY_IMAGE),
        gang_scheduler=flags.get("gang-scheduler-name") or None,
        ray_init_container_injection=ray_env.get("ENABLE_INIT_CONTAINER_INJECTION", "true").lower()
        != "false",
    )


@dataclass(frozen=True)
class OperatorPod:
    """One pod a controller creates: `job` is `<Kind>/<name>`, `role` the replica, replicated job, Ray
    group or submitter; `held` why it does not exist yet (a queue that cannot admit the job)."""

    job: str
    role: str
    pod: dict[str, Any]
    held: str | None = None

    @property
    def spec(self) -> dict[str, Any]:
        return self.pod["spec"]

    @property
    def labels(self) -> dict[str, str]:
        return self.pod["metadata"].get("labels") or {}


# Go's html/template htmlEscaper (escape_html.go htmlReplacementTable), for data in a text context.
_GO_HTML_ESCAPES = {
    "\0": "\ufffd",
    '"': "&#34;",
    "&": "&amp;",
    "'": "&#39;",
    "+": "&#43;",
    "<": "&lt;",
    ">": "&gt;",
}


def go_template(text: str, values: Mapping[str, Any]) -> str:
    """The `{{.Name}}` actions of a Go html/template, each value escaped as the template engine does."""

    def value(match: re.Match[str]) -> str:
        return "".join(_GO_HTML_ESCAPES.get(ch, ch) for ch in str(values[match.group(1)]))

    return re.sub(r"\{\{\s*\.(\w+)\s*\}\}", value, text)


def _pod(name: str, namespace: str, template: Mapping[str, Any], *, generate: bool = False) -> dict[str, Any]:
    meta = copy.deepcopy(dict(template.get("metadata") or {}))
    meta.pop("name", None)
    meta |= {"generateName" if generate else "name": name, "namespace": namespace}
    meta.setdefault("labels", {})
    meta.setdefault("annotations", {})
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": copy.deepcopy(dict(template["spec"])),
    }


def _env(container: dict[str, Any], *pairs: tuple[str, Any]) -> None:
    """Append, as the operators do (a name already there is appended again: the last one wins)."""
    container.setdefault("env", [])
    for name, value in pairs:
        container["env"].append({"name": name, **({"value": value} if isinstance(value, str) else value)})


def _upsert_env(container: dict[str, Any], *pairs: tuple[str, Any]) -> None:
    """Kubeflow Trainer's apply.UpsertEnvVars: replace a variable of the same name, else append."""
    env = container.setdefault("env", [])
    for name, value in pairs:
        entry = {"name": name, **({"value": value} if isinstance(value, str) else value)}
        for i, existing in enumerate(env):
            if existing["name"] == name:
                env[i] = entry
                break
        else:
            env.append(entry)


def _field_ref(path: str) -> dict[str, Any]:
    return {"valueFrom": {"fieldRef": {"fieldPath": path}}}


def _restart_policy(replica: Mapping[str, Any], default: str) -> str:
    """pkg/core/pod.go SetRestartPolicy: ExitCode is the operator's own; the pod gets Never."""
    policy = replica.get("restartPolicy") or default
    return "Never" if policy == "ExitCode" else policy


def _volcano(pod: dict[str, Any], job: str, rtype: str, settings: OperatorSettings) -> None:
    if settings.gang_scheduler != "volcano":
        return
    pod["spec"].setdefault("schedulerName", "volcano")
    pod["metadata"]["annotations"] |= {VOLCANO_GROUP_ANNOTATION: job, VOLCANO_TASK_ANNOTATION: rtype}


def _v1_labels(job: str, controller: str, rtype: str) -> dict[str, str]:
    return {
        V1_LABELS["operator"]: controller,
        V1_LABELS["job"]: job.replace("/", "-"),
        V1_LABELS["type"]: rtype,
    }


def pytorch_job_pods(job: Mapping[str, Any], settings: OperatorSettings) -> list[OperatorPod]:
    """Training Operator v1.9.2 (kubeflow/trainer at v1.9.2): PyTorchJob defaults (pkg/apis/kubeflow.org/v1/
    pytorch_defaults.go), pod creation (pkg/controller.v1/common/pod.go createNewPod), environment and the
    Worker's init container (pkg/controller.v1/pytorch/envvar.go, master.go, elastic.go, initcontainer.go);
    under Volcano, control/podgroup_control.go DecoratePodTemplateSpec."""
    name, namespace, spec = job["metadata"]["name"], job["metadata"]["namespace"], copy.deepcopy(job["spec"])
    replicas: dict[str, dict[str, Any]] = spec["pytorchReplicaSpecs"]
    for replica in replicas.values():  # pytorch_defaults.go SetDefaults_PyTorchJob
        replica.setdefault("replicas", 1)
        replica.setdefault("restartPolicy", "OnFailure")
        container = next(
            c for c in replica["template"]["spec"]["containers"] if c["name"] == PYTORCH_CONTAINER
        )
        if not any(p.get("name") == PYTORCH_PORT_NAME for p in container.get("ports") or []):
            container.setdefault("ports", []).append(
                {"name": PYTORCH_PORT_NAME, "containerPort": PYTORCH_PORT}
            )
    elastic = spec.get("elasticPolicy")
    nproc = spec.get("nprocPerNode", "auto" if not (elastic and elastic.get("nProcPerNode")) else None)
    total = sum(r["replicas"] for r in replicas.values())
    nproc_int = int(nproc) if nproc is not None and str(nproc).isdigit() else 1

    def port(rtype: str) -> int:
        container = next(
            c for c in replicas[rtype]["template"]["spec"]["containers"] if c["name"] == PYTORCH_CONTAINER
        )
        return next(p["containerPort"] for p in container["ports"] if p.get("name") == PYTORCH_PORT_NAME)

    pods = []
    for rtype_key, replica in replicas.items():
        rtype = rtype_key.lower()
        count = max(replica["replicas"], (elastic or {}).get("maxReplicas", 0) if rtype == "worker" else 0)
        for index in range(count):
            pod = _pod(f"{name}-{rtype}-{index}", namespace, replica["template"])
            labels = _v1_labels(name, "pytorchjob-controller", rtype) | {V1_LABELS["index"]: str(index)}
            if rtype_key == "Master" or ("Master" not in replicas and index == 0):
                labels[V1_LABELS["role"]] = "master"
            pod["metadata"]["labels"] |= labels
            for container in pod["spec"]["containers"]:  # envvar.go setPodEnv
                _env(container, ("PYTHONUNBUFFERED", "1"))
                if "Master" in replicas:
                    master, master_port = f"{name}-master-0", str(port("Master"))
                    rank = str(index + 1 if rtype == "worker" else index)
                    _env(
                        container,
                        ("MASTER_PORT", master_port),
                        ("PET_MASTER_PORT", master_port),
                        ("MASTER_ADDR", master),
                        ("PET_MASTER_ADDR", master),
                        ("WORLD_SIZE", str(total * nproc_int)),
                        ("RANK", rank),
                        ("PET_NODE_RANK", rank),
                    )
                if nproc is not None:
                    _env(container, ("PET_NPROC_PER_NODE", str(nproc)))
                elastic_vars = elastic_env(name, spec)
                if elastic_vars is None:
                    _env(container, ("PET_NNODES", str(total)))
                else:
                    _env(container, *elastic_vars)
            if "Master" in replicas and rtype == "worker":  # initcontainer.go setInitContainer
                rendered = go_template(
                    settings.pytorch_init_template,
                    {
                        "MasterAddr": f"{name}-master-0",
                        "InitContainerImage": settings.pytorch_init_image,
                        "MaxTries": settings.pytorch_init_max_tries,
                    },
                )
                pod["spec"].setdefault("initContainers", []).extend(yaml.safe_load(rendered) or [])
            pod["spec"]["restartPolicy"] = _restart_policy(replica, "OnFailure")
            _volcano(pod, name, rtype, settings)
            pods.append(OperatorPod(f"PyTorchJob/{name}", rtype_key, pod))
    return pods


def _pytorch_port(spec: Mapping[str, Any], rtype: str) -> int:
    """getPortFromPyTorchJob: the `pytorchjob-port` of the replica's `pytorch` container."""
    containers = spec["pytorchReplicaSpecs"][rtype]["template"]["spec"]["containers"]
    container = next(c for c in containers if c["name"] == PYTORCH_CONTAINER)
    return next(p["containerPort"] for p in container["ports"] if p.get("name") == PYTORCH_PORT_NAME)


def elastic_env(name: str, spec: Mapping[str, Any]) -> list[tuple[str, str]] | None:
    """elastic.go ElasticEnvVarGenerator.Generate: a PyTorchJob's elastic variables, in its order (None
    without an elasticPolicy). The rendezvous endpoint is rdzvHost (default the first Worker) and
    rdzvPort (default the Worker's port); PET_NNODES is min:max, or the Worker replicas when neither
    is set."""
    policy = spec.get("elasticPolicy")
    if policy is None:
        return None
    host = policy.get("rdzvHost", f"{name}-worker-0")
    port = policy["rdzvPort"] if "rdzvPort" in policy else _pytorch_port(spec, "Worker")
    if "minReplicas" not in policy and "maxReplicas" not in policy:
        if "Worker" not in spec["pytorchReplicaSpecs"]:
            raise ValueError("cannot find the worker spec")
        nnodes = str(spec["pytorchReplicaSpecs"]["Worker"]["replicas"])
    else:
        nnodes = f"{policy['minReplicas']}:{policy['maxReplicas']}"
    env = [
        ("PET_RDZV_ENDPOINT", f"{host}:{port}"),
        ("PET_RDZV_BACKEND", policy.get("rdzvBackend", "c10d")),
        ("PET_NNODES", nnodes),
    ]
    for key, var in (("maxRestarts", "PET_MAX_RESTARTS"), ("nProcPerNode", "PET_NPROC_PER_NODE")):
        if key in policy:
            env.append((var, str(policy[key])))
    if "rdzvId" in policy:
        env.append(("PET_RDZV_ID", policy["rdzvId"]))
    if policy.get("rdzvConf") is not None:
        env.append(
            (
                "PET_RDZV_CONF",
                ",".join(f"{c.get('key', '')}={c.get('value', '')}" for c in policy["rdzvConf"]),
            )
        )
    if policy.get("standalone"):
        env.append(("PET_STANDALONE", ""))
    return env


def mpi_job_pods(job: Mapping[str, Any], settings: OperatorSettings) -> list[OperatorPod]:
    """mpijob_controller.go newWorker and newLauncher (kubexec.sh, the hostfile and kubectl through the
    `<job>-config` ConfigMap and the kubectl-delivery init container)."""
    name, namespace = job["metadata"]["name"], job["metadata"]["namespace"]
    replicas = job["spec"]["mpiReplicaSpecs"]
    config: dict[str, Any] = {"name": "mpi-job-config", "configMap": {"name": f"{name}-config"}}
    pods = []
    worker = replicas.get("Worker")
    for index in range(worker.get("replicas", 0) if worker else 0):
        pod = _pod(f"{name}-worker-{index}", namespace, worker["template"])
        pod["metadata"]["labels"] |= _v1_labels(name, "mpijob-controller", "worker")
        pod["spec"]["restartPolicy"] = _restart_policy(worker, "Never")
        container = pod["spec"]["containers"][0]
        if not container.get("command"):
            container |= {"command": ["sleep"], "args": ["365d"]}
        container.setdefault("volumeMounts", []).append({"name": "mpi-job-config", "mountPath": "/etc/mpi"})
        items = [{"key": "kubexec.sh", "path": "kubexec.sh", "mode": 0o555}]
        pod["spec"].setdefault("volumes", []).append(
            config | {"configMap": config["configMap"] | {"items": items}}
        )
        _volcano(pod, name, "worker", settings)
        pods.append(OperatorPod(f"MPIJob/{name}", "Worker", pod))
    launcher = replicas["Launcher"]
    pod = _pod(f"{name}-launcher", namespace, launcher["template"])
    pod["metadata"]["labels"] |= _v1_labels(name, "mpijob-controller", "launcher") | {
        V1_LABELS["role"]: "master"
    }
    _volcano(pod, name, "launcher", settings)
    pod["spec"].setdefault("serviceAccountName", f"{name}-launcher")
    pod["spec"].setdefault("initContainers", []).append(
        {
            "name": "kubectl-delivery",
            "image": settings.mpi_kubectl_delivery_image,
            "imagePullPolicy": "IfNotPresent",
            "env": [{"name": "TARGET_DIR", "value": "/opt/kube"}, {"name": "NAMESPACE", "value": namespace}],
            "volumeMounts": [
                {"name": "mpi-job-kubectl", "mountPath": "/opt/kube"},
                {"name": "mpi-job-config", "mountPath": "/etc/mpi"},
            ],
            "resources": {
                kind: {"cpu": "100m", "memory": "512Mi", "ephemeral-storage": "5Gi"}
                for kind in ("limits", "requests")
            },
        }
    )
    container = pod["spec"]["containers"][0]
    _env(
        container,
        ("OMPI_MCA_plm_rsh_agent", "/etc/mpi/kubexec.sh"),
        ("OMPI_MCA_orte_default_hostfile", "/etc/mpi/hostfile"),
    )
    limits = {
        k
        for c in launcher["template"]["spec"]["containers"]
        for k in (c.get("resources") or {}).get("limits", {})
    }
    if not any(k.endswith(".com/gpu") or "gpu" in k for k in limits):  # isGPULauncher
        _env(container, ("NVIDIA_VISIBLE_DEVICES", ""), ("NVIDIA_DRIVER_CAPABILITIES", ""))
    names = {e["name"] for e in container.get("env") or []}
    if "I_MPI_HYDRA_BOOTSTRAP" not in names:
        _env(container, ("I_MPI_HYDRA_BOOTSTRAP", "rsh"))
    if "I_MPI_HYDRA_BOOTSTRAP_EXEC" not in names:
        _env(container, ("I_MPI_HYDRA_BOOTSTRAP_EXEC", "/etc/mpi/kubexec.sh"))
    container.setdefault("volumeMounts", []).extend(
        [
            {"name": "mpi-job-kubectl", "mountPath": "/opt/kube"},
            {"name": "mpi-job-config", "mountPath": "/etc/mpi"},
        ]
    )
    pod["spec"]["restartPolicy"] = _restart_policy(launcher, "Never")
    items = [
        {"key": k, "path": k, "mode": m}
        for k, m in (("kubexec.sh", 0o555), ("hostfile", 0o444), ("discover_hosts.sh", 0o555))
    ]
    pod["spec"].setdefault("volumes", []).extend(
        [
            {"name": "mpi-job-kubectl", "emptyDir": {}},
            config | {"configMap": config["configMap"] | {"items": items}},
        ]
    )
    return [*pods, OperatorPod(f"MPIJob/{name}", "Launcher", pod)]


# Strategic merge patch keys of the JobSet/Job/Pod spec lists (k8s.io/api patchMergeKey tags); any other
# list (tolerations, command, args) is replaced by the patch's.
_MERGE_KEYS = {
    "replicatedJobs": "name",
    "containers": "name",
    "initContainers": "name",
    "volumes": "name",
    "env": "name",
    "volumeMounts": "mountPath",
    "ports": "containerPort",
    "schedulingGates": "name",
}


def strategic_merge(base: Any, patch: Any, key: str | None = None) -> Any:
    if isinstance(base, dict) and isinstance(patch, dict):
        out = dict(base)
        for k, v in patch.items():
            if v is None:
                out.pop(k, None)
            else:
                out[k] = strategic_merge(base.get(k), v, k)
        return out
    if isinstance(base, list) and isinstance(patch, list) and key in _MERGE_KEYS:
        merge_key = _MERGE_KEYS[key]
        merged = [dict(x) for x in base]
        for item in patch:
            at = next((i for i, x in enumerate(merged) if x.get(merge_key) == item.get(merge_key)), None)
            if at is None:
                merged.append(copy.deepcopy(item))
            else:
                merged[at] = strategic_merge(merged[at], item)
        return merged
    return copy.deepcopy(patch)


@dataclass(frozen=True)
class Admission:
    """What Kueue writes into an admitted job's pods, or why it cannot admit the job."""

    node_selector: dict[str, str]
    tolerations: list[dict[str, str]]
    labels: dict[str, str]
    annotations: dict[str, str]
    refused: str | None = None


def _matches(labels: Mapping[str, str], spec: Mapping[str, Any]) -> bool:
    """A flavor's nodeLabels against the pod's nodeSelector and required node affinity, on the flavor's own
    label keys only (kueue pkg/scheduler/flavorassigner: a flavor the pod's node constraints exclude is
    skipped)."""
    if any(k in labels and labels[k] != v for k, v in (spec.get("nodeSelector") or {}).items()):
        return False
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    )
    terms = (required or {}).get("nodeSelectorTerms") or [{}]

    def allows(expr: Mapping[str, Any]) -> bool:
        key, op, values = expr["key"], expr["operator"], expr.get("values") or []
        if key not in labels:
            return True
        return {
            "In": labels[key] in values,
            "NotIn": labels[key] not in values,
            "Exists": True,
            "DoesNotExist": False,
        }.get(op, True)

    return any(all(allows(e) for e in term.get("matchExpressions") or []) for term in terms)


def kueue_admission(
    queue: QueueQuota | None,
    name: str,
    podset: str,
    spec: Mapping[str, Any],
    requests: Mapping[str, str],
    workload: str,
) -> Admission:
    """The flavors Kueue assigns one podset of a job in ClusterQueue `queue` (its LocalQueue has the same
    name) and what it writes into the pods for them. Quota is the scheduling simulation's business."""
    if queue is None:
        return Admission({}, [], {}, {}, refused=f"ClusterQueue {name!r} does not exist")
    flavors: dict[str, dict[str, Any]] = {KUEUE_CPU_FLAVOR: {}}
    for resource in requests:
        if resource == EFA_RESOURCE:
            flavors[KUEUE_EFA_FLAVOR] = {}
        elif resource not in ("cpu", "memory", "ephemeral-storage", "pods"):
            fitting = [
                f
                for f in (kueue_gpu_flavor(k) for k in sorted(queue.gpus))
                if _matches(f[1]["nodeLabels"], spec)
            ]
            if not fitting:
                refused = f"no flavor of ClusterQueue {name} covers {resource} on the pod's nodes"
                return Admission({}, [], {}, {}, refused=refused)
            flavors[fitting[0][0]] = fitting[0][1]
    selector = {k: v for f in flavors.values() for k, v in (f.get("nodeLabels") or {}).items()}
    tolerations = [t for f in flavors.values() for t in f.get("tolerations") or []]
    labels = {
        KUEUE_POD_LABELS["podset"]: podset,
        KUEUE_POD_LABELS["local_queue"]: name,
        KUEUE_POD_LABELS["cluster_queue"]: name,
    }
    return Admission(selector, tolerations, labels, {KUEUE_WORKLOAD_ANNOTATION: workload})


def _requests(container: Mapping[str, Any]) -> dict[str, str]:
    return {k: str(v) for k, v in ((container.get("resources") or {}).get("requests") or {}).items()}


def train_job_jobset(
    job: Mapping[str, Any], runtime: Mapping[str, Any], platform: PlatformFacts
) -> tuple[dict[str, Any], str | None]:
    """The JobSet Kubeflow Trainer 2.3.0 applies for a TrainJob, and why Kueue holds it (None: admitted or
    not queued). The runtime's template with the runtimePatches merged in order (pkg/runtime/core/
    trainingruntime.go mergeRuntimePatches; the patches' template labels join the runtime's, newRuntimeInfo),
    resourcesPerNode, the torch plugin's PET_* environment and port (framework/plugins/torch/torch.go), image
    and command (plugins/jobset/builder.go), the trainer job's parallelism and completions set to numNodes
    (plugins/jobset/jobset.go Build, SyncParallelCount). Under Kueue 0.19.2 the job waits suspended until
    admitted, then its pods carry the flavors' nodeLabels and tolerations, the podset and queue labels and
    the workload annotation (jobframework/reconciler.go getPodSetsInfoFromStatus, podset.go FromAssignment,
    trainjob_controller.go RunWithPodSetsInfo)."""
    name, namespace = job["metadata"]["name"], job["metadata"]["namespace"]
    trainer = job["spec"].get("trainer") or {}
    patches = list(job["spec"].get("runtimePatches") or [])
    queue_name = (job["metadata"].get("labels") or {}).get(KUEUE_QUEUE_LABEL)
    queued = platform.gang_scheduler == "kueue" and "TrainJob" in KUEUE_KINDS
    template = runtime["spec"]["template"]
    jobset = copy.deepcopy(template["spec"])
    labels = dict((template.get("metadata") or {}).get("labels") or {})
    for patch in patches:  # trainingruntime.go mergeRuntimePatches: in order
        patch_template = (patch.get("trainingRuntimeSpec") or {}).get("template") or {}
        labels |= (patch_template.get("metadata") or {}).get("labels") or {}
        if patch_template.get("spec"):
            jobset = strategic_merge(jobset, patch_template["spec"])
    held = None
    # Kueue's webhook appended its patch; on admission it fills it (RunWithPodSetsInfo).
    if queued and queue_name is not None:
        kueue_patch = []
        workload = f"trainjob-{name}-{RANDOM}"
        for rjob in jobset["replicatedJobs"]:
            pod_spec = rjob["template"]["spec"]["template"]["spec"]
            node = next((c for c in pod_spec["containers"] if c["name"] == TRAINER_CONTAINER), None)
            requests = (trainer.get("resourcesPerNode") or {}).get("requests") or {}
            requests = requests if node is not None else _requests(pod_spec["containers"][0])
            admission = kueue_admission(
                platform.queue(queue_name), queue_name, rjob["name"], pod_spec, requests, workload
            )
            held = held or admission.refused
            pod_patch = {
                "metadata": {"labels": admission.labels, "annotations": admission.annotations},
                "spec": {"nodeSelector": admission.node_selector, "tolerations": admission.tolerations},
            }
            kueue_patch.append({"name": rjob["name"], "template": {"spec": {"template": pod_patch}}})
        if held is None:
            jobset = strategic_merge(jobset, {"replicatedJobs": kueue_patch})
    ml_policy = runtime["spec"].get("mlPolicy") or {}
    num_nodes = trainer.get("numNodes") or ml_policy.get("numNodes", 1)
    nproc = trainer.get("numProcPerNode", "auto")
    for rjob in jobset["replicatedJobs"]:
        ancestor = ((rjob["template"].get("metadata") or {}).get("labels") or {}).get(
            "trainer.kubeflow.org/trainjob-ancestor-step"
        )
        job_spec = rjob["template"]["spec"]
        node = next(
            (c for c in job_spec["template"]["spec"]["containers"] if c["name"] == TRAINER_CONTAINER), None
        )
        if ancestor != "trainer" or node is None:
            continue
        job_spec["parallelism"] = job_spec["completions"] = num_nodes
        resources = trainer.get("resourcesPerNode")
        if resources:  # MergeResourceRequirements: the TrainJob's quantities over the runtime's
            base = node.get("resources") or {}
            node["resources"] = {
                k: {**(base.get(k) or {}), **(resources.get(k) or {})}
                for k in ("limits", "requests")
                if base.get(k) or resources.get(k)
            }
        for key in ("image", "command", "args"):
            if trainer.get(key) is not None:
                node[key] = trainer[key]
        for entry in trainer.get("env") or []:  # torch.go EnforceMLPolicy
            _upsert_env(node, (entry["name"], {k: v for k, v in entry.items() if k != "name"}))
        _upsert_env(
            node,
            ("PET_NNODES", str(num_nodes)),
            ("PET_NPROC_PER_NODE", str(nproc)),
            ("PET_NODE_RANK", _field_ref(f"metadata.annotations['{COMPLETION_INDEX}']")),
            ("PET_MASTER_ADDR", f"{name}-{TRAINER_CONTAINER}-0-0.{name}"),
            ("PET_MASTER_PORT", str(TRAINER_PORT)),
        )
        if not any(p.get("containerPort") == TRAINER_PORT for p in node.get("ports") or []):
            node.setdefault("ports", []).append({"containerPort": TRAINER_PORT, "protocol": "TCP"})
    jobset["suspend"] = bool(job["spec"].get("suspend")) or held is not None
    owner = {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "name": name,
        "controller": True,
    }
    meta = {"name": name, "namespace": namespace, "labels": labels, "ownerReferences": [owner]}
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": meta,
        "spec": jobset,
    }, held


def jobset_jobs(jobset: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The batch Jobs JobSet 0.12.0 creates from a JobSet, after its webhook's defaults (jobset_webhook.go
    Default): `replicas` Jobs per replicated job, named <jobset>-<replicated job>-<index>, each labelled and
    annotated on itself and its pod template (jobset_controller.go constructJob, labelAndAnnotateObject)."""
    defaulted = jobset_webhook.default(jobset)
    name, namespace = jobset["metadata"]["name"], jobset["metadata"]["namespace"]
    rjobs = defaulted["spec"]["replicatedJobs"]
    global_replicas = sum(r.get("replicas", 1) for r in rjobs)
    jobs, position = [], 0
    for rjob in rjobs:
        for index in range(rjob.get("replicas", 1)):
            job_name = f"{name}-{rjob['name']}-{index}"
            labels = {
                JOBSET_LABELS["jobset"]: name,
                JOBSET_LABELS["uid"]: RANDOM,
                JOBSET_LABELS["rjob"]: rjob["name"],
                JOBSET_LABELS["restarts"]: "0",
                JOBSET_LABELS["rjob_replicas"]: str(rjob.get("replicas", 1)),
                JOBSET_LABELS["global_replicas"]: str(global_replicas),
                JOBSET_LABELS["index"]: str(index),
                JOBSET_LABELS["key"]: hashlib.sha1(f"{namespace}/{job_name}".encode()).hexdigest(),  # noqa: S324
                JOBSET_LABELS["global_index"]: str(position),
                JOBSET_LABELS["group"]: rjob.get("groupName", "default"),
                JOBSET_LABELS["group_replicas"]: str(global_replicas),
                JOBSET_LABELS["group_index"]: str(position),
            }
            position += 1
            spec = copy.deepcopy(rjob["template"]["spec"])
            pod_meta = spec["template"].setdefault("metadata", {})
            pod_meta["labels"] = (pod_meta.get("labels") or {}) | labels
            pod_meta["annotations"] = (pod_meta.get("annotations") or {}) | labels
            spec["suspend"] = bool(defaulted["spec"].get("suspend"))
            meta = {"name": job_name, "namespace": namespace, "labels": labels, "annotations": dict(labels)}
            jobs.append({"apiVersion": "batch/v1", "kind": "Job", "metadata": meta, "spec": spec})
    return jobs


def indexed_job_pods(job: Mapping[str, Any], subdomain: str) -> list[dict[str, Any]]:
    """The batch Job controller's pods of an Indexed Job: one per completion index, with the index label,
    annotation and environment, the job-tracking finalizer and a stable hostname under `subdomain`
    (kubernetes pkg/controller/job/indexed_job_utils.go addCompletionIndexEnvVariables, job_controller.go)."""
    name, namespace = job["metadata"]["name"], job["metadata"]["namespace"]
    pods = []
    for index in range(job["spec"].get("parallelism", 1)):
        pod = _pod(f"{name}-{index}-", namespace, job["spec"]["template"], generate=True)
        meta = pod["metadata"]
        meta["labels"] |= {
            "batch.kubernetes.io/controller-uid": RANDOM,
            "batch.kubernetes.io/job-name": name,
            "controller-uid": RANDOM,
            "job-name": name,
            COMPLETION_INDEX: str(index),
        }
        meta["annotations"] |= {COMPLETION_INDEX: str(index)}
        meta["finalizers"] = ["batch.kubernetes.io/job-tracking"]
        pod["spec"] |= {"hostname": f"{name}-{index}", "subdomain": subdomain}
        for container in [*pod["spec"].get("initContainers", []), *pod["spec"]["containers"]]:
            _env(
                container, ("JOB_COMPLETION_INDEX", _field_ref(f"metadata.annotations['{COMPLETION_INDEX}']"))
            )
        pods.append(pod)
    return pods


def train_job_pods(
    job: Mapping[str, Any], runtime: Mapping[str, Any], platform: PlatformFacts
) -> list[OperatorPod]:
    """A TrainJob's pods: Trainer's JobSet (train_job_jobset), JobSet's Jobs (jobset_jobs), the Job
    controller's Indexed pods (indexed_job_pods)."""
    jobset, held = train_job_jobset(job, runtime, platform)
    name = job["metadata"]["name"]
    return [
        OperatorPod(f"TrainJob/{name}", j["metadata"]["labels"][JOBSET_LABELS["rjob"]], pod, held)
        for j in jobset_jobs(jobset)
        for pod in indexed_job_pods(j, subdomain=name)
    ]


def _ray_container_env(container: dict[str, Any], node_type: str, fqdn: str, start: str) -> None:
    """common/pod.go setContainerEnvVars."""
    if node_type == "worker":
        _env(container, ("FQ_RAY_IP", fqdn), ("RAY_IP", fqdn.split(".")[0]))
    _env(
        container,
        ("RAY_CLUSTER_NAME", _field_ref("metadata.labels['ray.io/cluster']")),
        ("RAY_CLUSTER_NAMESPACE", _field_ref("metadata.namespace")),
        ("RAY_CLOUD_INSTANCE_ID", _field_ref("metadata.name")),
        ("RAY_NODE_TYPE_NAME", _field_ref("metadata.labels['ray.io/group']")),
        ("KUBERAY_GEN_RAY_START_CMD", start),
        ("RAY_PORT", "6379"),
        ("RAY_ADDRESS", f"{'127.0.0.1' if node_type == 'head' else fqdn}:6379"),
        ("RAY_USAGE_STATS_KUBERAY_IN_USE", "1"),
        ("RAY_DASHBOARD_ENABLE_K8S_DISK_USAGE", "1"),
    )


def _ray_pod(
    template: Mapping[str, Any],
    namespace: str,
    cluster: str,
    node_type: str,
    group: str,
    fqdn: str,
    settings: OperatorSettings,
) -> dict[str, Any]:
    name = f"{cluster}-head-" if node_type == "head" else f"{cluster}-{group}-worker-"
    pod = _pod(name, namespace, template, generate=True)
    spec, ray = pod["spec"], pod["spec"]["containers"][0]
    if node_type == "worker" and settings.ray_init_container_injection:  # DefaultWorkerPodTemplate
        spec.setdefault("initContainers", []).append(
            {
                "name": RAY_INIT_CONTAINER,
                "image": ray["image"],
                "imagePullPolicy": ray.get("imagePullPolicy"),
                "command": ["/bin/bash", "-c", "--"],
                "args": [f"ray health-check --address {fqdn}:6379 ..."],
                "securityContext": copy.deepcopy(ray.get("securityContext")),
                "env": copy.deepcopy(ray.get("env", [])),
                "volumeMounts": copy.deepcopy(ray.get("volumeMounts", [])),
                "resources": {"limits": dict(RAY_INIT_RESOURCES), "requests": dict(RAY_INIT_RESOURCES)},
            }
        )
        spec["initContainers"][-1] = {k: v for k, v in spec["initContainers"][-1].items() if v is not None}
    overrides = {
        k: v
        for k, v in pod["metadata"]["labels"].items()
        if k not in ("ray.io/node-type", "ray.io/group", "ray.io/cluster")
    }
    pod["metadata"]["labels"] = {  # labelPod
        "ray.io/is-ray-node": "yes",
        "ray.io/cluster": cluster,
        "ray.io/node-type": node_type,
        "ray.io/group": group,
        "ray.io/identifier": f"{cluster}-{node_type}",
        "app.kubernetes.io/name": "kuberay",
        "app.kubernetes.io/created-by": "kuberay-operator",
    } | overrides
    if not any(p.get("name") == RAY_METRICS_PORT[0] for p in ray.get("ports") or []):
        ray.setdefault("ports", []).append(
            {"name": RAY_METRICS_PORT[0], "containerPort": RAY_METRICS_PORT[1]}
        )
    if not any(
        m.get("mountPath") == "/dev/shm" for m in ray.get("volumeMounts") or []
    ):  # BuildPod addEmptyDir
        ray.setdefault("volumeMounts", []).append({"name": "shared-mem", "mountPath": "/dev/shm"})
        spec.setdefault("volumes", []).append({"name": "shared-mem", "emptyDir": {"medium": "Memory"}})
    start = f"ray start {'--head ' if node_type == 'head' else ''}..."
    if "ray start" not in " ".join([*(ray.get("command") or []), *(ray.get("args") or [])]):
        ray |= {
            "command": ["/bin/bash", "-c", "--"],
            "args": [f"ulimit -n ${{RAY_START_ULIMIT_OPEN_FILES:-65536}}; {start}"],
        }
    for init in spec.get("initContainers") or []:  # setInitContainerEnvVars
        _env(init, ("FQ_RAY_IP", fqdn), ("RAY_IP", fqdn.split(".")[0]))
    _ray_container_env(ray, node_type, fqdn, start)
    return pod


def ray_job_pods(job: Mapping[str, Any], settings: OperatorSettings) -> list[OperatorPod]:
    """KubeRay 1.7.0: ray-operator/controllers/ray/common/pod.go DefaultHeadPodTemplate,
    DefaultWorkerPodTemplate (its wait-gcs-ready init container), BuildPod; rayjob_controller.go
    getSubmitterTemplate, createNewK8sJob."""
    name, namespace, spec = job["metadata"]["name"], job["metadata"]["namespace"], job["spec"]
    cluster = f"{name}-{RANDOM}"  # utils.GenerateRayClusterName
    fqdn = f"{name}-head-svc.{namespace}.svc.cluster.local"  # the RayJob's head Service
    head = spec["rayClusterSpec"]["headGroupSpec"]
    pods = [
        OperatorPod(
            f"RayJob/{name}",
            "head",
            _ray_pod(head["template"], namespace, cluster, "head", "headgroup", fqdn, settings),
        )
    ]
    for group in spec["rayClusterSpec"].get("workerGroupSpecs") or []:
        for _ in range(group.get("replicas", group.get("minReplicas", 0))):
            pod = _ray_pod(
                group["template"], namespace, cluster, "worker", group["groupName"], fqdn, settings
            )
            pods.append(OperatorPod(f"RayJob/{name}", group["groupName"], pod))
    if spec.get("submissionMode", "K8sJobMode") == "K8sJobMode":  # getSubmitterTemplate, createNewK8sJob
        template = spec["submitterPodTemplate"]
        pod = _pod(f"{name}-", namespace, template, generate=True)
        container = pod["spec"]["containers"][0]
        if not container.get("command"):
            container |= {"command": ["/bin/bash", "-ce", "--"], "args": ["ray job submit ..."]}
        _env(
            container,
            ("PYTHONUNBUFFERED", "1"),
            ("RAY_DASHBOARD_ADDRESS", f"{fqdn.split('.')[0]}:8265"),
            ("RAY_JOB_SUBMISSION_ID", f"{name}-{RANDOM}"),
        )
        pod["metadata"]["labels"] |= {
            "ray.io/originated-from-cr-name": name,
            "ray.io/originated-from-crd": "RayJob",
            "app.kubernetes.io/created-by": "kuberay-operator",
            "batch.kubernetes.io/controller-uid": RANDOM,
            "batch.kubernetes.io/job-name": name,
            "controller-uid": RANDOM,
            "job-name": name,
        }
        pods.append(OperatorPod(f"RayJob/{name}", "submitter", pod))
    return pods


def operator_pods(
    objects: Sequence[Mapping[str, Any]], platform: PlatformFacts, settings: OperatorSettings | None = None
) -> list[OperatorPod]:
    """Every pod the job objects among `objects` lead to, as their controllers create them on `platform`
    (a gang at its largest: an elastic job's maxReplicas)."""
    settings = settings or operator_settings(platform)
    runtimes = {o["metadata"]["name"]: o for o in objects if o["kind"] == "TrainingRuntime"}
    pods: list[OperatorPod] = []
    for obj in objects:
        if obj["kind"] == "TrainJob":
            pods += train_job_pods(obj, runtimes[obj["spec"]["runtimeRef"]["name"]], platform)
        elif obj["kind"] == "PyTorchJob":
            pods += pytorch_job_pods(obj, settings)
        elif obj["kind"] == "MPIJob":
            pods += mpi_job_pods(obj, settings)
        elif obj["kind"] == "RayJob":
            pods += ray_job_pods(obj, settings)
    return pods


def container_env(pod: Mapping[str, Any], container: str) -> dict[str, str]:
    """A container's environment as the kubelet resolves it: values, and the downward API's fieldRefs to
    the pod's name, namespace, labels and annotations (kubernetes pkg/kubelet/kubelet_pods.go
    podFieldSelectorRuntimeValue; pkg/fieldpath/fieldpath.go ExtractFieldPathAsString). A later entry of
    the same name wins."""
    meta = pod["metadata"]
    (spec,) = [
        c
        for c in [*pod["spec"].get("initContainers", []), *pod["spec"]["containers"]]
        if c["name"] == container
    ]
    env: dict[str, str] = {}
    for entry in spec.get("env") or []:
        if "value" in entry:
            env[entry["name"]] = entry["value"]
            continue
        path = ((entry.get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath", "")
        found = re.fullmatch(r"metadata\.(labels|annotations)\['([^']+)'\]", path)
        if found:
            env[entry["name"]] = (meta.get(found.group(1)) or {}).get(found.group(2), "")
        elif path in ("metadata.name", "metadata.namespace"):
            env[entry["name"]] = meta.get(path.split(".")[1], "")
    return env
