"""Custom resources from rendered bodies (plain dicts checked against upstream CRDs in tests)."""

from __future__ import annotations

from typing import Any

import pulumi
import pulumi_kubernetes as k8s


def custom_resource(
    resource_name: str,
    body: dict[str, Any],
    opts: pulumi.ResourceOptions,
    *,
    spec: pulumi.Input[dict[str, Any]] | None = None,
) -> k8s.apiextensions.CustomResource:
    """Register `body` (apiVersion, kind, metadata, spec). `spec`, when given, replaces the body's spec:
    for specs that wait on other resources' outputs (rendered inside an `apply`)."""
    extra = {k: v for k, v in body.items() if k not in ("apiVersion", "kind", "metadata", "spec")}
    return k8s.apiextensions.CustomResource(
        resource_name,
        api_version=body["apiVersion"],
        kind=body["kind"],
        metadata=body["metadata"],
        spec=body.get("spec") if spec is None else spec,
        opts=opts,
        **extra,
    )
