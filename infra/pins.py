"""Every upstream release the platform installs or models, pinned once: the Helm charts, the manifest
bundles, the EKS add-on versions and every image a node pulls (with its digest where one is cited). Pure
data (no Pulumi import), so the offline tools, the models in sim/ and the tests read the same pins
`pulumi up` installs (infra/charts.py `release`).
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

    @property
    def archive(self) -> str:
        """The chart package `pulumi up` installs, relative to the project root: the vendored archive the
        offline checks render (upstream/helm/PROVENANCE.txt), so a preview or update fetches no chart."""
        return f"upstream/helm/{self.short_name}-{self.version}.tgz"


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


@dataclass(frozen=True, kw_only=True)
class Image:
    """An upstream image: `ref` is registry/path:tag as its project publishes it; `digest` the manifest
    digest where a release note or manifest cites one (`cited`). infra/platform/registries.py says how it
    reaches the nodes. A digest goes into the chart values where the chart takes one; either way the image
    check before the release (infra/platform/image_primer.py) stops the update unless the tag in the
    registry is that digest, and the cache's tags are immutable from then on."""

    ref: str
    digest: str = ""
    cited: str = ""
    # Pulled only when a user's job asks for it (a runtime's default image), not by the platform itself.
    on_demand: bool = False

    @property
    def pinned(self) -> str:
        return f"{self.ref}@{self.digest}" if self.digest else self.ref


# The EKS node monitoring agent add-on (infra/addons/node_health.py) and the DCGM it runs: the agent's
# dcgm-server DaemonSet is the node's DCGM host engine, and dcgm-exporter talks to it as a DCGM client, so
# both sides carry the same DCGM. Agent v1.6.7 runs nv-hostengine from eks/observability/dcgm-exporter
# 4.5.2-4.8.1 (aws/eks-node-monitoring-agent@v1.6.7 charts/eks-node-monitoring-agent/values.yaml,
# dcgmAgent.image.tag): DCGM 4.5.2. v1.7.0 bundles DCGM 4.6.1 (its Dockerfile, DCGM_VERSION=4.6.1-1), for
# which no dcgm-exporter release exists yet (NVIDIA/dcgm-exporter tags stop at 4.5.3-4.8.2), and NVIDIA pairs
# each exporter with one DCGM ("Run DCGM Exporter with the DCGM version paired with that exporter release").
NODE_MONITORING_AGENT_VERSION = "v1.6.7-eksbuild.1"
DCGM_VERSION = "4.5.2"
DCGM_EXPORTER_IMAGE_TAG = f"{DCGM_VERSION}-4.8.1-distroless"

