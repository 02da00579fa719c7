"""Metrics and dashboards: kube-prometheus-stack (Prometheus, Alertmanager, Grafana, node exporter,
kube-state-metrics) and metrics-server (the resource metrics API behind `kubectl top` and the HPA).

Prometheus selects every ServiceMonitor, PodMonitor and PrometheusRule in the cluster
(`*SelectorNilUsesHelmValues: false`): without that, DCGM's and Kubecost's monitors, installed by other
releases, are silently never scraped. Grafana's admin password comes from a Pulumi secret (generated when
none is configured) through a Kubernetes Secret, so it never appears in the Helm values; dashboards are
ConfigMaps picked up by Grafana's sidecar. The sidecars read ConfigMaps of the monitoring namespace only,
through a Role of ours (GRAFANA_SIDECAR_ROLE): the chart's own role, namespaced or not, always adds every
Secret (grafana chart templates/role.yaml, clusterrole.yaml), and with `searchNamespace: ALL` it would
read every Secret of the cluster.

On EKS the control plane is AWS's: kube-controller-manager, kube-scheduler and etcd expose no scrape
target, so their ServiceMonitors and rules are off (else their Down alerts fire forever); kube-proxy too
(the EKS add-on binds its metrics to 127.0.0.1 and reverts edits: aws/containers-roadmap#657).
Alertmanager sends the platform's alerts (label `platform: mlops-eks`, alerts.py) and every critical one to
`addons.observability.alertReceiver`, its URL or key read from a mounted Secret; with none, to "null".
The StatefulSets delete their volumes with themselves (persistentVolumeClaimRetentionPolicy), and the
release depends on the EBS CSI add-on and the nodes, so `pulumi destroy` leaves no EBS volume.
"""

from __future__ import annotations

import json
from typing import Any

import pulumi
import pulumi_kubernetes as k8s
import pulumi_random as random

from infra.addons.monitoring import training_metrics
from infra.addons.monitoring.alerts import alertmanager_config, prometheus_rules
from infra.addons.monitoring.dashboards import DASHBOARDS
from infra.charts import release
from infra.component_args import ComponentArgs, child_options
from infra.config.addons import ObservabilityConfig
from infra.platform.image_cache import ImageCache

NAMESPACE = "monitoring"
RELEASE = "kube-prometheus-stack"
# The chart names its Prometheus service "<release>-prometheus".
PROMETHEUS_URL = f"http://{RELEASE}-prometheus.{NAMESPACE}.svc:9090"
GRAFANA_SECRET = "grafana-admin"
# What Grafana's dashboard and datasource sidecars may do: watch the ConfigMaps of the monitoring namespace
# (every dashboard and datasource of the platform is one there). The chart binds it (rbac.useExistingRole).
GRAFANA_SIDECAR_ROLE = "grafana-sidecar"
GRAFANA_SIDECAR_RULES = [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "watch"]}]
DASHBOARD_LABEL = "grafana_dashboard"
# Holds the receiver's URL or routing key; the chart mounts alertmanagerSpec.secrets under
# /etc/alertmanager/secrets/<name>/ in the Alertmanager pods.
RECEIVER_SECRET = "alertmanager-receiver"
RECEIVER_SECRET_KEY = "receiver"
RECEIVER_SECRET_FILE = f"/etc/alertmanager/secrets/{RECEIVER_SECRET}/{RECEIVER_SECRET_KEY}"
# StatefulSet volumes go with their StatefulSet (Kubernetes >= 1.32: StatefulSetAutoDeletePVC is GA).
DELETE_VOLUMES = {"whenDeleted": "Delete", "whenScaled": "Retain"}
# Control-plane components EKS does not expose, and kube-proxy (metrics on 127.0.0.1 only).
UNSCRAPABLE = ("kubeControllerManager", "kubeScheduler", "kubeEtcd", "kubeProxy")
# Their default rule groups (values `defaultRules.rules.*`), off as well.
UNSCRAPABLE_RULES = (
    "kubeControllerManager",
    "kubeSchedulerAlerting",
    "kubeSchedulerRecording",
    "etcd",
    "kubeProxy",
)


def _volume_claim(storage_class: str, gib: int) -> dict[str, Any]:
    return {
        "volumeClaimTemplate": {
            "spec": {
                "storageClassName": storage_class,
                "accessModes": ["ReadWriteOnce"],
                "resources": {"requests": {"storage": f"{gib}Gi"}},
            }
        }
    }


