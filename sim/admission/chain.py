"""A job's objects through admission, as the controllers create them: each object of ours (what `pulumi up`
creates) and each one a controller creates from it (Kubeflow Trainer: a TrainJob's JobSet; JobSet: its
Jobs; the Job controller: their pods; Training Operator v1: a PyTorchJob's or MPIJob's pods; KubeRay: a
RayJob's RayCluster, its pods and the submitter Job), through every webhook of the ledger (ledger.yaml)
that matches it and has a port, mutating ones first, then the API server's own validation of its kind
(sim/kubernetes/job_validation.py for batch/v1 Jobs) and the validating webhooks. An object that is refused
is never created, so nothing is created from it.

What the objects look like comes from sim/operators/pods.py; what each webhook does, from its port.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from infra.contract import KUEUE_NAMESPACE_LABEL
from sim.admission import jobset_webhook, kueue_webhooks, trainer_webhooks, training_operator_webhooks
from sim.kubernetes import job_validation
from sim.operators import pods as operator_pods
from workloads.platform import PlatformFacts

LEDGER_PATH = Path(__file__).with_name("ledger.yaml")
PULUMI = "pulumi up"
# Resource names of the kinds that reach admission here (kind.lower() + "s" for all others).
PLURALS = {"NetworkPolicy": "networkpolicies"}


@functools.cache
def ledger() -> dict[str, Any]:
    return yaml.safe_load(LEDGER_PATH.read_text())


@dataclass(frozen=True)
class Created:
    """One object and who creates it; `parent`: the index of the object it is created from."""

    obj: dict[str, Any]
    by: str
    parent: int | None = None

    @property
    def shown(self) -> str:
        meta = self.obj["metadata"]
        name = meta.get("name") or f"{meta.get('generateName', '')}<random>"
        return f"{self.obj['kind']} {meta.get('namespace', '')}/{name}".replace(" /", " ")


@dataclass(frozen=True)
class Refusal:
    created: Created
    judge: str  # the webhook's name, or "API server (<kind> validation)"
    message: str

    def __str__(self) -> str:
        return f"{self.judge} refuses {self.created.shown} (created by {self.created.by}): {self.message}"


def _resource(obj: Mapping[str, Any]) -> str:
    group = obj["apiVersion"].rpartition("/")[0]
    plural = PLURALS.get(obj["kind"], obj["kind"].lower() + "s")
    return f"{group}/{plural}" if group else plural


def _selects(selector: Any, labels: Mapping[str, str]) -> bool:
    """A LabelSelector (metav1) against labels; `all` (the ledger's word for none) selects everything."""
    if selector == "all":
        return True
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for e in selector.get("matchExpressions") or []:
        present, value = e["key"] in labels, labels.get(e["key"])
        if not {
            "In": present and value in e.get("values", []),
            "NotIn": not present or value not in e.get("values", []),
            "Exists": present,
            "DoesNotExist": not present,
        }[e["operator"]]:
            return False
    return True


def webhooks_that_see(obj: Mapping[str, Any], namespace_labels: Mapping[str, str]) -> list[tuple[str, dict]]:
    """(name, ledger entry) of every webhook whose rules, namespace and object selectors match a CREATE of
    `obj` in a namespace with `namespace_labels`; mutating ones first, as the API server calls them."""
    found = []
    for name, entry in ledger()["webhooks"].items():
        if _resource(obj) not in entry["resources"] or "CREATE" not in entry["operations"]:
            continue
        if entry["namespaces"] == "kueue-managed" and namespace_labels.get(KUEUE_NAMESPACE_LABEL) != "true":
            continue
        if not _selects(entry["objects"], obj["metadata"].get("labels") or {}):
            continue
        found.append((name, entry))
    return sorted(found, key=lambda item: item[1]["type"] != "mutating")


@dataclass(frozen=True)
class Context:
    """What a webhook looks up besides the object: the namespaced TrainingRuntimes of the stack."""

    runtimes: Mapping[str, Mapping[str, Any]]


def _messages(errors: Sequence[Any]) -> list[str]:
    return [str(e) for e in errors]


def _train_job(obj: Mapping[str, Any], ctx: Context) -> list[str]:
    return _messages(
        trainer_webhooks.validate_train_job(obj, ctx.runtimes.get(obj["spec"]["runtimeRef"]["name"]))
    )


# The ledger's `judged_by` -> the port, called as the webhook calls it. Validating: the messages of a
# refusal (empty: admitted). Mutating: the object as the webhook leaves it.
VALIDATE: dict[str, Callable[[Mapping[str, Any], Context], list[str]]] = {
    "sim.admission.trainer_webhooks.validate_train_job": _train_job,
    "sim.admission.trainer_webhooks.validate_replicated_jobs": lambda o, _: _messages(
        trainer_webhooks.validate_replicated_jobs(o["spec"]["template"]["spec"]["replicatedJobs"])
    ),
    "sim.admission.jobset_webhook.validate_create": lambda o, _: jobset_webhook.validate_create(o),
    "sim.admission.kueue_webhooks.validate_job_on_create": lambda o, _: _messages(
        kueue_webhooks.validate_job_on_create(o)
    ),
    "sim.admission.training_operator_webhooks.validate_create": lambda o, _: (
        training_operator_webhooks.validate_create(o)
    ),
}
MUTATE: dict[str, Callable[[Mapping[str, Any]], dict[str, Any]]] = {
    "sim.admission.jobset_webhook.default": jobset_webhook.default,
}
# The API server's own validation of a kind, after the mutating webhooks.
BUILT_IN: dict[str, Callable[[Mapping[str, Any]], list[str]]] = {
    "Job": lambda o: _messages(job_validation.validate_job(o)),
}


def lifecycle(objects: Sequence[Mapping[str, Any]], platform: PlatformFacts) -> list[Created]:
    """Every object of the stack's life, in creation order: ours, then what the controllers make of them."""
    settings = operator_pods.operator_settings(platform)
    runtimes = {o["metadata"]["name"]: o for o in objects if o["kind"] == "TrainingRuntime"}
    out = [Created(dict(o), PULUMI) for o in objects]
    for index, obj in enumerate(objects):
        name = obj["metadata"]["name"]
        if obj["kind"] == "TrainJob":
            runtime = runtimes.get(obj["spec"]["runtimeRef"]["name"])
            if runtime is None:
                continue  # the TrainJob itself is refused (no such runtime)
            jobset, _ = operator_pods.train_job_jobset(obj, runtime, platform)
            out.append(Created(jobset, f"Kubeflow Trainer (TrainJob {name})", index))
            jobset_at = len(out) - 1
            for job in operator_pods.jobset_jobs(jobset):
                out.append(Created(job, f"JobSet {name}", jobset_at))
                job_at = len(out) - 1
                for pod in operator_pods.indexed_job_pods(job, subdomain=name):
                    out.append(Created(pod, f"Job {job['metadata']['name']}", job_at))
        elif obj["kind"] in ("PyTorchJob", "MPIJob"):
            made = (
                operator_pods.pytorch_job_pods if obj["kind"] == "PyTorchJob" else operator_pods.mpi_job_pods
            )(obj, settings)
            out += [Created(p.pod, f"Training Operator ({obj['kind']} {name})", index) for p in made]
        elif obj["kind"] == "RayJob":
            out += _ray_objects(obj, index, settings)
    return out


def _ray_objects(
    job: Mapping[str, Any], index: int, settings: operator_pods.OperatorSettings
) -> list[Created]:
    """KubeRay 1.7.0: the RayCluster (rayjob_controller.go getOrCreateRayClusterInstance) and its pods,
    and in K8sJobMode the submitter Job (createNewK8sJob: named after the RayJob, backoffLimit from
    submitterConfig, 2 by default)."""
    name, namespace, spec = job["metadata"]["name"], job["metadata"]["namespace"], job["spec"]
    by = f"KubeRay (RayJob {name})"
    cluster = {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {"name": f"{name}-{operator_pods.RANDOM}", "namespace": namespace, "labels": {}},
        "spec": spec["rayClusterSpec"],
    }
    out = [Created(cluster, by, index)]
    made = operator_pods.ray_job_pods(job, settings)
    out += [Created(p.pod, by, index) for p in made if p.role != "submitter"]
    if spec.get("submissionMode", "K8sJobMode") == "K8sJobMode":
        submitter = next(p.pod for p in made if p.role == "submitter")
        template = {"metadata": {"labels": submitter["metadata"]["labels"]}, "spec": submitter["spec"]}
        backoff = (spec.get("submitterConfig") or {}).get("backoffLimit", 2)
        meta = {"name": name, "namespace": namespace, "labels": {"ray.io/originated-from-cr-name": name}}
        submitter_job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta}
        submitter_job["spec"] = {"backoffLimit": backoff, "template": template}
        out.append(Created(submitter_job, by, index))
    return out


