"""Pod fields set through a Helm release's values. The engine shows the pack a release's inputs, not the
objects the chart renders from them, so a value such as `securityContext: {privileged: true}` would
reach the cluster unseen. Charts pass these blocks through to the pod unchanged (that is what they are
for), so the rule reads them by their Kubernetes field names wherever they sit in the values. What a
chart renders from its own defaults is checked offline against the rendered objects
(policy/chart_exceptions.py)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from infra.image_refs import tag_problem
from policy import pod_security
from policy.core import Rule, dig

RELEASES = (
    "kubernetes:helm.sh/v3:Release",
    "kubernetes:helm.sh/v3:Chart",
    "kubernetes:helm.sh/v4:Chart",
)


def _normalized(cap: Any) -> str:
    text = str(cap).upper()
    return text[4:] if text.startswith("CAP_") else text


def _field(key: str, value: Any) -> str | None:
    """Why one `key: value` of the values grants a pod more than baseline (None: it does not)."""
    if (
        key in ("privileged", "allowPrivilegeEscalation", "hostNetwork", "hostPID", "hostIPC")
        and value is True
    ):
        return f"{key}: true"
    if key == "runAsUser" and value == 0:
        return "runAsUser: 0"
    if key == "runAsNonRoot" and value is False:
        return "runAsNonRoot: false"
    if key == "hostPort" and value not in (None, 0, ""):
        return f"hostPort: {value}"
    if key == "procMount" and value not in (None, "Default"):
        return f"procMount: {value}"
    profile = key in ("seccompProfile", "appArmorProfile") and isinstance(value, Mapping)
    if profile and str(value.get("type", "")).lower() == "unconfined":
        return f"{key}.type: {value.get('type')}"
    if key == "capabilities" and isinstance(value, Mapping):
        added = [
            str(c) for c in value.get("add") or [] if _normalized(c) not in pod_security.BASELINE_CAPABILITIES
        ]
        if added:
            return f"capabilities.add: {added}"
    if key == "hostPath" and value is not None:
        path = value.get("path") if isinstance(value, Mapping) else value
        return f"hostPath {pod_security.normalized_host_path(path)}"
    if key == "tag" and isinstance(value, str) and value and (problem := tag_problem(value)):
        return f"image tag: {problem}"
    return None


def _walk(values: Any, path: str = "") -> Iterator[str]:
    if isinstance(values, Mapping):
        for key, value in values.items():
            where = f"{path}.{key}" if path else str(key)
            if why := _field(str(key), value):
                yield f"values {where}: {why}"
            yield from _walk(value, where)
    elif isinstance(values, Sequence) and not isinstance(values, str):
        for i, value in enumerate(values):
            yield from _walk(value, f"{path}[{i}]")


def check_release_values(type_: str, inputs: Mapping[str, Any]) -> Iterator[str]:
    yield from _walk(dig(inputs, "values", default={}))


RULES = (
    Rule(
        name="k8s-helm-values-no-privilege",
        description="A Helm release's values grant no pod more than Pod Security baseline: no privileged, "
        "host namespaces, hostPath, hostPort, added capabilities outside baseline, UID 0, "
        "allowPrivilegeEscalation, procMount or Unconfined seccomp/AppArmor, and no moving image tag.",
        remediation="Leave the chart's security context as the pinned chart ships it (what it renders is "
        "checked in policy/chart_exceptions.yaml), or tighten it; pin image tags to versions.",
        level="mandatory",
        severity="high",
        types=RELEASES,
        check=check_release_values,
    ),
)
