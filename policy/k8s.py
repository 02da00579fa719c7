"""Kubernetes rules over every object kind the engine shows (`kubernetes:<group>/<version>:<Kind>`),
including pod templates nested in custom resources (TrainJob runtimePatches, ClusterTrainingRuntime,
PyTorchJob replica specs, JobSet, Argo workflows). A pod is found by what it is, wherever it sits: any
mapping with a `containers` list; any mapping with pod-level fields (hostNetwork, securityContext,
volumes...) where a pod spec goes (`template.spec`, a Pod's or PodPatch's `spec`, `podSpec`, a
`podTemplateOverrides` entry's `spec`), so a patch that sets root or host namespaces without repeating
`containers` is one; an Argo template's `container:` or `script:` with the template's own pod fields; and
an Argo `podSpecPatch` string."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import yaml

from infra.accelerators import CATALOG
from infra.image_refs import image_problem
from policy import pod_security
from policy.core import Resource, Rule, as_list, dig
from policy.coverage import whole_number

KUBERNETES = "kubernetes:"
# Kinds whose pods run training code: they get the stricter pod rules (restricted's capabilities,
# non-root). Any other pod-bearing kind (Deployment, StatefulSet, DaemonSet, CronJob, ...) is held to
# baseline and may not run as UID 0 either.
TRAINING_KINDS = frozenset(
    {
        "Pod",
        "Job",
        "TrainJob",
        "TrainingRuntime",
        "ClusterTrainingRuntime",
        "PyTorchJob",
        "MPIJob",
        "JobSet",
        "TFJob",
        "XGBoostJob",
        "PaddleJob",
        "JAXJob",
        "MXJob",
        "RayJob",
        "RayCluster",
        "RayService",
    }
)
GPU_TAINTS = {a.taint.key: a.taint for a in CATALOG.values()}
HOST_NAMESPACES = ("hostNetwork", "hostPID", "hostIPC")
PERSISTENT_VOLUME = "PersistentVolume"
# Host paths whose contents (or anything below them) hand over the node: its root, configuration,
# kubelet credentials and pods' secrets, the container runtime's sockets, kernel interfaces. A local
# PersistentVolume on one of them is a hostPath by another name.
SENSITIVE_HOST_PATHS = (
    "/etc",
    "/root",
    "/home",
    "/boot",
    "/proc",
    "/sys",
    "/dev",
    "/var/lib/kubelet",
    "/var/lib/containerd",
    "/var/lib/docker",
    "/var/run",
    "/run",
    "/var/log",
)
HOST_ROOTS = ("/", "/var", "/var/lib", "/usr")


def kind_of(type_: str, inputs: Mapping[str, Any]) -> str:
    return str(dig(inputs, "kind", default=type_.rsplit(":", 1)[-1]))


def type_token(obj: Mapping[str, Any]) -> str:
    """The Pulumi type token of a plain manifest: apps/v1 Deployment -> kubernetes:apps/v1:Deployment."""
    api = str(obj.get("apiVersion", ""))
    return f"{KUBERNETES}{api if '/' in api else 'core/' + api}:{obj.get('kind')}"


# Fields only a pod spec has (not a JobSpec or JobSetSpec beside it): where a pod spec goes, any one of
# them makes the mapping a pod, however little of it a patch repeats.
POD_FIELDS = frozenset(
    {
        "containers",
        "initContainers",
        "ephemeralContainers",
        "hostNetwork",
        "hostPID",
        "hostIPC",
        "hostUsers",
        "securityContext",
        "volumes",
        "serviceAccountName",
        "serviceAccount",
        "automountServiceAccountToken",
        "nodeName",
        "nodeSelector",
        "tolerations",
        "shareProcessNamespace",
        "runtimeClassName",
        "priorityClassName",
        "hostAliases",
        "os",
    }
)
# Keys whose value is a pod template ({metadata, spec}) or a list of pod spec overrides ({spec}).
TEMPLATE_KEYS = frozenset({"template", "podTemplate", "submitterPodTemplate", "podTemplateOverrides"})
ARGO_CONTAINERS = ("container", "script")


def _sequence(value: Any) -> bool:
    return isinstance(value, Sequence) and not isinstance(value, str)


def _argo_pod(obj: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """An Argo template's pod: its `container` (or `script`) with the template's pod-level fields."""
    found = [obj[k] for k in ARGO_CONTAINERS if isinstance(obj.get(k), Mapping) and "image" in obj[k]]
    if not found:
        return None
    return {**{k: v for k, v in obj.items() if k in POD_FIELDS}, "containers": found}


def _patch_pod(value: Any) -> Mapping[str, Any] | None:
    """An Argo `podSpecPatch`: a pod spec in YAML or JSON text."""
    try:
        parsed = yaml.safe_load(value) if isinstance(value, str) else None
    except yaml.YAMLError:
        return None
    return parsed if isinstance(parsed, Mapping) else None


def pod_templates(
    obj: Any, path: str = "", keys: tuple[str, ...] = ()
) -> Iterator[tuple[str, Mapping[str, Any], Mapping[str, Any]]]:
    """(path, pod spec, pod metadata) for every pod spec in `obj` (module docstring); the metadata is
    given for an Argo template's pod (the others' is their template's, _with_metadata). `keys`: the keys
    that led to `obj` (list positions left out)."""
    if isinstance(obj, Mapping):
        if not keys and obj.get("kind") == "Pod" and isinstance(obj.get("spec"), Mapping):
            keys = ("template",)  # a Pod (or PodPatch) is its own template
        at_pod_path = bool(keys) and (
            (len(keys) >= 2 and keys[-1] == "spec" and keys[-2] in TEMPLATE_KEYS) or keys[-1] == "podSpec"
        )
        if _sequence(obj.get("containers")) or (at_pod_path and POD_FIELDS & set(obj)):
            yield path or ".", obj, {}
        elif (argo := _argo_pod(obj)) is not None:
            meta = obj.get("metadata")
            yield path or ".", argo, meta if isinstance(meta, Mapping) else {}
        patch = _patch_pod(obj.get("podSpecPatch"))
        if patch is not None:
            yield f"{path}.podSpecPatch" if path else "podSpecPatch", patch, {}
        for key, value in obj.items():
            if isinstance(value, Mapping) or _sequence(value):
                yield from pod_templates(value, f"{path}.{key}" if path else str(key), (*keys, str(key)))
    elif _sequence(obj):
        for i, value in enumerate(obj):
            yield from pod_templates(value, f"{path}[{i}]", keys)


def pod_specs(obj: Any) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """(path, pod spec) for every pod spec nested anywhere in `obj`."""
    for path, spec, _ in _with_metadata(obj):
        yield path, spec


def _with_metadata(obj: Any) -> list[tuple[str, Mapping[str, Any], Mapping[str, Any]]]:
    """pod_templates with each spec's metadata: the `metadata` of the template (or object) holding it."""
    found = []
    for path, spec, meta in pod_templates(obj):
        if not meta:
            parent = _parent(obj, path)
            candidate = parent.get("metadata") if isinstance(parent, Mapping) else None
            meta = candidate if isinstance(candidate, Mapping) else {}
        found.append((path, spec, meta))
    return found


