"""The add-ons inside the real platform program: `infra synth` lists them, and the dependency wiring
gives `pulumi destroy` the safe teardown order."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

# Runs the dev program under the synth mocks in a fresh process (a second root stack is refused in this
# one) and prints each resource's dependencies, as the engine receives them.
_DEPENDENCIES = """
import json
import pulumi
from infra.tools import synth
from infra.config.platform import PlatformConfig
from infra.program import program

class DependencyMonitor(synth.RecordingMonitor):
    def __init__(self, mocks):
        super().__init__(mocks)
        self.dependencies = {}

    def RegisterResource(self, request):
        self.dependencies[request.name] = sorted(u.split("::")[-1] for u in request.dependencies)
        return super().RegisterResource(request)

values = synth.stack_config("dev")
mocks = synth.PlatformMocks(PlatformConfig.from_mapping(values).region)
monitor = DependencyMonitor(mocks)
pulumi.runtime.set_all_config({k: v if isinstance(v, str) else json.dumps(v) for k, v in values.items()})
synth.install_mocks(mocks, "dev", monitor)
pulumi.runtime.test(program)()
print(json.dumps(monitor.dependencies))
"""


@pytest.fixture(scope="module")
def dependencies() -> dict[str, list[str]]:
    p = subprocess.run(
        [sys.executable, "-c", _DEPENDENCIES], cwd=REPO, capture_output=True, text=True, timeout=300
    )
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


def test_synth_json_lists_every_addon():
    p = subprocess.run(
        [sys.executable, "-m", "infra", "synth", "--stack", "dev", "--json"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode == 0, p.stderr[-3000:]
    resources = json.loads(p.stdout)
    releases = {r["name"] for r in resources if r["type"] == "kubernetes:helm.sh/v3:Release"}
    gpu = {"nvidia-device-plugin", "dcgm-exporter", "amd-gpu"}
    training = {"kubeflow-trainer", "kueue"}
    assert releases == {"karpenter", "kube-prometheus-stack", "metrics-server", "kubecost", *gpu, *training}
    types = {r["type"] for r in resources}
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


def test_node_pools_depend_on_the_karpenter_release_and_the_release_on_the_cluster(dependencies):
    pools = [name for name in dependencies if name.startswith("karpenter-pool-")]
    classes = [name for name in dependencies if name.startswith("karpenter-class-")]
    assert pools and classes
    for name in pools + classes:
        assert "karpenter" in dependencies[name], name
    # The controller goes after (is created after) the cluster and its node groups, and those after the
    # Pod Identity agent, so on destroy it outlives its NodePools and dies before the cluster.
    assert {"cluster-eks", "system"} <= set(dependencies["karpenter"])
    assert "cluster-pod-identity-agent" in dependencies["system"]


def test_nodes_wait_for_the_vpc_cni_identity_and_the_cluster_for_its_log_group(dependencies):
    # aws-node gets credentials only through the agent and its association: a node without them
    # never turns Ready. EKS writes control-plane logs into the group only if it exists first.
    for group in [n for n in dependencies if n == "system" or n.startswith("gpu-")]:
        assert {"cluster-pod-identity-agent", "cluster-vpc-cni"} <= set(dependencies[group]), group
    assert "cluster-logs" in dependencies["cluster-eks"]
    assert "cluster-pod-identity-agent" in dependencies["addons-aws-ebs-csi-driver"]


def test_addon_exports_follow_the_platform_contract(dev):
    exports = dev.exports
    assert exports["training_operators"] == {"trainjob": True, "pytorchjob": True}
    assert exports["training_runtimes"] == ["torch-distributed"]
    assert exports["gang_scheduler"] == "kueue" and exports["kueue_queues"] == ["ml-team"]
    assert "grafana_admin_password" in exports
