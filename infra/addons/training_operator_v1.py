"""Training Operator v1 (PyTorchJob, MPIJob) as the platform configures it: which kustomize overlay installs
it, and what its Deployment then runs with (flags, and the files its ConfigMaps put in the container).

Pure: infra/addons/training.py installs the overlay; sim/operators/pods.py reads the same overlay
files to know what the operator adds to the pods it creates (the PyTorchJob Worker's init container comes
from the template file the operator reads). The overlays live in infra/addons/kustomize/; this module
applies their configMapGenerator and JSON patches to the operator's Deployment the way kustomize would,
for the operations those overlays use (`add`, including `/-` appends), so a mount path that does not match
the template flag shows up here as a missing file, exactly as the operator would see it.
"""

from __future__ import annotations

import copy
import posixpath
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

KUSTOMIZE = Path(__file__).resolve().parent / "kustomize"
# Relative to the project root, where Pulumi runs the program (kustomize/v2 Directory's `directory`).
OVERLAY = "infra/addons/kustomize/training-operator-v1"
VOLCANO_OVERLAY = "infra/addons/kustomize/training-operator-v1-volcano"
DEPLOYMENT = "training-operator"
# What the operator's Deployment container looks like before the overlays patch it (kubeflow/trainer
# manifests/base/deployment.yaml at the pinned commit: no args, one mount and one volume, the webhook cert).
BASE_DEPLOYMENT: dict[str, Any] = {
    "apiVersion": "apps/v1",
    "kind": "Deployment",
    "metadata": {"name": DEPLOYMENT},
    "spec": {
        "template": {
            "spec": {
                "containers": [
                    {
                        "name": DEPLOYMENT,
                        "command": ["/manager"],
                        "volumeMounts": [
                            {
                                "mountPath": "/tmp/k8s-webhook-server/serving-certs",
                                "name": "cert",
                                "readOnly": True,
                            }
                        ],
                    }
                ],
                "volumes": [{"name": "cert", "secret": {"secretName": "training-operator-webhook-cert"}}],
            }
        }
    },
}


def overlay(volcano: bool) -> str:
    return VOLCANO_OVERLAY if volcano else OVERLAY


@dataclass(frozen=True)
class OperatorDeployment:
    """The operator's Deployment after the overlay, and the data of the ConfigMaps the overlay generates."""

    deployment: dict[str, Any]
    config_maps: dict[str, dict[str, str]]

    @property
    def container(self) -> dict[str, Any]:
        return self.deployment["spec"]["template"]["spec"]["containers"][0]

    @property
    def flags(self) -> dict[str, str]:
        """`--name=value` arguments of the manager (Go's flag package also takes `--name value`; the
        overlays use the `=` form only)."""
        found = {}
        for arg in self.container.get("args") or []:
            name, _, value = arg.partition("=")
            found[name.lstrip("-")] = value
        return found

    def read_file(self, path: str) -> str | None:
        """The text the operator reads at `path` in its container, or None when no mounted ConfigMap key
        holds it (os.ReadFile fails: the operator falls back to its built-in template)."""
        volumes = {v["name"]: v for v in self.deployment["spec"]["template"]["spec"].get("volumes") or []}
        for mount in self.container.get("volumeMounts") or []:
            directory = mount["mountPath"].rstrip("/")
            if posixpath.dirname(path) != directory:
                continue
            source = volumes.get(mount["name"], {}).get("configMap")
            if source is None:
                continue
            data = self.config_maps.get(source["name"], {})
            return data.get(posixpath.basename(path))
        return None


def _json_patch(target: dict[str, Any], ops: list[dict[str, Any]]) -> None:
    for op in ops:
        if op["op"] != "add":
            raise ValueError(f"JSON patch op {op['op']!r}: this reader applies `add` only")
        parts = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].lstrip("/").split("/")]
        node: Any = target
        for part in parts[:-1]:
            node = node[int(part)] if isinstance(node, list) else node.setdefault(part, {})
        last = parts[-1]
        if isinstance(node, list):
            node.insert(len(node) if last == "-" else int(last), copy.deepcopy(op["value"]))
        else:
            node[last] = copy.deepcopy(op["value"])


def apply_overlay(directory: str | Path, base: dict[str, Any] | None = None) -> OperatorDeployment:
    """The Deployment `training-operator` after the overlay at `directory` (and the local overlays it
    builds on; remote resources are the pinned upstream overlay, whose Deployment is `base`)."""
    root = Path(directory)
    if not root.is_absolute():
        root = KUSTOMIZE.parents[2] / root
    kustomization = yaml.safe_load((root / "kustomization.yaml").read_text())
    deployment, config_maps = copy.deepcopy(base or BASE_DEPLOYMENT), {}
    for resource in kustomization.get("resources") or []:
        if "://" not in resource:
            inner = apply_overlay(root / resource, base)
            deployment, config_maps = inner.deployment, dict(inner.config_maps)
    for generator in kustomization.get("configMapGenerator") or []:
        files = {Path(f).name: (root / f).read_text() for f in generator.get("files") or []}
        config_maps[generator["name"]] = config_maps.get(generator["name"], {}) | files
    for patch in kustomization.get("patches") or []:
        target = patch.get("target") or {}
        if target.get("kind") == "Deployment" and target.get("name") == DEPLOYMENT:
            _json_patch(deployment, yaml.safe_load(patch["patch"]))
    return OperatorDeployment(deployment, config_maps)
