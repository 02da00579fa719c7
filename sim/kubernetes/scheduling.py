"""Would the pods of a rendered workload ever run? A scheduling simulation against the platform's contract.

For every pod the rendered job leads to, as its operator creates it (sim/operators/pods.py: the
TrainJob's JobSet pods with Kueue's flavors written in, a PyTorchJob's Master and Workers with their init
container, a RayJob's head, workers and submitter, an MPIJob's launcher and workers), it looks for a node
source (infra.contract.AcceleratorPool) that can host the pods: the node selector and required node
affinity against the labels a node of the pool carries, the tolerations against its taints (Kubernetes'
matching rules), each pod's effective requests (init containers included) against one instance, a device
plugin serving that node for every extended resource, and enough nodes in the source for the job's pods.
A queued job must also fit its queue's nominal quota, every requested resource covered, and the pods the
namespace's ResourceQuota (quota_problems). Pure functions of plain dicts: the same objects `render`
returns and `pulumi up` creates.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from infra.accelerators import CATALOG
from infra.contract import EFA_RESOURCE, AcceleratorPool, DevicePlugin, PoolTaint, Toleration, quantity
from sim.kubernetes.pod_resources import missing_quota_resources, pod_requests, quota_usage
from sim.operators.pods import KUEUE_QUEUE_LABEL, OperatorPod, OperatorSettings, operator_pods
from workloads.platform import PlatformFacts

_BASIC = {"cpu", "memory", "ephemeral-storage", "pods"}
# The pools do not export their root volumes; none is smaller than this (infra/config: a managed group's
# diskSizeGiB >= 20, Karpenter's rootVolumeGiB >= 50). An operator's init container asks for some (the MPI
# launcher's kubectl-delivery: 5Gi).
MIN_NODE_DISK = Decimal(20 * 2**30)
# Training Operator v1 kinds: where each keeps its replicas (Master/Worker, Launcher/Worker).
REPLICA_SPECS = {"PyTorchJob": "pytorchReplicaSpecs", "MPIJob": "mpiReplicaSpecs"}


def tolerated(tolerations: Sequence[Toleration], taint: PoolTaint) -> bool:
    """Whether any of `tolerations` tolerates `taint`: k8s.io/api core/v1/toleration.go ToleratesTaint at
    release-1.35 with the alpha comparison operators (Gt, Lt) off, as EKS runs it."""
    return any(_tolerates(t, taint) for t in tolerations)


def _tolerates(tol: Toleration, taint: PoolTaint) -> bool:
    if tol.effect and tol.effect != taint.effect:
        return False  # an empty effect matches every effect
    if tol.key and tol.key != taint.key:
        return False  # an empty key matches every key (validation allows it only with Exists)
    if tol.operator == "Exists":
        return True
    return tol.operator in ("", "Equal") and tol.value == taint.value


def serves(plugin: DevicePlugin, labels: Mapping[str, str], taints: Sequence[PoolTaint]) -> bool:
    """Whether a device plugin's DaemonSet runs on a node with these labels and taints."""
    return (
        all(labels.get(k) == v for k, v in plugin.node_selector.items())
        and all(labels.get(k) in vs for k, vs in plugin.node_affinity.items())
        and all(tolerated(plugin.tolerations, t) for t in taints if t.effect != "PreferNoSchedule")
    )


@dataclass(frozen=True)
class PodTemplate:
    job: str  # "<Kind>/<name>/<replica>"
    count: int
    node_selector: dict[str, str]
    # Required node affinity's nodeSelectorTerms (ORed); None when the pod requires none.
    node_terms: list[dict[str, Any]] | None
    tolerations: list[Toleration]
    requests: dict[str, str]  # per pod
    queue: str | None = None  # the ClusterQueue (Kueue) or Queue (Volcano) admitting the job
    held: str | None = None  # why its pods are not created (a queue that cannot admit the job)


