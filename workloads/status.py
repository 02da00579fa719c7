"""`python -m workloads status --stack STACK`: where a deployed job stands, read from the cluster's API.

One line of state, then the evidence: not deployed, queued in Kueue (its Workload not admitted, and why),
waiting for a node (the pending pods, the scheduler's reason and the Karpenter NodeClaims launching),
running (step and loss from the trainer's /metrics through the API server's pod proxy, or from its log
lines), restarting or failed (each pod's exit code, permanent or retryable per trainer/faults.py), or
succeeded (where the output is). A job its operator could not give pods (an object it creates refused by
a webhook or the API server: Kubeflow Trainer's TrainJobResourcesCreationFailed, a Training Operator's
FailedCreatePod) is explained by the warning events on the job. Read-only: list/get calls only, with the
official `kubernetes` client.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from infra.contract import JOB_LABEL
from trainer import faults
from workloads import pod as pod_mod
from workloads.platform import read_platform_outputs
from workloads.spec import SpecError, TrainingJobSpec

NOT_FOUND = 3  # the job object does not exist (not deployed, or deleted after its TTL)
FAILED = 1
# The API server did not answer: transient, worth a retry (>= 128, like the trainer's retryable exits).
UNREACHABLE = 200

# kind -> (group, version, plural, name of the training container)
JOB_APIS = {
    "trainjob": ("trainer.kubeflow.org", "v1alpha1", "trainjobs", "node"),
    "pytorchjob": ("kubeflow.org", "v1", "pytorchjobs", "pytorch"),
    "mpijob": ("kubeflow.org", "v1", "mpijobs", "mpi"),
    # Head, workers and submitter each run one container, each named differently: the pod's only one.
    "rayjob": ("ray.io", "v1", "rayjobs", ""),
}
KUEUE = ("kueue.x-k8s.io", "v1beta2", "workloads")
NODECLAIMS = ("karpenter.sh", "v1", "nodeclaims")
NODEPOOLS = ("karpenter.sh", "v1", "nodepools")
NODE_CLASSES = ("karpenter.k8s.aws", "v1", "ec2nodeclasses")
# Karpenter core's FailedScheduling event on a pod no NodePool can launch for (kubernetes-sigs/karpenter
# v1.14.1 pkg/controllers/provisioning/scheduling/scheduler.go: `incompatible with nodepool %q, daemonset
# overhead=%s, %w`); a reserved-only pool without an active reservation has no offering to launch.
_NO_OFFERING = re.compile(
    r'incompatible with nodepool "([\w.-]+)", daemonset overhead=\{[^}]*\}, ([^;]*offering)'
)
# JobSet (TrainJob) numbers a Job's pods with the completion index; the Training Operator its replicas.
NODE_INDEX_LABELS = ("batch.kubernetes.io/job-completion-index", "training.kubeflow.org/replica-index")
_LOG_PROGRESS = re.compile(r"\[trainer\] \w+ step (\d+)(?:/(\d+))?\b.*?\bloss ([-+\d.e]+)")
# The exit-code table in trainer/faults.py's docstring: "  <code>  <meaning>".
EXIT_MEANINGS = {
    int(code): text.strip() for code, text in re.findall(r"^ {2}(\d+) {2,}(.+)$", faults.__doc__ or "", re.M)
}


class ClusterError(Exception):
    """The API server could not be reached or refused us; `code` is the CLI's exit status."""

    def __init__(self, message: str, code: int):
        super().__init__(message)
        self.code = code


