"""Creation order, read from the dependency graph the program hands the engine (every registration's
dependencies and provider, recorded under the synth mocks): nothing that names the cluster is created
before it, every Kubernetes object goes through the cluster's provider, and every custom resource waits
for the Helm release that installs its CRD (the CRDs each chart package in upstream/helm ships)."""

from __future__ import annotations

import re
import tarfile
from functools import cache

import pytest

from sim.contracts import HELM_PACKAGES
from sim.helm_render import chart_name
from tests.infra.dependency_graph import Node, build_graph, depends_on

CLUSTER = "eks:index:Cluster"
K8S_PROVIDER = "pulumi:providers:kubernetes"
RELEASE = "kubernetes:helm.sh/v3:Release"


@pytest.fixture(scope="module", params=["dev", "prod"])
def graph(request) -> list[Node]:
    return build_graph(request.getfixturevalue(request.param))


def names_cluster(node: Node) -> bool:
    return node.type.startswith("aws:") and "clusterName" in node.inputs


def test_every_aws_resource_naming_the_cluster_waits_for_it(graph):
    cluster = next(n for n in graph if n.type == CLUSTER)
    naming = [n for n in graph if names_cluster(n)]
    assert {n.type for n in naming} >= {
        "aws:eks/accessEntry:AccessEntry",
        "aws:eks/podIdentityAssociation:PodIdentityAssociation",
        "aws:eks/addon:Addon",
    }
    early = [f"{n.type} {n.name}" for n in naming if not depends_on(graph, n, cluster.urn)]
    assert early == [], "created while EKS may still be creating the cluster"


def test_every_kubernetes_object_uses_the_clusters_provider(graph):
    cluster = next(n for n in graph if n.type == CLUSTER)
    providers = [n for n in graph if n.type == K8S_PROVIDER]
    assert len(providers) == 1 and depends_on(graph, providers[0], cluster.urn)
    objects = [n for n in graph if n.type.startswith("kubernetes:")]
    assert objects
    wrong = [f"{n.type} {n.name}: {n.provider or 'default provider'}" for n in objects]
    wrong = [
        w for n, w in zip(objects, wrong, strict=True) if not n.provider.startswith(providers[0].urn + "::")
    ]
    assert wrong == [], "would deploy through the ambient kubeconfig, not the platform cluster"


def is_custom_resource(type_: str) -> bool:
    """A CRD-backed kind: an API group with a dot that is neither Kubernetes' own (*.k8s.io) nor a
    pulumi-kubernetes pseudo-group (helm.sh, kustomize, yaml)."""
    match = re.match(r"^kubernetes:([^/:]+)/[^:]+:", type_)
    group = match.group(1) if match else ""
    return "." in group and not group.endswith(".k8s.io") and group != "helm.sh"


@cache
def chart_crd_groups(chart: str, version: str) -> frozenset[str]:
    """The API groups of the CRDs a chart package installs (crds/ and templates/ alike)."""
    package = HELM_PACKAGES / f"{chart_name(chart, version)}-{version}.tgz"
    if not package.exists():
        pytest.fail(f"{package} is missing: the ordering check reads the CRDs each pinned chart installs")
    groups = set()
    with tarfile.open(package) as tgz:
        for member in tgz.getmembers():
            if not member.isfile() or not member.name.endswith((".yaml", ".yml")):
                continue
            text = tgz.extractfile(member).read().decode("utf-8", "replace")  # type: ignore[union-attr]
            for doc in re.split(r"^---", text, flags=re.M):
                if re.search(r"^kind:\s*CustomResourceDefinition", doc, re.M):
                    groups.update(re.findall(r"^  group:\s*['\"]?([a-z0-9.-]+)", doc, re.M))
    return frozenset(groups)


def test_every_custom_resource_waits_for_the_release_installing_its_crd(graph):
    releases = {
        n.urn: chart_crd_groups(n.inputs["chart"], n.inputs["version"]) for n in graph if n.type == RELEASE
    }
    crs = [n for n in graph if is_custom_resource(n.type)]
    assert crs, "no custom resource in the stack: nothing checked"
    problems = []
    for cr in crs:
        group = cr.type.split(":")[1].split("/")[0]
        installers = [urn for urn, groups in releases.items() if group in groups]
        if not installers:
            problems.append(f"{cr.type} {cr.name}: no release of the stack installs the {group} CRDs")
        elif not any(depends_on(graph, cr, urn) for urn in installers):
            problems.append(f"{cr.type} {cr.name}: does not wait for {', '.join(installers)}")
    assert problems == []