@dataclass
class Verdict:
    template: PodTemplate
    source: str | None = None  # the pool that hosts it
    reasons: list[str] = field(default_factory=list)  # why not, per pool or queue

    @property
    def schedulable(self) -> bool:
        return self.source is not None and not self.reasons


def pod_templates(objects: Sequence[Mapping[str, Any]], platform: PlatformFacts) -> list[PodTemplate]:
    """One template per role of every job among `objects`: its pods as the operators create them on
    `platform` (sim/operators/pods.py), their count and one pod's effective requests."""
    local_queues = {
        o["metadata"]["name"]: o["spec"]["clusterQueue"] for o in objects if o["kind"] == "LocalQueue"
    }
    queues: dict[str, str | None] = {}
    for obj in objects:
        queue = (obj["metadata"].get("labels") or {}).get(KUEUE_QUEUE_LABEL)
        if obj["kind"] in REPLICA_SPECS:
            queue = queue or (obj["spec"]["runPolicy"].get("schedulingPolicy") or {}).get("queue")
        # Without a LocalQueue in the stack, the shared namespace's queue points at the same name.
        queues[f"{obj['kind']}/{obj['metadata']['name']}"] = local_queues.get(queue, queue) if queue else None
    roles: dict[tuple[str, str], list[OperatorPod]] = {}
    for pod in operator_pods(objects, platform):
        roles.setdefault((pod.job, pod.role), []).append(pod)
    return [
        _template(f"{job}/{role}", len(pods), pods[0], queues.get(job)) for (job, role), pods in roles.items()
    ]


def _template(name: str, count: int, pod: OperatorPod, queue: str | None) -> PodTemplate:
    spec = pod.spec
    required = (
        spec.get("affinity", {}).get("nodeAffinity", {}).get("requiredDuringSchedulingIgnoredDuringExecution")
    )
    terms = None if required is None else list(required.get("nodeSelectorTerms") or [])
    return PodTemplate(
        job=name,
        count=count,
        node_selector=dict(spec.get("nodeSelector", {})),
        node_terms=terms,
        tolerations=[Toleration(**t) for t in spec.get("tolerations", [])],
        requests={k: str(v) for k, v in pod_requests(spec).items()},
        queue=queue,
        held=pod.held,
    )


# Node affinity as k8s.io/component-helpers scheduling/corev1/nodeaffinity/nodeaffinity.go matches it, with
# k8s.io/apimachinery pkg/labels/selector.go (NewRequirement, Requirement.Matches) at release-1.35.
NODE_SELECTOR_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")
_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_INT64 = range(-(2**63), 2**63)


def _int64(text: str) -> int | None:
    """strconv.ParseInt(text, 10, 64), or None when it fails."""
    if not re.fullmatch(r"[+-]?[0-9]+", text) or int(text) not in _INT64:
        return None
    return int(text)


def _key_error(key: str) -> str | None:
    """validateLabelKey (a qualified name: an optional DNS-subdomain prefix and '/', then a name)."""
    prefix, _, name = key.rpartition("/")
    if "/" in prefix or (prefix and (len(prefix) > 253 or not _DNS_SUBDOMAIN.fullmatch(prefix))):
        return "prefix part must be a lowercase RFC 1123 subdomain"
    if len(name) > 63 or not _NAME.fullmatch(name):
        return (
            "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end "
            "with an alphanumeric character"
        )
    return None


