"""The add-on components under Pulumi mocks: what they register, with which inputs, in which order."""

from __future__ import annotations

import json
from pathlib import Path

import pulumi
import pulumi_kubernetes as k8s
import pytest
import yaml
from recording_mocks import RecordingMocks

from infra.accelerators import CATALOG
from infra.addons.gpu import GpuSoftware, GpuSoftwareArgs
from infra.addons.karpenter.controller import Karpenter, KarpenterArgs
from infra.addons.monitoring.kube_prometheus import Observability, ObservabilityArgs
from infra.addons.training import Training, TrainingArgs
from infra.config.addons import AddonsConfig
from infra.config.platform import GpuPoolConfig
from infra.platform.image_cache import ImageCache, ImageCacheArgs
from infra.platform.registries import ImagePath

REPO = Path(__file__).resolve().parents[2]
GPU_POOLS = [
    GpuPoolConfig.model_validate(
        {"name": "t4", "accelerator": "t4", "capacityTypes": ["spot", "on-demand"], "gpuLimit": 8}
    ),
    GpuPoolConfig.model_validate(
        {"name": "amd", "accelerator": "amd-v520", "amiId": "ami-0123456789abcdef0", "gpuLimit": 2}
    ),
]
CONFIG = AddonsConfig.model_validate(
    {
        "gpu": {"amdDevicePlugin": True},
        "training": {"trainingOperatorV1": True, "gangScheduler": "kueue", "queues": [{"name": "team-a"}]},
    }
)


_SECRET_SIG = "4dabf18193072939515e22adb298388d"


@pytest.fixture
def mocks(pulumi_mocks) -> RecordingMocks:
    return pulumi_mocks()


class _DependsOn:
    """A transformation on the component (inherited by its children) recording each child's depends_on."""

    def __init__(self):
        self.edges: dict[str, set[str]] = {}

    def __call__(self, args: pulumi.ResourceTransformationArgs):
        self.edges[args.name] = {
            r._name for r in (args.opts.depends_on or []) if isinstance(r, pulumi.Resource)
        }
        return None


def _images() -> ImageCache:
    """The stack's image path (infra/platform/image_cache.py), registered under the test's mocks."""
    path = ImagePath("123456789012", "us-east-1", "test")
    key = "arn:aws:kms:us-east-1:123456789012:key/test"
    return ImageCache("image-cache", ImageCacheArgs(path=path, kms_key_arn=key, tags={}))


def _karpenter(provider: k8s.Provider, depends_on=(), opts=None) -> Karpenter:
    args = KarpenterArgs(
        config=CONFIG.karpenter,
        gpu_pools=GPU_POOLS,
        cluster_name="mlops-eks-test",
        region="us-east-1",
        account_id="123456789012",
        k8s_provider=provider,
        subnet_tags={"karpenter.sh/discovery": "mlops-eks-test"},
        security_group_id="sg-0123456789abcdef0",
        images=_images(),
    )
    waits_for = pulumi.ResourceOptions(depends_on=list(depends_on))
    return Karpenter("karpenter", args, opts=pulumi.ResourceOptions.merge(opts, waits_for))


def _settled(*resources: pulumi.Resource) -> pulumi.Output:
    return pulumi.Output.all(*[r.urn for r in resources])


@pulumi.runtime.test
def test_karpenter_pools_go_before_the_controller_and_the_controller_before_the_cluster(mocks):
    provider = k8s.Provider("k8s", kubeconfig="{}")
    cluster = pulumi.CustomResource("test:index:Cluster", "the-cluster", {})
    order = _DependsOn()
    karpenter = _karpenter(
        provider, depends_on=[cluster], opts=pulumi.ResourceOptions(transformations=[order])
    )

    def check(_):
        assert "the-cluster" in order.edges["karpenter"]
        assert set(karpenter.node_pools) == {"gpu-t4", "gpu-amd", "cpu"}
        for pool in karpenter.node_pools:
            assert "karpenter" in order.edges[f"karpenter-pool-{pool}"]
        for node_class in karpenter.node_classes:
            assert "karpenter" in order.edges[f"karpenter-class-{node_class}"]
        # The controller starts only once its identity, the node access entry and its policies exist.
        assert {"karpenter-controller", "karpenter-node", "karpenter-node-lifecycle"} <= order.edges[
            "karpenter"
        ]

    return _settled(karpenter.release, *karpenter.node_pools.values()).apply(check)


