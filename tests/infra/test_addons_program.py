"""The add-ons inside the real platform program: what it registers for them, and the dependency wiring
that gives `pulumi up` a working creation order and `pulumi destroy` the safe teardown order (read from
the dependency graph the program hands the engine, as tests/infra/test_ordering.py records it)."""

from __future__ import annotations

import pytest

from tests.infra.dependency_graph import Node, build_graph, depends_on

RELEASE = "kubernetes:helm.sh/v3:Release"
NODE_GROUP = "eks:index:ManagedNodeGroup"


@pytest.fixture
def graph(stack) -> list[Node]:
    return build_graph(stack)


def one(graph: list[Node], type_: str, name: str) -> Node:
    (node,) = [n for n in graph if n.type == type_ and n.name == name]
    return node


def test_the_program_installs_every_addon(dev):
    releases = {r.name for r in dev.of_type(RELEASE)}
    gpu = {"nvidia-device-plugin", "dcgm-exporter", "amd-gpu"}
    training = {"kubeflow-trainer", "kueue", "kuberay-operator"}
    assert releases == {"karpenter", "kube-prometheus-stack", "metrics-server", "kubecost", *gpu, *training}
    types = {r.type for r in dev.resources}
    assert {
        "mlops-eks:infra:Karpenter",
        "kubernetes:karpenter.sh/v1:NodePool",
        "kubernetes:karpenter.k8s.aws/v1:EC2NodeClass",
        "aws:eks/podIdentityAssociation:PodIdentityAssociation",
        "aws:sqs/queue:Queue",
        "kubernetes:trainer.kubeflow.org/v1alpha1:ClusterTrainingRuntime",
        "kubernetes:kustomize/v2:Directory",
        "kubernetes:kueue.x-k8s.io/v1beta2:ClusterQueue",
    } <= types


def test_node_pools_wait_for_the_karpenter_release_and_the_release_for_the_cluster_and_its_nodes(graph):
    karpenter = one(graph, RELEASE, "karpenter")
    pools = [
        n for n in graph if n.type.startswith(("kubernetes:karpenter.sh/", "kubernetes:karpenter.k8s.aws/"))
    ]
    assert {n.type.rsplit(":", 1)[-1] for n in pools} == {"NodePool", "EC2NodeClass"}
    early = [n.name for n in pools if not depends_on(graph, n, karpenter.urn)]
    assert early == [], "created before the controller (and, on destroy, deleted after it: nodes stay)"
    # The controller goes after the cluster and its system nodes, and those after the Pod Identity agent,
    # so on destroy it outlives its NodePools and goes before the cluster.
    system = one(graph, NODE_GROUP, "system")
    assert depends_on(graph, karpenter, one(graph, "eks:index:Cluster", "cluster-eks").urn)
    assert depends_on(graph, karpenter, system.urn)
    assert depends_on(graph, system, one(graph, "aws:eks/addon:Addon", "cluster-pod-identity-agent").urn)


def test_nodes_wait_for_the_vpc_cni_identity_and_the_cluster_for_its_log_group(graph):
    # aws-node gets credentials only through the agent and its association: a node without them
    # never turns Ready. EKS writes control-plane logs into the group only if it exists first.
    agent = one(graph, "aws:eks/addon:Addon", "cluster-pod-identity-agent")
    cni = one(graph, "aws:eks/podIdentityAssociation:PodIdentityAssociation", "cluster-vpc-cni")
    groups = [n for n in graph if n.type == NODE_GROUP]
    assert "system" in {n.name for n in groups}
    for group in groups:
        assert depends_on(graph, group, agent.urn) and depends_on(graph, group, cni.urn), group.name
    cluster = one(graph, "eks:index:Cluster", "cluster-eks")
    assert depends_on(graph, cluster, one(graph, "aws:cloudwatch/logGroup:LogGroup", "cluster-logs").urn)
    assert depends_on(graph, one(graph, "aws:eks/addon:Addon", "addons-aws-ebs-csi-driver"), agent.urn)


def test_addon_exports_follow_the_platform_contract(dev):
    exports = dev.exports
    operators = {"trainjob": True, "pytorchjob": True, "mpijob": True, "rayjob": True}
    assert exports["training_operators"] == operators
    assert exports["training_runtimes"] == ["torch-distributed"]
    assert exports["gang_scheduler"] == "kueue" and exports["kueue_queues"] == ["ml-team"]
    assert "grafana_admin_password" in exports
