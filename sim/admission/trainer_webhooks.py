"""Kubeflow Trainer's validating webhooks, at the chart's version (kubeflow/trainer v2.3.0):
`validator.trainingruntime.trainer.kubeflow.org` (pkg/webhooks/trainingruntime_webhook.go
validateReplicatedJobs) and `validator.trainjob.trainer.kubeflow.org` (pkg/webhooks/trainjob_webhook.go,
which runs the runtime's plugins' Validate: pkg/runtime/core/trainingruntime.go ValidateObjects, the torch
plugin pkg/runtime/framework/plugins/torch/torch.go Validate, the jobset plugin
pkg/runtime/framework/plugins/jobset/jobset.go Validate and checkRuntimePatchesImmutability).

Not ported (no object of ours sets them; tests/sim/test_trainer_webhooks.py asserts so): the
initializer jobs' checks (spec.initializer), torchtune's model checks (a torchtune command), the torch
policy's envInjection targets.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sim.kubernetes.names import FieldError, domain_prefixed_path

ANCESTOR_LABEL = "trainer.kubeflow.org/trainjob-ancestor-step"
# The container each ancestor's replicated job must have (trainingruntime_webhook.go expectedContainerNames).
EXPECTED_CONTAINERS = {
    "trainer": "node",
    "model-initializer": "model-initializer",
    "dataset-initializer": "dataset-initializer",
}
TORCHRUN_RESERVED_ENV = (
    "PET_NNODES",
    "PET_NPROC_PER_NODE",
    "PET_NODE_RANK",
    "PET_MASTER_ADDR",
    "PET_MASTER_PORT",
)
ENV_FORBIDDEN_CONTAINERS = ("dataset-initializer", "model-initializer", "node")
UNPORTED_FIELDS = ("initializer",)
PATCHES = "spec.runtimePatches"


def validate_replicated_jobs(rjobs: list[Mapping[str, Any]]) -> list[FieldError]:
    """A TrainingRuntime's create: one replica per ancestor's job, each with the ancestor's container."""
    errs = []
    path = "spec.template.spec.replicatedJobs"
    for i, rjob in enumerate(rjobs):
        labels = (rjob.get("template") or {}).get("metadata", {}).get("labels")
        if labels is None:
            continue
        ancestor = labels.get(ANCESTOR_LABEL)
        if ancestor not in EXPECTED_CONTAINERS:
            continue
        if rjob.get("replicas", 1) != 1:
            errs.append(
                FieldError(f"{path}[{i}].replicas", "Invalid value", "always must be 1", rjob.get("replicas"))
            )
        containers = rjob["template"]["spec"]["template"]["spec"].get("containers") or []
        if not any(c.get("name") == EXPECTED_CONTAINERS[ancestor] for c in containers):
            errs.append(
                FieldError(
                    f"{path}[{i}].template.spec.template.spec.containers",
                    "Invalid value",
                    f"must contain the required container for the ancestor: {ancestor}",
                )
            )
    return errs


def validate_train_job(
    job: Mapping[str, Any], runtime: Mapping[str, Any] | None, old: Mapping[str, Any] | None = None
) -> list[FieldError]:
    """The TrainJob validator on a create (`old` None) or an update, against the namespaced
    TrainingRuntime its runtimeRef names (None: not there)."""
    ref = job["spec"]["runtimeRef"]
    if runtime is None:
        return [
            FieldError(
                "spec.runtimeRef",
                "Invalid value",
                f'trainingruntimes.trainer.kubeflow.org "{ref["name"]}" not found: specified trainingRuntime '
                "must be created before the TrainJob is created",
            )
        ]
    errs: list[FieldError] = []
    if "torch" in (runtime["spec"].get("mlPolicy") or {}):
        env = [e["name"] for e in (job["spec"].get("trainer") or {}).get("env") or []]
        reserved = sorted({n for n in env if n in TORCHRUN_RESERVED_ENV})
        if reserved:
            errs.append(
                FieldError(
                    "spec.trainer.env",
                    "Invalid value",
                    f"must not have reserved envs, invalid envs configured: [{' '.join(reserved)}]",
                )
            )
    return errs + _jobset_plugin(job, runtime, old)


def _containers(rjob: Mapping[str, Any]) -> set[str]:
    pod = rjob["template"]["spec"]["template"]["spec"]
    return {c["name"] for c in [*(pod.get("initContainers") or []), *(pod.get("containers") or [])]}


def _jobset_plugin(
    job: Mapping[str, Any], runtime: Mapping[str, Any], old: Mapping[str, Any] | None
) -> list[FieldError]:
    rjob_containers = {
        r["name"]: _containers(r) for r in runtime["spec"]["template"]["spec"]["replicatedJobs"]
    }
    errs: list[FieldError] = []
    patches = job["spec"].get("runtimePatches") or []
    changed = old is not None and (old["spec"].get("runtimePatches") or []) != patches
    if changed and not (old or {})["spec"].get("suspend") and not job["spec"].get("suspend"):
        errs.append(
            FieldError(
                PATCHES,
                "Forbidden",
                "RuntimePatches can only be modified when the TrainJob is suspended before or after the "
                "update",
            )
        )
    for patch in patches:
        errs += domain_prefixed_path(f"{PATCHES}.manager", patch.get("manager", ""))
        spec = ((patch.get("trainingRuntimeSpec") or {}).get("template") or {}).get("spec")
        for rjob in (spec or {}).get("replicatedJobs") or []:
            containers = rjob_containers.get(rjob["name"])
            if containers is None:
                errs.append(
                    FieldError(
                        PATCHES,
                        "Invalid value",
                        "must not have replicated job that doesn't exist in the runtime job template",
                    )
                )
                continue
            pod = (((rjob.get("template") or {}).get("spec") or {}).get("template") or {}).get("spec")
            if pod is None:
                continue
            for c in pod.get("initContainers") or []:
                if c["name"] not in containers:
                    errs.append(
                        FieldError(
                            PATCHES,
                            "Invalid value",
                            f"must not have initContainer that doesn't exist in the runtime job "
                            f"{rjob['name']}",
                        )
                    )
            for c in pod.get("containers") or []:
                if c["name"] not in containers:
                    errs.append(
                        FieldError(
                            PATCHES,
                            "Invalid value",
                            f"must not have container that doesn't exist in the runtime job {rjob['name']}",
                        )
                    )
                elif c.get("env") and c["name"] in ENV_FORBIDDEN_CONTAINERS:
                    errs.append(
                        FieldError(
                            PATCHES,
                            "Invalid value",
                            "must not have envs for the dataset-initializer, model-initializer, node "
                            "containers",
                        )
                    )
    return errs
