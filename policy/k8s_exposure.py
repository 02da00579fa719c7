"""What puts a cluster's services, credentials or admitted objects within reach of the outside: Services
of type LoadBalancer (internet-facing, unless narrowed to an office block) or NodePort, external IPs, a
RayCluster's head (the Ray dashboard runs any code it is sent) exposed either way, Helm values that do
the same; long-lived service account token Secrets; admission webhooks whose Service is an ExternalName
(the API server sends every object it admits to that outside host).

Standards: NSA/CISA Kubernetes Hardening Guidance (network separation: expose no management service);
Kubernetes documentation, "Service" (ExternalName, externalIPs: CVE-2020-8554) and "Manage Service
Accounts" (legacy token Secrets do not expire); Amazon EKS Best Practices Guide, Security (prefer an
internal load balancer, restrict source ranges).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from policy.core import Resource, Rule, StackRule, as_list, dig, known
from policy.network import WIDEST_PUBLIC, public_addresses

SERVICE = ("kubernetes:core/v1:Service", "kubernetes:core/v1:ServicePatch")
SECRET = ("kubernetes:core/v1:Secret", "kubernetes:core/v1:SecretPatch")
RAY = ("RayCluster", "RayJob", "RayService")
EXPOSING = ("LoadBalancer", "NodePort")
# AWS Load Balancer Controller and the in-tree controller: what makes a load balancer internal.
INTERNAL = {
    "service.beta.kubernetes.io/aws-load-balancer-scheme": "internal",
    "service.beta.kubernetes.io/aws-load-balancer-internal": "true",
}
LEGACY_TOKEN = "kubernetes.io/service-account-token"
WEBHOOKS = (
    "kubernetes:admissionregistration.k8s.io/v1:MutatingWebhookConfiguration",
    "kubernetes:admissionregistration.k8s.io/v1:ValidatingWebhookConfiguration",
)


def _internal(annotations: Mapping[str, Any]) -> bool:
    return any(str(annotations.get(k, "")).lower() == v for k, v in INTERNAL.items())


def _load_balancer_problem(spec: Mapping[str, Any], annotations: Mapping[str, Any]) -> str | None:
    """Why an internet-facing load balancer is open to too much (None: it is not)."""
    if _internal(annotations):
        return None
    ranges = [str(r) for r in as_list(dig(spec, "loadBalancerSourceRanges"))]
    if not ranges:
        return "an internet-facing load balancer open to every address (no loadBalancerSourceRanges)"
    v4, v6, bad = public_addresses(ranges)
    if bad:
        return f"loadBalancerSourceRanges {bad} are not CIDRs: the load balancer cannot be judged"
    if v4 > 2 ** (32 - WIDEST_PUBLIC) or v6 > 2**16:
        return (
            f"an internet-facing load balancer open to {ranges} (at most one /{WIDEST_PUBLIC} office block)"
        )
    return None


def _service_problems(spec: Mapping[str, Any], annotations: Mapping[str, Any], where: str) -> Iterator[str]:
    kind = str(dig(spec, "type", default="ClusterIP"))
    if kind == "NodePort":
        yield f"{where} is a NodePort Service: its port is open on every node, to whoever reaches the nodes"
    elif kind == "LoadBalancer" and (problem := _load_balancer_problem(spec, annotations)):
        yield f"{where} is {problem}"
    if as_list(dig(spec, "externalIPs")):
        yield f"{where} sets externalIPs: it takes over traffic to those addresses (CVE-2020-8554)"


def check_services(type_: str, inputs: Mapping[str, Any]) -> Iterator[str]:
    kind = str(dig(inputs, "kind", default=type_.rsplit(":", 1)[-1]))
    if type_ in SERVICE:
        annotations = dig(inputs, "metadata", "annotations", default={})
        yield from _service_problems(dig(inputs, "spec", default={}), annotations, "the Service")
        return
    if kind in RAY:
        # RayCluster spec.headGroupSpec, RayJob spec.rayClusterSpec..., RayService spec.rayClusterConfig...
        for head in _heads(inputs):
            service_type = str(dig(head, "serviceType", default="ClusterIP"))
            if service_type in EXPOSING:
                yield (
                    f"the Ray head (its dashboard and job API run any code they are sent) is a "
                    f"{service_type} Service: reach it with `kubectl port-forward`"
                )
            service = dig(head, "headService", default={})
            annotations = dig(service, "metadata", "annotations", default={})
            yield from _service_problems(
                dig(service, "spec", default={}), annotations, "the Ray head Service"
            )


def _heads(obj: Any) -> Iterator[Mapping[str, Any]]:
    if isinstance(obj, Mapping):
        head = obj.get("headGroupSpec")
        if isinstance(head, Mapping):
            yield head
        for value in obj.values():
            yield from _heads(value)
    elif isinstance(obj, Sequence) and not isinstance(obj, str):
        for value in obj:
            yield from _heads(value)


def check_legacy_tokens(type_: str, inputs: Mapping[str, Any]) -> Iterator[str]:
    if str(dig(inputs, "type", default="")) == LEGACY_TOKEN:
        account = dig(inputs, "metadata", "annotations", "kubernetes.io/service-account.name", default="?")
        yield (
            f"a legacy token Secret for service account {account!r}: the token never expires and anyone who "
            "can read Secrets in the namespace holds it"
        )


def check_webhook_services(resources: Sequence[Resource]) -> Iterator[tuple[str | None, str]]:
    """Webhooks whose clientConfig.service is an ExternalName Service of the stack."""
    external = {}
    for r in resources:
        inputs = known(r.inputs)
        if r.type in SERVICE and str(dig(inputs, "spec", "type", default="")) == "ExternalName":
            key = (
                str(dig(inputs, "metadata", "namespace", default="default")),
                str(dig(inputs, "metadata", "name")),
            )
            external[key] = str(dig(inputs, "spec", "externalName", default="?"))
    for r in resources:
        if r.type not in WEBHOOKS:
            continue
        for hook in as_list(dig(known(r.inputs), "webhooks")):
            service = dig(hook, "clientConfig", "service", default={})
            key = (str(dig(service, "namespace", default="default")), str(dig(service, "name", default="")))
            if key in external:
                yield (
                    r.name,
                    (
                        f"webhook {dig(hook, 'name')!r} calls Service {key[0]}/{key[1]}, an ExternalName for "
                        f"{external[key]}: every object it admits leaves the cluster"
                    ),
                )


RULES = (
    Rule(
        name="k8s-services-not-exposed",
        description="No Service is a NodePort or an internet-facing LoadBalancer open wider than one office "
        "block, or takes externalIPs; no Ray head (dashboard) is exposed as either.",
        remediation="Keep Services ClusterIP and reach them with `kubectl port-forward`; where a load "
        "balancer is needed, make it internal (service.beta.kubernetes.io/aws-load-balancer-scheme: "
        "internal) or set loadBalancerSourceRanges to the office CIDRs.",
        level="mandatory",
        severity="high",
        types=(*SERVICE, "kubernetes:ray.io/"),
        check=check_services,
    ),
    Rule(
        name="k8s-no-legacy-service-account-tokens",
        description="No Secret of type kubernetes.io/service-account-token: such tokens never expire.",
        remediation="Let pods get short-lived tokens (the projected service account token, TokenRequest: "
        "`kubectl create token`); delete legacy token Secrets.",
        level="mandatory",
        severity="high",
        types=SECRET,
        check=check_legacy_tokens,
    ),
)

STACK_RULES = (
    StackRule(
        name="k8s-webhook-services-in-cluster",
        description="No admission webhook is served through an ExternalName Service: the API server would "
        "send what it admits to the outside host that Service names.",
        remediation="Serve the webhook from pods in the cluster behind a ClusterIP Service.",
        level="mandatory",
        severity="high",
        check=check_webhook_services,
    ),
)
