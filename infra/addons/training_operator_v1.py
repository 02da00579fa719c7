"""Training Operator v1 (PyTorchJob, MPIJob) as the platform configures it: which kustomize overlay installs
it, and what its Deployment then runs with (flags, and the files its ConfigMaps put in the container).

Pure: infra/addons/training.py installs the overlay; sim/operators/pods.py reads the same overlay
files to know what the operator adds to the pods it creates (the PyTorchJob Worker's init container comes
from the template file the operator reads). The overlays live in infra/addons/kustomize/, over a local copy
of the upstream manifests at the pinned commit (training-operator-v1/base, PROVENANCE.md). `build` reads
them the way kustomize would, for what they use: local resources, configMapGenerator and JSON patches
(`add`, including `/-` appends, and `replace`) and `images:`, so a mount path that does not match the
template flag shows up here as a missing file, exactly as the operator would see it, and the webhooks they
register can be listed offline.

A stack installs an overlay under its own layer (`stack_layer`), written at deploy into STACK_LAYERS: the
operator's image and the images its flags put into the pods it creates (JOB_IMAGE_FLAGS), each the pin of
infra/pins.py through the stack's image path (infra/platform/registries.py `ImagePath.ref`); a static file
cannot name the stack's registry.
"""

from __future__ import annotations

import copy
import functools
import os
import posixpath
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from infra.pins import IMAGES
from infra.platform.registries import ImagePath, split_ref

KUSTOMIZE = Path(__file__).resolve().parent / "kustomize"
# Relative to the project root, where Pulumi runs the program (kustomize/v2 Directory's `directory`).
OVERLAY = "infra/addons/kustomize/training-operator-v1"
VOLCANO_OVERLAY = "infra/addons/kustomize/training-operator-v1-volcano"
DEPLOYMENT = "training-operator"
# Where `write_stack_layer` puts each stack's layer (ignored by git; rewritten by every preview and update).
STACK_LAYERS = "infra/addons/kustomize/stacks"
# The operator's own image (IMAGES key), as its Deployment names it (manifests/base/deployment.yaml).
OPERATOR_IMAGE = "training-operator-v1"
# The images the operator puts into the pods it creates, by the flag that names each
# (cmd/training-operator.v1/main.go at the pinned commit) -> IMAGES key.
JOB_IMAGE_FLAGS = {
    "pytorch-init-container-image": "pytorch-init",
    "mpi-kubectl-delivery-image": "mpi-kubectl-delivery",
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
        if op["op"] not in ("add", "replace"):
            raise ValueError(f"JSON patch op {op['op']!r}: this reader applies `add` and `replace` only")
        parts = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].lstrip("/").split("/")]
        node: Any = target
        for part in parts[:-1]:
            node = node[int(part)] if isinstance(node, list) else node.setdefault(part, {})
        last, value = parts[-1], copy.deepcopy(op["value"])
        if isinstance(node, list) and op["op"] == "add":
            node.insert(len(node) if last == "-" else int(last), value)
        elif isinstance(node, list):
            node[int(last)] = value
        else:
            node[last] = value


@dataclass(frozen=True)
class Built:
    """What `kustomize build` of a directory yields: its objects and its generated ConfigMaps' data."""

    objects: list[dict[str, Any]]
    config_maps: dict[str, dict[str, str]]

    def one(self, kind: str, name: str) -> dict[str, Any]:
        (found,) = [o for o in self.objects if o["kind"] == kind and o["metadata"]["name"] == name]
        return found


def _targets(patch: dict[str, Any], obj: dict[str, Any]) -> bool:
    target = patch.get("target") or {}
    group = obj["apiVersion"].rpartition("/")[0]
    return (
        target.get("kind") in (None, obj["kind"])
        and target.get("name") in (None, obj["metadata"].get("name"))
        and target.get("group") in (None, group)
    )