def api_client(kubeconfig: Path | None, platform_outputs: Path | None) -> Any:
    """A client from --kubeconfig, else $KUBECONFIG, else the platform outputs' `kubeconfig`
    (`pulumi stack output --json --show-secrets`), else ~/.kube/config."""
    from kubernetes import config

    default = Path.home() / ".kube" / "config"
    try:
        if kubeconfig is not None or os.environ.get("KUBECONFIG") or platform_outputs is None:
            path = kubeconfig or Path(os.environ.get("KUBECONFIG") or default)
            if not path.is_file():
                raise ClusterError(
                    f"no kubeconfig at {path}: pass --kubeconfig FILE, set KUBECONFIG, or pass "
                    "--platform-outputs FILE with the platform stack's outputs (they include `kubeconfig`)",
                    2,
                )
            client = config.new_client_from_config(config_file=str(path))
        else:
            outputs = read_platform_outputs(platform_outputs)  # a SpecError: exit 2 naming the file
            raw = outputs.get("kubeconfig")
            if not raw:
                raise ClusterError(f"{platform_outputs}: no `kubeconfig` output (use --show-secrets)", 2)
            # pulumi-eks exports it as a JSON string; a YAML kubeconfig reads the same way
            client = config.new_client_from_config_dict(yaml.safe_load(raw) if isinstance(raw, str) else raw)
    except config.ConfigException as err:
        raise ClusterError(f"kubeconfig: {err}", 2) from None
    except SpecError:
        raise  # the platform outputs file, named by its own message
    except (yaml.YAMLError, TypeError, ValueError, AttributeError, KeyError) as err:
        # The client reads the file without checking its shape: a bad one fails deep inside it.
        where = kubeconfig or os.environ.get("KUBECONFIG") or platform_outputs or default
        raise ClusterError(
            f"kubeconfig {where} is unreadable ({type(err).__name__}: {err}); expected a kubeconfig "
            "(`aws eks update-kubeconfig` writes one)",
            2,
        ) from None
    # Fail fast on an unreachable API server instead of urllib3's default three retries.
    client.configuration.retries = 0
    return client


def call(fn: Any, *args: Any, missing: Any = None, **kwargs: Any) -> Any:
    """One API call: 404 -> `missing` (object or CRD absent), the rest -> ClusterError."""
    import urllib3
    from kubernetes.client.exceptions import ApiException

    try:
        return fn(*args, _request_timeout=15, **kwargs)
    except ApiException as err:
        if err.status == 404:
            return missing
        if err.status in (401, 403):
            raise ClusterError(
                f"the API server refused the request ({err.status} {err.reason}): "
                "check the kubeconfig's credentials (aws eks get-token) and access entry",
                2,
            ) from None
        raise ClusterError(f"the API server answered {err.status} {err.reason}", UNREACHABLE) from None
    except (urllib3.exceptions.HTTPError, OSError) as err:
        host = getattr(getattr(fn, "__self__", None), "api_client", None)
        where = host.configuration.host if host else "the API server"
        raise ClusterError(f"cannot reach {where}: {err}", UNREACHABLE) from None


def conditions(obj: dict[str, Any] | None) -> dict[str, dict[str, Any]]:
    status = (obj or {}).get("status") or {}
    found = {c["type"]: c for c in status.get("conditions") or []}
    # A RayJob states its outcome in jobDeploymentStatus, with reason and message (KubeRay's RayJobStatus).
    outcome = status.get("jobDeploymentStatus")
    if outcome in ("Complete", "Failed") and outcome not in found:
        found[outcome] = {
            "type": outcome,
            "status": "True",
            "reason": status.get("reason") or "",
            "message": status.get("message") or "",
        }
    return found


def is_true(conds: dict[str, dict[str, Any]], *types: str) -> dict[str, Any] | None:
    return next((conds[t] for t in types if conds.get(t, {}).get("status") == "True"), None)


def node_index(p: dict[str, Any]) -> int:
    labels = p["metadata"].get("labels") or {}
    index = next((labels[k] for k in NODE_INDEX_LABELS if k in labels), "0")
    offset = 1 if labels.get("training.kubeflow.org/replica-type", "").lower() == "worker" else 0
    return int(index) + offset if index.isdigit() else 0


def exit_summary(code: int, reason: str = "", message: str = "") -> str:
    meaning = EXIT_MEANINGS.get(code, "killed by a signal" if code > 128 else "")
    verdict = "success" if code == 0 else faults.describe(code)
    details = "; ".join(x for x in (reason, message.strip().splitlines()[-1] if message.strip() else "") if x)
    return f"exit {code} ({verdict}){': ' + meaning if meaning else ''}{f' [{details}]' if details else ''}"


@dataclass
class Report:
    state: str
    lines: list[str] = field(default_factory=list)
    code: int = 0

    def text(self) -> str:
        return "\n".join([self.state, *("  " + line for line in self.lines)])


