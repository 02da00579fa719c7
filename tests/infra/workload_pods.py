"""The pods a flow matrix connects: those the rendered charts create (with their template labels and
named ports), those an operator creates behind a rendered Service (Prometheus, Alertmanager) or EKS runs
(CoreDNS), and the pods of every workload stack's job as its operator creates them."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from infra.contract import JOB_LABEL
from sim.kubernetes.netpol import Endpoint, selects
from sim.operators.pods import operator_pods
from workloads.__main__ import platform_facts
from workloads.pod_security import pod_spec
from workloads.render import render
from workloads.stacks import load_stack, program_text, workload_stacks


def _named_ports(spec: dict[str, Any]) -> dict[str, int]:
    return {
        p["name"]: p["containerPort"]
        for c in spec.get("containers") or []
        for p in c.get("ports") or []
        if p.get("name")
    }


def _behind(service: dict[str, Any], pod: Endpoint) -> bool:
    selector = service["spec"].get("selector")
    return (
        bool(selector)
        and pod.namespace == service["metadata"]["namespace"]
        and selects({"matchLabels": selector}, pod.labels)
    )


def pod_endpoints(objects: list[dict[str, Any]], ips: Iterator[str]) -> list[Endpoint]:
    pods = []
    for obj in objects:
        spec = pod_spec(obj)
        if spec is None:
            continue
        meta, template = obj["metadata"], obj["spec"].get("template") or {}
        # A host-network pod has its node's address and no policy applies to it.
        namespace = None if spec.get("hostNetwork") else meta["namespace"]
        labels = (template.get("metadata") or {}).get("labels") or {}
        name = f"{meta['namespace']}/{meta['name']}"
        pods.append(Endpoint(name, next(ips), namespace, labels, _named_ports(spec)))
    for svc in (o for o in objects if o["kind"] == "Service"):
        selector, ns = svc["spec"].get("selector"), svc["metadata"]["namespace"]
        if not selector or any(_behind(svc, p) for p in pods):
            continue
        # Pods no template describes (an operator's, or EKS's CoreDNS): the Service's selector and ports.
        ports = {}
        for p in svc["spec"]["ports"]:
            target = p.get("targetPort", p["port"])
            ports[str(p.get("name") or p["port"])] = target if isinstance(target, int) else p["port"]
            if isinstance(target, str):
                ports[target] = p["port"]
        name = f"{ns}/{svc['metadata']['name']} (operator)"
        pods.append(Endpoint(name, next(ips), ns, dict(selector), ports))
    return pods


def service_targets(
    objects: list[dict[str, Any]], pods: list[Endpoint], ref: dict[str, Any]
) -> list[tuple[Endpoint, int]]:
    """(pod, pod port) a Service reference reaches: a webhook's or APIService's {namespace, name, port}
    (port 443 unless given), or a ServiceMonitor endpoint's {namespace, name, portName, targetPort}."""
    found = [
        o
        for o in objects
        if o["kind"] == "Service"
        and o["metadata"]["namespace"] == ref["namespace"]
        and o["metadata"]["name"] == ref["name"]
    ]
    targets = []
    for svc in found:
        selected = [p for p in pods if _behind(svc, p)]
        ports = svc["spec"]["ports"]
        if ref.get("targetPort") is not None:
            wanted = [ref["targetPort"]]
        elif ref.get("portName"):
            wanted = [p.get("targetPort", p["port"]) for p in ports if p.get("name") == ref["portName"]]
        else:
            wanted = [p.get("targetPort", p["port"]) for p in ports if p["port"] == ref.get("port", 443)]
        for pod in selected:
            for target in wanted:
                number = target if isinstance(target, int) else pod.ports.get(target)
                if number is not None:
                    targets.append((pod, number))
    return targets


@dataclass
class Jobs:
    policies: list[dict[str, Any]] = field(default_factory=list)
    namespaces: dict[str, dict[str, str]] = field(default_factory=dict)
    # Pairs of pods of one job (a one-pod job: the pod with itself).
    ranks: list[tuple[Endpoint, Endpoint]] = field(default_factory=list)

    @property
    def pods(self) -> list[Endpoint]:
        return [p for pair in self.ranks for p in pair]


def job_world(platform_stack: str, ips: Iterator[str]) -> Jobs:
    """Every workload stack on `platform_stack`, rendered: its policies, namespace and the pods its operator
    creates (sim/operators/pods.py), with their own labels and named ports."""
    jobs = Jobs()
    for stack in workload_stacks():
        loaded = load_stack(stack)
        if loaded.platform_stack.rsplit("/", 1)[-1] != platform_stack:
            continue
        facts, _ = platform_facts(loaded.platform_stack, None)
        objects = render(loaded.spec, facts, program_text=program_text(loaded.spec))
        jobs.policies += [o for o in objects if o["kind"] == "NetworkPolicy"]
        for ns in (o for o in objects if o["kind"] == "Namespace"):
            jobs.namespaces[ns["metadata"]["name"]] = ns["metadata"].get("labels") or {}
        ns = loaded.spec.namespace_name
        pods = [
            Endpoint(f"{ns}/{p.job}/{p.role}/{i}", next(ips), ns, p.labels, _named_ports(p.spec))
            for i, p in enumerate(operator_pods(objects, facts))
        ]
        assert pods and all(p.labels.get(JOB_LABEL) == loaded.spec.name for p in pods), (
            f"{stack}: pods without {JOB_LABEL}"
        )
        jobs.ranks += list(itertools.pairwise(pods)) or [(pods[0], pods[0])]
    return jobs
