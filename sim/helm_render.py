"""Render the platform's Helm releases with their real charts, as `helm install` would, offline.

The releases are the `kubernetes:helm.sh/v3:Release` resources the platform program registers under
mocks (`infra synth`): chart, pinned version, namespace and values exactly as Pulumi would send them.
Each is rendered from its package in upstream/helm/<chart>-<version>.tgz with helm-python-sdk
(Helm v4's engine, pkg/engine/engine.go, in a shared library), at the cluster's Kubernetes version and
with the API groups the platform installs (Prometheus Operator's), so `.Capabilities` checks take the
branch a live cluster would take.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import helm_python
import kubernetes_validate
from helm_python import _native

from sim import contracts
from sim.contracts import HELM_PACKAGES

RELEASE_TYPE = "kubernetes:helm.sh/v3:Release"
# kubernetes-validate 1.37.0 reads and parses a schema file on every validate() call, its 1 MB
# _definitions.json included (kubernetes_validate/utils.py schema_contents): a platform's few hundred
# objects would parse it hundreds of times. The files are the package's data and never change, so each is
# parsed once per process; validate() only reads the parsed schemas.
kubernetes_validate.utils.schema_contents = functools.cache(kubernetes_validate.utils.schema_contents)
# What the cluster serves besides the built-in APIs once the platform is up: kube-prometheus-stack
# installs the Prometheus Operator CRDs, and charts gate their ServiceMonitors/PrometheusRules on them.
PLATFORM_API_VERSIONS = (
    "monitoring.coreos.com/v1",
    "monitoring.coreos.com/v1/ServiceMonitor",
    "monitoring.coreos.com/v1/PodMonitor",
    "monitoring.coreos.com/v1/PrometheusRule",
    "monitoring.coreos.com/v1alpha1",
)


@dataclass(frozen=True)
class HelmRelease:
    name: str
    chart: str  # the chart's own name (the last path element of an oci:// reference)
    version: str
    namespace: str
    values: dict[str, Any]

    @property
    def package(self) -> Path:
        return HELM_PACKAGES / f"{self.chart}-{self.version}.tgz"


def chart_name(chart: str, version: str) -> str:
    """A release's chart as its own name: from an oci:// reference, a repository chart or the path of a
    vendored archive (upstream/helm/<chart>-<version>.tgz)."""
    return chart.rsplit("/", 1)[-1].removesuffix(f"-{version}.tgz")


def releases(resources: list[Any]) -> list[HelmRelease]:
    """Every Helm release among synthesized resources (`Registered` records or synth --json dicts)."""
    found = []
    for r in resources:
        typ, inputs = (r["type"], r["inputs"]) if isinstance(r, dict) else (r.type, r.inputs)
        if typ != RELEASE_TYPE:
            continue
        found.append(
            HelmRelease(
                name=inputs["name"],
                chart=chart_name(inputs["chart"], inputs["version"]),
                version=inputs["version"],
                namespace=inputs.get("namespace", "default"),
                values=inputs.get("values") or {},
            )
        )
    return found


class MissingPackage(LookupError):
    pass


@functools.cache
def load_chart(package: Path) -> helm_python.Chart:
    if not package.exists():
        have = ", ".join(sorted(p.name for p in HELM_PACKAGES.glob("*.tgz")))
        raise MissingPackage(f"no chart package {package.name} in {HELM_PACKAGES}; have: {have}")
    return helm_python.Chart.load(package)


def render(release: HelmRelease, kube_version: str, package: Path | None = None) -> dict[str, str]:
    """template path -> manifest text. Raises helm_python.HelmError on a `required`/`fail`, a values
    type error or a values.schema.json violation (what `helm install` reports before touching the
    cluster). `package`: a chart other than the release's pinned package (tests of this module)."""
    chart = load_chart(package or release.package)
    chart.validate_schema(release.values)
    # Chart.render (helm-python-sdk 0.2.2) passes only name/namespace/revision/is_install/is_upgrade,
    # so every chart would see the library's default Kubernetes version (v1.36) and no CRD-backed API.
    # The C entry point it wraps, helm_render, also takes `kube_version` and `api_versions` (Helm's
    # `--kube-version` / `--api-versions`), so call it directly with the same handle and encoding.
    opts = {
        "name": release.name,
        "namespace": release.namespace,
        "is_install": True,
        "kube_version": f"v{kube_version}.0",
        "api_versions": list(PLATFORM_API_VERSIONS),
    }
    out = _native.call_string("helm_render", chart._raw(), json.dumps(release.values), json.dumps(opts))
    return json.loads(out)


def objects(manifests: dict[str, str]) -> list[dict[str, Any]]:
    """The Kubernetes objects `helm install` creates from rendered manifests (hooks included, test hooks,
    NOTES.txt and empty documents dropped)."""
    found: list[dict[str, Any]] = []
    for path, text in sorted(manifests.items()):
        if not path.endswith((".yaml", ".yml", ".tpl", ".json")) or path.endswith("NOTES.txt"):
            continue
        for doc in contracts.load_all(text):
            if not isinstance(doc, dict) or not doc.get("kind"):
                continue
            hooks = ((doc.get("metadata") or {}).get("annotations") or {}).get("helm.sh/hook", "")
            if {"test", "test-success"} & {h.strip() for h in hooks.split(",")}:
                continue  # `helm test` pods: `helm install` never creates them
            found.extend(doc["items"] if doc["kind"].endswith("List") and "items" in doc else [doc])
    return found


