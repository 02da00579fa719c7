"""How the platform installs a Helm chart pinned in infra/pins.py.

`release()` is the one way a component installs a chart: a Helm-native `helm.v3.Release` (hooks run,
CRDs in `crds/` are installed, the release is atomic and rolls back on failure) on the cluster's
Kubernetes provider. Change a version in infra/pins.py and nowhere else; the values tests check every key
we set against the chart's default values at the version pinned there.
"""

from __future__ import annotations

from typing import Any

import pulumi
from pulumi_kubernetes.helm.v3 import Release, RepositoryOptsArgs

from infra.pins import CHARTS


def release(
    name: str,
    chart_key: str,
    namespace: str,
    values: dict[str, Any] | pulumi.Output,
    opts: pulumi.ResourceOptions,
    *,
    timeout_s: int = 600,
) -> Release:
    """Install CHARTS[chart_key] as release `name` into `namespace` (which must exist). The Pulumi resource
    is named as the release, without the component-name prefix other children carry."""
    chart = CHARTS[chart_key]
    return Release(
        name,
        name=name,
        chart=chart.name,
        version=chart.version,
        repository_opts=RepositoryOptsArgs(repo=chart.repository) if chart.repository else None,
        namespace=namespace,
        # Namespaces are created with Pod Security labels and NetworkPolicies (infra/addons/namespaces.py):
        # a release into one that does not exist fails instead of creating it unlabeled.
        create_namespace=False,
        values=values,
        atomic=True,
        cleanup_on_fail=True,
        timeout=timeout_s,
        opts=opts,
    )
