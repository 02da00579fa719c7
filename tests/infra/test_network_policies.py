"""The flow matrix: which connections the platform's and the jobs' NetworkPolicies let through, evaluated
with Kubernetes semantics (sim/kubernetes/netpol.py) over the policies the platform program registers and the
workload stacks render, between pods labeled as the pinned charts render them (sim/helm_render.py)
and the jobs' pods as workloads.render makes them."""

from __future__ import annotations

import dataclasses
import ipaddress
import itertools

import kubernetes_validate
import pytest

from infra.addons.network_policies import NAME_LABEL, POD_IDENTITY_AGENT, job_policies, platform_policies
from infra.addons.training import volcano_values
from infra.contract import JOB_LABEL
from sim.helm_render import HelmRelease, installed, objects, render, validation_version
from sim.kubernetes.netpol import Endpoint, allowed
from tests.infra.workload_pods import job_world, pod_endpoints, service_targets

NETWORK_POLICY = "kubernetes:networking.k8s.io/v1:NetworkPolicy"
NAMESPACE = "kubernetes:core/v1:Namespace"
NAMESPACE_PATCH = "kubernetes:core/v1:NamespacePatch"  # labels a namespace a manifest bundle creates
STACKS = ["dev", "prod"]
S3_ADDRESS = "52.216.8.1"  # in S3's us-east-1 range (ip-ranges.json, service S3): via the gateway endpoint
IMDS = "169.254.169.254"


class World:
    """Every pod, namespace and policy of one platform stack plus its workload stacks' jobs."""

    def __init__(self, synth_stack: str, synth, rendered):
        self.policies = [
            {"metadata": r.inputs["metadata"], "spec": r.inputs["spec"]}
            for r in synth.of_type(NETWORK_POLICY)
        ]
        self.namespaces = {}
        for r in [*synth.of_type(NAMESPACE), *synth.of_type(NAMESPACE_PATCH)]:
            meta = r.inputs["metadata"]
            self.namespaces[meta["name"]] = {NAME_LABEL: meta["name"], **meta["labels"]}
        self.kubernetes_version = synth.config.kubernetes_version
        vpc = ipaddress.ip_network(synth.config.vpc_cidr)
        self._ips = (str(ip) for ip in itertools.islice(vpc.hosts(), 256, None))
        self.objects = rendered.all_objects
        self.pods = pod_endpoints(self.objects, self._ips)
        self.jobs = job_world(synth_stack, self._ips)
        for ns, labels in self.jobs.namespaces.items():
            self.namespaces.setdefault(ns, {NAME_LABEL: ns, **labels})
        self.policies += self.jobs.policies
        for ns in {p.namespace for p in [*self.pods, *self.jobs.pods]} - {None}:
            self.namespaces.setdefault(ns, {NAME_LABEL: ns})
        self.api_server = Endpoint("api-server", str(vpc[-6]))  # a control-plane ENI in a private subnet
        self.s3 = Endpoint("s3", S3_ADDRESS)
        self.pod_identity = Endpoint("pod-identity-agent", POD_IDENTITY_AGENT.split("/")[0])
        self.imds = Endpoint("imds", IMDS)
        self.other = Endpoint("default/curl", next(self._ips), "default", {"app": "curl"})
        self.namespaces["default"] = {NAME_LABEL: "default"}

    def pod(self, namespace: str, **labels: str) -> Endpoint:
        found = [
            p
            for p in self.pods
            if p.namespace == namespace and all(p.labels.get(k) == v for k, v in labels.items())
        ]
        assert found, f"no rendered pod in {namespace} with {labels}"
        return found[0]

    def allows(self, src: Endpoint, dst: Endpoint, port: int, protocol: str = "TCP") -> bool:
        return allowed(self.policies, src, dst, port, self.namespaces, protocol)


@pytest.fixture(scope="module", params=STACKS)
def world(request, dev, prod, rendered) -> World:
    return World(request.param, {"dev": dev, "prod": prod}[request.param], rendered[request.param])