# Built-in kinds without a namespace; everything else a chart leaves unnamespaced lands in the release's.
CLUSTER_SCOPED = frozenset(
    {
        "APIService",
        "CSIDriver",
        "ClusterRole",
        "ClusterRoleBinding",
        "CustomResourceDefinition",
        "IngressClass",
        "MutatingWebhookConfiguration",
        "Namespace",
        "PersistentVolume",
        "PriorityClass",
        "RuntimeClass",
        "StorageClass",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
        "ValidatingWebhookConfiguration",
    }
)


def installed(
    release: HelmRelease, objs: list[dict[str, Any]], cluster_kinds: set[str]
) -> list[dict[str, Any]]:
    """The objects as `helm install` creates them: a namespaced object the chart leaves without a
    namespace goes into the release's (Helm's kube client does that; `helm template` output does not
    show it). `cluster_kinds`: cluster-scoped custom kinds (from their CRDs)."""
    out = []
    for obj in objs:
        meta = obj.get("metadata") or {}
        if obj["kind"] in CLUSTER_SCOPED or obj["kind"] in cluster_kinds or meta.get("namespace"):
            out.append(obj)
        else:
            out.append({**obj, "metadata": {**meta, "namespace": release.namespace}})
    return out


def cluster_scoped_kinds(crds: list[dict[str, Any]]) -> set[str]:
    return {c["spec"]["names"]["kind"] for c in crds if c["spec"].get("scope") == "Cluster"}


def crds(release: HelmRelease) -> list[dict[str, Any]]:
    """The CustomResourceDefinitions a chart installs from crds/ (Helm installs them before templates).
    Parsed once per package (kube-prometheus-stack's are megabytes): treat them as read-only."""
    return list(_package_crds(release.package))


@functools.cache
def _package_crds(package: Path) -> tuple[dict[str, Any], ...]:
    return tuple(
        doc
        for crd in load_chart(package).crds
        for doc in contracts.load_all(crd["data"])
        if isinstance(doc, dict) and doc.get("kind") == "CustomResourceDefinition"
    )


def crd_schemas(crds: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    """(apiVersion, kind) -> openAPIV3Schema for every served version: upstream/crds (the pinned
    upstream copies) first, then `crds` (those the rendered charts install)."""
    return {**contracts.served_schemas(crds), **contracts.crd_schemas()}


def validation_version(kube_version: str) -> str:
    """The newest Kubernetes version kubernetes-validate has schemas for, not newer than the cluster's."""
    wanted = tuple(int(x) for x in kube_version.split(".")[:2])
    known = sorted(tuple(int(x) for x in v.split(".")[:2]) for v in kubernetes_validate.utils.all_versions())
    usable = [v for v in known if v <= wanted]
    if not usable:
        raise LookupError(f"kubernetes-validate knows no version <= {kube_version}: {known}")
    return ".".join(map(str, usable[-1]))


def is_builtin(obj: dict[str, Any]) -> bool:
    group = obj["apiVersion"].rsplit("/", 1)[0] if "/" in obj["apiVersion"] else ""
    return group == "" or "." not in group or group.endswith(".k8s.io")


def label(release: HelmRelease, obj: dict[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return f"{release.name}: {obj.get('kind')}/{meta.get('namespace', '')}/{meta.get('name')}"


@dataclass
class Rendered:
    """Every release of one platform stack, rendered and installed as Helm would, and validated."""

    kube_version: str
    releases: list[HelmRelease]
    objects: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # release name -> objects
    errors: dict[str, str] = field(default_factory=dict)  # release name -> why it did not render
    crds: list[dict[str, Any]] = field(default_factory=list)  # installed by the charts
    invalid: list[str] = field(default_factory=list)  # built-in objects kubernetes-validate rejects
    builtin_checked: int = 0
    custom: list[tuple[str, dict[str, Any]]] = field(default_factory=list)  # kinds it has no schema for

    def of_kind(self, kind: str) -> list[tuple[str, dict[str, Any]]]:
        return [(name, o) for name, objs in self.objects.items() for o in objs if o["kind"] == kind]

    @property
    def all_objects(self) -> list[dict[str, Any]]:
        return [o for objs in self.objects.values() for o in objs]


def render_platform(resources: list[Any], kube_version: str) -> Rendered:
    """Render every release among `resources` (a failure is recorded in `errors`, not raised), then
    validate the built-in objects with kubernetes-validate (strict)."""
    result = Rendered(kube_version, releases(resources))
    for release in result.releases:
        try:
            result.objects[release.name] = objects(render(release, kube_version))
            result.crds += crds(release)
        except (helm_python.HelmError, MissingPackage) as e:
            result.errors[release.name] = f"{release.chart} {release.version}: {type(e).__name__}: {e}"
    result.crds += [o for o in result.all_objects if o["kind"] == "CustomResourceDefinition"]
    cluster_kinds = cluster_scoped_kinds(result.crds)
    for release in result.releases:
        if release.name in result.objects:
            result.objects[release.name] = installed(release, result.objects[release.name], cluster_kinds)
    # kubernetes-validate ships schemas up to some 1.3x: the newest it knows, not above the cluster's.
    version = validation_version(kube_version)
    for name, objs in result.objects.items():
        for obj in objs:
            try:
                kubernetes_validate.validate(obj, version, strict=True)
                result.builtin_checked += 1
            except kubernetes_validate.SchemaNotFoundError:
                result.custom.append((name, obj))
            except kubernetes_validate.ValidationError as e:
                result.invalid.append(f"{name}: {obj['kind']}/{obj['metadata'].get('name')}: {e.message}")
    return result
