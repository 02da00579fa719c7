"""The Pod Security Standards as the admission controller implements them: a port of the checks of
k8s.io/pod-security-admission/policy (kubernetes/pod-security-admission v0.35.4, policy/check_*.go), with
each check's versions, the restricted checks that override baseline ones, and the user-namespace and
Windows relaxations. `violations(spec, metadata, level, version)` is what `pod-security.kubernetes.io/
enforce: <level>` with `enforce-version: <version>` refuses in a pod; each violation names one container,
volume or field, so a finding can be accepted one item at a time.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

LEVELS = ("restricted", "baseline", "privileged")  # strictest first
Version = tuple[int, int]
LATEST: Version = (1, 10_000)

# check_capabilities_baseline.go capabilities_allowed_1_0
BASELINE_CAPABILITIES = frozenset(
    {
        "AUDIT_WRITE",
        "CHOWN",
        "DAC_OVERRIDE",
        "FOWNER",
        "FSETID",
        "KILL",
        "MKNOD",
        "NET_BIND_SERVICE",
        "SETFCAP",
        "SETGID",
        "SETPCAP",
        "SETUID",
        "SYS_CHROOT",
    }
)
RESTRICTED_CAPABILITIES = frozenset({"NET_BIND_SERVICE"})  # check_capabilities_restricted.go
# check_sysctls.go, by the version that added them.
SYSCTLS: dict[Version, frozenset[str]] = {
    (1, 0): frozenset(
        {
            "kernel.shm_rmid_forced",
            "net.ipv4.ip_local_port_range",
            "net.ipv4.tcp_syncookies",
            "net.ipv4.ping_group_range",
            "net.ipv4.ip_unprivileged_port_start",
        }
    ),
    (1, 27): frozenset({"net.ipv4.ip_local_reserved_ports"}),
    (1, 29): frozenset(
        {
            "net.ipv4.tcp_keepalive_time",
            "net.ipv4.tcp_fin_timeout",
            "net.ipv4.tcp_keepalive_intvl",
            "net.ipv4.tcp_keepalive_probes",
        }
    ),
    (1, 32): frozenset({"net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem"}),
}
# check_restrictedVolumes.go: the volume sources restricted allows.
RESTRICTED_VOLUMES = frozenset(
    {
        "configMap",
        "csi",
        "downwardAPI",
        "emptyDir",
        "ephemeral",
        "image",
        "persistentVolumeClaim",
        "projected",
        "secret",
    }
)
SELINUX_TYPES = frozenset({"", "container_t", "container_init_t", "container_kvm_t"})  # 1.31 adds one
SECCOMP_ANNOTATION_POD = "seccomp.security.alpha.kubernetes.io/pod"
SECCOMP_ANNOTATION_CONTAINER = "container.seccomp.security.alpha.kubernetes.io/"
APPARMOR_ANNOTATION = "container.apparmor.security.beta.kubernetes.io/"


@dataclass(frozen=True)
class Violation:
    check: str  # the check's ID in pod-security-admission
    detail: str

    def __str__(self) -> str:
        return f"{self.check}: {self.detail}"


def parse_version(version: str | None) -> Version:
    """ "latest", "v1.35" or "1.35" (a namespace's enforce-version; anything else reads as latest, as
    api.ParseVersion does)."""
    m = re.fullmatch(r"v?1\.(\d+)", str(version or "latest"))
    return (1, int(m.group(1))) if m else LATEST


def containers(spec: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """visitor.go visitContainers: init containers, containers, ephemeral containers."""
    return [
        c
        for key in ("initContainers", "containers", "ephemeralContainers")
        for c in spec.get(key) or []
        if isinstance(c, Mapping)
    ]


def _ctx(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    ctx = obj.get("securityContext")
    return ctx if isinstance(ctx, Mapping) else {}


def _name(c: Mapping[str, Any]) -> str:
    return str(c.get("name"))


def _windows(spec: Mapping[str, Any]) -> bool:
    return str((spec.get("os") or {}).get("name", "")).lower() == "windows"


def _user_namespace(spec: Mapping[str, Any]) -> bool:
    """helpers.go relaxPolicyForUserNamespacePod: hostUsers: false."""
    return spec.get("hostUsers") is False


def normalized_host_path(path: Any) -> str:
    """A hostPath as the node resolves it: `//etc`, `/./etc/` and `/var/../etc` are /etc."""
    text = re.sub("/+", "/", "/" + str(path or ""))
    return posixpath.normpath(text) if text != "/" else "/"


Check = Callable[[Mapping[str, Any], Mapping[str, Any], Version], Iterator[Violation]]


def host_namespaces(spec: Mapping[str, Any], meta: Mapping[str, Any], v: Version) -> Iterator[Violation]:
    for field in ("hostNetwork", "hostPID", "hostIPC"):
        if spec.get(field) is True:
            yield Violation("hostNamespaces", f"{field} is true: the pod shares the node's namespace")


def privileged(spec: Mapping[str, Any], meta: Mapping[str, Any], v: Version) -> Iterator[Violation]:
    for c in containers(spec):
        if _ctx(c).get("privileged") is True:
            yield Violation("privileged", f"container {_name(c)!r} is privileged")


def _added(c: Mapping[str, Any]) -> list[str]:
    return [str(x) for x in ((_ctx(c).get("capabilities") or {}).get("add") or [])]


def capabilities_baseline(
    spec: Mapping[str, Any], meta: Mapping[str, Any], v: Version
) -> Iterator[Violation]:
    for c in containers(spec):
        bad = [cap for cap in _added(c) if cap not in BASELINE_CAPABILITIES]
        if bad:
            yield Violation(
                "capabilities_baseline", f"container {_name(c)!r} adds capabilities {', '.join(bad)}"
            )


def capabilities_restricted(
    spec: Mapping[str, Any], meta: Mapping[str, Any], v: Version
) -> Iterator[Violation]:
    if v >= (1, 25) and _windows(spec):
        return
    for c in containers(spec):
        drop = (_ctx(c).get("capabilities") or {}).get("drop") or []
        if "ALL" not in drop:
            yield Violation(
                "capabilities_restricted", f"container {_name(c)!r} does not drop ALL capabilities"
            )
        bad = [cap for cap in _added(c) if cap not in RESTRICTED_CAPABILITIES]
        if bad:
            yield Violation(
                "capabilities_restricted",
                f"container {_name(c)!r} adds capabilities {', '.join(bad)} (only NET_BIND_SERVICE)",
            )


def host_path_volumes(spec: Mapping[str, Any], meta: Mapping[str, Any], v: Version) -> Iterator[Violation]:
    for volume in spec.get("volumes") or []:
        if isinstance(volume, Mapping) and volume.get("hostPath") is not None:
            path = normalized_host_path((volume.get("hostPath") or {}).get("path"))
            yield Violation("hostPathVolumes", f"volume {volume.get('name')!r} mounts the node's {path}")


def restricted_volumes(spec: Mapping[str, Any], meta: Mapping[str, Any], v: Version) -> Iterator[Violation]:
    for volume in spec.get("volumes") or []:
        if not isinstance(volume, Mapping):
            continue
        sources = [k for k, val in volume.items() if k != "name" and val is not None]
        if not any(s in RESTRICTED_VOLUMES for s in sources):
            kinds = ", ".join(sorted(sources)) or "unknown"
            yield Violation("restrictedVolumes", f"volume {volume.get('name')!r} is a {kinds} volume")


def host_ports(spec: Mapping[str, Any], meta: Mapping[str, Any], v: Version) -> Iterator[Violation]:
    for c in containers(spec):
        ports = [p.get("hostPort") for p in c.get("ports") or [] if isinstance(p, Mapping)]
        bad = [str(p) for p in ports if p not in (None, 0)]
        if bad:
            yield Violation("hostPorts", f"container {_name(c)!r} uses hostPort {', '.join(bad)}")


def app_armor(spec: Mapping[str, Any], meta: Mapping[str, Any], v: Version) -> Iterator[Violation]:
    allowed = ("RuntimeDefault", "Localhost")
    pod = (_ctx(spec).get("appArmorProfile") or {}).get("type")
    if pod is not None and pod not in allowed:
        yield Violation("appArmorProfile", f"the pod sets AppArmor profile type {pod}")
    for c in containers(spec):
        kind = (_ctx(c).get("appArmorProfile") or {}).get("type")
        if kind is not None and kind not in allowed:
            yield Violation("appArmorProfile", f"container {_name(c)!r} sets AppArmor profile type {kind}")
    for key, value in (meta.get("annotations") or {}).items():
        ok = not value or value == "runtime/default" or str(value).startswith("localhost/")
        if str(key).startswith(APPARMOR_ANNOTATION) and not ok:
            yield Violation("appArmorProfile", f"annotation {key}={value!r}")


def se_linux(spec: Mapping[str, Any], meta: Mapping[str, Any], v: Version) -> Iterator[Violation]:
    types = SELINUX_TYPES | ({"container_engine_t"} if v >= (1, 31) else set())
    holders = [("the pod", _ctx(spec))] + [(f"container {_name(c)!r}", _ctx(c)) for c in containers(spec)]
    for who, ctx in holders:
        opts = ctx.get("seLinuxOptions")
        if not isinstance(opts, Mapping):
            continue
        if str(opts.get("type") or "") not in types or opts.get("user") or opts.get("role"):
            yield Violation("seLinuxOptions", f"{who} sets seLinuxOptions {dict(opts)}")


def proc_mount(spec: Mapping[str, Any], meta: Mapping[str, Any], v: Version) -> Iterator[Violation]:
    for c in containers(spec):
        mount = _ctx(c).get("procMount")
        if mount is not None and mount != "Default":
            yield Violation("procMount", f"container {_name(c)!r} sets procMount {mount}")


def proc_mount_baseline(spec: Mapping[str, Any], meta: Mapping[str, Any], v: Version) -> Iterator[Violation]:
    if v >= (1, 35) and _user_namespace(spec):
        return
    yield from proc_mount(spec, meta, v)


def _seccomp_fields(spec: Mapping[str, Any]) -> Iterator[tuple[str, Any]]:
    yield "the pod", (_ctx(spec).get("seccompProfile") or {}).get("type")
    for c in containers(spec):
        yield f"container {_name(c)!r}", (_ctx(c).get("seccompProfile") or {}).get("type")


def seccomp_baseline(spec: Mapping[str, Any], meta: Mapping[str, Any], v: Version) -> Iterator[Violation]:
    if v < (1, 19):
        valid = ("runtime/default", "docker/default")
        for key, value in (meta.get("annotations") or {}).items():
            seccomp = key == SECCOMP_ANNOTATION_POD or str(key).startswith(SECCOMP_ANNOTATION_CONTAINER)
            if seccomp and value not in valid and not str(value).startswith("localhost/"):
                yield Violation("seccompProfile_baseline", f"annotation {key}={value!r}")
        return
    for who, kind in _seccomp_fields(spec):
        if kind is not None and kind not in ("RuntimeDefault", "Localhost"):
            yield Violation("seccompProfile_baseline", f"{who} sets seccompProfile type {kind}")


def seccomp_restricted(spec: Mapping[str, Any], meta: Mapping[str, Any], v: Version) -> Iterator[Violation]:
    if v >= (1, 25) and _windows(spec):
        return
    fields = list(_seccomp_fields(spec))
    pod_set = fields[0][1] in ("RuntimeDefault", "Localhost")
    for who, kind in fields:
        if kind is not None and kind not in ("RuntimeDefault", "Localhost"):
            yield Violation("seccompProfile_restricted", f"{who} sets seccompProfile type {kind}")
        elif kind is None and who != "the pod" and not pod_set:
            yield Violation(
                "seccompProfile_restricted", f"{who} has no seccompProfile RuntimeDefault or Localhost"
            )


def sysctls(spec: Mapping[str, Any], meta: Mapping[str, Any], v: Version) -> Iterator[Violation]:
    allowed = frozenset().union(*(names for since, names in SYSCTLS.items() if v >= since))
    for sysctl in _ctx(spec).get("sysctls") or []:
        name = str((sysctl or {}).get("name"))
        if name not in allowed:
            yield Violation("sysctls", f"the pod sets sysctl {name}")


def windows_host_process(spec: Mapping[str, Any], meta: Mapping[str, Any], v: Version) -> Iterator[Violation]:
    holders = [("the pod", _ctx(spec))] + [(f"container {_name(c)!r}", _ctx(c)) for c in containers(spec)]
    for who, ctx in holders:
        if (ctx.get("windowsOptions") or {}).get("hostProcess") is True:
            yield Violation("windowsHostProcess", f"{who} sets windowsOptions.hostProcess")


def host_probes(spec: Mapping[str, Any], meta: Mapping[str, Any], v: Version) -> Iterator[Violation]:
    for c in containers(spec):
        handlers = [c.get(p) for p in ("livenessProbe", "readinessProbe", "startupProbe")]
        handlers += [(c.get("lifecycle") or {}).get(h) for h in ("postStart", "preStop")]
        hosts = [
            str(h[kind]["host"])
            for h in handlers
            if isinstance(h, Mapping)
            for kind in ("httpGet", "tcpSocket")
            if isinstance(h.get(kind), Mapping) and h[kind].get("host")
        ]
        if hosts:
            yield Violation(
                "hostProbesAndHostLifecycle",
                f"container {_name(c)!r} probes or hooks host {', '.join(hosts)}",
            )


def allow_privilege_escalation(
    spec: Mapping[str, Any], meta: Mapping[str, Any], v: Version
) -> Iterator[Violation]:
    if v >= (1, 25) and _windows(spec):
        return
    for c in containers(spec):
        if _ctx(c).get("allowPrivilegeEscalation") is not False:
            yield Violation(
                "allowPrivilegeEscalation",
                f"container {_name(c)!r} does not set allowPrivilegeEscalation: false",
            )


def run_as_non_root(spec: Mapping[str, Any], meta: Mapping[str, Any], v: Version) -> Iterator[Violation]:
    if v >= (1, 35) and _user_namespace(spec):
        return
    pod = _ctx(spec).get("runAsNonRoot")
    if pod is False:
        yield Violation("runAsNonRoot", "the pod sets runAsNonRoot: false")
    for c in containers(spec):
        own = _ctx(c).get("runAsNonRoot")
        if own is False or (own is None and pod is not True):
            yield Violation("runAsNonRoot", f"container {_name(c)!r} does not run with runAsNonRoot: true")


def run_as_user(spec: Mapping[str, Any], meta: Mapping[str, Any], v: Version) -> Iterator[Violation]:
    if v >= (1, 35) and _user_namespace(spec):
        return
    if _ctx(spec).get("runAsUser") == 0:
        yield Violation("runAsUser", "the pod sets runAsUser: 0")
    for c in containers(spec):
        if _ctx(c).get("runAsUser") == 0:
            yield Violation("runAsUser", f"container {_name(c)!r} sets runAsUser: 0")


@dataclass(frozen=True)
class Versioned:
    since: Version
    run: Check
    overrides: tuple[str, ...] = ()


# check ID -> (level, versions, oldest first), as policy/check_*.go register them.
CHECKS: dict[str, tuple[str, tuple[Versioned, ...]]] = {
    "hostNamespaces": ("baseline", (Versioned((1, 0), host_namespaces),)),
    "privileged": ("baseline", (Versioned((1, 0), privileged),)),
    "capabilities_baseline": ("baseline", (Versioned((1, 0), capabilities_baseline),)),
    "hostPathVolumes": ("baseline", (Versioned((1, 0), host_path_volumes),)),
    "hostPorts": ("baseline", (Versioned((1, 0), host_ports),)),
    "appArmorProfile": ("baseline", (Versioned((1, 0), app_armor),)),
    "seLinuxOptions": ("baseline", (Versioned((1, 0), se_linux),)),
    "procMount": ("baseline", (Versioned((1, 0), proc_mount_baseline),)),
    "seccompProfile_baseline": ("baseline", (Versioned((1, 0), seccomp_baseline),)),
    "sysctls": ("baseline", (Versioned((1, 0), sysctls),)),
    "windowsHostProcess": ("baseline", (Versioned((1, 0), windows_host_process),)),
    "hostProbesAndHostLifecycle": ("baseline", (Versioned((1, 34), host_probes),)),
    "restrictedVolumes": ("restricted", (Versioned((1, 0), restricted_volumes, ("hostPathVolumes",)),)),
    "allowPrivilegeEscalation": ("restricted", (Versioned((1, 8), allow_privilege_escalation),)),
    "runAsNonRoot": ("restricted", (Versioned((1, 0), run_as_non_root),)),
    "runAsUser": ("restricted", (Versioned((1, 23), run_as_user),)),
    "seccompProfile_restricted": (
        "restricted",
        (Versioned((1, 19), seccomp_restricted, ("seccompProfile_baseline",)),),
    ),
    "capabilities_restricted": (
        "restricted",
        (Versioned((1, 22), capabilities_restricted, ("capabilities_baseline",)),),
    ),
    "procMount_restricted": ("restricted", (Versioned((1, 35), proc_mount, ("procMount",)),)),
}


def _at(versions: Sequence[Versioned], version: Version) -> Versioned | None:
    found = [v for v in versions if v.since <= version]
    return found[-1] if found else None


def violations(
    spec: Mapping[str, Any],
    metadata: Mapping[str, Any] | None = None,
    *,
    level: str = "restricted",
    version: str = "latest",
) -> list[Violation]:
    """What `level` at `version` refuses in a pod (spec and metadata); [] for privileged."""
    if level not in LEVELS:
        raise ValueError(f"level {level!r} is not one of {', '.join(LEVELS)}")
    at = parse_version(version)
    wanted = (
        ("baseline",) if level == "baseline" else ("baseline", "restricted") if level == "restricted" else ()
    )
    chosen = {cid: _at(vs, at) for cid, (lvl, vs) in CHECKS.items() if lvl in wanted}
    overridden = {o for check in chosen.values() if check is not None for o in check.overrides}
    found: list[Violation] = []
    for cid, check in chosen.items():
        if check is not None and cid not in overridden:
            found += [Violation(cid, v.detail) for v in check.run(spec, metadata or {}, at)]
    return found
