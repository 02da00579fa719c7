"""Kubecost: cost per namespace, job and GPU, from the platform's own Prometheus.

Why the 2.9.7 `cost-analyzer` line and not 3.2.1 `kubecost`: 2.x reads an existing Prometheus
(`global.prometheus.enabled: false` + `fqdn`), so Kubecost reuses the kube-prometheus-stack that already
scrapes DCGM, kube-state-metrics and cAdvisor. 3.x brings its own collector and storage: a second metrics
pipeline, a second set of volumes and a second place where GPU metrics must be scraped, for no feature a
single-cluster training platform needs. GPU cost allocation needs `nvidia.com/gpu` requests (the device
plugin) and DCGM utilisation, both present here. Kubecost's own metrics and recording rules reach
Prometheus through its ServiceMonitor and PrometheusRule, which our Prometheus selects (it selects all).
Revisit when 2.x support ends: 3.x is the migration path (the finops agent that prepares it is off here).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from infra.charts import release
from infra.observability import PROMETHEUS_URL

NAMESPACE = "kubecost"
RELEASE = "kubecost"
# The frontend service (port 9090) that `kubectl port-forward` reaches.
SERVICE = f"{RELEASE}-cost-analyzer"


def cost_analyzer_values(*, cluster_name: str) -> dict[str, Any]:
    return {
        "global": {
            "clusterId": cluster_name,
            "prometheus": {"enabled": False, "fqdn": PROMETHEUS_URL},
            # Our Grafana holds the dashboards; Kubecost's bundled one would be a second Grafana.
            "grafana": {"enabled": False, "proxy": False},
        },
        "serviceMonitor": {"enabled": True},
        "prometheusRule": {"enabled": True},
        "finopsagent": {"enabled": False},
        # On the cluster's default StorageClass (encrypted gp3).
        "persistentVolume": {"enabled": True, "size": "32Gi"},
    }


@dataclass(frozen=True, kw_only=True)
class KubecostArgs:
    cluster_name: pulumi.Input[str]
    k8s_provider: k8s.Provider
    # The observability release: Prometheus and its CRDs must exist first.
    depends_on: Sequence[pulumi.Resource] = ()


class Kubecost(pulumi.ComponentResource):
    release: k8s.helm.v3.Release

    def __init__(self, name: str, args: KubecostArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("mlops-eks:infra:Kubecost", name, None, opts)
        values = pulumi.Output.from_input(args.cluster_name).apply(
            lambda cluster: cost_analyzer_values(cluster_name=cluster)
        )
        self.release = release(
            RELEASE,
            "cost-analyzer",
            NAMESPACE,
            values,
            pulumi.ResourceOptions(parent=self, provider=args.k8s_provider, depends_on=list(args.depends_on)),
        )
        self.register_outputs({"service": SERVICE})
