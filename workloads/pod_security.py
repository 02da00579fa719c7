"""The Pod Security Standards applied to pod templates, as `pod-security.kubernetes.io/enforce` applies
them: which checks of `baseline` and `restricted` a pod fails, at a Pod Security version ("latest" by
default, or the `enforce-version` a namespace pins). The checks are policy/pod_security.py's port of
k8s.io/pod-security-admission/policy (the same code the policy pack judges pods with); this module
reads pods out of workload objects and answers per level.
"""

from __future__ import annotations

from typing import Any

from policy.pod_security import (
    BASELINE_CAPABILITIES,
    LEVELS,
    RESTRICTED_VOLUMES,
    SYSCTLS,
    violations,
)

SAFE_SYSCTLS = frozenset().union(*SYSCTLS.values())
WORKLOAD_KINDS = {"Deployment", "DaemonSet", "StatefulSet", "ReplicaSet", "Job"}
__all__ = ["BASELINE_CAPABILITIES", "LEVELS", "RESTRICTED_VOLUMES", "SAFE_SYSCTLS", "WORKLOAD_KINDS"]


def pod_template(obj: dict[str, Any]) -> dict[str, Any] | None:
    """The pod (metadata and spec) a workload object creates pods from (CronJob: its job's template)."""
    if obj["kind"] == "Pod":
        return obj
    if obj["kind"] in WORKLOAD_KINDS:
        return obj["spec"]["template"]
    if obj["kind"] == "CronJob":
        return obj["spec"]["jobTemplate"]["spec"]["template"]
    return None


def pod_spec(obj: dict[str, Any]) -> dict[str, Any] | None:
    """The pod spec a workload object creates pods from (CronJob: its job's template)."""
    template = pod_template(obj)
    return None if template is None else template["spec"]


def baseline_violations(
    spec: dict[str, Any], *, version: str = "latest", metadata: dict[str, Any] | None = None
) -> list[str]:
    return [str(v) for v in violations(spec, metadata, level="baseline", version=version)]


def restricted_violations(
    spec: dict[str, Any], *, version: str = "latest", metadata: dict[str, Any] | None = None
) -> list[str]:
    return [str(v) for v in violations(spec, metadata, level="restricted", version=version)]
