"""Grafana dashboards as code: GPU health per node and per pod (DCGM metrics) and training jobs (DCGM plus
the trainer's own loss, throughput and progress gauges).

Jobs are identified by the `mlops-eks.io/job` pod label, which DCGM copies onto the metrics of the GPUs a
pod holds (see gpu.POD_LABEL_ALLOWLIST) as `mlops_eks_io_job`.
"""

from __future__ import annotations

from typing import Any

from infra.addons.gpu import JOB_METRIC_LABEL

_DATASOURCE = {"type": "prometheus", "uid": "prometheus"}


def _panel(
    panel_id: int,
    title: str,
    exprs: dict[str, str],
    unit: str,
    grid: tuple[int, int, int, int],
    kind="timeseries",
) -> dict[str, Any]:
    x, y, w, h = grid
    return {
        "id": panel_id,
        "type": kind,
        "title": title,
        "datasource": _DATASOURCE,
        "gridPos": {"x": x, "y": y, "w": w, "h": h},
        "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
        "targets": [
            {"refId": chr(ord("A") + i), "datasource": _DATASOURCE, "expr": expr, "legendFormat": legend}
            for i, (legend, expr) in enumerate(exprs.items())
        ],
    }


def _variable(name: str, label: str, query: str) -> dict[str, Any]:
    return {
        "name": name,
        "label": label,
        "type": "query",
        "datasource": _DATASOURCE,
        "query": {"query": query, "refId": name},
        "includeAll": True,
        "multi": True,
        "allValue": ".*",
        "refresh": 2,
    }


def _dashboard(
    uid: str, title: str, panels: list[dict[str, Any]], variables: list[dict[str, Any]]
) -> dict[str, Any]:
    return {
        "uid": uid,
        "title": title,
        "tags": ["mlops-eks", "gpu"],
        "timezone": "utc",
        "schemaVersion": 39,
        "time": {"from": "now-6h", "to": "now"},
        "refresh": "30s",
        "templating": {"list": variables},
        "panels": panels,
    }


# (title, DCGM metric, aggregation, Grafana unit): one row per metric, per node on the left, per pod right.
_GPU_ROWS = (
    ("GPU utilisation", "DCGM_FI_DEV_GPU_UTIL", "avg", "percent"),
    ("GPU memory used", "DCGM_FI_DEV_FB_USED", "sum", "decmbytes"),
    ("Power", "DCGM_FI_DEV_POWER_USAGE", "sum", "watt"),
)


def gpu_dashboard() -> dict[str, Any]:
    node = 'Hostname=~"$node"'
    pod = f'{node}, pod=~"$pod", pod!=""'
    panels = []
    for row, (title, metric, agg, unit) in enumerate(_GPU_ROWS):
        per_node = {"{{Hostname}}": f"{agg} by (Hostname) ({metric}{{{node}}})"}
        per_pod = {"{{namespace}}/{{pod}}": f"{agg} by (namespace, pod) ({metric}{{{pod}}})"}
        panels.append(_panel(2 * row + 1, f"{title} per node", per_node, unit, (0, 8 * row, 12, 8)))
        panels.append(_panel(2 * row + 2, f"{title} per pod", per_pod, unit, (12, 8 * row, 12, 8)))
    xid = {
        "{{Hostname}} {{gpu}} {{pod}}": f"max by (Hostname, gpu, pod) (DCGM_FI_DEV_XID_ERRORS{{{node}}}) > 0"
    }
    panels.append(_panel(7, "XID errors (last XID per GPU)", xid, "none", (0, 24, 24, 8), kind="table"))
    variables = [
        _variable("node", "Node", "label_values(DCGM_FI_DEV_GPU_UTIL, Hostname)"),
        _variable("pod", "Pod", 'label_values(DCGM_FI_DEV_GPU_UTIL{Hostname=~"$node"}, pod)'),
    ]
    return _dashboard("mlops-eks-gpu", "GPUs (DCGM)", panels, variables)


