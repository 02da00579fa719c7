"""Installs the cluster add-ons onto a built platform and returns their stack exports.

Order (each a dependency, so `pulumi destroy` runs it backwards): managed node groups and EKS add-ons ->
the add-ons' namespaces (Pod Security labels, NetworkPolicies) -> kube-prometheus-stack (its CRDs back
every ServiceMonitor) -> GPU software, metrics-server, Karpenter,
Kubecost, training operators, and Kueue last (after every release that creates Deployments: its webhooks
cannot refuse them on first install). Karpenter's NodePools go before its controller on destroy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pulumi

from infra.addons.cost import NAMESPACE as KUBECOST_NAMESPACE
from infra.addons.cost import Kubecost, KubecostArgs
from infra.addons.gpu import NAMESPACE as GPU_NAMESPACE
from infra.addons.gpu import GpuSoftware, GpuSoftwareArgs
from infra.addons.karpenter.controller import NAMESPACE as KARPENTER_NAMESPACE
from infra.addons.karpenter.controller import Karpenter, KarpenterArgs
from infra.addons.kuberay import NAMESPACE as KUBERAY_NAMESPACE
from infra.addons.monitoring.kube_prometheus import NAMESPACE as MONITORING_NAMESPACE
from infra.addons.monitoring.kube_prometheus import (
    MetricsServer,
    MetricsServerArgs,
    Observability,
    ObservabilityArgs,
)
from infra.addons.namespaces import (
    TRAINING_OPERATOR_V1_NAMESPACE,
    PlatformNamespaces,
    PlatformNamespacesArgs,
    platform_namespaces,
)
from infra.addons.system_admission import SystemAdmission, SystemAdmissionArgs
from infra.addons.training import Training, TrainingArgs
from infra.config.addons import AddonsConfig
from infra.exports import device_plugins, queue_quotas

if TYPE_CHECKING:
    from infra.program import Platform


def install_addons(
    platform: Platform,
    config: AddonsConfig,
    grafana_admin_password: pulumi.Output[str] | None,
    *,
    alert_receiver_secret: pulumi.Output[str] | None = None,
    deployer_arns: list[str] | None = None,
) -> dict[str, Any]:
    """Register every enabled add-on; returns the add-on exports (see the platform exports contract).
    `deployer_arns`: who runs `pulumi up` (the cluster's creator and adminPrincipalArns), the only people
    the system namespaces' admission policies let install workloads there."""
    provider = platform.k8s_provider
    cluster_ready: list[pulumi.Resource] = [
        platform.eks_cluster,
        # A deploy-from-VPC runner reaches the API only once its security group rule exists.
        *platform.cluster.api_access,
        *platform.node_groups,
        platform.managed_addons,
    ]
    # Every add-on namespace, labeled and with its NetworkPolicies, before any release goes into it.
    namespaces = PlatformNamespaces(
        "namespaces",
        PlatformNamespacesArgs(
            names=platform_namespaces(config),
            kubernetes_version=platform.config.kubernetes_version,
            vpc_cidr=platform.config.vpc_cidr,
            k8s_provider=provider,
        ),
        pulumi.ResourceOptions(depends_on=cluster_ready),
    )
    # Before anything installs into kube-system, gpu-system or monitoring (infra/addons/system_admission.py).
    admission = SystemAdmission(
        "system-admission",
        SystemAdmissionArgs(
            deployer_arns=deployer_arns or list(platform.config.admin_principal_arns), k8s_provider=provider
        ),
        pulumi.ResourceOptions(depends_on=cluster_ready),
    )
    cluster_ready = [*cluster_ready, namespaces, admission]
    storage_class = "gp3"

    observability = None
    if config.observability.enabled:
        observability = Observability(
            "observability",
            ObservabilityArgs(
                config=config.observability,
                k8s_provider=provider,
                storage_class=storage_class,
                grafana_admin_password=grafana_admin_password,
                alert_receiver_secret=alert_receiver_secret,
                gpu_check=config.node_health.gpu_check,
                images=platform.image_cache,
            ),
            pulumi.ResourceOptions(depends_on=cluster_ready),
        )
    monitors_after = observability.release if observability else None
    monitoring: list[pulumi.Resource] = [monitors_after] if monitors_after else []

    releases: list[pulumi.Resource] = [*monitoring]
    gpu = GpuSoftware(
        "gpu",
        GpuSoftwareArgs(
            config=config.gpu,
            k8s_provider=provider,
            service_monitor_after=monitors_after,
            node_host_engine=platform.config.node_monitoring_agent,
            node_check_instance_types=(
                [t for p in platform.config.gpu_pools for t in p.instance_type_names]
                if config.node_health.gpu_check
                else []
            ),
            node_check_image=config.node_health.gpu_check_image,
            images=platform.image_cache,
        ),
        pulumi.ResourceOptions(depends_on=cluster_ready),
    )
    releases += gpu.releases.values()
    if config.metrics_server.enabled:
        metrics_server = MetricsServer(
            "metrics-server",
            MetricsServerArgs(
                k8s_provider=provider, service_monitor_after=monitors_after, images=platform.image_cache
            ),
            pulumi.ResourceOptions(depends_on=cluster_ready),
        )
        releases.append(metrics_server.release)
    if config.karpenter.enabled:
        karpenter = Karpenter(
            "karpenter",
            KarpenterArgs(
                config=config.karpenter,
                gpu_pools=platform.config.gpu_pools,
                # An Output of the cluster: its access entry and pod identity association wait for it.
                cluster_name=platform.cluster.name,
                region=platform.region,
                account_id=platform.account_id,
                partition=platform.partition,
                k8s_provider=provider,
                subnet_tags={"karpenter.sh/discovery": platform.cluster_name},
                private_subnet_ids=platform.network.private_subnet_ids,
                efa_subnet_index=platform.zone_plan.efa_zone,
                security_group_id=platform.cluster.info.vpc_config.cluster_security_group_id,
                service_monitor=observability is not None,
                node_repair=config.node_health.karpenter_node_repair,
                gpu_check=config.node_health.gpu_check,
                session_manager=platform.config.session_manager,
                tags=platform.tags,
                images=platform.image_cache,
            ),
            # With monitoring, the ServiceMonitor's CRD (the observability release) must exist first.
            pulumi.ResourceOptions(depends_on=[*cluster_ready, *monitoring]),
        )
        releases.append(karpenter.release)
    if config.kubecost.enabled and observability is not None:
        kubecost = Kubecost(
            "kubecost",
            KubecostArgs(
                cluster_name=platform.cluster_name,
                prometheus_retention=config.observability.retention,
                k8s_provider=provider,
                images=platform.image_cache,
            ),
            pulumi.ResourceOptions(depends_on=[*cluster_ready, observability.release]),
        )
        releases.append(kubecost.release)
    training = Training(
        "training",
        TrainingArgs(
            config=config.training,
            k8s_provider=provider,
            service_monitor_after=monitors_after,
            kueue_after=releases,
            platform_namespaces=[
                GPU_NAMESPACE,
                MONITORING_NAMESPACE,
                KUBECOST_NAMESPACE,
                KARPENTER_NAMESPACE,
                KUBERAY_NAMESPACE,
            ],
            images=platform.image_cache,
        ),
        pulumi.ResourceOptions(depends_on=cluster_ready),
    )
    if config.training.training_operator_v1:
        PlatformNamespaces(
            "namespaces-training-operator-v1",
            PlatformNamespacesArgs(
                names=[TRAINING_OPERATOR_V1_NAMESPACE],
                kubernetes_version=platform.config.kubernetes_version,
                vpc_cidr=platform.config.vpc_cidr,
                k8s_provider=provider,
                existing=True,
            ),
            pulumi.ResourceOptions(depends_on=[training]),
        )
    return {
        "grafana_admin_password": observability.grafana_admin_password if observability else None,
        "training_operators": training.operators,
        "training_runtimes": training.runtimes,
        "gang_scheduler": config.training.gang_scheduler,
        "kueue_queues": training.queues,
        "priority_classes": training.priority_classes,
        # The scheduling contract (infra.contract): what serves each extended resource, and queue quotas.
        "device_plugins": [p.model_dump(mode="json") for p in device_plugins(config.gpu)],
        "queue_quotas": [q.model_dump(mode="json") for q in queue_quotas(config.training)],
    }
