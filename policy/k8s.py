"""Kubernetes rules over every object kind the engine shows (`kubernetes:<group>/<version>:<Kind>`),
including pod templates nested in custom resources (TrainJob runtimePatches, ClusterTrainingRuntime,
PyTorchJob replica specs, JobSet): any mapping with a `containers` list is a pod spec."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from infra.accelerators import CATALOG
from infra.image_refs import image_problem
from policy.core import Resource, Rule, as_list, dig

KUBERNETES = "kubernetes:"
# Kinds whose pods run training code: they get the stricter pod rules.
TRAINING_KINDS = frozenset(
    {"Pod", "Job", "TrainJob", "TrainingRuntime", "ClusterTrainingRuntime", "PyTorchJob", "MPIJob", "JobSet"}
)
GPU_TAINTS = {a.taint.key: a.taint for a in CATALOG.values()}
HOST_NAMESPACES = ("hostNetwork", "hostPID", "hostIPC")
# Capabilities that reach past the container: ALL, mounts and namespaces (SYS_ADMIN), kernel modules,
# other processes' memory, raw devices and I/O ports, eBPF.
NODE_CAPABILITIES = frozenset({"ALL", "SYS_ADMIN", "SYS_MODULE", "SYS_PTRACE", "SYS_RAWIO", "BPF"})
# Host paths whose contents (or anything below them) hand over the node: its root, configuration,
# kubelet credentials and pods' secrets, the container runtime's sockets, kernel interfaces.
SENSITIVE_HOST_PATHS = (
    "/etc", "/root", "/home", "/boot", "/proc", "/sys", "/dev", "/var/lib/kubelet", "/var/lib/containerd",
    "/var/lib/docker", "/var/run", "/run", "/var/log",
)  # fmt: skip
HOST_ROOTS = ("", "/", "/var", "/var/lib", "/usr")


def kind_of(type_: str, inputs: Mapping[str, Any]) -> str:
    return str(dig(inputs, "kind", default=type_.rsplit(":", 1)[-1]))


def type_token(obj: Mapping[str, Any]) -> str:
    """The Pulumi type token of a plain manifest: apps/v1 Deployment -> kubernetes:apps/v1:Deployment."""
    api = str(obj.get("apiVersion", ""))
    return f"{KUBERNETES}{api if '/' in api else 'core/' + api}:{obj.get('kind')}"


def pod_specs(obj: Any, path: str = "") -> Iterator[tuple[str, Mapping[str, Any]]]:
    """(path, pod spec) for every pod spec nested anywhere in `obj`."""
    if isinstance(obj, Mapping):
        if isinstance(obj.get("containers"), Sequence) and not isinstance(obj.get("containers"), str):
            yield path or ".", obj
        for key, value in obj.items():
            if isinstance(value, Mapping | Sequence) and not isinstance(value, str):
                yield from pod_specs(value, f"{path}.{key}" if path else str(key))
    elif isinstance(obj, Sequence) and not isinstance(obj, str):
        for i, value in enumerate(obj):
            yield from pod_specs(value, f"{path}[{i}]")


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


def _capability(name: Any) -> str:
    """Kubernetes takes capability names with or without CAP_, in any case (the runtime normalizes)."""
    cap = str(name).upper()
    return cap[4:] if cap.startswith("CAP_") else cap


def check_not_privileged(type_: str, inputs: Mapping[str, Any]) -> Iterator[str]:
    """Anything that gives a container the node: privileged, a capability that escapes the container,
    privilege escalation, the host's namespaces, or a hostPath mount of the host's root, its
    configuration, credentials or container runtime socket."""
    for path, spec in pod_specs(inputs):
        for field in HOST_NAMESPACES:
            if spec.get(field) is True:
                yield f"{path}: {field} is true: the pod shares the node's namespace"
        for volume in as_list(spec.get("volumes")):
            host = str(dig(volume, "hostPath", "path", default="")).rstrip("/") or None
            if dig(volume, "hostPath") is not None and (host is None or _sensitive_host_path(host)):
                yield f"{path}: volume {dig(volume, 'name')!r} mounts the node's {host or '/'}"
        for c in containers(spec):
            ctx = dig(c, "securityContext", default={})
            name = c.get("name")
            if dig(ctx, "privileged") is True:
                yield f"{path}: container {name!r} is privileged"
            added = sorted(
                {_capability(a) for a in as_list(dig(ctx, "capabilities", "add"))} & NODE_CAPABILITIES
            )
            if added:
                yield f"{path}: container {name!r} adds capabilities {', '.join(added)}"
            if dig(ctx, "allowPrivilegeEscalation") is True:
                yield f"{path}: container {name!r} sets allowPrivilegeEscalation: true"


def _sensitive_host_path(host: str) -> bool:
    return any(host == p or host.startswith(p + "/") for p in SENSITIVE_HOST_PATHS) or host in HOST_ROOTS


def check_no_host_namespaces(type_: str, inputs: Mapping[str, Any]) -> Iterator[str]:
    if kind_of(type_, inputs) not in TRAINING_KINDS:
        return
    for path, spec in pod_specs(inputs):
        for field in HOST_NAMESPACES:
            if spec.get(field) is True:
                yield f"{path}: {field} is true"


def check_run_as_non_root(type_: str, inputs: Mapping[str, Any]) -> Iterator[str]:
    if kind_of(type_, inputs) not in TRAINING_KINDS:
        return
    for path, spec in pod_specs(inputs):
        pod = dig(spec, "securityContext", default={})
        for c in containers(spec):
            ctx = dig(c, "securityContext", default={})
            non_root = dig(ctx, "runAsNonRoot", default=dig(pod, "runAsNonRoot"))
            user = dig(ctx, "runAsUser", default=dig(pod, "runAsUser"))
            if user == 0:
                yield f"{path}: container {c.get('name')!r} runs as UID 0"
            elif non_root is not True:
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
    wanted: set[str] = set()
    for section in ("requests", "limits"):
        for key, count in dig(resources, section, default={}).items():
            if key in GPU_TAINTS and str(count) not in ("0", ""):
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
        description="No container runs privileged or gets the node another way: node-escaping "
        "capabilities (ALL, SYS_ADMIN, ...), allowPrivilegeEscalation true, hostPID/hostIPC/hostNetwork, "
        "hostPath mounts of / or the node's configuration, credentials and runtime sockets.",
        remediation="Remove securityContext.privileged, those capabilities and host namespaces; set "
        "allowPrivilegeEscalation: false; mount what the pod needs (emptyDir, a PVC, a projected token) "
        "instead of host paths. A platform agent that needs the node is listed in "
        "policy/helm_exceptions.yaml with the reason.",
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
        description="Training pods' containers run as a non-root user (runAsNonRoot: true, UID not 0).",
        remediation="Set securityContext.runAsNonRoot: true and a non-zero runAsUser on the pod; build the "
        "image with a USER (docker/*/Dockerfile).",
        level="mandatory",
        severity="high",
        types=(KUBERNETES,),
        check=check_run_as_non_root,
    ),
    Rule(
        name="k8s-images-pinned",
        description="Container images carry an explicit tag other than :latest (or a digest).",
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