def requirement_errors(expr: Mapping[str, Any], path: str = "") -> list[tuple[str, str]]:
    """(field, detail) for each way one NodeSelectorRequirement of matchExpressions fails to parse
    (nodeSelectorRequirementsAsSelector, labels.NewRequirement). A term with any matches no node."""
    key, op, values = expr.get("key", ""), expr.get("operator"), list(expr.get("values") or [])
    if op not in NODE_SELECTOR_OPERATORS:
        return [
            (f"{path}.operator", f"Unsupported value: {op!r}: supported values: {NODE_SELECTOR_OPERATORS}")
        ]
    errors = [(f"{path}.key", e) for e in [_key_error(key)] if e]
    if op in ("In", "NotIn") and not values:
        errors.append((f"{path}.values", "for 'in', 'notin' operators, values set can't be empty"))
    if op in ("Exists", "DoesNotExist") and values:
        errors.append((f"{path}.values", "values set must be empty for exists and does not exist"))
    if op in ("Gt", "Lt"):
        if len(values) != 1:
            errors.append((f"{path}.values", "for 'Gt', 'Lt' operators, exactly one value is required"))
        errors += [
            (f"{path}.values[{i}]", "for 'Gt', 'Lt' operators, the value must be an integer")
            for i, v in enumerate(values)
            if _int64(v) is None
        ]
    errors += [
        (f"{path}.values[{i}]", "a valid label must be an empty string or consist of alphanumeric characters")
        for i, v in enumerate(values)
        if len(v) > 63 or (v and not _NAME.fullmatch(v))
    ]
    return errors


def matches_expression(labels: Mapping[str, str], expr: Mapping[str, Any]) -> bool:
    """One parsed requirement against a node's labels (Requirement.Matches)."""
    key, op, values = expr["key"], expr["operator"], list(expr.get("values") or [])
    if op == "In":
        return key in labels and labels[key] in values
    if op == "NotIn":
        return key not in labels or labels[key] not in values
    if op == "Exists":
        return key in labels
    if op == "DoesNotExist":
        return key not in labels
    if op in ("Gt", "Lt") and key in labels and len(values) == 1:
        node, wanted = _int64(labels[key]), _int64(values[0])
        if node is None or wanted is None:
            return False  # a label that is not an integer matches neither
        return node > wanted if op == "Gt" else node < wanted
    return False


def _field_errors(expr: Mapping[str, Any], path: str) -> list[tuple[str, str]]:
    """nodeSelectorRequirementsAsFieldSelector: In or NotIn with exactly one value."""
    if expr.get("operator") not in ("In", "NotIn"):
        return [
            (f"{path}.operator", f"Unsupported value: {expr.get('operator')!r}: supported values: In, NotIn")
        ]
    if len(expr.get("values") or []) != 1:
        return [(f"{path}.values", "must have one element")]
    return []


def term_errors(term: Mapping[str, Any], path: str = "") -> list[tuple[str, str]]:
    """newNodeSelectorTerm's parse errors for one NodeSelectorTerm."""
    return [
        *(
            e
            for i, x in enumerate(term.get("matchExpressions") or [])
            for e in requirement_errors(x, f"{path}.matchExpressions[{i}]")
        ),
        *(
            e
            for i, x in enumerate(term.get("matchFields") or [])
            for e in _field_errors(x, f"{path}.matchFields[{i}]")
        ),
    ]


def node_selector_errors(terms: Sequence[Mapping[str, Any]]) -> list[tuple[str, str]]:
    """NewNodeSelector's errors: every term's, empty terms skipped."""
    return [e for i, t in enumerate(terms) for e in term_errors(t, f"nodeSelectorTerms[{i}]")]


def term_matches(term: Mapping[str, Any], labels: Mapping[str, str], node_name: str = "") -> bool:
    """nodeSelectorTerm.match: an empty term or one that fails to parse matches nothing; matchFields
    (metadata.name only) apply to a node that has a name."""
    expressions, fields = term.get("matchExpressions") or [], term.get("matchFields") or []
    if not (expressions or fields) or term_errors(term):
        return False
    if not all(matches_expression(labels, e) for e in expressions):
        return False
    node_fields = {"metadata.name": node_name} if node_name else {}
    return not node_fields or all(
        (node_fields.get(f["key"], "") == f["values"][0]) == (f["operator"] == "In") for f in fields
    )


def node_selector_matches(
    terms: Sequence[Mapping[str, Any]], labels: Mapping[str, str], node_name: str = ""
) -> bool:
    """LazyErrorNodeSelector.Match: the terms ORed; no terms match nothing."""
    return any(term_matches(t, labels, node_name) for t in terms)