def kube_prometheus_stack_values(
    config: ObservabilityConfig, *, storage_class: str, gpu_check: bool = True
) -> dict[str, Any]:
    receiving = config.alert_receiver != "none"
    return {
        "prometheus": {
            "prometheusSpec": {
                "serviceMonitorSelectorNilUsesHelmValues": False,
                "podMonitorSelectorNilUsesHelmValues": False,
                "ruleSelectorNilUsesHelmValues": False,
                "retention": config.retention,
                "storageSpec": _volume_claim(storage_class, config.prometheus_storage_gib),
                "persistentVolumeClaimRetentionPolicy": DELETE_VOLUMES,
            }
        },
        "alertmanager": {
            "alertmanagerSpec": {
                "storage": _volume_claim(storage_class, 10),
                "persistentVolumeClaimRetentionPolicy": DELETE_VOLUMES,
                "secrets": [RECEIVER_SECRET] if receiving else [],
            },
            "config": alertmanager_config(config.alert_receiver, RECEIVER_SECRET_FILE),
        },
        **{component: {"enabled": False} for component in UNSCRAPABLE},
        "defaultRules": {"rules": dict.fromkeys(UNSCRAPABLE_RULES, False)},
        "grafana": {
            # `type: sts` makes Grafana a StatefulSet with a claim of its own: users, API keys and
            # annotations survive restarts, and the claim goes with the StatefulSet (DELETE_VOLUMES), so
            # `pulumi destroy` leaves no volume; the dashboards themselves are code. kube-prometheus-stack
            # documents this block only as a commented example; the grafana subchart defaults the rest
            # (persistentVolumeClaimRetentionPolicy): tests check each key against the two.
            "persistence": {
                "enabled": True,
                "type": "sts",
                "storageClassName": storage_class,
                "accessModes": ["ReadWriteOnce"],
                "size": "10Gi",
                "persistentVolumeClaimRetentionPolicy": DELETE_VOLUMES,
            },
            "admin": {
                "existingSecret": GRAFANA_SECRET,
                "userKey": "admin-user",
                "passwordKey": "admin-password",
            },
            # The sidecars watch the release's namespace (no searchNamespace), ConfigMaps only, with our
            # Role instead of the chart's (which grants every Secret).
            "rbac": {"namespaced": True, "useExistingRole": GRAFANA_SIDECAR_ROLE},
            "sidecar": {
                "dashboards": {
                    "enabled": True,
                    "label": DASHBOARD_LABEL,
                    "labelValue": "1",
                    "resource": "configmap",
                },
                "datasources": {"resource": "configmap"},
            },
            # The volume is EBS: the kubelet gives it the pod's fsGroup (472, the chart's default), so the
            # chart's root `chown` init container has nothing to do.
            "initChownData": {"enabled": False},
        },
        # No `secrets` collector: it would need (and the chart would grant) list/watch on every Secret of
        # every namespace, for metrics nothing here reads (kube_secret_*).
        "kube-state-metrics": {"collectorsExclude": ["secrets"]},
        "additionalPrometheusRulesMap": prometheus_rules(gpu_check=gpu_check),
    }


def metrics_server_values(*, service_monitor: bool) -> dict[str, Any]:
    return {
        "metrics": {"enabled": service_monitor},
        "serviceMonitor": {"enabled": service_monitor},
        "podDisruptionBudget": {"enabled": True, "minAvailable": 1},
        "replicas": 2,
    }


class ObservabilityArgs(ComponentArgs):
    config: ObservabilityConfig
    k8s_provider: k8s.Provider
    # The gp3 StorageClass the platform creates.
    storage_class: str = "gp3"
    # From the stack's secret config; None: generate one.
    grafana_admin_password: pulumi.Output[str] | str | None = None
    # The alert receiver's URL or routing key (secret config alertReceiverSecret); required unless
    # config.alert_receiver is "none".
    alert_receiver_secret: pulumi.Output[str] | str | None = None
    # Whether the startup GPU check is on (addons.nodeHealth.gpuCheck): its alert comes with it.
    gpu_check: bool = True
    images: ImageCache