@pulumi.runtime.test
def test_karpenter_identity_queue_and_node_access(mocks):
    karpenter = _karpenter(k8s.Provider("k8s", kubeconfig="{}"))

    def check(_):
        (identity,) = mocks.by_name("aws:eks/podIdentityAssociation:PodIdentityAssociation").values()
        release = mocks.by_name("kubernetes:helm.sh/v3:Release")["karpenter"]
        assert (identity["namespace"], identity["serviceAccount"]) == ("kube-system", "karpenter")
        assert release["values"]["serviceAccount"]["name"] == "karpenter"
        assert release["namespace"] == "kube-system"
        (access,) = mocks.by_name("aws:eks/accessEntry:AccessEntry").values()
        assert access["type"] == "EC2_LINUX"
        (queue,) = mocks.by_name("aws:sqs/queue:Queue").values()
        assert (queue["messageRetentionSeconds"], queue["sqsManagedSseEnabled"]) == (300, True)
        assert release["values"]["settings"]["interruptionQueue"] == "karpenter-interruption"
        assert len(mocks.by_name("aws:cloudwatch/eventTarget:EventTarget")) == 5
        # The controller's reference policies (the image cache's node policy is the platform's).
        assert len([n for n in mocks.by_name("aws:iam/policy:Policy") if n.startswith("karpenter-")]) == 6
        trust = json.loads(mocks.by_name("aws:iam/role:Role")["karpenter-controller"]["assumeRolePolicy"])
        # Pinned to this cluster (its ARN: account, region and name), not any cluster in the account.
        assert trust["Statement"][0]["Condition"]["StringEquals"] == {
            "aws:RequestTag/eks-cluster-arn": "arn:aws:eks:us-east-1:123456789012:cluster/mlops-eks-test",
            "aws:RequestTag/kubernetes-namespace": "kube-system",
            "aws:RequestTag/kubernetes-service-account": "karpenter",
        }

    return _settled(karpenter.release, *karpenter.node_classes.values()).apply(check)


@pytest.mark.parametrize(
    ("accelerator", "other", "plugin", "selector_key"),
    [
        ("t4", "amd-v520", "nvidia-device-plugin", "nodeSelector"),
        ("amd-v520", "t4", "amd-gpu", "node_selector"),
    ],
)
@pulumi.runtime.test
def test_gpu_pools_carry_the_labels_and_taint_the_device_plugins_schedule_onto(
    mocks, accelerator, other, plugin, selector_key
):
    provider = k8s.Provider("k8s", kubeconfig="{}")
    karpenter = _karpenter(provider)
    gpu = GpuSoftware("gpu", GpuSoftwareArgs(config=CONFIG.gpu, k8s_provider=provider, images=_images()))
    kubelet_labels = {"kubernetes.io/arch": "amd64"}

    def check(_):
        pool = next(p for p in GPU_POOLS if p.accelerator == accelerator)
        template = mocks.by_name("kubernetes:karpenter.sh/v1:NodePool")[f"karpenter-pool-gpu-{pool.name}"][
            "spec"
        ]["template"]
        acc = CATALOG[accelerator]
        assert template["metadata"]["labels"] == acc.node_labels
        assert template["spec"]["taints"] == [{"key": acc.taint.key, "value": "true", "effect": "NoSchedule"}]
        values = mocks.by_name("kubernetes:helm.sh/v3:Release")[plugin]["values"]
        tolerated = {(t["key"], t.get("effect")) for t in values["tolerations"]}
        assert (acc.taint.key, acc.taint.effect) in tolerated
        # On every node of its vendor, and on no node of the other vendor.
        selector = values[selector_key].items()
        assert not selector <= {**CATALOG[other].node_labels, **kubelet_labels}.items()
        assert selector <= {**acc.node_labels, **kubelet_labels}.items(), (
            "the plugin never lands on these nodes"
        )

    return _settled(*karpenter.node_pools.values(), *gpu.releases.values()).apply(check)


