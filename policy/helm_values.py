"""Pod fields set through a Helm release's values. The engine shows the pack a release's inputs, not the
objects the chart renders from them, so a value such as `securityContext: {privileged: true}` would
reach the cluster unseen. Charts pass these blocks through to the pod unchanged (that is what they are
for), so the rule reads them by their Kubernetes field names wherever they sit in the values. What a
chart renders from its own defaults is checked offline against the rendered objects
(policy/chart_exceptions.py).

Values are read however a release gives them: `values`, the files of `valueYamlFiles` (text assets, or
files read from the project), and strings that hold YAML (values a chart passes through `tpl` or
`fromYaml`); Helm renders `"true"` into a template as true, so a string counts as the boolean it spells,
and `imageTag:`-like keys are tags."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from infra.image_refs import image_problem, tag_problem
from policy import pod_security
from policy.core import REPO, Rule, as_list, dig
from policy.coverage import whole_number

RELEASES = (
    "kubernetes:helm.sh/v3:Release",
    "kubernetes:helm.sh/v3:Chart",
    "kubernetes:helm.sh/v4:Chart",
)


def _normalized(cap: Any) -> str:
    text = str(cap).upper()
    return text[4:] if text.startswith("CAP_") else text


BOOLEAN_FIELDS = ("privileged", "allowPrivilegeEscalation", "hostNetwork", "hostPID", "hostIPC")


def _truthy(value: Any) -> bool:
    return value is True or (isinstance(value, str) and value.strip().lower() == "true")


def _falsy(value: Any) -> bool:
    return value is False or (isinstance(value, str) and value.strip().lower() == "false")


def _field(key: str, value: Any) -> str | None:
    """Why one `key: value` of the values grants a pod more than baseline (None: it does not)."""
    if key in BOOLEAN_FIELDS and _truthy(value):
        return f"{key}: true"
    if key == "runAsUser" and whole_number(value) == 0:
        return "runAsUser: 0"
    if key == "runAsNonRoot" and _falsy(value):
        return "runAsNonRoot: false"
    if key == "hostPort" and value not in (None, "") and whole_number(value) != 0:
        return f"hostPort: {value}"
    if key == "procMount" and value not in (None, "Default"):
        return f"procMount: {value}"
    profile = key in ("seccompProfile", "appArmorProfile") and isinstance(value, Mapping)
    if profile and str(value.get("type", "")).lower() == "unconfined":
        return f"{key}.type: {value.get('type')}"
    if key == "capabilities" and isinstance(value, Mapping):
        added = [
            str(c)
            for c in as_list(value.get("add"))
            if _normalized(c) not in pod_security.BASELINE_CAPABILITIES
        ]
        if added:
            return f"capabilities.add: {added}"
    if key == "hostPath" and value is not None:
        path = value.get("path") if isinstance(value, Mapping) else value
        return f"hostPath {pod_security.normalized_host_path(path)}"
    tag_key = key.lower().endswith("tag") and not key.lower().endswith("pulltag")
    if tag_key and isinstance(value, str) and value and (problem := tag_problem(value)):
        return f"image tag: {problem}"
    if key in ("type", "serviceType") and value in ("LoadBalancer", "NodePort"):
        return f"{key}: {value} exposes a Service outside the cluster"
    tagged = isinstance(value, str) and (":" in value.rsplit("/", 1)[-1] or "@" in value)
    if key == "image" and tagged and (problem := image_problem(value)):
        return problem
    return None


def _yaml(text: str) -> Any:
    """The mapping or list a multi-line or flow-style string holds (None for anything else)."""
    if "\n" not in text and not text.lstrip().startswith(("{", "[")):
        return None
    try:
        parsed = yaml.safe_load(text)
    except yaml.YAMLError:
        return None
    return parsed if isinstance(parsed, Mapping | list) else None


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
    elif isinstance(values, str) and (parsed := _yaml(values)) is not None:
        yield from _walk(parsed, f"{path}(yaml)")


def _asset_text(asset: Any) -> tuple[str | None, str]:
    """(text, name) of a values file asset: a text asset's text, or the file a path asset names (relative
    paths from the project's root, where `pulumi up` runs the program); None when it cannot be read."""
    text = getattr(asset, "text", None) or (asset.get("text") if isinstance(asset, Mapping) else None)
    path = getattr(asset, "path", None) or (asset.get("path") if isinstance(asset, Mapping) else None)
    if isinstance(text, str):
        return text, "text asset"
    if not isinstance(path, str):
        return None, repr(asset)
    file = Path(path) if Path(path).is_absolute() else REPO / path
    try:
        return file.read_text(), path
    except OSError:
        return None, path


def check_release_values(type_: str, inputs: Mapping[str, Any]) -> Iterator[str]:
    yield from _walk(dig(inputs, "values", default={}))
    for i, asset in enumerate(as_list(dig(inputs, "valueYamlFiles"))):
        text, name = _asset_text(asset)
        if text is None:
            yield f"valueYamlFiles[{i}] ({name}) cannot be read: its values cannot be checked"
            continue
        try:
            values = yaml.safe_load(text)
        except yaml.YAMLError as err:
            yield f"valueYamlFiles[{i}] ({name}) is not YAML ({err}): its values cannot be checked"
            continue
        yield from _walk(values, f"valueYamlFiles[{i}]")


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
