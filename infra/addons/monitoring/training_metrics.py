"""How the platform's Prometheus finds the trainer's metrics: a PodMonitor for every training pod.

The trainer serves `/metrics` from local rank 0 of each pod on `output.metrics_port` (trainer.metrics);
workload stacks declare that container port under the name `metrics` on every pod that runs the trainer
and label the pod `mlops-eks.io/job`. The PodMonitor selects pods by that label in every namespace and
copies it onto the series (`mlops_eks_io_job`, the Prometheus spelling DCGM uses too), so the Training jobs
dashboard joins loss and throughput with the GPU metrics of the same job. Pure data: no Pulumi import.
"""

from __future__ import annotations

from typing import Any

from infra.contract import ACCELERATOR_LABEL, JOB_LABEL

METRICS_PORT_NAME = "metrics"
METRICS_PORT = 9464  # the trainer's output.metrics_port default
SCRAPE_INTERVAL = "30s"


def pod_monitor(namespace: str) -> dict[str, Any]:
    """monitoring.coreos.com/v1 PodMonitor (validated against kube-prometheus-stack's CRD in tests)."""
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PodMonitor",
        "metadata": {"name": "training-jobs", "namespace": namespace},
        "spec": {
            "selector": {"matchExpressions": [{"key": JOB_LABEL, "operator": "Exists"}]},
            "namespaceSelector": {"any": True},
            # The operator relabels `__meta_kubernetes_pod_label_<l>` onto `sanitizeLabelName(l)` (every
            # character outside [a-zA-Z0-9_] becomes "_"; prometheus-operator pkg/prometheus/promcfg.go).
            "podTargetLabels": [JOB_LABEL, ACCELERATOR_LABEL],
            "podMetricsEndpoints": [
                {
                    "port": METRICS_PORT_NAME,
                    "path": "/metrics",
                    "interval": SCRAPE_INTERVAL,
                    # Succeeded pods keep their IP for a while; their scrapes would only fail.
                    "filterRunning": True,
                }
            ],
        },
    }
