"""The API server's own validation of a batch/v1 Job, for the Jobs the controllers create from ours (a
JobSet's Jobs, a RayJob's submitter): kubernetes/kubernetes at release-1.35
pkg/apis/batch/validation/validation.go validateJobSpec and its podFailurePolicy rules
(validatePodFailurePolicy, validatePodFailurePolicyRule, validatePodFailurePolicyRuleOnExitCodes,
validatePodFailurePolicyRuleOnPodConditions, validatePodReplacementPolicy), with the limits of
k8s.io/api v0.35.0 batch/v1/types.go (20 rules, 255 exit codes, 20 condition patterns). Also the name
rule every Job meets through its generated pod labels: `batch.kubernetes.io/job-name` carries the Job's
name, a label value (63 characters at most).

Not ported (no object of ours sets them; tests/sim/test_job_validation.py asserts so on the committed
stacks): successPolicy, backoffLimitPerIndex/maxFailedIndexes, managedBy, a manual selector.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sim.kubernetes.names import FieldError, label_key, label_value

MAX_RULES, MAX_EXIT_CODES, MAX_CONDITION_PATTERNS = 20, 255, 20
MAX_PARALLELISM_INDEXED = 100_000
ACTIONS = ("Count", "FailIndex", "FailJob", "Ignore")
OPERATORS = ("In", "NotIn")
CONDITION_STATUSES = ("False", "True", "Unknown")
UNPORTED_FIELDS = ("successPolicy", "backoffLimitPerIndex", "maxFailedIndexes", "managedBy", "manualSelector")


def _quoted(values: tuple[str, ...]) -> str:
    return "[" + " ".join(f'"{v}"' for v in values) + "]"


def _supported(values: tuple[str, ...]) -> str:
    return "supported values: " + ", ".join(f'"{v}"' for v in values)


def validate_job(job: Mapping[str, Any]) -> list[FieldError]:
    """Every error the API server returns for this Job on create (empty: admitted)."""
    errs = [
        FieldError(
            "metadata.labels[batch.kubernetes.io/job-name]", "Invalid value", m, job["metadata"]["name"]
        )
        for m in label_value(job["metadata"]["name"])
    ]
    return errs + validate_job_spec(job["spec"])


def validate_job_spec(spec: Mapping[str, Any], path: str = "spec") -> list[FieldError]:
    errs: list[FieldError] = []
    for key in (
        "parallelism",
        "completions",
        "activeDeadlineSeconds",
        "backoffLimit",
        "ttlSecondsAfterFinished",
    ):
        if spec.get(key) is not None and spec[key] < 0:
            errs.append(
                FieldError(f"{path}.{key}", "Invalid value", "must be greater than or equal to 0", spec[key])
            )
    mode = spec.get("completionMode")
    if mode is not None and mode not in ("NonIndexed", "Indexed"):
        errs.append(
            FieldError(
                f"{path}.completionMode", "Unsupported value", _supported(("Indexed", "NonIndexed")), mode
            )
        )
    if mode == "Indexed":
        if spec.get("completions") is None:
            errs.append(
                FieldError(f"{path}.completions", "Required value", "when completion mode is Indexed")
            )
        if (spec.get("parallelism") or 0) > MAX_PARALLELISM_INDEXED:
            errs.append(
                FieldError(
                    f"{path}.parallelism",
                    "Invalid value",
                    f"must be less than or equal to {MAX_PARALLELISM_INDEXED} when completion mode is "
                    "Indexed",
                    spec["parallelism"],
                )
            )
    policy = spec.get("podFailurePolicy")
    if policy is not None:
        errs += _pod_failure_policy(spec, policy, f"{path}.podFailurePolicy")
    replacement = spec.get("podReplacementPolicy")
    if replacement is not None:
        allowed = ("Failed",) if policy is not None else ("Failed", "TerminatingOrFailed")
        if replacement not in allowed:
            errs.append(
                FieldError(
                    f"{path}.podReplacementPolicy", "Unsupported value", _supported(allowed), replacement
                )
            )
    restart = ((spec.get("template") or {}).get("spec") or {}).get("restartPolicy") or ""
    restart_path = f"{path}.template.spec.restartPolicy"
    if restart in ("Always", ""):
        errs.append(FieldError(restart_path, "Required value", 'valid values: "OnFailure", "Never"'))
    elif restart not in ("OnFailure", "Never"):
        errs.append(
            FieldError(restart_path, "Unsupported value", _supported(("OnFailure", "Never")), restart)
        )
    elif policy is not None and restart != "Never":
        errs.append(
            FieldError(
                restart_path,
                "Invalid value",
                'only "Never" is supported when podFailurePolicy is specified',
                restart,
            )
        )
    return errs


def _pod_failure_policy(spec: Mapping[str, Any], policy: Mapping[str, Any], path: str) -> list[FieldError]:
    errs: list[FieldError] = []
    rules = policy.get("rules") or []
    if len(rules) > MAX_RULES:
        errs.append(
            FieldError(f"{path}.rules", "Too many", f"must have at most {MAX_RULES} items", len(rules))
        )
    pod = (spec.get("template") or {}).get("spec") or {}
    names = {c["name"] for c in [*(pod.get("containers") or []), *(pod.get("initContainers") or [])]}
    for i, rule in enumerate(rules):
        errs += _rule(spec, rule, f"{path}.rules[{i}]", names)
    return errs


def _rule(spec: Mapping[str, Any], rule: Mapping[str, Any], path: str, names: set[str]) -> list[FieldError]:
    errs: list[FieldError] = []
    action = rule.get("action") or ""
    if not action:
        errs.append(FieldError(f"{path}.action", "Required value", f"valid values: {_quoted(ACTIONS)}"))
    elif action == "FailIndex":
        if spec.get("backoffLimitPerIndex") is None:
            errs.append(
                FieldError(
                    f"{path}.action", "Invalid value", "requires the backoffLimitPerIndex to be set", action
                )
            )
    elif action not in ACTIONS:
        errs.append(FieldError(f"{path}.action", "Unsupported value", _supported(ACTIONS), action))
    codes, conditions = rule.get("onExitCodes"), rule.get("onPodConditions") or []
    if codes is not None:
        errs += _on_exit_codes(codes, f"{path}.onExitCodes", names)
    if conditions:
        errs += _on_pod_conditions(conditions, f"{path}.onPodConditions")
    if codes is not None and conditions:
        errs.append(
            FieldError(
                path, "Invalid value", "specifying both OnExitCodes and OnPodConditions is not supported"
            )
        )
    if codes is None and not conditions:
        errs.append(
            FieldError(path, "Invalid value", "specifying one of OnExitCodes and OnPodConditions is required")
        )
    return errs


def _on_pod_conditions(patterns: list[Mapping[str, Any]], path: str) -> list[FieldError]:
    errs: list[FieldError] = []
    if len(patterns) > MAX_CONDITION_PATTERNS:
        errs.append(
            FieldError(path, "Too many", f"must have at most {MAX_CONDITION_PATTERNS} items", len(patterns))
        )
    for j, pattern in enumerate(patterns):
        kind = pattern.get("type") or ""
        errs += [FieldError(f"{path}[{j}].type", "Invalid value", m, kind) for m in label_key(kind)]
        status = pattern.get("status") or ""
        if not status:
            errs.append(
                FieldError(
                    f"{path}[{j}].status", "Required value", f"valid values: {_quoted(CONDITION_STATUSES)}"
                )
            )
        elif status not in CONDITION_STATUSES:
            errs.append(
                FieldError(f"{path}[{j}].status", "Unsupported value", _supported(CONDITION_STATUSES), status)
            )
    return errs


def _on_exit_codes(codes: Mapping[str, Any], path: str, names: set[str]) -> list[FieldError]:
    errs: list[FieldError] = []
    operator = codes.get("operator") or ""
    if not operator:
        errs.append(FieldError(f"{path}.operator", "Required value", f"valid values: {_quoted(OPERATORS)}"))
    elif operator not in OPERATORS:
        errs.append(FieldError(f"{path}.operator", "Unsupported value", _supported(OPERATORS), operator))
    container = codes.get("containerName")
    if container is not None and container not in names:
        errs.append(
            FieldError(
                f"{path}.containerName",
                "Invalid value",
                "must be one of the container or initContainer names in the pod template",
                container,
            )
        )
    values = list(codes.get("values") or [])
    if not values:
        errs.append(FieldError(f"{path}.values", "Invalid value", "at least one value is required", values))
    elif len(values) > MAX_EXIT_CODES:
        errs.append(
            FieldError(f"{path}.values", "Too many", f"must have at most {MAX_EXIT_CODES} items", len(values))
        )
    seen: set[int] = set()
    for j, value in enumerate(values):
        if operator == "In" and value == 0:
            errs.append(
                FieldError(f"{path}.values[{j}]", "Invalid value", "must not be 0 for the In operator", 0)
            )
        if value in seen:
            errs.append(FieldError(f"{path}.values[{j}]", "Duplicate value", "", value))
        seen.add(value)
    if any(a > b for a, b in zip(values, values[1:], strict=False)):
        errs.append(FieldError(f"{path}.values", "Invalid value", "must be ordered", values))
    return errs