class Observability(pulumi.ComponentResource):
    release: k8s.helm.v3.Release
    grafana_admin_password: pulumi.Output[str]

    def __init__(self, name: str, args: ObservabilityArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("mlops-eks:infra:Observability", name, None, opts)
        k8s_opts = child_options(self, opts, provider=args.k8s_provider)
        if args.grafana_admin_password is None:
            generated = random.RandomPassword(
                f"{name}-grafana-admin", length=32, special=False, opts=pulumi.ResourceOptions(parent=self)
            )
            password = generated.result
        else:
            password = pulumi.Output.secret(args.grafana_admin_password)
        self.grafana_admin_password = pulumi.Output.secret(password)

        # The namespace (Pod Security labels, NetworkPolicies) is infra/addons/namespaces.py's, in
        # opts.depends_on.
        in_namespace = k8s_opts
        secret = k8s.core.v1.Secret(
            f"{name}-grafana-admin",
            metadata={"name": GRAFANA_SECRET, "namespace": NAMESPACE},
            string_data={"admin-user": "admin", "admin-password": self.grafana_admin_password},
            opts=in_namespace,
        )
        sidecar_role = k8s.rbac.v1.Role(
            f"{name}-grafana-sidecar",
            metadata={"name": GRAFANA_SIDECAR_ROLE, "namespace": NAMESPACE},
            rules=[
                k8s.rbac.v1.PolicyRuleArgs(
                    api_groups=rule["apiGroups"], resources=rule["resources"], verbs=rule["verbs"]
                )
                for rule in GRAFANA_SIDECAR_RULES
            ],
            opts=in_namespace,
        )
        release_after: list[pulumi.Resource] = [secret, sidecar_role]
        if args.config.alert_receiver != "none":
            if args.alert_receiver_secret is None:
                raise ValueError(f"alertReceiver {args.config.alert_receiver!r} has no alertReceiverSecret")
            release_after.append(
                k8s.core.v1.Secret(
                    f"{name}-alert-receiver",
                    metadata={"name": RECEIVER_SECRET, "namespace": NAMESPACE},
                    string_data={RECEIVER_SECRET_KEY: pulumi.Output.secret(args.alert_receiver_secret)},
                    opts=in_namespace,
                )
            )
        else:
            pulumi.log.warn(
                "no alert receiver (addons.observability.alertReceiver): Alertmanager sends every alert to "
                '"null"; set one and `pulumi config set --secret alertReceiverSecret ...` (docs/deploy.md)',
                self,
            )
        for file_name, render in DASHBOARDS.items():
            k8s.core.v1.ConfigMap(
                f"{name}-dashboard-{file_name.removesuffix('.json')}",
                metadata={
                    "name": f"dashboard-{file_name.removesuffix('.json')}",
                    "namespace": NAMESPACE,
                    "labels": {DASHBOARD_LABEL: "1"},
                },
                data={file_name: json.dumps(render())},
                opts=in_namespace,
            )
        self.release = release(
            RELEASE,
            "kube-prometheus-stack",
            NAMESPACE,
            kube_prometheus_stack_values(
                args.config, storage_class=args.storage_class, gpu_check=args.gpu_check
            ),
            pulumi.ResourceOptions.merge(in_namespace, pulumi.ResourceOptions(depends_on=release_after)),
            images=args.images,
            timeout_s=900,
        )
        monitor = training_metrics.pod_monitor(NAMESPACE)  # the trainer's /metrics on every training pod
        after_chart = pulumi.ResourceOptions(depends_on=[self.release])  # the chart installs the CRD
        k8s.apiextensions.CustomResource(
            f"{name}-training-pods",
            api_version=monitor["apiVersion"],
            kind=monitor["kind"],
            metadata=monitor["metadata"],
            spec=monitor["spec"],
            opts=pulumi.ResourceOptions.merge(in_namespace, after_chart),
        )
        self.register_outputs(
            {"grafana_admin_password": self.grafana_admin_password, "prometheus_url": PROMETHEUS_URL}
        )


class MetricsServerArgs(ComponentArgs):
    k8s_provider: k8s.Provider
    service_monitor_after: pulumi.Resource | None = None
    images: ImageCache


class MetricsServer(pulumi.ComponentResource):
    def __init__(self, name: str, args: MetricsServerArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("mlops-eks:infra:MetricsServer", name, None, opts)
        after = [args.service_monitor_after] if args.service_monitor_after else []
        self.release = release(
            "metrics-server",
            "metrics-server",
            "kube-system",
            metrics_server_values(service_monitor=args.service_monitor_after is not None),
            child_options(self, opts, provider=args.k8s_provider, depends_on=after),
            images=args.images,
        )
        self.register_outputs({})
