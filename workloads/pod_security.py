"""The Pod Security Standards (kubernetes.io/docs/concepts/security/pod-security-standards/, the checks
of k8s.io/pod-security-admission/policy) applied to pod templates: which checks of `baseline` and
`restricted` a pod fails. What the admission controller does with `pod-security.kubernetes.io/enforce`.
"""

from __future__ import annotations

from typing import Any

LEVELS = ("restricted", "baseline", "privileged")  # strictest first
BASELINE_CAPABILITIES = {
    "AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD", "NET_BIND_SERVICE",
    "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT",
}  # fmt: skip
SAFE_SYSCTLS = {
    "kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range", "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.tcp_syncookies", "net.ipv4.ping_group_range", "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout", "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
}  # fmt: skip
RESTRICTED_VOLUMES = {
    "configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim", "projected",
    "secret",
}  # fmt: skip
WORKLOAD_KINDS = {"Deployment", "DaemonSet", "StatefulSet", "ReplicaSet", "Job"}


def pod_spec(obj: dict[str, Any]) -> dict[str, Any] | None:
    """The pod spec a workload object creates pods from (CronJob: its job's template)."""
    if obj["kind"] == "Pod":
        return obj["spec"]
    if obj["kind"] in WORKLOAD_KINDS:
        return obj["spec"]["template"]["spec"]
    if obj["kind"] == "CronJob":
        return obj["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    return None


def _containers(spec: dict[str, Any]) -> list[dict[str, Any]]:
    return [c for key in ("initContainers", "containers", "ephemeralContainers") for c in spec.get(key) or []]


def baseline_violations(spec: dict[str, Any]) -> list[str]:
    found = []
    for key in ("hostNetwork", "hostPID", "hostIPC"):
        if spec.get(key):
            found.append(key)
    pod_sc = spec.get("securityContext") or {}
    if (pod_sc.get("seccompProfile") or {}).get("type") == "Unconfined":
        found.append("seccomp Unconfined")
    for sysctl in pod_sc.get("sysctls") or []:
        if sysctl["name"] not in SAFE_SYSCTLS:
            found.append(f"sysctl {sysctl['name']}")
    for v in spec.get("volumes") or []:
        if "hostPath" in v:
            found.append(f"hostPath volume {v['name']}")
    for c in _containers(spec):
        sc = c.get("securityContext") or {}
        if sc.get("privileged"):
            found.append(f"{c['name']}: privileged")
        if (sc.get("windowsOptions") or {}).get("hostProcess"):
            found.append(f"{c['name']}: hostProcess")
        added = set((sc.get("capabilities") or {}).get("add") or []) - BASELINE_CAPABILITIES
        if added:
            found.append(f"{c['name']}: capabilities {sorted(added)}")
        if any(p.get("hostPort") for p in c.get("ports") or []):
            found.append(f"{c['name']}: hostPort")
        if sc.get("procMount", "Default") != "Default":
            found.append(f"{c['name']}: procMount")
        if (sc.get("seccompProfile") or {}).get("type") == "Unconfined":
            found.append(f"{c['name']}: seccomp Unconfined")
        if (sc.get("appArmorProfile") or {}).get("type") == "Unconfined":
            found.append(f"{c['name']}: appArmor Unconfined")
    return found


def restricted_violations(spec: dict[str, Any]) -> list[str]:
    found = baseline_violations(spec)
    pod_sc = spec.get("securityContext") or {}
    for v in spec.get("volumes") or []:
        kinds = set(v) - {"name"}
        if not kinds <= RESTRICTED_VOLUMES:
            found.append(f"volume {v['name']}: {sorted(kinds)}")
    pod_seccomp = (pod_sc.get("seccompProfile") or {}).get("type")
    for c in _containers(spec):
        sc = c.get("securityContext") or {}
        if sc.get("allowPrivilegeEscalation") is not False:
            found.append(f"{c['name']}: allowPrivilegeEscalation not false")
        if not sc.get("runAsNonRoot", pod_sc.get("runAsNonRoot")):
            found.append(f"{c['name']}: runAsNonRoot not true")
        if sc.get("runAsUser", pod_sc.get("runAsUser")) == 0:
            found.append(f"{c['name']}: runAsUser 0")
        if (sc.get("seccompProfile") or {}).get("type", pod_seccomp) not in ("RuntimeDefault", "Localhost"):
            found.append(f"{c['name']}: seccompProfile not RuntimeDefault/Localhost")
        caps = sc.get("capabilities") or {}
        if "ALL" not in (caps.get("drop") or []):
            found.append(f"{c['name']}: capabilities do not drop ALL")
        if set(caps.get("add") or []) - {"NET_BIND_SERVICE"}:
            found.append(f"{c['name']}: adds capabilities beyond NET_BIND_SERVICE")
    return found


def strictest_level(specs: list[dict[str, Any]]) -> str:
    """The strictest Pod Security level every one of `specs` passes."""
    if not any(restricted_violations(s) for s in specs):
        return "restricted"
    if not any(baseline_violations(s) for s in specs):
        return "baseline"
    return "privileged"