@pulumi.runtime.test
def test_node_classes_use_the_nvidia_alias_or_the_amd_ami_and_imdsv2_one_hop(mocks):
    karpenter = _karpenter(k8s.Provider("k8s", kubeconfig="{}"))

    def check(_):
        classes = mocks.by_name("kubernetes:karpenter.k8s.aws/v1:EC2NodeClass")
        assert classes["karpenter-class-amd-amd"]["spec"]["amiSelectorTerms"] == [
            {"id": "ami-0123456789abcdef0"}
        ]
        # The pinned default release: an AMI change is a config change, never a surprise drift.
        nvidia = classes["karpenter-class-nvidia"]["spec"]
        assert nvidia["amiSelectorTerms"] == [{"alias": "al2023@v20260818"}]
        for node_class in classes.values():
            assert node_class["spec"]["metadataOptions"]["httpPutResponseHopLimit"] == 1
            assert node_class["spec"]["metadataOptions"]["httpTokens"] == "required"

    return _settled(*karpenter.node_classes.values()).apply(check)


@pulumi.runtime.test
def test_grafana_password_is_generated_when_not_configured_and_kept_secret(mocks):
    observability = Observability(
        "observability",
        ObservabilityArgs(
            config=CONFIG.observability, k8s_provider=k8s.Provider("k8s", kubeconfig="{}"), images=_images()
        ),
    )

    def check(args):
        _, is_secret = args
        string_data = mocks.by_name("kubernetes:core/v1:Secret")["observability-grafana-admin"]["stringData"]
        # The engine sees a secret (Pulumi's secret signature wraps the value): never stored in plain text.
        assert string_data[_SECRET_SIG] == "1b47061264138c4ac30d75fd1eb44270"
        assert string_data["value"]["admin-password"] == "generated-password"
        assert is_secret
        dashboards = mocks.by_name("kubernetes:core/v1:ConfigMap")
        assert {d["metadata"]["labels"]["grafana_dashboard"] for d in dashboards.values()} == {"1"}
        assert len(dashboards) == 2

    password_is_secret = pulumi.Output.from_input(observability.grafana_admin_password).is_secret()
    return pulumi.Output.all(observability.release.urn, pulumi.Output.from_input(password_is_secret)).apply(
        check
    )


@pulumi.runtime.test
def test_training_installs_trainer_runtime_operator_v1_and_kueue_queues(mocks):
    training = Training(
        "training",
        TrainingArgs(
            config=CONFIG.training, k8s_provider=k8s.Provider("k8s", kubeconfig="{}"), images=_images()
        ),
    )

    def check(_):
        assert training.operators == {"trainjob": True, "pytorchjob": True, "mpijob": True}
        assert training.runtimes == ["torch-distributed"] and training.queues == ["team-a"]
        runtimes = mocks.by_name("kubernetes:trainer.kubeflow.org/v1alpha1:ClusterTrainingRuntime")
        assert [r["metadata"]["name"] for r in runtimes.values()] == ["torch-distributed"]
        (operator_v1,) = mocks.by_name("kubernetes:kustomize/v2:Directory").values()
        # Our overlay of upstream's manifests vendored at the pinned commit: kustomize reads no URL.
        # The stack's layer over the overlay, which builds on the local copy.
        assert operator_v1["directory"] == "infra/addons/kustomize/stacks/test/training-operator-v1"
        layer = yaml.safe_load((REPO / operator_v1["directory"] / "kustomization.yaml").read_text())
        assert layer["resources"] == ["../../../training-operator-v1"]
        kustomization = yaml.safe_load(
            (REPO / "infra/addons/kustomize/training-operator-v1/kustomization.yaml").read_text()
        )
        assert kustomization["resources"] == ["base", "namespace.yaml"]
        assert {"kubeflow-trainer", "kueue"} <= set(mocks.by_name("kubernetes:helm.sh/v3:Release"))
        assert len(mocks.by_name("kubernetes:kueue.x-k8s.io/v1beta2:ClusterQueue")) == 1

    return _settled(*training.installed).apply(check)


@pulumi.runtime.test
def test_a_configured_grafana_password_is_used_instead_of_a_generated_one(mocks):
    observability = Observability(
        "observability",
        ObservabilityArgs(
            config=CONFIG.observability,
            k8s_provider=k8s.Provider("k8s", kubeconfig="{}"),
            grafana_admin_password="from-pulumi-config",
            images=_images(),
        ),
    )

    def check(_):
        assert not mocks.by_name("random:index/randomPassword:RandomPassword")
        string_data = mocks.by_name("kubernetes:core/v1:Secret")["observability-grafana-admin"]["stringData"]
        assert string_data["value"]["admin-password"] == "from-pulumi-config"

    return observability.release.urn.apply(check)
