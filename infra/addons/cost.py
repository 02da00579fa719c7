"""Kubecost: cost per namespace, job and GPU, from the platform's own Prometheus.

Why the 2.8.7 `cost-analyzer` chart, and not 2.9.x or Kubecost 3 (`kubecost` 3.2.1):
- 2.8 reads an existing Prometheus (`global.prometheus.enabled: false` + `fqdn`), so Kubecost reuses the
  kube-prometheus-stack that already scrapes DCGM, kube-state-metrics and cAdvisor: one metrics pipeline,
  one set of volumes, one place where GPU metrics are scraped.
- 2.9.x is a bridge to Kubecost 3: its templates `fail` unless the finops agent is on and federated
  storage is configured (cost-analyzer-deployment-template.yaml, _helpers.tpl at 2.9.7), so "2.x with our
  Prometheus" is not what 2.9 installs.
- 3.x collects with its own agent into object storage: a second pipeline, an S3 prefix and a Pod Identity
  role for a single-cluster platform that needs none of its multi-cluster features.
Revisit when 2.8 leaves support: 3.x with storage in the platform bucket is the migration path.

What the chart needs to work on our Prometheus (read from its templates at 2.8.7):
- `prometheus.server.global.external_labels.cluster_id` becomes the cost model's CLUSTER_ID (the bundled
  server is not deployed: every template under templates/prometheus/ is gated on
  `global.prometheus.enabled`).
- `prometheus.server.retention` carries *our* Prometheus's retention: the chart's own
  prometheusRetentionCheck then refuses a retention shorter than the cost model's hourly ETL window.
- Kubecost's metrics (node_gpu_hourly_cost, container_gpu_allocation, ...) and recording rules reach our
  Prometheus through the chart's ServiceMonitor and PrometheusRule, which it selects (it selects all).
GPU cost allocation: the cost model counts a node's GPUs from its `nvidia.com/gpu` capacity (the NVIDIA
device plugin) and prices them per instance type; per-container GPU utilisation comes from DCGM
(DCGM_FI_DEV_GPU_UTIL with the workload's namespace/pod/container labels, which survive only because the
DCGM ServiceMonitor honours the exporter's labels: infra/addons/gpu.py). AMD GPUs (`amd.com/gpu`)
are not priced by Kubecost 2.8; their nodes are costed as ordinary instances.
"""

from __future__ import annotations

from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from infra.addons.monitoring.kube_prometheus import PROMETHEUS_URL
from infra.charts import release
from infra.component_args import ComponentArgs, child_options

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
        )
        self.register_outputs({"service": SERVICE})