def _monitoring(world: World) -> dict[str, Endpoint]:
    return {
        "alertmanager": world.pod("monitoring", **{"app.kubernetes.io/name": "alertmanager"}),
        "prometheus": world.pod("monitoring", **{"app.kubernetes.io/name": "prometheus"}),
        "grafana": world.pod("monitoring", **{"app.kubernetes.io/name": "grafana"}),
        "kubecost": world.pod("kubecost", app="cost-analyzer"),
    }


def test_a_training_pod_reaches_no_monitoring_or_cost_service(world):
    m = _monitoring(world)
    for job in world.jobs.ranks:
        rank = job[0]
        denied = {
            "alertmanager": (m["alertmanager"], 9093),
            "prometheus": (m["prometheus"], 9090),
            "grafana": (m["grafana"], 3000),
            "kubecost frontend": (m["kubecost"], 9090),
            "kubecost model": (m["kubecost"], 9003),
        }
        through = [name for name, (dst, port) in denied.items() if world.allows(rank, dst, port)]
        assert through == [], f"{rank.name} reaches {through}"


def test_a_training_pod_reaches_dns_s3_credentials_and_its_peers(world):
    dns = world.pod("kube-system", **{"k8s-app": "kube-dns"})
    assert world.jobs.ranks
    for rank0, rank1 in world.jobs.ranks:
        assert world.allows(rank0, dns, 53, "UDP") and world.allows(rank0, dns, 53, "TCP")
        assert world.allows(rank0, world.s3, 443)
        assert world.allows(rank0, world.pod_identity, 80)
        # torchrun's rendezvous port, then NCCL/Gloo's ephemeral ones, both ways.
        for port in (29400, 29500, 23456, 45123):
            assert world.allows(rank0, rank1, port) and world.allows(rank1, rank0, port)


def test_a_training_pod_reaches_no_private_address_but_its_own(world):
    kueue_webhook = world.pod("kueue-system", **{"app.kubernetes.io/name": "kueue"})
    for rank0, _ in world.jobs.ranks:
        assert not world.allows(rank0, world.api_server, 443)  # the private endpoint: jobs never call it
        assert not world.allows(rank0, kueue_webhook, 9443)
        assert not world.allows(rank0, world.imds, 80)
        assert not world.allows(rank0, world.other, 8080)
        assert not world.allows(rank0, world.s3, 80)  # HTTPS only


def test_jobs_are_isolated_from_each_other_and_from_other_namespaces(world):
    ranks = [r for pair in world.jobs.ranks for r in pair]
    for a, b in itertools.product(ranks, ranks):
        if a.labels.get(JOB_LABEL) != b.labels.get(JOB_LABEL):
            assert not world.allows(a, b, 29500), f"{a.name} -> {b.name}"
    for rank in ranks:
        assert not world.allows(world.other, rank, 29500)


def _on_node(world: World, node: str) -> dict[str, Endpoint]:
    """The node's own address (its kubelet) and its host-network node-exporter, which shares it."""
    ip = next(world._ips)
    exporter = next(p for p in world.pods if p.name.endswith("prometheus-node-exporter"))
    assert exporter.namespace is None  # host network: the node's address, no policy selects it
    return {
        "kubelet": Endpoint(f"{node} kubelet", ip, node=node),
        "node-exporter": dataclasses.replace(exporter, ip=ip, node=node),
    }


