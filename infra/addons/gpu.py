"""GPU software on the nodes: the NVIDIA device plugin (makes `nvidia.com/gpu` allocatable), DCGM exporter
(GPU metrics for Prometheus and Kubecost), the AMD device plugin (`amd.com/gpu`) and the EFA device plugin
(`vpc.amazonaws.com/efa`: without it a pod requesting EFA never schedules).

Each DaemonSet is scheduled by the labels every GPU node of its vendor carries (the catalog's
`node_labels`, set by managed node groups and Karpenter NodePools alike) and tolerates the vendor's GPU
taint. Without the label the NVIDIA plugin waits for NFD labels that AL2023 nodes never get, and no GPU is
ever allocatable (a common AL2023 pitfall).
"""

from __future__ import annotations

import re
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from infra.addons import gpu_node_check
from infra.charts import release
from infra.component_args import ComponentArgs, child_options
from infra.config.addons import GpuSoftwareConfig
from infra.contract import (
    JOB_LABEL,
)
from infra.exports import (
    amd_device_plugin_values,
    efa_device_plugin_values,
    nvidia_device_plugin_values,
    vendor_node_selector,
    vendor_toleration,
)
from infra.pins import Image
from infra.platform.image_cache import ImageCache
from infra.platform.registries import split_ref

NAMESPACE = "gpu-system"
# Workload pod labels DCGM copies onto GPU metrics (set by the workload renderer on every training pod):
# `mlops-eks.io/job` (job name) and `mlops-eks.io/accelerator`. The exporter sanitises label names the
# Prometheus way, so they appear as `mlops_eks_io_job` and `mlops_eks_io_accelerator`.
POD_LABEL_ALLOWLIST = [r"^mlops-eks\.io/.*$"]
JOB_METRIC_LABEL = re.sub(r"[^a-zA-Z0-9_]", "_", JOB_LABEL)  # mlops_eks_io_job


# The EKS node monitoring agent's DCGM host engine: its dcgm-server DaemonSet runs `nv-hostengine -n -b ALL`
# with hostPort 5555 on every GPU node it is placed on (aws/eks-node-monitoring-agent
# charts/eks-node-monitoring-agent/templates/dcgm-daemonset.yaml).
NODE_HOST_ENGINE_PORT = 5555


def dcgm_exporter_values(*, service_monitor: bool, node_host_engine: bool = False) -> dict[str, Any]:
    """`node_host_engine`: the node monitoring agent runs a DCGM host engine on every GPU node. DCGM's
    profiling module (the DCGM_FI_PROF_* fields; Kubecost's GPU utilisation reads
    DCGM_FI_PROF_GR_ENGINE_ACTIVE, which the exporter's default-counters.csv collects) takes a system-wide
    lock in the driver, so one engine per node can serve it (NVIDIA/DCGM#56; aws/eks-node-monitoring-agent
    #256). The agent's engine cannot be switched off (its add-on configuration schema,
    charts/configuration.schema.json `DCGMAgent`, has no such key) and the agent needs it for
    AcceleratedHardwareReady, so it owns the GPUs: the exporter embeds no engine of its own and connects to
    the agent's on the pod's node (`-r`, env DCGM_REMOTE_HOSTENGINE_INFO: NVIDIA/dcgm-exporter
    pkg/cmd/app.go; the chart's values.yaml documents `-r <HOST>:<PORT>`)."""
    remote = (
        {
            "extraEnv": [
                {"name": "NODE_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.hostIP"}}},
                # $(NODE_IP): the kubelet expands a variable defined earlier in the container's env.
                {"name": "DCGM_REMOTE_HOSTENGINE_INFO", "value": f"$(NODE_IP):{NODE_HOST_ENGINE_PORT}"},
            ]
        }
        if node_host_engine
        else {}
    )
    return {
        **remote,
        "nodeSelector": vendor_node_selector("nvidia"),
        "tolerations": [vendor_toleration("nvidia")],
        "serviceMonitor": {
            "enabled": service_monitor,
            # Keep the exporter's pod/namespace/container labels (the GPU's workload) instead of renaming
            # them to exported_* under the exporter pod's own: dashboards and alerts join on them.
            "honorLabels": True,
            "interval": "15s",
        },
        "kubernetes": {"enablePodLabels": True, "podLabelAllowlistRegex": POD_LABEL_ALLOWLIST},
    }