@functools.cache
def _documents(path: str) -> list[dict[str, Any]]:
    """A manifest file's objects, parsed once per process (the CRDs are megabytes; libyaml)."""
    with open(path) as f:
        documents = [doc for doc in yaml.load_all(f, Loader=yaml.CSafeLoader) if doc]
    for doc in documents:
        _IMAGES_IN[id(doc)] = (doc, frozenset(_container_images(doc, set())))
    return documents


@functools.lru_cache(maxsize=256)
def _parsed(text: str) -> Any:
    """A kustomization's or a patch's YAML, parsed once per process per text (libyaml), to be read, not
    changed: a platform's overlays are built again for every job the offline commands plan."""
    return yaml.load(text, Loader=yaml.CSafeLoader)


def _image_name(image: str) -> str:
    return split_ref(image)[0]


def _container_images(obj: Any, found: set[str]) -> set[str]:
    """The image names `_set_images` would look at in `obj`: every container's and init container's."""
    if isinstance(obj, list):
        for item in obj:
            _container_images(item, found)
    elif isinstance(obj, dict):
        for key, value in obj.items():
            if key in ("containers", "initContainers") and isinstance(value, list):
                found |= {_image_name(c["image"]) for c in value if isinstance(c.get("image"), str)}
            _container_images(value, found)
    return found


# The image names in each parsed manifest document, by the document's id: the documents are shared and
# live as long as the process (_documents' cache), so each is walked once, and `images:` copies only the
# objects it changes instead of megabytes of CustomResourceDefinitions on every build.
_IMAGES_IN: dict[int, tuple[dict[str, Any], frozenset[str]]] = {}


def _images_in(obj: dict[str, Any]) -> frozenset[str]:
    known = _IMAGES_IN.get(id(obj))
    if known is not None and known[0] is obj:
        return known[1]
    return frozenset(_container_images(obj, set()))


def _set_images(obj: Any, images: list[dict[str, str]]) -> None:
    """kustomize's image transformer: every container's and init container's `image` whose name is an
    entry's `name` gets its newName, newTag or digest (a digest replaces the tag)."""
    if isinstance(obj, list):
        for item in obj:
            _set_images(item, images)
        return
    if not isinstance(obj, dict):
        return
    for key, value in obj.items():
        if key in ("containers", "initContainers") and isinstance(value, list):
            for container in value:
                image = container.get("image")
                entry = next(
                    (e for e in images if isinstance(image, str) and _image_name(image) == e["name"]), None
                )
                if entry is None:
                    continue
                name, tag, digest = split_ref(image)
                name = entry.get("newName", name)
                if "digest" in entry:
                    container["image"] = f"{name}@{entry['digest']}"
                else:
                    tag = entry.get("newTag", tag)
                    container["image"] = f"{name}:{tag}" if tag else (f"{name}@{digest}" if digest else name)
        _set_images(value, images)


def build(directory: str | Path, kustomization: dict[str, Any] | None = None) -> Built:
    """The objects of the kustomization at `directory` (relative to the project root, or absolute), to be
    read, not changed (the parsed files are shared); `kustomization` stands for its kustomization.yaml
    (a stack layer before it is written). Paths are joined and cleaned as kustomize does (filepath.Join).
    A remote resource is refused: the deploy reads no URL."""
    root = Path(directory)
    if not root.is_absolute():
        root = KUSTOMIZE.parents[2] / root
    if kustomization is None:
        kustomization = _parsed((root / "kustomization.yaml").read_text())
    objects: list[dict[str, Any]] = []
    config_maps: dict[str, dict[str, str]] = {}
    for resource in kustomization.get("resources") or []:
        if "://" in resource:
            raise ValueError(f"{root}/kustomization.yaml: remote resource {resource}; vendor it instead")
        path = Path(os.path.normpath(root / resource))
        if path.is_dir():
            inner = build(path)
            objects += inner.objects
            config_maps |= inner.config_maps
        else:
            objects += _documents(str(path))
    for generator in kustomization.get("configMapGenerator") or []:
        files = {Path(f).name: (root / f).read_text() for f in generator.get("files") or []}
        config_maps[generator["name"]] = config_maps.get(generator["name"], {}) | files
    for patch in kustomization.get("patches") or []:
        ops = _parsed(patch["patch"] if "patch" in patch else (root / patch["path"]).read_text())
        for i, obj in enumerate(objects):
            if _targets(patch, obj):
                objects[i] = copy.deepcopy(obj)  # the parsed files are shared: patch a copy
                _json_patch(objects[i], ops)
    if images := kustomization.get("images"):
        names = {entry["name"] for entry in images}
        changed = [copy.deepcopy(o) if _images_in(o) & names else None for o in objects]  # copy what changes
        _set_images([o for o in changed if o is not None], images)
        objects = [new if new is not None else o for o, new in zip(objects, changed, strict=True)]
    return Built(objects, config_maps)