def test_the_checks_catch_a_cluster_named_by_a_plain_string(graph):
    """The dependency walk itself: a resource with no path to the cluster (an access entry that named
    the cluster by a string and depended only on its IAM role) is reported."""
    cluster = next(n for n in graph if n.type == CLUSTER)
    entry = next(n for n in graph if n.type == "aws:eks/accessEntry:AccessEntry")
    roles = {n.urn for n in graph if n.type == "aws:iam/role:Role"}
    detached = Node(entry.type, entry.name, "urn:detached", entry.inputs, entry.dependencies & roles, "")
    assert not depends_on([*graph, detached], detached, cluster.urn)


def test_every_release_waits_for_its_labeled_namespace(graph):
    """Releases do not create namespaces (Helm would make them without Pod Security labels): each one's
    namespace is a Namespace of the stack, created first, or EKS's kube-system."""
    namespaces = {n.inputs["metadata"]["name"]: n for n in graph if n.type == "kubernetes:core/v1:Namespace"}
    releases = [n for n in graph if n.type == RELEASE]
    assert releases and all(not n.inputs.get("createNamespace") for n in releases)
    problems = []
    for rel in releases:
        ns = rel.inputs["namespace"]
        if ns == "kube-system":
            continue
        if ns not in namespaces:
            problems.append(f"{rel.name}: namespace {ns} is not created by the stack")
        elif not depends_on(graph, rel, namespaces[ns].urn):
            problems.append(f"{rel.name}: does not wait for namespace {ns}")
        elif "pod-security.kubernetes.io/enforce" not in namespaces[ns].inputs["metadata"]["labels"]:
            problems.append(f"{ns}: no Pod Security label")
    assert problems == []


def test_eks_addons_with_pods_wait_for_the_system_nodes_and_the_pod_identity_agent_does_not(graph):
    """EKS reports an add-on ACTIVE only once its pods run: created before any node, CoreDNS and the EBS
    CSI driver stay DEGRADED until the create times out. The Pod Identity agent is what nodes wait for."""
    system = next(n for n in graph if n.type == "eks:index:ManagedNodeGroup" and n.name == "system")
    addons = {n.inputs["addonName"]: n for n in graph if n.type == "aws:eks/addon:Addon"}
    with_pods = ("coredns", "aws-ebs-csi-driver", "eks-node-monitoring-agent")
    assert set(addons) == {*with_pods, "eks-pod-identity-agent"}
    for name in with_pods:
        assert depends_on(graph, addons[name], system.urn), f"{name} is created before any node"
    assert depends_on(graph, system, addons["eks-pod-identity-agent"].urn)
    assert not depends_on(graph, addons["eks-pod-identity-agent"], system.urn)


def test_destroy_waits_for_the_ebs_volumes_before_the_csi_driver_goes(graph):
    """`pulumi destroy` deletes in reverse dependency order: every release and namespace (and so every PVC)
    before the command that waits for the volumes, and that command before the driver's add-on."""
    (wait,) = [n for n in graph if n.name.endswith("ebs-volumes-released")]
    assert wait.type == "command:local:Command"
    addons = [n for n in graph if n.type == "aws:eks/addon:Addon"]
    (driver,) = [n for n in addons if n.inputs["addonName"] == "aws-ebs-csi-driver"]
    assert depends_on(graph, wait, driver.urn)
    holders = [n for n in graph if n.type in (RELEASE, "kubernetes:core/v1:Namespace")]
    assert holders
    early = [f"{n.type} {n.name}" for n in holders if not depends_on(graph, n, wait.urn)]
    assert early == [], f"destroyed after the wait, so their volumes may outlive the driver: {early}"


def test_the_wait_script_waits_for_every_volume_of_the_class_and_nothing_else(tmp_path):
    """The delete command as the deployer's shell runs it, with a kubectl that answers like the API."""
    import os
    import subprocess

    from infra.platform.cluster import GP3, VOLUMES_RELEASED_SCRIPT

    calls = tmp_path / "calls"
    kubectl = tmp_path / "kubectl"
    kubectl.write_text(
        "#!/bin/sh\n"
        f'echo "$KUBECONFIG|$(cat "$KUBECONFIG")|$*" >> {calls}\n'
        'case "$1" in get) printf "pvc-a pvc-b ";; esac\n'
    )
    kubectl.chmod(0o755)
    env = {
        **os.environ,
        "PATH": f"{tmp_path}:{os.environ['PATH']}",
        "KUBECONFIG_JSON": '{"kind":"Config"}',
        "STORAGE_CLASS": GP3,
        "TIMEOUT": "15m",
    }
    done = subprocess.run(["sh", "-c", VOLUMES_RELEASED_SCRIPT], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    get, wait = calls.read_text().splitlines()
    assert '{"kind":"Config"}' in get and 'storageClassName=="gp3"' in get
    assert wait.endswith("wait --for=delete --timeout=15m pv pvc-a pvc-b")
    assert not os.path.exists(get.split("|")[0]), "the kubeconfig copy is left on disk"