# The kinds the startup GPU check is made of, and the Python names of their top-level fields.
_CHECK_KINDS: dict[str, Any] = {
    "ServiceAccount": k8s.core.v1.ServiceAccount,
    "ConfigMap": k8s.core.v1.ConfigMap,
    "ClusterRole": k8s.rbac.v1.ClusterRole,
    "ClusterRoleBinding": k8s.rbac.v1.ClusterRoleBinding,
    "ValidatingAdmissionPolicy": k8s.admissionregistration.v1.ValidatingAdmissionPolicy,
    "ValidatingAdmissionPolicyBinding": k8s.admissionregistration.v1.ValidatingAdmissionPolicyBinding,
    "DaemonSet": k8s.apps.v1.DaemonSet,
}
_SNAKE = {"roleRef": "role_ref"}


class GpuSoftwareArgs(ComponentArgs):
    config: GpuSoftwareConfig
    k8s_provider: k8s.Provider
    # DCGM's ServiceMonitor needs the Prometheus Operator CRDs: pass the observability release.
    service_monitor_after: pulumi.Resource | None = None
    # The EKS node monitoring agent runs its DCGM host engine on the GPU nodes (dcgm_exporter_values).
    node_host_engine: bool = False
    # The startup GPU check (infra/addons/gpu_node_check.py) for the stack's GPU pools' instance types
    # (its NVIDIA ones; none: no check), run from `node_check_image`.
    node_check_instance_types: list[str] = []
    node_check_image: str = gpu_node_check.CHECK_IMAGE
    images: ImageCache


class GpuSoftware(pulumi.ComponentResource):
    releases: dict[str, k8s.helm.v3.Release]

    def __init__(self, name: str, args: GpuSoftwareArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("mlops-eks:infra:GpuSoftware", name, None, opts)
        cfg = args.config
        base = child_options(self, opts, provider=args.k8s_provider)
        self.releases = {}
        if cfg.nvidia_device_plugin:
            self.releases["nvidia-device-plugin"] = release(
                "nvidia-device-plugin",
                "nvidia-device-plugin",
                NAMESPACE,
                nvidia_device_plugin_values(),
                base,
                images=args.images,
            )
        if cfg.dcgm_exporter:
            monitored = args.service_monitor_after is not None
            after = [args.service_monitor_after] if args.service_monitor_after else []
            self.releases["dcgm-exporter"] = release(
                "dcgm-exporter",
                "dcgm-exporter",
                NAMESPACE,
                dcgm_exporter_values(service_monitor=monitored, node_host_engine=args.node_host_engine),
                pulumi.ResourceOptions.merge(base, pulumi.ResourceOptions(depends_on=after)),
                images=args.images,
            )
        if cfg.amd_device_plugin:
            self.releases["amd-gpu"] = release(
                "amd-gpu", "amd-gpu", NAMESPACE, amd_device_plugin_values(), base, images=args.images
            )
        if cfg.efa_device_plugin:
            self.releases["aws-efa-k8s-device-plugin"] = release(
                "aws-efa-k8s-device-plugin",
                "aws-efa-k8s-device-plugin",
                NAMESPACE,
                efa_device_plugin_values(),
                base,
                images=args.images,
            )
        self._node_check(name, args, base)
        self.register_outputs({"releases": list(self.releases)})

    def _node_check(self, name: str, args: GpuSoftwareArgs, base: pulumi.ResourceOptions) -> None:
        """The check's objects; its pods start once the rights, the admission policy that narrows them
        and the script are in place."""
        image = args.images.path.ref(args.node_check_image)
        objects = gpu_node_check.objects(NAMESPACE, args.node_check_instance_types, image)
        # The check's pods pull only once the image is in the registry (at its digest, if it has one).
        prerequisites: list[pulumi.Resource] = []
        repository, tag, digest = split_ref(args.node_check_image)
        if objects and tag:
            pin = Image(ref=f"{repository}:{tag}", digest=digest)
            prerequisites += args.images.primed(f"{name}-check", [pin], pulumi.ResourceOptions(parent=self))
        for obj in objects:
            after = prerequisites if obj["kind"] == "DaemonSet" else []
            fields = {_SNAKE.get(k, k): v for k, v in obj.items() if k not in ("apiVersion", "kind")}
            created = _CHECK_KINDS[obj["kind"]](
                f"{name}-check-{obj['kind'].lower()}-{obj['metadata']['name']}",
                opts=pulumi.ResourceOptions.merge(base, pulumi.ResourceOptions(depends_on=after)),
                **fields,
            )
            if obj["kind"] != "DaemonSet":
                prerequisites.append(created)