def apply_overlay(directory: str | Path, images: ImagePath | None = None) -> OperatorDeployment:
    """The Deployment `training-operator` after the overlay at `directory` (under the stack layer of
    `images`, when given: as the platform installs it), and its ConfigMaps' data."""
    if images is None:
        built = build(directory)
    else:
        built = build(layer_directory(str(directory), images), stack_layer(str(directory), images))
    return OperatorDeployment(built.one("Deployment", DEPLOYMENT), built.config_maps)


def layer_directory(directory: str, images: ImagePath) -> str:
    """Where the stack's layer over `directory` is written, relative to the project root."""
    return f"{STACK_LAYERS}/{images.stack}/{posixpath.basename(directory)}"


def stack_layer(directory: str, images: ImagePath) -> dict[str, Any]:
    """The kustomization that installs the overlay at `directory` with every image through `images`: the
    operator's by kustomize's `images:`, the job pods' by the manager's flags (the overlay's own arguments,
    with the image flags set; a flag the overlay already sets is replaced, not repeated)."""
    operator = IMAGES[OPERATOR_IMAGE]
    name, tag, _ = split_ref(images.ref(operator.ref))
    image: dict[str, str] = {"name": _image_name(operator.ref), "newName": name}
    image |= {"digest": operator.digest} if operator.digest else {"newTag": tag}
    args = [
        a
        for a in apply_overlay(directory).container.get("args") or []
        if a.split("=", 1)[0].lstrip("-") not in JOB_IMAGE_FLAGS
    ]
    args += [f"--{flag}={images.ref(IMAGES[key].pinned)}" for flag, key in JOB_IMAGE_FLAGS.items()]
    layer = layer_directory(directory, images)
    return {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": [posixpath.relpath(directory, layer)],
        "images": [image],
        "patches": [
            {
                "target": {"kind": "Deployment", "name": DEPLOYMENT},
                "patch": yaml.safe_dump(
                    [{"op": "replace", "path": "/spec/template/spec/containers/0/args", "value": args}]
                ),
            }
        ],
    }


def write_stack_layer(directory: str, images: ImagePath) -> str:
    """Write the stack's layer over `directory` (see `stack_layer`) and return its directory, relative to
    the project root: what the kustomize Directory resource installs."""
    layer = layer_directory(directory, images)
    path = KUSTOMIZE.parents[2] / layer / "kustomization.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    header = (
        "# Written by infra/addons/training_operator_v1.py write_stack_layer at every preview and update.\n"
    )
    text = header + yaml.safe_dump(stack_layer(directory, images), sort_keys=False)
    if not path.exists() or path.read_text() != text:
        # Whole or not at all: a reader (kustomize, another preview of the same checkout) never sees a
        # half-written file.
        partial = path.with_name(f".{path.name}.{os.getpid()}")
        partial.write_text(text)
        os.replace(partial, path)
    return layer
