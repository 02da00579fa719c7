"""Installs the cluster add-ons onto a built platform and returns their stack exports.

Order (each a dependency, so `pulumi destroy` runs it backwards): managed node groups and EKS add-ons ->
kube-prometheus-stack (its CRDs back every ServiceMonitor) -> GPU software, metrics-server, Karpenter,
Kubecost, training operators. Karpenter's NodePools go before its controller on destroy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pulumi

from infra.addons_config import AddonsConfig
from infra.cost import Kubecost, KubecostArgs
from infra.gpu import GpuSoftware, GpuSoftwareArgs
from infra.karpenter import Karpenter, KarpenterArgs
from infra.observability import MetricsServer, MetricsServerArgs, Observability, ObservabilityArgs
from infra.training import Training, TrainingArgs

if TYPE_CHECKING:
    from infra.program import Platform


def install_addons(
    platform: Platform, config: AddonsConfig, grafana_admin_password: pulumi.Input[str] | None
) -> dict[str, Any]:
    """Register every enabled add-on; returns the add-on exports (see the platform exports contract)."""
    provider = platform.k8s_provider
    cluster_ready: list[pulumi.Resource] = [
        platform.eks_cluster,
        *platform.node_groups,
        platform.managed_addons,
    ]
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
                depends_on=cluster_ready,
            ),
        )
    monitors_after = observability.release if observability else None

    GpuSoftware(
        "gpu",
        GpuSoftwareArgs(
            config=config.gpu,
            k8s_provider=provider,
            service_monitor_after=monitors_after,
            depends_on=cluster_ready,
        ),
    )
    if config.metrics_server.enabled:
        MetricsServer(
            "metrics-server",
            MetricsServerArgs(
                k8s_provider=provider, service_monitor_after=monitors_after, depends_on=cluster_ready
            ),
        )
    if config.karpenter.enabled:
        Karpenter(
            "karpenter",
            KarpenterArgs(
                config=config.karpenter,
                cluster_name=platform.cluster_name,
                region=platform.region,
                account_id=platform.account_id,
                partition=platform.partition,
                k8s_provider=provider,
                subnet_tags={"karpenter.sh/discovery": platform.cluster_name},
                security_group_id=platform.cluster.info.vpc_config.cluster_security_group_id,
                service_monitor=observability is not None,
                tags=platform.tags,
                depends_on=[*cluster_ready, *([monitors_after] if monitors_after else [])],
            ),
        )
    if config.kubecost.enabled and observability is not None:
        Kubecost(
            "kubecost",
            KubecostArgs(
                cluster_name=platform.cluster_name,
                k8s_provider=provider,
                depends_on=[*cluster_ready, observability.release],
            ),
        )
    training = Training(
        "training",
        TrainingArgs(
            config=config.training,
            k8s_provider=provider,
            service_monitor_after=monitors_after,
            depends_on=cluster_ready,
        ),
    )
    return {
        "grafana_admin_password": observability.grafana_admin_password if observability else None,
        "training_operators": training.operators,
        "training_runtimes": training.runtimes,
        "gang_scheduler": config.training.gang_scheduler,
        "kueue_queues": training.queues,
    }
