"""JobSet's own webhooks, which the Kubeflow Trainer chart installs (failurePolicy Fail, every namespace):
kubernetes-sigs/jobset at v0.12.0 pkg/webhooks/jobset_webhook.go, `Default` and `ValidateCreate` with its
`validateFailurePolicy`, with the feature gates at their defaults (pkg/features/features.go: InPlaceRestart
and RestartJob off). Trainer 2.3.0 creates one JobSet per TrainJob from the runtime's template
(pkg/runtime/framework/plugins/jobset/jobset.go Build), so every rule of a TrainingRuntime meets this
code once per job, after `pulumi up` has succeeded: a refusal shows only as a
TrainJobResourcesCreationFailed event and a job without pods.

Not ported (no JobSet of ours sets them; tests/sim/test_jobset_webhook.py asserts so): coordinator,
volumeClaimPolicies, network.subdomain, managedBy.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from typing import Any

from sim.kubernetes.names import FieldError, dns1035_label

MIN_RULE_NAME, MAX_RULE_NAME = 1, 128
RULE_NAME = re.compile(r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$")
JOB_FAILURE_REASONS = (
    "BackoffLimitExceeded",
    "DeadlineExceeded",
    "FailedIndexes",
    "MaxFailedIndexesExceeded",
    "PodFailurePolicy",
)
RESTART_JOB_ACTIONS = ("RestartJob", "RestartJobAndIgnoreMaxRestarts")
MAX_INT32 = 2**31 - 1
UNPORTED_FIELDS = ("coordinator", "volumeClaimPolicies", "managedBy")
_TOO_LONG = "must be no more than 63 characters"
JOB_NAME_TOO_LONG = "JobSet name is too long, job names generated for this JobSet will exceed 63 characters"
POD_NAME_TOO_LONG = "JobSet name is too long, pod names generated for this JobSet will exceed 63 characters"


def default(jobset: Mapping[str, Any]) -> dict[str, Any]:
    """jobSetWebhook.Default: what the stored JobSet holds beyond what its creator sent."""
    js = copy.deepcopy(dict(jobset))
    spec = js["spec"]
    spec.setdefault("successPolicy", {"operator": "All"})
    spec.setdefault("startupPolicy", {"startupPolicyOrder": "AnyOrder"})
    for rjob in spec.get("replicatedJobs") or []:
        job_spec = rjob["template"].setdefault("spec", {})
        job_spec.setdefault("completionMode", "Indexed")
        pod = job_spec.setdefault("template", {}).setdefault("spec", {})
        if not pod.get("restartPolicy"):
            pod["restartPolicy"] = "OnFailure"
    network = spec.setdefault("network", {})
    network.setdefault("enableDNSHostnames", True)
    network.setdefault("publishNotReadyAddresses", True)
    for i, rule in enumerate((spec.get("failurePolicy") or {}).get("rules") or []):
        if not rule.get("name"):
            rule["name"] = f"failurePolicyRule{i}"
    return js


def validate_create(jobset: Mapping[str, Any]) -> list[str]:
    """jobSetWebhook.ValidateCreate: every message it returns (empty: admitted)."""
    name, spec = jobset["metadata"]["name"], jobset["spec"]
    errs: list[Any] = []
    rjobs = spec.get("replicatedJobs") or []
    if rjobs and rjobs[0].get("dependsOn"):
        errs.append("DependsOn can't be set for the first ReplicatedJob")
    names: list[str] = []
    for i, rjob in enumerate(rjobs):
        path = f"spec.replicatedJobs[{i}]"
        names.append(rjob["name"])
        job_spec = rjob["template"].get("spec") or {}
        replicas = rjob.get("replicas", 1)
        if job_spec.get("parallelism", 1) * replicas > MAX_INT32:
            errs.append(
                f"the product of replicas and parallelism must not exceed {MAX_INT32} for replicatedJob "
                f"'{rjob['name']}'"
            )
        for message in dns1035_label(rjob.get("groupName", "default")):
            if _TOO_LONG in message:
                message = ".spec.replicatedJob[].groupName is too long, must be less than 63 characters"
            errs.append(FieldError(f"{path}.groupName", "Invalid value", message, rjob.get("groupName")))
        longest_job = f"{name}-{rjob['name']}-{replicas - 1}"  # placement.go GenJobName
        for message in dns1035_label(longest_job):
            if _TOO_LONG in message:
                message = JOB_NAME_TOO_LONG
            errs.append(FieldError(f"{path}.name", "Invalid value", message, longest_job))
        if job_spec.get("completionMode") == "Indexed" and job_spec.get("completions") is not None:
            pod_name = f"{name}-{rjob['name']}-{replicas - 1}-{job_spec['completions'] - 1}-abcde"
            for message in dns1035_label(pod_name):
                if _TOO_LONG in message:
                    message = POD_NAME_TOO_LONG
                errs.append(FieldError(f"{path}.name", "Invalid value", message, longest_job))
        for dependency in rjob.get("dependsOn") or []:
            if dependency["name"] not in names:
                errs.append(
                    f"replicatedJob: {rjob['name']} cannot depend on replicatedJob: {dependency['name']}"
                )
    for target in (spec.get("successPolicy") or {}).get("targetReplicatedJobs") or []:
        if target not in names:
            errs.append(f"invalid replicatedJob name '{target}' does not appear in .spec.ReplicatedJobs")
    if spec.get("failurePolicy") is not None:
        errs += validate_failure_policy(spec, set(names))
    return [str(e) for e in errs]


def validate_failure_policy(spec: Mapping[str, Any], rjob_names: set[str]) -> list[str]:
    """validateFailurePolicy, in its order (the uniqueness errors last, one per repeated name)."""
    policy = spec["failurePolicy"]
    rules = policy.get("rules") or []
    errs: list[str] = []
    if any(r.get("action") in RESTART_JOB_ACTIONS for r in rules):
        return [
            "RestartJob and RestartJobAndIgnoreMaxRestarts failure policy actions are not allowed when "
            "RestartJob feature gate is disabled"
        ]
    by_name: dict[str, list[int]] = {}
    for index, rule in enumerate(rules):
        name = rule.get("name") or ""
        if not MIN_RULE_NAME <= len(name) <= MAX_RULE_NAME:
            errs.append(
                f"invalid failure policy rule name of length {len(name)}, the rule name must be at least "
                f"{MIN_RULE_NAME} characters long and at most {MAX_RULE_NAME} characters long"
            )
        by_name.setdefault(name, []).append(index)
        if not RULE_NAME.match(name):
            errs.append(
                f"invalid failure policy rule name '{name}', a failure policy rule name must start with an "
                "alphabetic character, optionally followed by a string of alphanumeric characters or '_,:', "
                "and must end with an alphanumeric character or '_'"
            )
        for target in rule.get("targetReplicatedJobs") or []:
            if target not in rjob_names:
                errs.append(
                    f"invalid replicatedJob name '{target}' in failure policy does not appear in "
                    ".spec.ReplicatedJobs"
                )
        for reason in rule.get("onJobFailureReasons") or []:
            if reason not in JOB_FAILURE_REASONS:
                errs.append(
                    f"invalid job failure reason '{reason}' in failure policy is not a recognized job "
                    "failure reason"
                )
    for name, indices in by_name.items():
        if len(indices) > 1:
            shown = "[" + " ".join(map(str, indices)) + "]"
            errs.append(
                f"rule names are not unique, rules with indices {shown} all have the same name '{name}'"
            )
    return errs
