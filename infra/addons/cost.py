"""Kubecost: cost per namespace, job and GPU, from the platform's own Prometheus.

The 2.8.7 `cost-analyzer` chart reads an existing Prometheus (`global.prometheus.enabled: false` + `fqdn`):
one metrics pipeline with DCGM's. 2.9.x `fail`s without the finops agent and federated storage (its
templates at 2.9.7), and 3.x brings its own agent and object storage; 3.x with storage in the platform
bucket is the migration path when 2.8 leaves support.

On our Prometheus (its templates at 2.8.7): `prometheus.server.global.external_labels.cluster_id` becomes
the cost model's CLUSTER_ID; `prometheus.server.retention` carries our retention, which the chart's
prometheusRetentionCheck compares with its hourly ETL window; its ServiceMonitor and PrometheusRule reach
our Prometheus. GPU cost needs the NVIDIA device plugin (`nvidia.com/gpu` capacity) and DCGM's utilisation
with the workload's labels (the DCGM ServiceMonitor honours them: infra/addons/gpu.py); AMD GPUs are not
priced by 2.8 (their nodes cost as ordinary instances).
"""

from __future__ import annotations

from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from infra.addons.monitoring.kube_prometheus import PROMETHEUS_URL
from infra.charts import release
from infra.component_args import ComponentArgs, child_options
from infra.platform.image_cache import ImageCache

NAMESPACE = "kubecost"
RELEASE = "kubecost"
# The frontend service (port 9090) that `kubectl port-forward` reaches.
SERVICE = f"{RELEASE}-cost-analyzer"


def cost_analyzer_values(*, cluster_name: str, prometheus_retention: str) -> dict[str, Any]:
    return {
        "global": {
            "prometheus": {"enabled": False, "fqdn": PROMETHEUS_URL},
            # Our Grafana holds the dashboards; Kubecost's bundled one would be a second Grafana.
            "grafana": {"enabled": False, "proxy": False},
        },
        "prometheus": {
            "server": {
                "retention": prometheus_retention,
                "global": {"external_labels": {"cluster_id": cluster_name}},
            }
        },
        "serviceMonitor": {"enabled": True},
        "prometheusRule": {"enabled": True},
        # A plain PVC (not a StatefulSet claim) on the default StorageClass (encrypted gp3): Helm
        # deletes it with the release.
        "persistentVolume": {"enabled": True, "size": "32Gi"},
    }


class KubecostArgs(ComponentArgs):
    cluster_name: pulumi.Output[str] | str
    # The platform Prometheus's retention (ObservabilityConfig.retention).
    prometheus_retention: str
    k8s_provider: k8s.Provider
    images: ImageCache


class Kubecost(pulumi.ComponentResource):
    """`opts.depends_on` must hold the observability release: Prometheus and its CRDs must exist first."""

    release: k8s.helm.v3.Release

    def __init__(self, name: str, args: KubecostArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("mlops-eks:infra:Kubecost", name, None, opts)
        values = pulumi.Output.from_input(args.cluster_name).apply(
            lambda cluster: cost_analyzer_values(
                cluster_name=cluster, prometheus_retention=args.prometheus_retention
            )
        )
        self.release = release(
            RELEASE,
            "cost-analyzer",
            NAMESPACE,
            values,
            child_options(self, opts, provider=args.k8s_provider),
            images=args.images,
        )
        self.register_outputs({"service": SERVICE})
