"""Alerting rules and dashboards: the alerts the platform promises exist, and every query parses as PromQL."""

from __future__ import annotations

import promql_parser
import pytest

from infra.addons.gpu import JOB_METRIC_LABEL
from infra.addons.monitoring.alerts import prometheus_rules
from infra.addons.monitoring.dashboards import DASHBOARDS

RULES = [rule for spec in prometheus_rules().values() for group in spec["groups"] for rule in group["rules"]]


def _dashboard_queries() -> list[tuple[str, str]]:
    queries = []
    for file_name, render in DASHBOARDS.items():
        dashboard = render()
        for panel in dashboard["panels"]:
            queries += [(f"{file_name}: {panel['title']}", t["expr"]) for t in panel["targets"]]
        queries += [
            (f"{file_name}: ${v['name']}", v["query"]["query"]) for v in dashboard["templating"]["list"]
        ]
    return queries


def test_the_alerts_the_platform_promises_exist():
    assert {r["alert"] for r in RULES} == {
        "GpuXidError",
        "GpuNodeNotReady",
        "GpuAllocatedButIdle",
        "TrainingPodRestarting",
        "KarpenterInterruptionEvents",
        "GpuHardwareUnhealthy",
        "GpuHardwareUnhealthyNotRepaired",
        "NodeHealthConditionFailing",
        "KarpenterNodeRepaired",
        "GpuNodeCheckNotPassed",
    }
    idle = next(r for r in RULES if r["alert"] == "GpuAllocatedButIdle")
    assert "[30m]" in idle["expr"]


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r["alert"])
def test_alert_expressions_are_valid_promql(rule):
    promql_parser.parse(rule["expr"])
    assert rule["labels"]["severity"] in {"info", "warning", "critical"} and rule["annotations"]["summary"]


@pytest.mark.parametrize(("where", "query"), _dashboard_queries(), ids=lambda x: x if ":" in x else "")
def test_dashboard_queries_are_valid_promql(where, query):
    if query.startswith("label_values("):  # Grafana's variable function: check the selector inside
        query = query.removeprefix("label_values(").rsplit(",", 1)[0]
    promql_parser.parse(query.replace("$__range", "1h"))


def test_training_dashboard_groups_by_the_job_label_workloads_set():
    queries = [q for where, q in _dashboard_queries() if where.startswith("training-jobs.json")]
    assert queries and all(JOB_METRIC_LABEL in q for q in queries)


def test_promql_check_rejects_a_broken_expression():
    with pytest.raises(ValueError):
        promql_parser.parse("sum by (namespace (DCGM_FI_DEV_GPU_UTIL")