def admit(objects: Sequence[Mapping[str, Any]], platform: PlatformFacts) -> list[Refusal]:
    """Every refusal on the way: an empty list means each object the stack leads to is admitted."""
    namespaces = {o["metadata"]["name"]: o for o in objects if o["kind"] == "Namespace"}
    ctx = Context({o["metadata"]["name"]: o for o in objects if o["kind"] == "TrainingRuntime"})
    refused: set[int] = set()
    refusals: list[Refusal] = []
    for index, created in enumerate(lifecycle(objects, platform)):
        if created.parent is not None and created.parent in refused:
            refused.add(index)  # never created: its parent was refused
            continue
        namespace = namespaces.get(created.obj["metadata"].get("namespace", ""), {})
        labels = (namespace.get("metadata") or {}).get("labels") or {}
        obj: Mapping[str, Any] = created.obj
        found: list[Refusal] = []
        for _, entry in webhooks_that_see(obj, labels):
            port = entry.get("judged_by")
            if port in MUTATE:
                obj = MUTATE[port](obj)
        built_in = BUILT_IN.get(obj["kind"])
        found += [
            Refusal(created, f"API server ({obj['kind']} validation)", m)
            for m in (built_in(obj) if built_in else [])
        ]
        for name, entry in webhooks_that_see(obj, labels):
            port = entry.get("judged_by")
            if port in VALIDATE:
                found += [Refusal(created, f"webhook {name}", m) for m in VALIDATE[port](obj, ctx)]
        if found:
            refused.add(index)
            refusals += found
    return refusals
