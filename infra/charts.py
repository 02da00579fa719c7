"""How the platform installs a Helm chart pinned in infra/pins.py.

`release()` is the one way a component installs a chart: a Helm-native `helm.v3.Release` (hooks run,
CRDs in `crds/` are installed, the release is atomic and rolls back on failure) on the cluster's
Kubernetes provider, from the chart's vendored package (`Chart.archive`: the archive the offline checks
render, so a preview or update fetches nothing from a chart repository), with every image it pulls pointed
at the platform's ECR (infra/addons/chart_images.py) and checked there before the release starts
(infra/platform/image_cache.py `primed`). Change a version in infra/pins.py and nowhere else; the values
tests check every key we set against the chart's default values at the version pinned there.
"""

from __future__ import annotations

from typing import Any

import pulumi
from pulumi_kubernetes.helm.v3 import Release

from infra.addons.chart_images import chart_images, image_values, merged
from infra.pins import CHARTS, IMAGES
from infra.platform.image_cache import ImageCache


def release(
    name: str,
    chart_key: str,
    namespace: str,
    values: dict[str, Any] | pulumi.Output,
    opts: pulumi.ResourceOptions,
    *,
    images: ImageCache,
    timeout_s: int = 600,
) -> Release:
    """Install CHARTS[chart_key] as release `name` into `namespace` (which must exist). The Pulumi resource
    is named as the release, without the component-name prefix other children carry."""
    chart = CHARTS[chart_key]
    pulled = image_values(chart_key, images.path)
    if isinstance(values, pulumi.Output):
        values = values.apply(lambda v: merged(v, pulled))
    else:
        values = merged(values, pulled)
    pins = [IMAGES[key] for key in chart_images(chart_key)]
    primed = images.primed(name, pins, pulumi.ResourceOptions(parent=opts.parent))
    return Release(
        name,
        name=name,
        chart=chart.archive,
        # Helm reads a local archive as it is; the version says which one for the reader and the checks.
        version=chart.version,
        namespace=namespace,
        # Namespaces are created with Pod Security labels and NetworkPolicies (infra/addons/namespaces.py):
        # a release into one that does not exist fails instead of creating it unlabeled.
        create_namespace=False,
        values=values,
        atomic=True,
        cleanup_on_fail=True,
        timeout=timeout_s,
        opts=pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(depends_on=primed)),
    )