def _parent(obj: Any, path: str) -> Any:
    """The mapping that holds the value at `path` (a pod spec's template), by walking `path`."""
    steps = [p for p in path.replace("[", ".[").split(".") if p][:-1]
    for step in steps:
        if step.startswith("["):
            index = int(step[1:-1])
            obj = obj[index] if _sequence(obj) and len(obj) > index else None
        else:
            obj = obj.get(step) if isinstance(obj, Mapping) else None
    return obj


def containers(spec: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [
        c
        for key in ("initContainers", "containers", "ephemeralContainers")
        for c in as_list(spec.get(key))
        if isinstance(c, Mapping)
    ]


def _trainer(type_: str, inputs: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """A TrainJob's trainer is a container in all but name: image, command, resourcesPerNode."""
    if kind_of(type_, inputs) != "TrainJob":
        return None
    trainer = dig(inputs, "spec", "trainer")
    return trainer if isinstance(trainer, Mapping) else None


def _normalized_capability(name: Any) -> str:
    """What the runtime adds: containerd upper-cases a capability and prefixes CAP_ (any spelling of
    SYS_ADMIN, with or without CAP_, is SYS_ADMIN)."""
    cap = str(name).upper()
    return cap[4:] if cap.startswith("CAP_") else cap


def _sensitive_host_path(host: str) -> bool:
    return any(host == p or host.startswith(p + "/") for p in SENSITIVE_HOST_PATHS) or host in HOST_ROOTS


def check_persistent_volume(inputs: Mapping[str, Any]) -> Iterator[str]:
    """A PersistentVolume hands its path to every pod that claims it: a hostPath one is a hostPath
    volume that Pod Security never sees (it checks the pod's persistentVolumeClaim, which it allows)."""
    spec = dig(inputs, "spec", default={})
    if dig(spec, "hostPath") is not None:
        path = pod_security.normalized_host_path(dig(spec, "hostPath", "path"))
        yield f"PersistentVolume is a hostPath volume: every pod that claims it mounts the node's {path}"
    local = dig(spec, "local", "path")
    if local is not None and _sensitive_host_path(pod_security.normalized_host_path(local)):
        path = pod_security.normalized_host_path(local)
        yield f"PersistentVolume is a local volume on the node's {path}"


def check_not_privileged(type_: str, inputs: Mapping[str, Any]) -> Iterator[str]:
    """Pod Security baseline, as the admission controller implements it (policy/pod_security.py), for
    every pod template of every kind, plus what baseline leaves open: allowPrivilegeEscalation true,
    hostPath reached through a PersistentVolume, and, for training kinds, restricted's capabilities
    (only NET_BIND_SERVICE may be added). Capabilities are judged as the runtime reads them: case and
    CAP_ prefix do not matter."""
    if kind_of(type_, inputs) == PERSISTENT_VOLUME:
        yield from check_persistent_volume(inputs)
        return
    training = kind_of(type_, inputs) in TRAINING_KINDS
    allowed = pod_security.RESTRICTED_CAPABILITIES if training else pod_security.BASELINE_CAPABILITIES
    for path, spec, meta in _with_metadata(inputs):
        for v in pod_security.violations(spec, meta, level="baseline"):
            if v.check != "capabilities_baseline":
                yield f"{path}: {v.detail}"
        for c in containers(spec):
            ctx = dig(c, "securityContext", default={})
            name = c.get("name")
            added = sorted(
                {_normalized_capability(a) for a in as_list(dig(ctx, "capabilities", "add"))} - allowed
            )
            if added:
                only = " (training pods may add only NET_BIND_SERVICE)" if training else ""
                yield f"{path}: container {name!r} adds capabilities {', '.join(added)}{only}"
            if dig(ctx, "allowPrivilegeEscalation") is True:
                yield f"{path}: container {name!r} sets allowPrivilegeEscalation: true"


def check_no_host_namespaces(type_: str, inputs: Mapping[str, Any]) -> Iterator[str]:
    if kind_of(type_, inputs) not in TRAINING_KINDS:
        return
    for path, spec in pod_specs(inputs):
        for field in HOST_NAMESPACES:
            if spec.get(field) is True:
                yield f"{path}: {field} is true"


def check_run_as_non_root(type_: str, inputs: Mapping[str, Any]) -> Iterator[str]:
    """Training kinds: restricted's runAsNonRoot and runAsUser checks. Every other pod-bearing kind:
    no UID 0, set on the pod or a container (what restricted's runAsUser check refuses)."""
    training = kind_of(type_, inputs) in TRAINING_KINDS
    for path, spec in pod_specs(inputs):
        pod = dig(spec, "securityContext", default={})
        if dig(pod, "runAsUser") == 0:
            yield f"{path}: the pod sets runAsUser: 0"
        for c in containers(spec):
            ctx = dig(c, "securityContext", default={})
            non_root = dig(ctx, "runAsNonRoot", default=dig(pod, "runAsNonRoot"))
            user = dig(ctx, "runAsUser", default=dig(pod, "runAsUser"))
            if dig(ctx, "runAsUser") == 0 or (user == 0 and training):
                yield f"{path}: container {c.get('name')!r} runs as UID 0"
            elif training and non_root is not True:
                yield f"{path}: container {c.get('name')!r} does not set runAsNonRoot: true"


def check_image_pinned(type_: str, inputs: Mapping[str, Any]) -> Iterator[str]:
    found = [(f"{p}/{c.get('name')}", c.get("image")) for p, s in pod_specs(inputs) for c in containers(s)]
    trainer = _trainer(type_, inputs)
    if trainer is not None:
        found.append(("spec.trainer", trainer.get("image")))
    for where, image in found:
        problem = image_problem(str(image)) if image else None  # patches may omit the image
        if problem:
            yield f"{where}: {problem}"


def _gpu_requests(resources: Any) -> set[str]:
    """The GPU resources a container asks for: any count but zero (0, "0", or 0.0 as the engine sends
    every number)."""
    wanted: set[str] = set()
    for section in ("requests", "limits"):
        for key, count in dig(resources, section, default={}).items():
            if key in GPU_TAINTS and count not in (None, "") and whole_number(count) != 0:
                wanted.add(key)
    return wanted


def tolerates(tolerations: Sequence[Any], key: str) -> bool:
    taint = GPU_TAINTS[key]
    for t in tolerations:
        key_ok = dig(t, "key") == key or (not dig(t, "key") and dig(t, "operator") == "Exists")
        value_ok = dig(t, "operator") == "Exists" or dig(t, "value") == taint.value
        effect_ok = dig(t, "effect") in (None, "", taint.effect)
        if key_ok and value_ok and effect_ok:
            return True
    return False


def check_gpu_pods_tolerate(type_: str, inputs: Mapping[str, Any]) -> Iterator[str]:
    specs = list(pod_specs(inputs))
    for path, spec in specs:
        for key in sorted(set().union(*(_gpu_requests(c.get("resources")) for c in containers(spec)))):
            if not tolerates(as_list(spec.get("tolerations")), key):
                yield f"{path}: requests {key} but does not tolerate the {key}=true:NoSchedule taint"
    trainer = _trainer(type_, inputs)
    if trainer is not None:
        # The TrainJob's pods take their tolerations from its runtimePatches (or the runtime).
        all_tolerations = [t for _, s in specs for t in as_list(s.get("tolerations"))]
        for key in sorted(_gpu_requests(trainer.get("resourcesPerNode"))):
            if not tolerates(all_tolerations, key):
                yield f"spec.trainer requests {key} but no runtimePatches pod tolerates {key}=true:NoSchedule"


RULES = (
    Rule(
        name="k8s-no-privileged-containers",
        description="Every pod of every kind meets Pod Security baseline as the admission controller "
        "implements it (privileged, capabilities outside baseline's allow-list, host namespaces, hostPath "
        "however spelled, hostPort, procMount, seccomp/AppArmor Unconfined, SELinux, sysctls, probe "
        "hosts), sets no allowPrivilegeEscalation: true, and reaches no host path through a "
        "PersistentVolume; training pods add no capability but NET_BIND_SERVICE.",
        remediation="Remove securityContext.privileged, added capabilities, host namespaces and ports; set "
        "allowPrivilegeEscalation: false and seccompProfile RuntimeDefault; mount what the pod needs "
        "(emptyDir, a PVC on a CSI volume, a projected token) instead of host paths. A platform agent that "
        "needs the node is listed in policy/chart_exceptions.yaml with the reason.",
        level="mandatory",
        severity="critical",
        types=(KUBERNETES,),
        check=check_not_privileged,
    ),
    Rule(
        name="k8s-training-no-host-namespaces",
        description="Training pods do not share the node's network, PID or IPC namespace.",
        remediation="Drop hostNetwork/hostPID/hostIPC; EFA works through the vpc.amazonaws.com/efa "
        "device and NCCL through the pod network; use an emptyDir(medium=Memory) for /dev/shm.",
        level="mandatory",
        severity="high",
        types=(KUBERNETES,),
        check=check_no_host_namespaces,
    ),
    Rule(
        name="k8s-training-run-as-non-root",
        description="Training pods' containers run as a non-root user (runAsNonRoot: true, UID not 0), "
        "and no pod of any kind (Deployment, StatefulSet, DaemonSet, CronJob, RayJob...) sets UID 0.",
        remediation="Set securityContext.runAsNonRoot: true and a non-zero runAsUser on the pod; build the "
        "image with a USER (docker/*/Dockerfile).",
        level="mandatory",
        severity="high",
        types=(KUBERNETES,),
        check=check_run_as_non_root,
    ),
    Rule(
        name="k8s-images-pinned",
        description="Container images carry a digest or a version tag: not :latest, no tag at all, nor a "
        "branch or channel name such as :main or :stable (infra/image_refs.py).",
        remediation="Use the ECR repository URL with an immutable version tag or @sha256 digest.",
        level="mandatory",
        severity="medium",
        types=(KUBERNETES,),
        check=check_image_pinned,
    ),
    Rule(
        name="k8s-gpu-requests-tolerate-taint",
        description="Pods that request GPUs (nvidia.com/gpu, amd.com/gpu) tolerate that GPU taint; "
        "otherwise they stay Pending forever on tainted GPU nodes.",
        remediation="Add tolerations: [{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}] "
        "(amd.com/gpu for AMD), as workloads/render.py derives from the accelerator catalog.",
        level="mandatory",
        severity="medium",
        types=(KUBERNETES,),
        check=check_gpu_pods_tolerate,
    ),
)


def from_manifests(objects: Sequence[Mapping[str, Any]]) -> list[Resource]:
    """Resources from plain Kubernetes manifests, typed as the Pulumi engine would show them."""
    return [
        Resource(type=type_token(o), name=str(dig(o, "metadata", "name", default="?")), inputs=o)
        for o in objects
    ]