def test_a_training_pod_reaches_its_own_nodes_kubelet_and_node_exporter_and_no_other_nodes(world):
    """Traffic between a pod and its own node is always allowed, whatever the pod's egress policy (the
    VPC CNI's policy agent allows the node's IP in every pod's maps): a job's pod can reach its node's
    kubelet (10250, which authenticates and authorizes every request: EKS runs it with webhook authn/authz
    and anonymous auth off) and node-exporter (9100, read-only node metrics), never another node's."""
    rank0, rank1 = (
        dataclasses.replace(r, node=n) for r, n in zip(world.jobs.ranks[0], ("gpu-0", "gpu-1"), strict=True)
    )
    own, other = _on_node(world, "gpu-0"), _on_node(world, "gpu-1")
    for what, port in (("kubelet", 10250), ("node-exporter", 9100)):
        assert world.allows(rank0, own[what], port), what
        assert not world.allows(rank0, other[what], port), what
        assert world.allows(rank1, other[what], port), what
    # The kubelet's probes and port-forward reach the pod on its node only, through its default-deny.
    assert world.allows(own["kubelet"], rank0, 29500)
    assert not world.allows(own["kubelet"], rank1, 29500)
    prometheus = _monitoring(world)["prometheus"]
    assert world.allows(prometheus, own["node-exporter"], 9100)
    assert world.allows(prometheus, other["node-exporter"], 9100)


def test_prometheus_scrapes_the_jobs_metrics_port_and_nothing_else_of_theirs(world):
    prometheus = _monitoring(world)["prometheus"]
    scraped = [r for pair in world.jobs.ranks for r in pair if "metrics" in r.ports]
    assert scraped
    for rank in scraped:
        assert world.allows(prometheus, rank, rank.ports["metrics"])
        assert not world.allows(prometheus, rank, 29500)


def test_only_the_monitoring_namespace_and_kubecost_reach_prometheus_and_alertmanager(world):
    m = _monitoring(world)
    assert world.allows(m["grafana"], m["prometheus"], 9090)
    assert world.allows(m["grafana"], m["alertmanager"], 9093)
    assert world.allows(m["prometheus"], m["alertmanager"], 9093)
    assert world.allows(m["kubecost"], m["prometheus"], 9090)
    assert not world.allows(m["kubecost"], m["alertmanager"], 9093)
    trainer = world.pod("kubeflow-system", **{"app.kubernetes.io/name": "kubeflow-trainer"})
    for src in (world.other, trainer):
        for name, port in (
            ("alertmanager", 9093),
            ("prometheus", 9090),
            ("grafana", 3000),
            ("kubecost", 9090),
        ):
            assert not world.allows(src, m[name], port), f"{src.name} -> {name}"


def test_the_api_server_reaches_every_webhook_and_aggregated_api_the_charts_install(world):
    calls = [
        (o["kind"], w["name"], w["clientConfig"]["service"])
        for o in world.objects
        if o["kind"] in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")
        for w in o.get("webhooks") or []
        if "service" in w["clientConfig"]
    ]
    calls += [
        (o["kind"], o["metadata"]["name"], o["spec"]["service"])
        for o in world.objects
        if o["kind"] == "APIService" and (o.get("spec") or {}).get("service")
    ]
    assert len(calls) > 20
    refused = []
    for kind, name, service in calls:
        targets = service_targets(world.objects, world.pods, service)
        assert targets, f"{kind} {name}: no pod behind {service}"
        refused += [
            f"{kind} {name} -> {pod.name}:{port}"
            for pod, port in targets
            if not world.allows(world.api_server, pod, port)
        ]
    assert refused == []


def test_prometheus_scrapes_every_service_monitor_target_of_the_platform(world):
    prometheus = _monitoring(world)["prometheus"]
    checked, refused = 0, []
    for monitor in (o for o in world.objects if o["kind"] == "ServiceMonitor"):
        spec = monitor["spec"]
        own = [monitor["metadata"]["namespace"]]
        namespaces = (spec.get("namespaceSelector") or {}).get("matchNames") or own
        services = [
            o
            for o in world.objects
            if o["kind"] == "Service"
            and o["metadata"].get("namespace") in namespaces
            and all(
                (o["metadata"].get("labels") or {}).get(k) == v
                for k, v in (spec["selector"].get("matchLabels") or {}).items()
            )
        ]
        for service, endpoint in itertools.product(services, spec.get("endpoints") or []):
            ref = {
                "namespace": service["metadata"]["namespace"],
                "name": service["metadata"]["name"],
                "portName": endpoint.get("port"),
                "targetPort": endpoint.get("targetPort"),
            }
            for pod, port in service_targets(world.objects, world.pods, ref):
                checked += 1
                if pod.namespace != "kube-system" and not world.allows(prometheus, pod, port):
                    refused.append(f"{monitor['metadata']['name']} -> {pod.name}:{port}")
    assert checked > 5
    assert refused == []


