"""The Helm values that make each pinned chart pull its images from the platform's ECR registry.

Every image value of every chart the platform installs, by chart: where in the values it is
(`ChartImage.path`), which pinned image it is (infra/pins.py IMAGES) and how the chart spells an image
(`style`): `registry` (registry, repository, tag: kube-prometheus-stack and its subcharts, the Trainer),
`repository` (a repository with its host, and a tag: most charts), `full` (one string with the tag:
Kubecost's fullImageName), `image` (the repository with its host alone: Kubecost's templates that add the
chart's version as tag), and Volcano's host and names. Pure: infra/charts.py merges `image_values` into
every release's values, and tests/policy/test_image_sources.py follows every rendered image to ECR.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from infra.pins import IMAGES
from infra.platform.registries import ImagePath, split_ref

Style = Literal["registry", "repository", "full", "image", "host", "name"]


@dataclass(frozen=True)
class ChartImage:
    path: str  # dotted path in the chart's values
    image: str  # key of infra/pins.py IMAGES
    style: Style
    digest_key: str | None = None  # where the chart takes a digest (sha, digest), if it does
    # Set IfNotPresent where the chart's default pulls Always (a source-tree default for a moving tag).
    pull_policy: bool = False
    # Other keys of the same image value (e.g. a variant the chart would append to the tag).
    extra: tuple[tuple[str, Any], ...] = ()
    # False: no pod pulls it with the platform's values (a component turned off, an operator's fallback);
    # pointed at ECR all the same, and not checked before the release.
    pulled: bool = True


CHART_IMAGES: dict[str, tuple[ChartImage, ...]] = {
    "karpenter": (ChartImage("controller.image", "karpenter", "repository", "digest"),),
    "kube-prometheus-stack": (
        ChartImage("prometheusOperator.image", "prometheus-operator", "registry", "sha"),
        # Passed to the operator as flags: it puts them into the Prometheus and Alertmanager pods it makes.
        ChartImage(
            "prometheusOperator.prometheusConfigReloader.image",
            "prometheus-config-reloader",
            "registry",
            "sha",
        ),
        ChartImage("prometheusOperator.thanosImage", "thanos", "registry", "sha", pulled=False),
        ChartImage(
            "prometheusOperator.admissionWebhooks.patch.image", "kube-webhook-certgen", "registry", "sha"
        ),
        ChartImage("alertmanager.alertmanagerSpec.image", "alertmanager", "registry", "sha"),
        ChartImage("prometheus.prometheusSpec.image", "prometheus", "registry", "sha"),
        ChartImage("grafana.image", "grafana", "registry", "sha"),
        ChartImage("grafana.sidecar.image", "grafana-sidecar", "registry", "sha"),
        ChartImage("grafana.initChownData.image", "busybox", "registry", "sha", pulled=False),
        ChartImage("kube-state-metrics.image", "kube-state-metrics", "registry", "sha"),
        # The chart appends "-distroless" to the tag when `distroless` is on (kube-prometheus-stack turns
        # it on): the pin names the variant, so the tag is the one pulled and the primer checks.
        ChartImage(
            "prometheus-node-exporter.image",
            "node-exporter",
            "registry",
            "sha",
            extra=(("distroless", False),),
        ),
    ),
    "metrics-server": (ChartImage("image", "metrics-server", "repository"),),
    "nvidia-device-plugin": (ChartImage("image", "nvidia-device-plugin", "repository"),),
    "dcgm-exporter": (ChartImage("image", "dcgm-exporter", "repository"),),
    "amd-gpu": (
        ChartImage("dp.image", "amd-device-plugin", "repository"),
        ChartImage("lbl.image", "amd-node-labeller", "repository", pulled=False),
    ),
    "aws-efa-k8s-device-plugin": (ChartImage("image", "efa-device-plugin", "repository"),),
    "cost-analyzer": (
        # Some templates build the cost-model image from `image` and the chart's version, others take
        # fullImageName: both.
        ChartImage("kubecostModel.image", "kubecost-cost-model", "image"),
        ChartImage("kubecostFrontend.image", "kubecost-frontend", "image"),
        ChartImage("kubecostModel.fullImageName", "kubecost-cost-model", "full"),
        ChartImage("kubecostFrontend.fullImageName", "kubecost-frontend", "full"),
        ChartImage("forecasting.fullImageName", "kubecost-modeling", "full"),
    ),
    "kubeflow-trainer": (
        ChartImage("image", "trainer-controller-manager", "registry"),
        ChartImage("jobset.image", "jobset", "repository", pull_policy=True),
    ),
    "kueue": (ChartImage("controllerManager.manager.image", "kueue", "repository", pull_policy=True),),
    "kuberay-operator": (ChartImage("image", "kuberay-operator", "repository"),),
    "volcano": (
        ChartImage("basic.image_registry", "volcano-controller-manager", "host"),
        ChartImage("basic.controller_image_name", "volcano-controller-manager", "name"),
        ChartImage("basic.scheduler_image_name", "volcano-scheduler", "name"),
        ChartImage("basic.admission_image_name", "volcano-webhook-manager", "name"),
    ),
}


def _value(entry: ChartImage, images: ImagePath) -> Any:
    pin = IMAGES[entry.image]
    name, tag, _ = split_ref(images.ref(pin.ref))
    host, _, repository = name.partition("/")
    digest = {entry.digest_key: pin.digest} if entry.digest_key and pin.digest else {}
    extra = dict(entry.extra) | ({"pullPolicy": "IfNotPresent"} if entry.pull_policy else {})
    if entry.style == "registry":
        return {"registry": host, "repository": repository, "tag": tag, **extra, **digest}
    if entry.style == "repository":
        return {"repository": name, "tag": tag, **extra, **digest}
    if entry.style == "full":
        return f"{name}:{tag}"
    return {"image": name, "host": host, "name": repository}[entry.style]


def image_values(chart_key: str, images: ImagePath) -> dict[str, Any]:
    """The values that point every image of `chart_key` at `images` (nested, to merge into the release's)."""
    values: dict[str, Any] = {}
    for entry in CHART_IMAGES[chart_key]:
        *parents, last = entry.path.split(".")
        node = values
        for key in parents:
            node = node.setdefault(key, {})
        node[last] = _value(entry, images)
    return values


def chart_images(chart_key: str) -> list[str]:
    """The IMAGES keys a chart's release pulls with the platform's values."""
    return list(dict.fromkeys(e.image for e in CHART_IMAGES[chart_key] if e.pulled))


def merged(values: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """`values` with `override` merged in, nested dicts key by key (as Helm merges values files)."""
    out = dict(values)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merged(out[key], value)
        else:
            out[key] = value
    return out