# Every image a node pulls, by the chart value (or object) that names it. Tags are what each pinned chart
# renders by default (its values or appVersion) unless a comment says why not.
IMAGES: MappingProxyType[str, Image] = MappingProxyType(
    {
        "karpenter": Image(
            ref="public.ecr.aws/karpenter/controller:1.14.1",
            digest="sha256:723130949e4cab989461ff07d1be4cd781d63515432494641b33c235f300ae23",
            cited="aws/karpenter-provider-aws@v1.14.1 charts/karpenter/values.yaml (controller.image.digest)",
        ),
        "prometheus-operator": Image(ref="quay.io/prometheus-operator/prometheus-operator:v0.93.1"),
        "prometheus-config-reloader": Image(
            ref="quay.io/prometheus-operator/prometheus-config-reloader:v0.93.1"
        ),
        "thanos": Image(ref="quay.io/thanos/thanos:v0.42.4"),
        "kube-webhook-certgen": Image(ref="ghcr.io/jkroepke/kube-webhook-certgen:1.8.7"),
        "alertmanager": Image(ref="quay.io/prometheus/alertmanager:v0.34.0"),
        "prometheus": Image(ref="quay.io/prometheus/prometheus:v3.14.0-distroless"),
        "grafana": Image(ref="docker.io/grafana/grafana:13.2.0"),
        "grafana-sidecar": Image(ref="quay.io/kiwigrid/k8s-sidecar:2.10.1"),
        "busybox": Image(ref="docker.io/library/busybox:1.38.0"),
        "kube-state-metrics": Image(ref="registry.k8s.io/kube-state-metrics/kube-state-metrics:v2.20.0"),
        "node-exporter": Image(ref="quay.io/prometheus/node-exporter:v1.12.1-distroless"),
        "metrics-server": Image(ref="registry.k8s.io/metrics-server/metrics-server:v0.8.1"),
        "nvidia-device-plugin": Image(ref="nvcr.io/nvidia/k8s-device-plugin:v0.20.0"),
        "dcgm-exporter": Image(ref=f"nvcr.io/nvidia/k8s/dcgm-exporter:{DCGM_EXPORTER_IMAGE_TAG}"),
        "amd-device-plugin": Image(ref="docker.io/rocm/k8s-device-plugin:1.31.0.9"),
        "amd-node-labeller": Image(ref="docker.io/rocm/k8s-device-plugin:labeller-1.31.0.9"),
        "efa-device-plugin": Image(
            ref="602401143452.dkr.ecr.us-west-2.amazonaws.com/eks/aws-efa-k8s-device-plugin:v0.5.20"
        ),
        "kubecost-cost-model": Image(ref="icr.io/kubecost/cost-model:2.8.7"),
        "kubecost-frontend": Image(ref="icr.io/kubecost/frontend:2.8.7"),
        "kubecost-modeling": Image(ref="icr.io/kubecost/modeling:v0.1.34"),
        "trainer-controller-manager": Image(ref="ghcr.io/kubeflow/trainer/trainer-controller-manager:v2.3.0"),
        # The kubeflow-trainer 2.3.0 package bundles the jobset 0.12.0 subchart with its source-tree values:
        # the staging registry's moving `main` tag, pulled Always. JobSet's release packaging replaces them
        # with the promoted image of the release (kubernetes-sigs/jobset hack/helm-chart-package.sh at
        # v0.12.0: registry.k8s.io/jobset/jobset:<tag>, IfNotPresent); the platform sets the same.
        "jobset": Image(
            ref="registry.k8s.io/jobset/jobset:v0.12.0",
            digest="sha256:e75536f1135b7bb2f19f8c3b620782fbdd9091d73398e3a272f9a5fed322980d",
            cited="kubernetes/k8s.io#9456, Image promotion for jobset v0.12.0 (registry.k8s.io/images/"
            "k8s-staging-jobset/images.yaml)",
        ),
        # The kueue 0.19.2 archive is packaged from the source tree, whose values name the staging
        # registry's moving `release-0.19` tag (pulled Always); the published chart installs the promoted
        # image (kubernetes/k8s.io#9856, "Kueue: Promote v0.19.2": "registry.k8s.io/kueue/kueue:v0.19.2").
        "kueue": Image(ref="registry.k8s.io/kueue/kueue:v0.19.2"),
        "kuberay-operator": Image(ref="quay.io/kuberay/operator:v1.7.0"),
        # Training Operator v1 (infra/addons/training_operator_v1.py): the tag upstream's standalone overlay
        # sets (kubeflow/trainer@TRAINING_OPERATOR_V1_COMMIT manifests/overlays/standalone/kustomization),
        # and the images it puts into the pods it creates, by the flags that name them
        # (cmd/training-operator.v1/main.go): the PyTorchJob Worker's init container (busybox's nslookup;
        # the digest as public build files pin it, docs/workloads.md says how to confirm it) and the MPIJob
        # launcher's kubectl-delivery (upstream's default, pkg/config/config.go; a tag frozen upstream).
        "training-operator-v1": Image(ref="ghcr.io/kubeflow/training-v1/training-operator:v1-3f15cb8"),
        "pytorch-init": Image(
            ref="docker.io/library/alpine:3.23.6",
            digest="sha256:85fe1e81d6758c208f3e1eed4338a1997e19d4be002d4dd32d3100c9a8c010a0",
            cited="public Dockerfiles pinning alpine:3.23.6 (docs/workloads.md: confirm with crane digest)",
        ),
        "mpi-kubectl-delivery": Image(ref="ghcr.io/kubeflow/training-v1/kubectl-delivery:latest"),
        "volcano-controller-manager": Image(ref="docker.io/volcanosh/vc-controller-manager:v1.15.1"),
        "volcano-scheduler": Image(ref="docker.io/volcanosh/vc-scheduler:v1.15.1"),
        "volcano-webhook-manager": Image(ref="docker.io/volcanosh/vc-webhook-manager:v1.15.1"),
        # The startup GPU check's default image (infra/addons/gpu_node_check.py): the CPU image's base.
        "gpu-check": Image(
            ref="docker.io/library/python:3.13.16-slim-trixie",
            digest="sha256:6906dca82c0e83d5994bbf2e7fc33e6b63ce3e7f27c30eafd01dfabeb3c90bf3",
            cited="docker/cpu/Dockerfile (FROM, the digest the CPU image is built from)",
        ),
        # The default image of Kubeflow Trainer 2.3.0's torch-distributed runtime (its manifests'
        # runtimes/torch_distributed.yaml; a tag published on Docker Hub with digest sha256:db80a41f...):
        # the runtime object keeps upstream's default, and every TrainJob of ours sets its own
        # (spec.trainer.image), the CUDA 12.6 build of docker/cuda/Dockerfile. Change it with the
        # kubeflow-trainer pin.
        "torch-runtime": Image(ref="pytorch/pytorch:2.13.0-cuda13.0-cudnn9-runtime", on_demand=True),
    }
)
JOBSET_VERSION = "0.12.0"

# Training Operator v1 (PyTorchJob, MPIJob) has no Helm chart: its standalone kustomize overlay, at the
# commit of its release tag (a tag can be moved; a commit cannot), copied into
# infra/addons/kustomize/training-operator-v1/base (PROVENANCE.md says from where; the deploy reads no URL).
# The repository is kubeflow/trainer now (formerly kubeflow/training-operator); its images are in IMAGES
# above, and reach the operator through the stack's image path (training_operator_v1.stack_layer).
TRAINING_OPERATOR_V1_VERSION = "1.9.2"
TRAINING_OPERATOR_V1_COMMIT = "bde9c20903ad9b54af1f3883e4fa764a3c0db797"