def test_every_namespace_the_platform_and_jobs_create_denies_by_default(world):
    created = set(world.namespaces) - {"kube-system", "default"}
    missing = created - _default_deny(world, "Ingress")
    assert created and not missing, sorted(missing)
    job_namespaces = set(world.jobs.namespaces)
    assert job_namespaces and job_namespaces <= _default_deny(world, "Egress")


def _default_deny(world: World, direction: str) -> set[str]:
    """Namespaces with a policy that selects every pod for `direction` and allows nothing."""
    return {
        p["metadata"]["namespace"]
        for p in world.policies
        if p["spec"]["podSelector"] == {}
        and direction in p["spec"]["policyTypes"]
        and not p["spec"].get(direction.lower())
    }


def test_training_operator_v1s_own_namespace_is_labeled_and_isolated(dev):
    """Its kustomize overlay creates `kubeflow` (not rendered offline): a patch labels it, and it gets the
    platform policies with the webhook port of its Service training-operator (targetPort 9443)."""
    (patch,) = [r for r in dev.of_type(NAMESPACE_PATCH) if r.inputs["metadata"]["name"] == "kubeflow"]
    assert patch.inputs["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "baseline"
    policies = {
        r.inputs["metadata"]["name"]: r.inputs["spec"]
        for r in dev.of_type(NETWORK_POLICY)
        if r.inputs["metadata"]["namespace"] == "kubeflow"
    }
    assert {"default-deny-ingress", "allow-same-namespace", "allow-api-server"} <= set(policies)
    assert policies["allow-api-server"]["ingress"][0]["ports"] == [{"protocol": "TCP", "port": 9443}]


def test_the_vpc_cni_enforces_network_policies(stack):
    """pulumi-eks turns `vpcCniOptions.enableNetworkPolicy` into the vpc-cni add-on's configuration value
    {"enableNetworkPolicy": "true"} (nodejs/eks/addons/cni-addon.ts, mergeConfigurationValues); without
    it the CNI ignores every NetworkPolicy."""
    cluster = stack.one("eks:index:Cluster")
    assert cluster.inputs["vpcCniOptions"]["enableNetworkPolicy"] is True
    assert not cluster.inputs.get("useDefaultVpcCni")


def _policy(pod_selector, types, **rules):
    spec = {"podSelector": pod_selector, "policyTypes": types, **rules}
    return {"metadata": {"namespace": "a"}, "spec": spec}


def test_evaluator_follows_kubernetes_semantics():
    """The evaluator itself, on the cases the Kubernetes NetworkPolicy documentation spells out."""
    ns = {"a": {NAME_LABEL: "a"}, "b": {NAME_LABEL: "b", "team": "x"}}
    web = Endpoint("a/web", "10.0.0.1", "a", {"app": "web"}, {"http": 8080})
    db = Endpoint("a/db", "10.0.0.2", "a", {"app": "db"})
    other = Endpoint("b/client", "10.0.1.1", "b", {"app": "client"})
    outside = Endpoint("internet", "52.0.0.1")
    assert allowed([], other, web, 8080, ns)  # nothing selects: not isolated
    deny = _policy({}, ["Ingress"])
    assert not allowed([deny], other, web, 8080, ns)
    assert allowed([deny], web, outside, 443, ns)  # isolated for ingress only
    # Policies add up; a peer's namespaceSelector and podSelector in one element are ANDed.
    from_x = _policy(
        {"matchLabels": {"app": "web"}},
        ["Ingress"],
        ingress=[
            {
                "from": [
                    {
                        "namespaceSelector": {"matchLabels": {"team": "x"}},
                        "podSelector": {"matchLabels": {"app": "nope"}},
                    }
                ]
            }
        ],
    )
    assert not allowed([deny, from_x], other, web, 8080, ns)
    named = _policy(
        {"matchLabels": {"app": "web"}},
        ["Ingress"],
        ingress=[
            {"from": [{"namespaceSelector": {"matchLabels": {"team": "x"}}}], "ports": [{"port": "http"}]}
        ],
    )
    assert allowed([deny, named], other, web, 8080, ns)
    assert not allowed([deny, named], other, web, 9090, ns)
    assert not allowed([deny, named], other, db, 8080, ns)
    # podSelector alone: the policy's own namespace only.
    same = _policy({}, ["Ingress"], ingress=[{"from": [{"podSelector": {}}]}])
    assert allowed([same], db, web, 1, ns) and not allowed([same], other, web, 1, ns)
    # Egress: ipBlock with except; both ends must allow.
    public = {"ipBlock": {"cidr": "0.0.0.0/0", "except": ["10.0.0.0/8"]}}
    out = _policy({}, ["Egress"], egress=[{"to": [public]}])
    assert allowed([out], web, outside, 443, ns) and not allowed([out], web, db, 443, ns)
    # policyTypes unset: Ingress, plus Egress only when the policy has egress rules.
    implicit = {"metadata": {"namespace": "a"}, "spec": {"podSelector": {}}}
    assert not allowed([implicit], other, web, 80, ns) and allowed([implicit], web, outside, 80, ns)
    # A pod and its own node reach each other through any policy, both ways; another node they do not.
    on_n1 = dataclasses.replace(web, node="n1")
    node1, node2 = Endpoint("n1", "10.0.9.1", node="n1"), Endpoint("n2", "10.0.9.2", node="n2")
    deny_all = _policy({}, ["Ingress", "Egress"])
    assert allowed([deny_all], on_n1, node1, 10250, ns) and allowed([deny_all], node1, on_n1, 8080, ns)
    assert not allowed([deny_all], on_n1, node2, 10250, ns) and not allowed(
        [deny_all], node2, on_n1, 8080, ns
    )


def test_every_policy_is_a_valid_network_policy(world):
    """kubernetes-validate (strict: an unknown field would be dropped by the API server)."""
    version = validation_version(world.kubernetes_version)
    assert world.policies, "the program rendered no NetworkPolicy"
    for policy in world.policies:
        obj = {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", **policy}
        kubernetes_validate.validate(obj, version, strict=True)


def test_a_job_in_a_shared_namespace_isolates_only_its_own_pods():
    policies = job_policies("j", "team", {"mlops-eks.io/job": "j"}, 9464, default_deny=False)
    assert [(p["metadata"]["name"], p["spec"]["podSelector"]) for p in policies] == [
        ("j-training", {"matchLabels": {"mlops-eks.io/job": "j"}})
    ]


def test_the_api_server_reaches_volcanos_admission_webhooks():
    """Neither committed stack picks volcano: render it alone at the pinned version, with its policies."""
    release = HelmRelease("volcano", "volcano", "1.15.1", "volcano-system", volcano_values())
    objs = installed(release, objects(render(release, "1.35")), set())
    ips = (f"10.0.9.{i}" for i in range(1, 255))
    pods = pod_endpoints(objs, ips)
    policies = platform_policies("volcano-system", "10.0.0.0/16")
    namespaces = {ns: {NAME_LABEL: ns} for ns in ("volcano-system", "other")}
    api_server = Endpoint("api-server", "10.0.200.5")
    calls = [
        w["clientConfig"]["service"]
        for o in objs
        if o["kind"].endswith("WebhookConfiguration")
        for w in o.get("webhooks") or []
    ]
    targets = [t for call in calls for t in service_targets(objs, pods, call)]
    assert calls and len(targets) == len(calls)
    assert all(allowed(policies, api_server, pod, port, namespaces) for pod, port in targets)
    assert not allowed(policies, Endpoint("x", "10.0.9.250", "other", {}), targets[0][0], 8080, namespaces)