class Cluster:
    """The few reads `status` and `logs` make."""

    def __init__(self, client: Any):
        from kubernetes import client as k8s

        self.core = k8s.CoreV1Api(client)
        self.custom = k8s.CustomObjectsApi(client)

    def job(self, spec: TrainingJobSpec) -> dict[str, Any] | None:
        group, version, plural, _ = JOB_APIS[spec.operator]
        get = self.custom.get_namespaced_custom_object
        return call(get, group, version, spec.namespace_name, plural, spec.name)

    def pods(self, spec: TrainingJobSpec) -> list[dict[str, Any]]:
        found = call(
            self.core.list_namespaced_pod,
            spec.namespace_name,
            label_selector=f"{JOB_LABEL}={spec.name}",
            _preload_content=False,
        )
        items = json.loads(found.data)["items"] if found is not None else []
        return sorted(items, key=lambda p: (node_index(p), p["metadata"]["name"]))

    def workloads(self, spec: TrainingJobSpec, job: dict[str, Any]) -> list[dict[str, Any]]:
        found = call(self.custom.list_namespaced_custom_object, *KUEUE[:2], spec.namespace_name, KUEUE[2])
        uid = job["metadata"].get("uid")
        return [
            w
            for w in (found or {}).get("items", [])
            if any(
                o.get("uid") == uid or o.get("name") == spec.name
                for o in w["metadata"].get("ownerReferences") or []
            )
        ]

    def nodeclaims(self) -> list[dict[str, Any]]:
        return (call(self.custom.list_cluster_custom_object, *NODECLAIMS) or {}).get("items", [])

    def cluster_object(self, api: tuple[str, str, str], name: str) -> dict[str, Any] | None:
        result: dict[str, Any] | None = call(self.custom.get_cluster_custom_object, *api, name)
        return result

    def events(self, namespace: str, pod_name: str) -> list[dict[str, Any]]:
        found = call(
            self.core.list_namespaced_event,
            namespace,
            field_selector=f"involvedObject.name={pod_name}",
            _preload_content=False,
        )
        return json.loads(found.data)["items"] if found is not None else []

    def output_dir(self, spec: TrainingJobSpec) -> str | None:
        """output.dir of the trainer config the pods read (the deployed ConfigMap, not the stack file)."""
        import yaml

        found = call(self.core.read_namespaced_config_map, f"{spec.name}-trainer-config", spec.namespace_name)
        text = ((found.data if found is not None else None) or {}).get("config.yaml", "")
        return ((yaml.safe_load(text) or {}).get("output") or {}).get("dir") if text else None

    def log(
        self, p: dict[str, Any], container: str, *, follow: bool = False, tail_lines: int | None = None
    ) -> Any:
        """The container's log as text, or with `follow` the open response to iterate line by line.
        Raw in both cases: the client's "str" deserialisation would return the bytes' repr."""
        kwargs: dict[str, Any] = {"follow": follow, "_preload_content": False}
        if container:  # "": the pod's only container
            kwargs["container"] = container
        if tail_lines is not None:
            kwargs["tail_lines"] = tail_lines
        name, namespace = p["metadata"]["name"], p["metadata"]["namespace"]
        resp = call(self.core.read_namespaced_pod_log, name, namespace, **kwargs)
        if follow or resp is None:
            return resp
        return resp.data.decode(errors="replace")

    def metrics(self, p: dict[str, Any]) -> str | None:
        ports = [
            port["containerPort"]
            for c in p["spec"]["containers"]
            for port in c.get("ports") or []
            if port.get("name") == pod_mod.METRICS_PORT_NAME
        ]
        if not ports:
            return None
        try:
            # Raw bytes: the client's "str" deserialisation would return the bytes' repr.
            resp = call(
                self.core.connect_get_namespaced_pod_proxy_with_path,
                f"{p['metadata']['name']}:{ports[0]}",
                p["metadata"]["namespace"],
                "metrics",
                _preload_content=False,
            )
            return resp.data.decode(errors="replace") if resp is not None else None
        except ClusterError:
            return None  # the trainer not serving yet, or the proxy refused: fall back to the log


def progress(cluster: Cluster, p: dict[str, Any], container: str) -> str:
    text = cluster.metrics(p)
    values: dict[str, float] = {}
    for line in (text or "").splitlines():
        name, _, value = line.partition(" ")
        if name in ("trainer_step", "trainer_total_steps", "trainer_loss"):
            values[name] = float(value.split()[0])
    if "trainer_step" in values:
        total = f"/{values['trainer_total_steps']:g}" if "trainer_total_steps" in values else ""
        loss = f" loss {values['trainer_loss']:.4g}" if "trainer_loss" in values else ""
        return f"step {values['trainer_step']:g}{total}{loss} (metrics)"
    matches = _LOG_PROGRESS.findall(cluster.log(p, container, tail_lines=200) or "")
    if matches:
        step, total, loss = matches[-1]
        return f"step {step}{'/' + total if total else ''} loss {loss} (log)"
    return "no step reported yet"