def required_affinity_matches(
    spec: Mapping[str, Any], labels: Mapping[str, str], node_name: str = ""
) -> bool:
    """GetRequiredNodeAffinity(pod).Match(node): the pod's nodeSelector and its required node affinity."""
    if any(labels.get(k) != v for k, v in (spec.get("nodeSelector") or {}).items()):
        return False
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    )
    return required is None or node_selector_matches(
        required.get("nodeSelectorTerms") or [], labels, node_name
    )


def _node_problems(t: PodTemplate, pool: AcceleratorPool, platform: PlatformFacts) -> list[str]:
    """Why no node of `pool` can host one pod of `t` (empty when some instance type can)."""
    problems: set[str] = set()
    acc = CATALOG[pool.accelerator]
    for it in pool.instance_types:
        instance = acc.instance(it)
        for capacity_type in pool.capacity_types:
            labels = pool.node_labels_for(it, capacity_type)
            found = []
            missing = {k: v for k, v in t.node_selector.items() if labels.get(k) != v}
            if missing:
                found.append(f"nodeSelector {missing} not on its nodes")
            if t.node_terms is not None and not node_selector_matches(t.node_terms, labels):
                found.append(f"required node affinity excludes {it}")
            for taint in pool.taints:
                if taint.effect != "PreferNoSchedule" and not tolerated(t.tolerations, taint):
                    found.append(f"taint {taint.key}={taint.value}:{taint.effect} not tolerated")
            # Startup taints are gone by the time a training pod can land (the startup GPU check removes
            # them), so they need no toleration; a pod that tolerates one would land on unchecked GPUs.
            for taint in pool.startup_taints:
                if tolerated(t.tolerations, taint):
                    found.append(f"tolerates the startup taint {taint.key}: it would land on unchecked GPUs")
            capacity = {
                # Allocatable, not capacity: the kubelet's reservations and the DaemonSets come first.
                "cpu": instance.allocatable_cpu,
                "memory": instance.allocatable_memory,
                "ephemeral-storage": MIN_NODE_DISK,
                pool.resource_name: Decimal(instance.gpus),
                EFA_RESOURCE: Decimal(instance.efa_interfaces if pool.efa else 0),
            }
            for resource, amount in t.requests.items():
                wanted = quantity(amount)
                if (
                    resource not in _BASIC
                    and wanted > 0
                    and not any(
                        p.resource == resource and serves(p, labels, pool.taints)
                        for p in platform.device_plugins
                    )
                ):
                    found.append(f"no device plugin serves {resource} on {it}")
                have = capacity.get(resource, Decimal(0))
                if wanted > have:
                    shown = f"{have / 2**30:g}Gi" if resource == "memory" else f"{have:g}"
                    found.append(f"{resource} {amount} per pod > {it}'s {shown}")
            if not found:
                return []
            problems.update(found)
    return sorted(problems)