def training_dashboard() -> dict[str, Any]:
    job = f'{JOB_METRIC_LABEL}=~"$job", {JOB_METRIC_LABEL}!=""'
    legend = f"{{{{{JOB_METRIC_LABEL}}}}}"

    def per_job(agg: str, metric: str) -> dict[str, str]:
        return {legend: f"{agg} by ({JOB_METRIC_LABEL}) ({metric}{{{job}}})"}

    running = {"jobs": f"count(count by ({JOB_METRIC_LABEL}) (DCGM_FI_DEV_GPU_UTIL{{{job}}}))"}
    # One sample per GPU per minute of the dashboard range = 1/60 GPU-hour.
    gpu_hours = {
        legend: f"sum by ({JOB_METRIC_LABEL}) "
        f"(count_over_time(DCGM_FI_DEV_GPU_UTIL{{{job}}}[$__range:1m])) / 60"
    }
    util, memory = per_job("avg", "DCGM_FI_DEV_GPU_UTIL"), per_job("sum", "DCGM_FI_DEV_FB_USED")
    # Tensor-core activity: the closest thing to throughput the GPU itself reports.
    tensor = per_job("avg", "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE")
    # The trainer's own gauges (trainer/metrics.py), scraped by the PodMonitor of
    # infra/addons/monitoring/training_metrics.py.
    # Every pod of a job reports the job-wide value, so pods are collapsed with max, not summed.
    loss, lr = per_job("max", "trainer_loss"), per_job("max", "trainer_learning_rate")
    samples = per_job("max", "trainer_samples_per_second")
    tokens = per_job("max", "trainer_tokens_per_second")
    progress = {legend: f"max by ({JOB_METRIC_LABEL}) (trainer_step{{{job}}} / trainer_total_steps{{{job}}})"}
    mfu = per_job("max", "trainer_mfu_ratio")
    trainer_panels = [
        _panel(7, "Training loss per job", loss, "none", (0, 22, 12, 8)),
        _panel(
            8,
            "Validation accuracy per job",
            per_job("max", "trainer_val_accuracy"),
            "percentunit",
            (12, 22, 12, 8),
        ),
        _panel(9, "Samples/s per job", samples, "none", (0, 30, 8, 8)),
        _panel(10, "Tokens/s per job", tokens, "none", (8, 30, 8, 8)),
        _panel(11, "MFU per job (GPUs with a known peak)", mfu, "percentunit", (16, 30, 8, 8)),
        _panel(12, "Progress (step / total)", progress, "percentunit", (0, 38, 12, 6), kind="bargauge"),
        _panel(13, "Learning rate per job", lr, "none", (12, 38, 12, 6)),
    ]
    panels = [
        _panel(1, "Running training jobs", running, "none", (0, 0, 6, 6), kind="stat"),
        _panel(2, "GPUs in use per job", per_job("count", "DCGM_FI_DEV_GPU_UTIL"), "none", (6, 0, 18, 6)),
        _panel(3, "GPU-hours per job (dashboard range)", gpu_hours, "h", (0, 6, 12, 8), kind="bargauge"),
        _panel(4, "GPU utilisation per job", util, "percent", (12, 6, 12, 8)),
        _panel(5, "Tensor pipe active per job", tensor, "percentunit", (0, 14, 12, 8)),
        _panel(6, "GPU memory used per job", memory, "decmbytes", (12, 14, 12, 8)),
        *trainer_panels,
    ]
    # Jobs with GPUs (DCGM) and jobs that run the trainer (CPU jobs have no DCGM series).
    jobs = '{__name__=~"DCGM_FI_DEV_GPU_UTIL|trainer_step"}'
    variables = [_variable("job", "Job", f"label_values({jobs}, {JOB_METRIC_LABEL})")]
    return _dashboard("mlops-eks-training", "Training jobs", panels, variables)


DASHBOARDS = {"gpu.json": gpu_dashboard, "training-jobs.json": training_dashboard}