def terminations(p: dict[str, Any]) -> Iterable[tuple[str, dict[str, Any]]]:
    for status in (p.get("status") or {}).get("containerStatuses") or []:
        for when in ("state", "lastState"):
            done = (status.get(when) or {}).get("terminated")
            if done:
                yield when, done


def pod_exits(pods: list[dict[str, Any]]) -> list[str]:
    lines = []
    for p in pods:
        for when, done in terminations(p):
            prefix = "previous run" if when == "lastState" else "exited"
            summary = exit_summary(done.get("exitCode", 0), done.get("reason", ""), done.get("message", ""))
            lines.append(f"pod {p['metadata']['name']} (node {node_index(p)}) {prefix}: {summary}")
    return lines


def nominated(cluster: Cluster, p: dict[str, Any]) -> list[str]:
    """NodeClaims Karpenter nominated the pod for ("Pod should schedule on: nodeclaim/<name>")."""
    names = []
    for event in cluster.events(p["metadata"]["namespace"], p["metadata"]["name"]):
        if event.get("reason") == "Nominated":
            names += re.findall(r"nodeclaim/([\w.-]+)", event.get("message", ""))
    return names


def describe_nodeclaim(claim: dict[str, Any]) -> str:
    labels = claim["metadata"].get("labels") or {}
    conds = conditions(claim)
    stage = next(
        (t for t in ("Ready", "Initialized", "Registered", "Launched") if is_true(conds, t)), "created"
    )
    problem = next(
        (
            f"{c['type']}: {c.get('message') or c.get('reason')}"
            for c in conds.values()
            if c.get("status") == "False" and (c.get("message") or c.get("reason"))
        ),
        "",
    )
    return (
        f"nodeclaim {claim['metadata']['name']} (pool {labels.get('karpenter.sh/nodepool', '?')}, "
        f"{labels.get('node.kubernetes.io/instance-type', 'type not chosen yet')}, "
        f"{labels.get('karpenter.sh/capacity-type', '?')}): {stage}{'; ' + problem if problem else ''}"
    )


def waiting(cluster: Cluster, pending: list[dict[str, Any]]) -> list[str]:
    lines, claims = [], []
    for p in pending:
        scheduled = conditions(p).get("PodScheduled", {})
        why = scheduled.get("message") or scheduled.get("reason") or "not scheduled yet"
        lines.append(f"pod {p['metadata']['name']} (node {node_index(p)}) pending: {why}")
        claims += nominated(cluster, p)
    unready = [c for c in cluster.nodeclaims() if not is_true(conditions(c), "Ready")]
    named = [c for c in unready if c["metadata"]["name"] in claims] or unready
    lines += [describe_nodeclaim(c) for c in named]
    if not named:
        lines.append("no Karpenter NodeClaim is launching: the scheduler's reason above says what is missing")
        lines += reservation_lines(cluster, pending)
    return lines


def reservation_lines(cluster: Cluster, pending: list[dict[str, Any]]) -> list[str]:
    """Why a reserved pool launches nothing: the reservations Karpenter sees (its EC2NodeClass's
    status.capacityReservations: active ones only, `expiring` in a Capacity Block's last 40 minutes), for
    the NodePools whose FailedScheduling event on a pending pod says no offering was left."""
    pools: dict[str, str] = {}
    for p in pending:
        for event in cluster.events(p["metadata"]["namespace"], p["metadata"]["name"]):
            if event.get("reason") == "FailedScheduling":
                pools.update(_NO_OFFERING.findall(event.get("message") or ""))
    lines = []
    for pool_name, why in sorted(pools.items()):
        pool = cluster.cluster_object(NODEPOOLS, pool_name) or {}
        ref = pool.get("spec", {}).get("template", {}).get("spec", {}).get("nodeClassRef", {}).get("name")
        node_class = cluster.cluster_object(NODE_CLASSES, ref) if ref else None
        terms = (node_class or {}).get("spec", {}).get("capacityReservationSelectorTerms")
        if not terms:
            continue
        selected = ", ".join(t.get("id") or f"tags {t.get('tags')}" for t in terms)
        seen = (node_class or {}).get("status", {}).get("capacityReservations") or []
        if not seen:
            lines.append(
                f"nodepool {pool_name} ({why}): it launches into capacity reservations ({selected}) and "
                "Karpenter sees none active: the reservation has not started yet, or has ended (Karpenter "
                "lists active reservations only; `aws ec2 describe-capacity-reservations` shows each one's "
                "State, StartDate and EndDate)"
            )
            continue
        for r in seen:
            state = r.get("state", "active")
            end = f", ends {r['endTime']}" if r.get("endTime") else ""
            expiring = "; in its last 40 minutes Karpenter launches no node into it and drains its nodes"
            kind = r.get("reservationType", "default")
            lines.append(
                f"nodepool {pool_name} ({why}): reservation {r.get('id')} ({kind}, "
                f"{r.get('instanceType')}, {r.get('availabilityZone')}): {state}{end}"
                + (expiring if state == "expiring" else "; no free instance the pods fit")
            )
    return lines


