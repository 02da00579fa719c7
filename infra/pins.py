"""Every upstream release the platform installs or models, pinned once: the Helm charts, the manifest
bundles and the images that are not a chart's own. Pure data (no Pulumi import), so the offline tools, the
models in sim/ and the tests read the same pins `pulumi up` installs (infra/charts.py `release`).
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType


@dataclass(frozen=True, kw_only=True)
class Chart:
    name: str
    version: str
    # An https Helm repository, or None when `name` is a full oci:// reference.
    repository: str | None = None

    @property
    def short_name(self) -> str:
        """The chart's own name (what upstream/charts files are named after)."""
        return self.name.rsplit("/", 1)[-1]


CHARTS: MappingProxyType[str, Chart] = MappingProxyType(
    {
        "karpenter": Chart(name="oci://public.ecr.aws/karpenter/karpenter", version="1.14.1"),
        "nvidia-device-plugin": Chart(
            name="nvidia-device-plugin",
            version="0.20.0",
            repository="https://nvidia.github.io/k8s-device-plugin",
        ),
        "dcgm-exporter": Chart(
            name="dcgm-exporter",
            version="4.8.2",
            repository="https://nvidia.github.io/dcgm-exporter/helm-charts",
        ),
        "amd-gpu": Chart(
            name="amd-gpu", version="0.21.0", repository="https://rocm.github.io/k8s-device-plugin/"
        ),
        "aws-efa-k8s-device-plugin": Chart(
            name="aws-efa-k8s-device-plugin", version="0.5.30", repository="https://aws.github.io/eks-charts"
        ),
        "kube-prometheus-stack": Chart(
            name="kube-prometheus-stack",
            version="88.5.3",
            repository="https://prometheus-community.github.io/helm-charts",
        ),
        "cost-analyzer": Chart(
            name="cost-analyzer", version="2.8.7", repository="https://kubecost.github.io/cost-analyzer/"
        ),
        "kubeflow-trainer": Chart(name="oci://ghcr.io/kubeflow/charts/kubeflow-trainer", version="2.3.0"),
        "kueue": Chart(name="oci://registry.k8s.io/kueue/charts/kueue", version="0.19.2"),
        "volcano": Chart(
            name="volcano", version="1.15.1", repository="https://volcano-sh.github.io/helm-charts"
        ),
        # RayJob and RayCluster (infra/addons/kuberay.py).
        "kuberay-operator": Chart(
            name="kuberay-operator", version="1.7.0", repository="https://ray-project.github.io/kuberay-helm/"
        ),
        "metrics-server": Chart(
            name="metrics-server",
            version="3.13.1",
            repository="https://kubernetes-sigs.github.io/metrics-server/",
        ),
    }
)

# The default image of Kubeflow Trainer 2.3.0's torch-distributed runtime (its manifests'
# runtimes/torch_distributed.yaml; a tag published on Docker Hub with digest sha256:db80a41f...): the runtime
# object keeps upstream's default, and every TrainJob of ours sets its own (spec.trainer.image), the
# CUDA 12.6 build of docker/cuda/Dockerfile. Change it with the kubeflow-trainer pin.
TRAINER_TORCH_RUNTIME_IMAGE = "pytorch/pytorch:2.13.0-cuda13.0-cudnn9-runtime"
# The kubeflow-trainer 2.3.0 package bundles the jobset 0.12.0 subchart with its source-tree values: the
# staging registry's moving `main` tag, pulled Always. JobSet's release packaging replaces them with the
# promoted image of the release (kubernetes-sigs/jobset hack/helm-chart-package.sh at v0.12.0:
# registry.k8s.io/jobset/jobset:<tag>, IfNotPresent); the platform sets the same. Change it with the
# kubeflow-trainer pin (its Chart.yaml names the jobset version).
JOBSET_VERSION = "0.12.0"
JOBSET_IMAGE = {
    "repository": "registry.k8s.io/jobset/jobset",
    "tag": f"v{JOBSET_VERSION}",
    "pullPolicy": "IfNotPresent",
}

# Training Operator v1 (PyTorchJob, MPIJob) has no Helm chart: its standalone kustomize overlay, at the
# commit of its release tag (a tag can be moved; a commit cannot), copied into
# infra/addons/kustomize/training-operator-v1/base (PROVENANCE.md says from where; the deploy reads no URL).
# The repository is kubeflow/trainer now (formerly kubeflow/training-operator); the image is pinned by tag
# in that overlay (v1-3f15cb8).
TRAINING_OPERATOR_V1_VERSION = "1.9.2"
TRAINING_OPERATOR_V1_COMMIT = "bde9c20903ad9b54af1f3883e4fa764a3c0db797"
