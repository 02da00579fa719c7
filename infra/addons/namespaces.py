"""The platform's own namespaces: each a Namespace with Pod Security labels and its NetworkPolicies,
created before any release installs into it (Helm's create_namespace would make it unlabeled).

Each namespace enforces the strictest Pod Security level its rendered pods pass (workloads/pod_security.py
checks every pod the pinned charts render against it); `warn` at the same level makes Helm print a
refusal when a Deployment's template would fail (`enforce` only refuses the pods, silently to Helm);
`audit` at `restricted` records in the audit log whatever falls short of it. The version is pinned to
the cluster's, so an upgrade does not tighten the checks under running pods.
"""

from __future__ import annotations

from collections.abc import Sequence

import pulumi
import pulumi_kubernetes as k8s

from infra.addons.gpu import NAMESPACE as GPU_NAMESPACE
from infra.addons.kuberay import NAMESPACE as KUBERAY_NAMESPACE
from infra.addons.network_policies import KUBECOST_NAMESPACE, MONITORING_NAMESPACE, platform_policies
from infra.addons.training import KUEUE_NAMESPACE, TRAINER_NAMESPACE, VOLCANO_NAMESPACE
from infra.component_args import ComponentArgs, child_options
from infra.config.addons import AddonsConfig
from infra.contract import POD_SECURITY  # namespace -> (level, why not stricter)

# Training Operator v1's standalone overlay creates it (manifests/overlays/standalone/namespace.yaml).
TRAINING_OPERATOR_V1_NAMESPACE = "kubeflow"


def pod_security_labels(namespace: str, kubernetes_version: str) -> dict[str, str]:
    level = POD_SECURITY[namespace][0]
    version = f"v{kubernetes_version}"
    prefix = "pod-security.kubernetes.io"
    return {
        f"{prefix}/enforce": level,
        f"{prefix}/enforce-version": version,
        f"{prefix}/warn": level,
        f"{prefix}/warn-version": version,
        f"{prefix}/audit": "restricted",
        f"{prefix}/audit-version": version,
    }


def platform_namespaces(config: AddonsConfig) -> list[str]:
    """The namespaces the enabled add-ons install into, besides kube-system (which EKS owns)."""
    gpu = config.gpu
    wanted = {
        MONITORING_NAMESPACE: config.observability.enabled,
        # The startup GPU check goes there too: it runs only with NVIDIA pools, which need the NVIDIA
        # device plugin (PlatformConfig refuses them without it).
        GPU_NAMESPACE: gpu.nvidia_device_plugin
        or gpu.dcgm_exporter
        or gpu.amd_device_plugin
        or gpu.efa_device_plugin,
        KUBECOST_NAMESPACE: config.kubecost.enabled and config.observability.enabled,
        TRAINER_NAMESPACE: config.training.trainer,
        KUBERAY_NAMESPACE: config.training.kuberay,
        KUEUE_NAMESPACE: config.training.gang_scheduler == "kueue",
        VOLCANO_NAMESPACE: config.training.gang_scheduler == "volcano",
    }
    return [ns for ns, on in wanted.items() if on]


class PlatformNamespacesArgs(ComponentArgs):
    names: Sequence[str]
    kubernetes_version: str
    # The API server calls webhooks from its ENIs in the VPC (infra/addons/network_policies.py).
    vpc_cidr: str
    k8s_provider: k8s.Provider
    # The namespaces exist already (a manifest bundle in opts.depends_on creates them): label them by a
    # server-side apply patch instead of creating them.
    existing: bool = False


class PlatformNamespaces(pulumi.ComponentResource):
    namespaces: dict[str, k8s.core.v1.Namespace | k8s.core.v1.NamespacePatch]

    def __init__(self, name: str, args: PlatformNamespacesArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("mlops-eks:infra:PlatformNamespaces", name, None, opts)
        base = child_options(self, opts, provider=args.k8s_provider)
        self.namespaces = {}
        for ns in args.names:
            labels = {"name": ns, **pod_security_labels(ns, args.kubernetes_version)}
            kind = k8s.core.v1.NamespacePatch if args.existing else k8s.core.v1.Namespace
            namespace = kind(f"{name}-{ns}", metadata={"name": ns, "labels": labels}, opts=base)
            self.namespaces[ns] = namespace
            after = pulumi.ResourceOptions.merge(base, pulumi.ResourceOptions(depends_on=[namespace]))
            for policy in platform_policies(ns, args.vpc_cidr):
                k8s.networking.v1.NetworkPolicy(
                    f"{name}-{ns}-{policy['metadata']['name']}",
                    metadata=policy["metadata"],
                    spec=policy["spec"],
                    opts=after,
                )
        self.register_outputs({"namespaces": list(self.namespaces)})