def warning_events(cluster: Cluster, spec: TrainingJobSpec) -> list[str]:
    """The warning events on the job object, newest last, one line per reason (its latest message)."""
    events = [e for e in cluster.events(spec.namespace_name, spec.name) if e.get("type") == "Warning"]
    events.sort(key=lambda e: e.get("lastTimestamp") or e.get("eventTime") or "")
    latest = {e.get("reason", ""): e for e in events}
    return [
        f"event {reason} (x{e.get('count') or 1}): {(e.get('message') or e.get('note') or '').strip()}"
        for reason, e in latest.items()
    ]


def status(cluster: Cluster, spec: TrainingJobSpec) -> Report:
    job = cluster.job(spec)
    kind = spec.operator
    if job is None:
        return Report(
            f"{spec.name}: not deployed ({kind} {spec.namespace_name}/{spec.name} not found)",
            ["`pulumi up` the workload stack; a finished job is deleted after its TTL"],
            NOT_FOUND,
        )
    conds = conditions(job)
    pods = cluster.pods(spec)
    container = JOB_APIS[kind][3]
    done = is_true(conds, "Complete", "Succeeded")
    if done:
        output = cluster.output_dir(spec)
        where = f"output in {output}" if output else "the job writes no output"
        return Report(f"{spec.name}: succeeded; {where}", [done["message"]] if done.get("message") else [])
    failed = is_true(conds, "Failed")
    if failed:
        lines = [f"{failed.get('reason', '')}: {failed.get('message', '')}".strip(": ")]
        return Report(f"{spec.name}: failed", lines + pod_exits(pods), FAILED)
    queued = [w for w in cluster.workloads(spec, job) if not is_true(conditions(w), "Admitted")]
    if queued:
        lines = []
        for w in queued:
            wc = conditions(w)
            # Quota reserved but not admitted: admission checks (e.g. ProvisioningRequest) still pending.
            step = "Admitted" if is_true(wc, "QuotaReserved") else "QuotaReserved"
            cond = wc.get(step) or {}
            queue = (w.get("spec") or {}).get("queueName", "?")
            why = cond.get("message") or cond.get("reason") or "waiting for admission"
            lines.append(f"workload {w['metadata']['name']} in queue {queue}: {why}")
        return Report(f"{spec.name}: queued in Kueue (not admitted)", lines)
    if (job.get("spec") or {}).get("suspend"):
        return Report(f"{spec.name}: suspended (spec.suspend is true; no queue admitted it)")
    pending = [
        p
        for p in pods
        if (p.get("status") or {}).get("phase") == "Pending" and not is_true(conditions(p), "PodScheduled")
    ]
    if pending:
        return Report(f"{spec.name}: waiting for a node", waiting(cluster, pending) + pod_exits(pods))
    running = [p for p in pods if (p.get("status") or {}).get("phase") == "Running"]
    if running:
        restarts = pod_exits(pods)
        lines = [
            f"{progress(cluster, running[0], container)}; {len(running)}/{len(pods)} pods running",
            *restarts,
        ]
        return Report(f"{spec.name}: {'running' if not restarts else 'running (restarted)'}", lines)
    if pods:
        exits = pod_exits(pods)
        state = "restarting" if exits else "starting"
        return Report(
            f"{spec.name}: {state}",
            [f"pod {p['metadata']['name']}: {p['status'].get('phase')}" for p in pods] + exits,
        )
    events = warning_events(cluster, spec)
    state = "created, no pods: its operator could not create them" if events else "created, no pods yet"
    return Report(
        f"{spec.name}: {state}",
        [f"{t}: {c.get('message') or c.get('reason', '')}" for t, c in conds.items()] + events,
    )
