"""Kueue's webhooks for the job kinds the platform lets it manage (TrainJob, and the JobSet Trainer creates
for it), and what Kueue writes back into an admitted TrainJob: kubernetes-sigs/kueue at v0.19.2.

- `vtrainjob.kb.io`, `vjobset.kb.io`: pkg/controller/jobs/trainjob/trainjob_webhook.go and
  pkg/controller/jobs/jobset/jobset_webhook.go validateCreate, both jobframework.ValidateJobOnCreate
  (pkg/controller/jobframework/validation.go: the queue-name and prebuilt-workload labels must be
  DNS-1123 subdomains, max-exec-time a positive integer) and, on an update, validateUpdateForQueueName (a
  running job keeps its queue).
- Kueue's own integrations of other kinds (PyTorchJob, MPIJob, RayJob, RayCluster, batch Job, Pod...)
  are off on this platform (infra/addons/training.py KUEUE_FRAMEWORKS): their webhooks are registered by
  the chart but served by a no-op (pkg/controller/jobframework/setup.go, SetupWebhook with
  WithNoopWebhook(true) for a disabled integration).
- Kueue 0.19.2 is built against Trainer v2.2.1 (its go.mod: github.com/kubeflow/trainer/v2 v2.2.1) and
  `Update`s an admitted TrainJob with those types (trainjob_controller.go RunWithPodSetsInfo; the
  reconciler's client.Update): a field of a runtime patch that v2.2.1's types lack is dropped from the
  live object. FIELDS_V2_2_1 lists the patch fields those types carry
  (kubeflow/trainer@v2.2.1 pkg/apis/trainer/v1alpha1/trainjob_types.go RuntimePatch ... ContainerPatch).

Not ported (no object of ours sets them; tests/sim/test_kueue_webhooks.py asserts so): Topology Aware
Scheduling annotations (kueue.x-k8s.io/podset-*), workload slicing, admission-gated-by.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from sim.kubernetes.names import FieldError, dns1123_subdomain

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PREBUILT_WORKLOAD_LABEL = "kueue.x-k8s.io/prebuilt-workload-name"
MAX_EXEC_TIME_LABEL = "kueue.x-k8s.io/max-exec-time-seconds"
UNPORTED_PREFIXES = (
    "kueue.x-k8s.io/podset-",
    "kueue.x-k8s.io/elastic-job",
    "kueue.x-k8s.io/admission-gated-by",
)
_OBJECT_META = None  # metav1.ObjectMeta: every field is carried
# The runtime patch as Trainer v2.2.1's Go types carry it: a key's value is the nested type, None where a
# whole Kubernetes type (metav1.ObjectMeta, corev1.Volume, ...) is carried as is.
_CONTAINER_PATCH = {"name": None, "env": None, "volumeMounts": None, "securityContext": None}
_POD_SPEC_PATCH = {
    "serviceAccountName": None,
    "volumes": None,
    "initContainers": _CONTAINER_PATCH,
    "containers": _CONTAINER_PATCH,
    "imagePullSecrets": None,
    "securityContext": None,
    "nodeSelector": None,
    "affinity": None,
    "tolerations": None,
    "schedulingGates": None,
}
_POD_TEMPLATE_PATCH = {"metadata": _OBJECT_META, "spec": _POD_SPEC_PATCH}
_REPLICATED_JOB_PATCH = {
    "name": None,
    "template": {"metadata": _OBJECT_META, "spec": {"template": _POD_TEMPLATE_PATCH}},
}
FIELDS_V2_2_1: dict[str, Any] = {
    "manager": None,
    "time": None,
    "trainingRuntimeSpec": {
        "template": {"metadata": _OBJECT_META, "spec": {"replicatedJobs": _REPLICATED_JOB_PATCH}}
    },
}


def _label_errors(labels: Mapping[str, str], key: str) -> list[FieldError]:
    if key not in labels:
        return []
    messages = dns1123_subdomain(labels[key])
    return (
        [FieldError(f"metadata.labels[{key}]", "Invalid value", ",".join(messages), labels[key])]
        if messages
        else []
    )


def validate_job_on_create(job: Mapping[str, Any]) -> list[FieldError]:
    """jobframework.ValidateJobOnCreate for a TrainJob or a JobSet."""
    labels = job["metadata"].get("labels") or {}
    errs = _label_errors(labels, QUEUE_LABEL) + _label_errors(labels, PREBUILT_WORKLOAD_LABEL)
    if MAX_EXEC_TIME_LABEL in labels:
        value = labels[MAX_EXEC_TIME_LABEL]
        path = f"metadata.labels[{MAX_EXEC_TIME_LABEL}]"
        if not value.lstrip("-").isdigit():
            errs.append(
                FieldError(path, "Invalid value", f'strconv.Atoi: parsing "{value}": invalid syntax', value)
            )
        elif int(value) <= 0:
            errs.append(FieldError(path, "Invalid value", "should be greater than 0", int(value)))
    return errs


def validate_job_on_update(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[FieldError]:
    """validateUpdateForQueueName: the queue of a job that is not suspended cannot change."""
    queue = (new["metadata"].get("labels") or {}).get(QUEUE_LABEL, "")
    before = (old["metadata"].get("labels") or {}).get(QUEUE_LABEL, "")
    errs = validate_job_on_create(new)
    if not new["spec"].get("suspend") and queue != before:
        errs.append(
            FieldError(f"metadata.labels[{QUEUE_LABEL}]", "Invalid value", "field is immutable", queue)
        )
    return errs


def _dropped(value: Any, fields: Any, path: str) -> Iterator[str]:
    if fields is None:
        return
    if isinstance(value, list):
        for i, item in enumerate(value):
            yield from _dropped(item, fields, f"{path}[{i}]")
        return
    if not isinstance(value, Mapping):
        return
    for key, inner in value.items():
        if key not in fields:
            yield f"{path}.{key}"
        else:
            yield from _dropped(inner, fields[key], f"{path}.{key}")


def dropped_on_admission(train_job: Mapping[str, Any]) -> list[str]:
    """The runtime patch fields Kueue's Update of the admitted TrainJob drops (empty: none)."""
    patches = train_job["spec"].get("runtimePatches") or []
    return [
        p
        for i, patch in enumerate(patches)
        for p in _dropped(patch, FIELDS_V2_2_1, f"spec.runtimePatches[{i}]")
    ]
