"""Training Operator v1's validating webhook for PyTorchJobs,
`validator.pytorchjob.training-operator.kubeflow.org` (kubeflow/trainer at v1.9.2, the commit
infra/pins.py pins): pkg/webhooks/pytorch/pytorchjob_webhook.go validatePyTorchJob, validateSpec,
validatePyTorchReplicaSpecs, and pkg/common/util/webhooks.go ValidateRunPolicy / ValidateRunPolicyUpdate.

Its ValidateUpdate passes the new object as the old one too (`oldJob := newObj.(...)`), so on an update
the managedBy immutability check compares the job with itself and never fails: `validate_update`
reproduces that. MPIJob has no validating webhook at v1.9.2 (pkg/webhooks/webhooks.go maps it to
`scaffold`, which registers nothing).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sim.kubernetes.names import FieldError, dns1035_label

SPECS = "spec.pytorchReplicaSpecs"
DEFAULT_CONTAINER = "pytorch"
ROLES = ("Master", "Worker")
MANAGED_BY = ("kubeflow.org/training-operator", "kueue.x-k8s.io/multikueue")


def _run_policy(policy: Mapping[str, Any]) -> list[FieldError]:
    manager = policy.get("managedBy")
    if manager is not None and manager not in MANAGED_BY:
        allowed = ", ".join(f'"{m}"' for m in MANAGED_BY)
        return [
            FieldError(
                "spec.runPolicy.managedBy", "Unsupported value", f"supported values: {allowed}", manager
            )
        ]
    return []


def _replica_specs(specs: Mapping[str, Any] | None) -> list[FieldError]:
    errs: list[FieldError] = []
    if specs is None:
        return [FieldError(SPECS, "Required value", "must be required")]
    for role, replica in specs.items():
        path = f"{SPECS}[{role}]"
        containers_path = f"{path}.template.spec.containers"
        if role not in ROLES:
            errs.append(FieldError(path, "Unsupported value", 'supported values: "Master", "Worker"', role))
        containers = ((replica or {}).get("template") or {}).get("spec", {}).get("containers") or []
        if not containers:
            errs.append(FieldError(containers_path, "Required value", "must be specified"))
        for i, container in enumerate(containers):
            if not container.get("image"):
                errs.append(FieldError(f"{containers_path}[{i}].image", "Required value", "must be required"))
        if not any(c.get("name") == DEFAULT_CONTAINER for c in containers):
            errs.append(
                FieldError(
                    containers_path,
                    "Required value",
                    f"must have at least one container with name {DEFAULT_CONTAINER}",
                )
            )
        replicas = (replica or {}).get("replicas")
        if role == "Master":
            if replicas != 1:
                errs.append(FieldError(f"{path}.replicas", "Forbidden", "must be 1"))
        elif replicas is not None and replicas < 1:
            errs.append(FieldError(f"{path}.replicas", "Forbidden", "must be at least 1"))
    return errs


def validate(
    job: Mapping[str, Any], old: Mapping[str, Any] | None = None
) -> tuple[list[str], list[FieldError]]:
    """validatePyTorchJob(old, new): (warnings, errors)."""
    errs = [
        FieldError(
            "metadata.name", "Invalid value", f"should match: {','.join(messages)}", job["metadata"]["name"]
        )
        for messages in [dns1035_label(job["metadata"]["name"])]
        if messages
    ]
    spec = job["spec"]
    if old is not None and (old["spec"].get("runPolicy") or {}).get("managedBy") != (
        spec.get("runPolicy") or {}
    ).get("managedBy"):
        errs.append(FieldError("spec.runPolicy.managedBy", "Invalid value", "field is immutable"))
    errs += _run_policy(spec.get("runPolicy") or {})
    warnings: list[str] = []
    elastic = spec.get("elasticPolicy")
    if elastic is not None:
        if "Worker" not in (spec.get("pytorchReplicaSpecs") or {}):
            errs.append(
                FieldError(
                    f"{SPECS}[Worker]", "Required value", "must be configured if elastic policy is used"
                )
            )
        if elastic.get("nProcPerNode") is not None:
            warnings.append("spec.elasticPolicy.nProcPerNode is deprecated, use spec.nprocPerNode instead")
            if spec.get("nprocPerNode") is not None:
                errs.append(
                    FieldError(
                        "spec.elasticPolicy.nProcPerNode",
                        "Forbidden",
                        "must not be used with spec.nprocPerNode",
                    )
                )
    return warnings, errs + _replica_specs(spec.get("pytorchReplicaSpecs"))


def validate_create(job: Mapping[str, Any]) -> list[str]:
    return [str(e) for e in validate(job)[1]]


def validate_update(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """The webhook's ValidateUpdate: upstream hands validatePyTorchJob the new object as the old one."""
    return [str(e) for e in validate(new, old=new)[1]]
