"""The trainer's metrics reach Grafana: the PodMonitor is a valid one, selects the pods workloads render on
the port the trainer serves, and the Training jobs dashboard queries gauges the trainer exports."""

from __future__ import annotations

import re
import tarfile

import pytest
import yaml

from infra.addons.gpu import JOB_METRIC_LABEL
from infra.addons.monitoring import training_metrics
from infra.addons.monitoring.dashboards import training_dashboard
from infra.pins import CHARTS
from sim import contracts
from sim.contracts import HELM_PACKAGES
from trainer import metrics
from trainer.config import OutputConfig
from workloads.platform import example_outputs_path, load_platform_outputs
from workloads.render import render
from workloads.stacks import load_stack, program_text


def _podmonitor_schema() -> dict:
    version = CHARTS["kube-prometheus-stack"].version
    package = HELM_PACKAGES / f"kube-prometheus-stack-{version}.tgz"
    with tarfile.open(package) as tar:
        member = tar.extractfile("kube-prometheus-stack/charts/crds/crds/crd-podmonitors.yaml")
        crd = yaml.safe_load(member)
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
    return version["schema"]["openAPIV3Schema"]


def _validate(obj: dict, schema: dict) -> list[str]:
    errors: list[str] = []
    contracts.validate(obj, schema, obj["kind"], errors, resource_root=True)
    return errors


def test_pod_monitor_is_valid_against_the_charts_crd():
    monitor = training_metrics.pod_monitor("monitoring")
    schema = _podmonitor_schema()
    assert _validate(monitor, schema) == []
    broken = {**monitor, "spec": {**monitor["spec"], "podMetricsEndpoint": []}}  # a typo is caught
    assert any("unknown field" in e for e in _validate(broken, schema))


@pytest.mark.parametrize("stack", ["dev-zimdb", "dev-zimdb-multinode"])
def test_pod_monitor_selects_the_rendered_training_pods_on_the_trainers_port(stack):
    spec = load_stack(stack).spec
    platform = load_platform_outputs(example_outputs_path(load_stack(stack).platform_stack))
    objects = render(spec, platform, program_text=program_text(spec))
    templates = [
        o["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
        for o in objects
        if o["kind"] == "TrainingRuntime"
    ]
    for job in (o for o in objects if o["kind"] == "PyTorchJob"):
        templates += [r["template"] for r in job["spec"]["pytorchReplicaSpecs"].values()]
    assert templates
    selector = training_metrics.pod_monitor("monitoring")["spec"]["selector"]["matchExpressions"]
    for template in templates:
        labels = template.get("metadata", {}).get("labels", {})
        if not labels:  # TrainJob: the runtime patch carries the labels
            (job,) = [o for o in objects if o["kind"] == "TrainJob"]
            labels = job["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["metadata"]["labels"]
        assert all(e["operator"] == "Exists" and e["key"] in labels for e in selector)
        (container,) = template["spec"]["containers"]
        ports = {p["name"]: p["containerPort"] for p in container.get("ports", [])}
        assert ports == {training_metrics.METRICS_PORT_NAME: OutputConfig().metrics_port}


def test_pod_label_reaches_the_series_as_the_label_the_dashboard_filters_by():
    # prometheus-operator's sanitizeLabelName, applied to podTargetLabels (pkg/prometheus/promcfg.go)
    copied = training_metrics.pod_monitor("monitoring")["spec"]["podTargetLabels"]
    assert JOB_METRIC_LABEL in {re.sub(r"[^a-zA-Z0-9_]", "_", label) for label in copied}
    assert all(JOB_METRIC_LABEL in t["expr"] for p in training_dashboard()["panels"] for t in p["targets"])


def test_trainer_default_port_is_the_one_workloads_declare():
    assert OutputConfig().metrics_port == training_metrics.METRICS_PORT


def test_training_dashboard_queries_gauges_the_trainer_exports():
    exported = set(metrics.GAUGES) | {"trainer_gpu_memory_bytes", "trainer_local_ranks"}
    queried = {
        name
        for panel in training_dashboard()["panels"]
        for target in panel["targets"]
        for name in re.findall(r"\btrainer_[a-z_]+", target["expr"])
    }
    assert {"trainer_loss", "trainer_samples_per_second", "trainer_tokens_per_second"} <= queried
    assert queried <= exported


def test_platform_installs_the_pod_monitor_in_the_monitoring_namespace(dev):
    monitor = dev.one("kubernetes:monitoring.coreos.com/v1:PodMonitor")
    assert monitor.inputs["spec"] == training_metrics.pod_monitor("monitoring")["spec"]
    assert monitor.inputs["metadata"]["namespace"] == "monitoring"
