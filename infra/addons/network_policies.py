"""NetworkPolicies of the platform's namespaces and of every job namespace. Pure data: no Pulumi import,
so workload stacks render their job's policies from the same builders.

The VPC CNI's network-policy agent enforces them (infra/platform/cluster.py). A connection needs the
sender's egress and the receiver's ingress; a pod's own node (probes, `kubectl port-forward`) always gets in.

Platform namespaces: ingress from the same namespace, from Prometheus, and on the webhook and aggregated
API ports from the VPC (the control plane's ENIs share the VPC CIDR with pods); egress open.

Job namespaces deny by default. Pods may reach DNS, each other on every port (rendezvous, then NCCL/Gloo
on ephemeral ports), the Pod Identity agent, and HTTPS outside private ranges: S3 arrives through the
gateway endpoint at S3's public addresses, which a NetworkPolicy cannot name, so 443 to public addresses
is the narrowest rule that works (the IAM role and the endpoint policy bound what S3 allows). A job that
sends its run to an MLflow server on another port or at a private address gets one more egress rule, to
that server only (`egress_to`). Prometheus may scrape the metrics port; nothing else reaches a job pod.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

NAME_LABEL = "kubernetes.io/metadata.name"  # set by the API server on every namespace (1.22+)
MONITORING_NAMESPACE = "monitoring"
KUBECOST_NAMESPACE = "kubecost"
# The pods the Prometheus Operator creates for kube-prometheus-stack's Prometheus carry this label (its
# Service `kube-prometheus-stack-prometheus` selects them by it).
PROMETHEUS_POD = {"app.kubernetes.io/name": "prometheus"}
PROMETHEUS_PORT = 9090
# Kubecost's cost-analyzer queries the platform Prometheus (infra/addons/cost.py).
KUBECOST_POD = {"app.kubernetes.io/name": "cost-analyzer"}
# CoreDNS (the EKS add-on) pods; the kube-dns Service targets port 53 on them.
DNS_POD = {"k8s-app": "kube-dns"}
# The EKS Pod Identity agent, a host-network DaemonSet on every node serving credentials on a link-local
# address (EKS user guide, pod-id-agent-setup): a default-deny egress blocks it unless allowed.
POD_IDENTITY_AGENT = "169.254.170.23/32"
POD_IDENTITY_PORT = 80
# Private and link-local ranges: the VPC and its pods (any RFC 1918 VPC CIDR), the Service CIDR, custom
# networking's 100.64/10, and IMDS. A job's HTTPS egress goes only outside them.
PRIVATE_RANGES = ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10", "169.254.0.0/16")
HTTPS = 443

# Ports the API server calls in each platform namespace (pod ports, which a policy matches):
#   monitoring: the Prometheus Operator's admission webhook (Service kube-prometheus-stack-operator,
#     targetPort https = 10250)
#   kubeflow-system: Trainer's and JobSet's webhooks (targetPort webhook = 9443)
#   kueue-system: Kueue's webhooks (9443) and its visibility APIService (8082)
#   volcano-system: volcano-admission (basic.admission_port, 8443)
#   kubeflow: Training Operator v1's webhooks (Service training-operator, targetPort 9443)
# tests/infra/test_network_policies.py resolves every webhook and APIService of the rendered charts to
# its pod port and checks that the API server gets through.
API_SERVER_PORTS: dict[str, tuple[int, ...]] = {
    MONITORING_NAMESPACE: (10250,),
    "kubeflow-system": (9443,),
    "kueue-system": (9443, 8082),
    "volcano-system": (8443,),
    "kubeflow": (9443,),
}


def network_policy(
    name: str,
    namespace: str,
    pod_selector: dict[str, Any],
    types: list[str],
    labels: dict[str, str] | None = None,
    **rules: Any,
) -> dict[str, Any]:
    metadata = {"name": name, "namespace": namespace} | ({"labels": dict(labels)} if labels else {})
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": metadata,
        "spec": {"podSelector": pod_selector, "policyTypes": types, **rules},
    }


def _in_namespace(namespace: str, pods: dict[str, str] | None = None) -> dict[str, Any]:
    peer: dict[str, Any] = {"namespaceSelector": {"matchLabels": {NAME_LABEL: namespace}}}
    if pods is not None:
        peer["podSelector"] = {"matchLabels": pods}
    return peer


def _ports(*ports: int, protocol: str = "TCP") -> list[dict[str, Any]]:
    return [{"protocol": protocol, "port": p} for p in ports]


def platform_policies(namespace: str, vpc_cidr: str) -> list[dict[str, Any]]:
    """Default-deny ingress for a platform namespace, and what may still come in (module docstring)."""
    policies = [
        network_policy("default-deny-ingress", namespace, {}, ["Ingress"]),
        network_policy(
            "allow-same-namespace", namespace, {}, ["Ingress"], ingress=[{"from": [{"podSelector": {}}]}]
        ),
    ]
    if namespace != MONITORING_NAMESPACE:
        policies.append(
            network_policy(
                "allow-prometheus-scrape",
                namespace,
                {},
                ["Ingress"],
                ingress=[{"from": [_in_namespace(MONITORING_NAMESPACE, PROMETHEUS_POD)]}],
            )
        )
    else:
        policies.append(
            network_policy(
                "allow-kubecost-to-prometheus",
                namespace,
                {"matchLabels": PROMETHEUS_POD},
                ["Ingress"],
                ingress=[
                    {
                        "from": [_in_namespace(KUBECOST_NAMESPACE, KUBECOST_POD)],
                        "ports": _ports(PROMETHEUS_PORT),
                    }
                ],
            )
        )
    if namespace in API_SERVER_PORTS:
        policies.append(
            network_policy(
                "allow-api-server",
                namespace,
                {},
                ["Ingress"],
                ingress=[
                    {"from": [{"ipBlock": {"cidr": vpc_cidr}}], "ports": _ports(*API_SERVER_PORTS[namespace])}
                ],
            )
        )
    return policies


def egress_to(
    port: int, *, cidr: str | None = None, namespace: str | None = None, pods: dict[str, str] | None = None
) -> dict[str, Any]:
    """An egress rule to one server: TCP `port` at the addresses of `cidr`, or on the pods of `namespace`
    (those labelled `pods`; all of them if None)."""
    peer = {"ipBlock": {"cidr": cidr}} if cidr is not None else _in_namespace(str(namespace), pods or None)
    return {"to": [peer], "ports": _ports(port)}


def job_policies(
    name: str,
    namespace: str,
    pod_labels: dict[str, str],
    metrics_port: int | None,
    *,
    default_deny: bool,
    labels: dict[str, str] | None = None,
    egress: Sequence[dict[str, Any]] = (),
) -> list[dict[str, Any]]:
    """The policy of job `name` (its pods, selected by `pod_labels`) and, when the stack owns the
    namespace, a default-deny for everything else in it. `metrics_port`: what Prometheus scrapes;
    `labels`: the policies' own labels; `egress`: rules to the job's own servers beyond what every job
    reaches (egress_to)."""
    job = {"matchLabels": dict(pod_labels)}
    peers = {"podSelector": job}
    ingress: list[dict[str, Any]] = [{"from": [peers]}]
    if metrics_port is not None:
        ingress.append(
            {"from": [_in_namespace(MONITORING_NAMESPACE, PROMETHEUS_POD)], "ports": _ports(metrics_port)}
        )
    egress = [
        {"to": [_in_namespace("kube-system", DNS_POD)], "ports": _ports(53, protocol="UDP") + _ports(53)},
        {"to": [peers]},
        {"to": [{"ipBlock": {"cidr": POD_IDENTITY_AGENT}}], "ports": _ports(POD_IDENTITY_PORT)},
        {"to": [{"ipBlock": {"cidr": "0.0.0.0/0", "except": list(PRIVATE_RANGES)}}], "ports": _ports(HTTPS)},
        *egress,
    ]
    policies = [
        network_policy(
            f"{name}-training", namespace, job, ["Ingress", "Egress"], labels, ingress=ingress, egress=egress
        )
    ]
    if default_deny:
        policies.insert(0, network_policy("default-deny", namespace, {}, ["Ingress", "Egress"], labels))
    return policies