def pods_per_node(t: PodTemplate, pool: AcceleratorPool) -> int:
    """How many of the pods fit on one node of the pool (its largest instance type)."""
    best = 0
    for it in pool.instance_types:
        instance = CATALOG[pool.accelerator].instance(it)
        capacity: dict[str, Decimal] = {
            "cpu": instance.allocatable_cpu,
            "memory": instance.allocatable_memory,
            pool.resource_name: Decimal(instance.gpus),
            EFA_RESOURCE: Decimal(instance.efa_interfaces),
        }
        fits = [
            int(capacity[r] // quantity(v))
            for r, v in t.requests.items()
            if r in capacity and quantity(v) > 0
        ]
        best = max(best, min(fits, default=1))
    return best


def nodes_by_type(templates: Sequence[PodTemplate], pool: AcceleratorPool) -> dict[str, int | None]:
    """Per instance type of the pool: the nodes of that type the pods of `templates` take together,
    first-fit decreasing (largest GPU, then CPU, then memory request first) as a bin-packing bound on what
    the scheduler and Karpenter achieve; None when some pod fits no empty node of that type."""
    pods = sorted(
        ({r: quantity(v) for r, v in t.requests.items()} for t in templates for _ in range(t.count)),
        key=lambda r: tuple(r.get(k, Decimal(0)) for k in (pool.resource_name, "cpu", "memory")),
        reverse=True,
    )
    found: dict[str, int | None] = {}
    for it in pool.instance_types:
        instance = CATALOG[pool.accelerator].instance(it)
        capacity = {
            "cpu": instance.allocatable_cpu,
            "memory": instance.allocatable_memory,
            pool.resource_name: Decimal(instance.gpus),
            EFA_RESOURCE: Decimal(instance.efa_interfaces),
        }
        nodes: list[dict[str, Decimal]] | None = []
        for requests in pods:
            if any(amount > capacity.get(r, Decimal(0)) for r, amount in requests.items() if r in capacity):
                nodes = None
                break
            assert nodes is not None
            free = next((n for n in nodes if all(a <= n[r] for r, a in requests.items() if r in n)), None)
            if free is None:
                free = dict(capacity)
                nodes.append(free)
            for r, amount in requests.items():
                if r in free:
                    free[r] -= amount
        found[it] = None if nodes is None else len(nodes)
    return found


def nodes_needed(templates: Sequence[PodTemplate], pool: AcceleratorPool) -> int:
    """Nodes of the pool's best instance type that the pods of `templates` take together (nodes_by_type).
    A pod no empty node can take counts as needing more than any pool."""
    counts = [n for n in nodes_by_type(templates, pool).values() if n is not None]
    return min(counts) if counts else pool.max_nodes + 1


@dataclass(frozen=True)
class QueueUse:
    """One resource of a gang against its queue's nominal quota (None: the queue does not cover it)."""

    resource: str
    accelerator: str  # the flavor's accelerator for a GPU; "" for cpu, memory, EFA
    total: Decimal
    nominal: str | None

    def shown(self) -> str:
        return f"{self.total / 2**30:g}Gi" if self.resource == "memory" else f"{self.total:g}"


def queue_use(members: Sequence[Verdict], platform: PlatformFacts) -> list[QueueUse]:
    """The whole gang's requests per resource against its queue's nominal quota, GPUs against the flavor
    of the pool that hosts them (Kueue 0.19 refuses a resource no resource group covers:
    flavorassigner.go). Empty for a job without a queue or with one the platform lacks."""
    name = members[0].template.queue
    queue = platform.queue(name) if name else None
    if queue is None:
        return []
    totals: dict[tuple[str, str], Decimal] = {}
    for v in members:
        pool = platform.accelerator_pools.get(v.source or "")
        accelerator = pool.accelerator if pool else ""
        for resource, amount in v.template.requests.items():
            if pool is None and resource not in _BASIC | {EFA_RESOURCE}:
                continue  # no node hosts it: reported by the node checks; its GPU flavor is unknown
            key = (resource, accelerator)
            totals[key] = totals.get(key, Decimal(0)) + quantity(amount) * v.template.count
    uses = []
    for (resource, accelerator), total in totals.items():
        nominal = queue.quota_for(resource, accelerator) if accelerator else queue.nominal.get(resource)
        if total:
            gpu = accelerator and resource == CATALOG[accelerator].resource_name
            uses.append(QueueUse(resource, accelerator if gpu else "", total, nominal))
    return uses


def _queue_problems(job: str, members: Sequence[Verdict], platform: PlatformFacts) -> list[str]:
    name = members[0].template.queue
    if name is None:
        return []
    queue = platform.queue(name)
    if queue is None:
        return [f"{job}: queue {name!r} does not exist on {platform.cluster_name}"]
    problems = []
    for use in queue_use(members, platform):
        if use.nominal is None and queue.scheduler == "volcano":
            # A Queue's capability limits only the resources it names (volcano pkg/scheduler/plugins/
            # proportion/proportion.go: realCapability.MinDimensionResource(capability, api.Infinity)).
            continue
        if use.nominal is None:
            problems.append(f"{job}: resource {use.resource} unavailable in {queue.scheduler} queue {name}")
        elif use.total > quantity(use.nominal):
            problems.append(
                f"{job}: {use.resource} {use.shown()} for the gang > queue {name}'s nominal quota "
                f"{use.nominal} (no cohort to borrow from: never admitted)"
            )
    return problems


def simulate(objects: Sequence[Mapping[str, Any]], platform: PlatformFacts) -> list[Verdict]:
    """A verdict per pod template: the source that hosts it, or the reasons none can."""
    templates = pod_templates(objects, platform)
    verdicts = []
    for t in templates:
        verdict = Verdict(t)
        reasons = []
        for name, pool in platform.accelerator_pools.items():
            problems = _node_problems(t, pool, platform)
            if not problems:
                needed = math.ceil(t.count / max(pods_per_node(t, pool), 1))
                if needed > pool.max_nodes:
                    problems = [f"needs {needed} nodes, the {pool.source} pool scales to {pool.max_nodes}"]
            if not problems:
                verdict.source = name
                break
            reasons.append(f"pool {name}: {'; '.join(problems)}")
        if verdict.source is None:
            verdict.reasons = reasons or [f"{platform.cluster_name} has no GPU pools"]
        if t.held:
            verdict.reasons.insert(0, f"not admitted: {t.held}")
        verdicts.append(verdict)
    jobs: dict[str, list[Verdict]] = {}
    for v in verdicts:
        jobs.setdefault(v.template.job.rsplit("/", 1)[0], []).append(v)
    for job, members in jobs.items():
        # Templates of one job on one pool share its nodes (a PyTorchJob's Master and Workers).
        for name, pool in platform.accelerator_pools.items():
            on_pool = [v for v in members if v.source == name]
            needed = nodes_needed([v.template for v in on_pool], pool) if len(on_pool) > 1 else 0
            if needed > pool.max_nodes:
                for v in on_pool:
                    v.reasons.append(f"{job}: needs {needed} nodes of {name}, it scales to {pool.max_nodes}")
        for problem in _queue_problems(job, members, platform):
            for v in members:
                v.reasons.append(problem)
    return verdicts


def unschedulable(verdicts: Iterable[Verdict]) -> list[str]:
    """One line per pod template that would never run, with its reasons."""
    return [
        f"{v.template.job} ({v.template.count} pods): " + " | ".join(v.reasons)
        for v in verdicts
        if not v.schedulable
    ]


def quota_problems(
    objects: Sequence[Mapping[str, Any]],
    platform: PlatformFacts,
    gangs: int = 2,
    settings: OperatorSettings | None = None,
) -> list[str]:
    """The job namespace's ResourceQuota against the pods the operators create: each pod states every
    tracked cpu/memory request and limit (else the API server refuses it: sim/kubernetes/pod_resources.py
    missing_quota_resources), and `gangs` times the job's pods (a restarted gang starts while the old one
    terminates: workloads/render.py QUOTA_GANGS), counted as the quota counts them (quota_usage), fit
    `hard`."""
    quotas = [o for o in objects if o["kind"] == "ResourceQuota"]
    pods = operator_pods(objects, platform, settings)
    problems = []
    for quota in quotas:
        hard = {k: quantity(v) for k, v in quota["spec"]["hard"].items()}
        used: dict[str, Decimal] = {}
        for pod in pods:
            name = pod.pod["metadata"].get("name") or pod.pod["metadata"]["generateName"]
            if missing := missing_quota_resources(pod.spec, hard):
                problems.append(f"{name}: {missing} (ResourceQuota {quota['metadata']['name']} tracks them)")
            for key, amount in quota_usage(pod.spec).items():
                used[key] = used.get(key, Decimal(0)) + amount
        for key, most in hard.items():
            wanted = used.get(key, Decimal(0)) * gangs
            if wanted > most:
                problems.append(
                    f"ResourceQuota {quota['metadata']['name']}: {key} {wanted:g} for {gangs} "
                    f"x the job's pods > hard {quota['spec']['hard'][key]}"
                )
    return problems
