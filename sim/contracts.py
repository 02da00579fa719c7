"""The upstream contracts vendored in upstream/ (CRDs, chart default values), checked in-process.

    python -m sim.contracts crd FILE...                 # objects (YAML, multi-document, or JSON)
    python -m sim.contracts values CHART VERSION FILE   # a Helm values file

`crd`: every object whose apiVersion/kind has a CRD in upstream/crds is validated against that CRD's
openAPIV3Schema, structure only (CEL rules: sim/kubernetes/cel.py). Unknown fields are errors: the API server
would prune them, so the setting would silently do nothing. Objects without a CRD here are counted.
`values`: every key path of the values must exist in the chart's default values
(upstream/charts/CHART-VERSION-values.yaml); below a default that is an empty map, null or a list, any key
is allowed (free-form maps such as nodeSelector or podAnnotations).
Exit status 0 when everything checked is valid, 1 otherwise, 2 on usage errors.

Each CRD file is parsed once per process (libyaml), so a check costs the walk, not the 6 MB of YAML.
upstream/README.md says where each file comes from; scripts/refresh_upstream.py refreshes them.
"""

from __future__ import annotations

import argparse
import functools
import json
import re
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml

UPSTREAM = Path(__file__).resolve().parents[1] / "upstream"
CRDS = UPSTREAM / "crds"
CHART_VALUES = UPSTREAM / "charts"
HELM_PACKAGES = UPSTREAM / "helm"


class Loader(yaml.CSafeLoader):  # libyaml (PyYAML's wheels bundle it): the CRDs are megabytes
    """PyYAML without YAML 1.1's `=` (value) tag, which Go's YAML does not have: some CRDs contain
    a plain `=` (an enum of operators)."""


Loader.add_constructor("tag:yaml.org,2002:value", Loader.construct_scalar)


def load_all(text: str) -> list[Any]:
    return list(yaml.load_all(text, Loader=Loader))  # noqa: S506 (a SafeLoader subclass)


@functools.cache
def _parsed(path: Path) -> tuple[Any, ...]:
    return tuple(load_all(path.read_text()))


def crd_documents(crd_dir: Path = CRDS) -> list[tuple[str, dict[str, Any]]]:
    """(file name, CustomResourceDefinition) for every CRD in `crd_dir`, parsed once per process.
    The documents are shared: treat them as read-only."""
    if not crd_dir.is_dir():
        raise FileNotFoundError(f"{crd_dir} is missing: the upstream contracts are part of the repository")
    return [
        (path.name, doc)
        for path in sorted(crd_dir.glob("*.yaml"))
        for doc in _parsed(path)
        if isinstance(doc, dict) and doc.get("kind") == "CustomResourceDefinition"
    ]


def served_schemas(crds: Iterable[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    """(apiVersion, kind) -> openAPIV3Schema of every served version; the first CRD of a kind wins."""
    schemas: dict[tuple[str, str], dict[str, Any]] = {}
    for crd in crds:
        for v in crd["spec"]["versions"]:
            schema = (v.get("schema") or {}).get("openAPIV3Schema")
            if v.get("served") and schema:
                schemas.setdefault(
                    (f"{crd['spec']['group']}/{v['name']}", crd["spec"]["names"]["kind"]), schema
                )
    return schemas


@functools.cache
def crd_schemas() -> dict[tuple[str, str], dict[str, Any]]:
    """(apiVersion, kind) -> openAPIV3Schema of every served version of upstream/crds."""
    return served_schemas(crd for _, crd in crd_documents())


TYPES: dict[str, type | tuple[type, ...]] = {
    "object": dict,
    "array": list,
    "string": str,
    "boolean": bool,
    "integer": int,
    "number": (int, float),
}


META_FIELDS = ("apiVersion", "kind", "metadata")


def pruned_fields(value: Any, schema: dict[str, Any] | None, resource_root: bool = False) -> list[str]:
    """The fields the API server drops from `value` under the structural `schema` (None: no schema),
    sorted, as apiextensions-apiserver pkg/apiserver/schema/pruning/algorithm.go PruneWithOptions reports
    them ("spec.a", "[1].b"). `resource_root`: the object is a whole resource (its apiVersion, kind and
    metadata stay). `value` is not changed."""
    if resource_root:
        schema = {**(schema or {}), "x-kubernetes-embedded-resource": True}
    found: list[str] = []
    _prune(value, schema, "", found)
    return sorted(found)


def _key(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _field_schema(schema: dict[str, Any], key: str) -> tuple[bool, dict[str, Any] | None]:
    """(declared, the schema a field's value is pruned by): its property, else additionalProperties (a
    boolean there stands for no schema: everything below is dropped)."""
    if key in (schema.get("properties") or {}):
        return True, schema["properties"][key]
    if "additionalProperties" in schema:
        extra = schema["additionalProperties"]
        return True, extra if isinstance(extra, dict) else None
    return False, None


def _prune(value: Any, schema: dict[str, Any] | None, path: str, found: list[str]) -> None:
    if schema is not None and schema.get("x-kubernetes-preserve-unknown-fields"):
        _skip_prune(value, schema, path, found)
    elif isinstance(value, dict):
        for key, child in value.items():
            if schema is None:
                found.append(_key(path, key))
                continue
            if schema.get("x-kubernetes-embedded-resource") and key in META_FIELDS:
                continue
            declared, sub = _field_schema(schema, key)
            if declared:
                _prune(child, sub, _key(path, key), found)
            elif key not in META_FIELDS or path:
                found.append(_key(path, key))  # dropped, and not reported at the root: apiVersion, kind
    elif isinstance(value, list):
        for i, item in enumerate(value):
            _prune(item, None if schema is None else schema.get("items"), f"{path}[{i}]", found)


def _skip_prune(value: Any, schema: dict[str, Any] | None, path: str, found: list[str]) -> None:
    """x-kubernetes-preserve-unknown-fields: unknown fields stay, declared ones are pruned by their schema."""
    if schema is None:
        return
    if isinstance(value, dict):
        for key, child in value.items():
            if schema.get("x-kubernetes-embedded-resource") and key in META_FIELDS:
                continue
            declared, sub = _field_schema(schema, key)
            if declared:
                _prune(child, sub, _key(path, key), found)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            _skip_prune(item, schema.get("items"), f"{path}[{i}]", found)


def validate(
    value: Any, schema: dict[str, Any], path: str, errors: list[str], resource_root: bool = False
) -> None:
    """Append to `errors` every way `value` breaks the structural `schema` (a CRD's openAPIV3Schema
    node): what structural validation refuses, and every field pruning would drop (pruned_fields), which
    would silently do nothing. `resource_root`: `value` is a whole resource (metadata is the API's)."""
    _validate(value, schema, path, errors)
    dropped = pruned_fields(value, schema, resource_root)
    errors += [f"{_key(path, field)}: unknown field (the API server drops it)" for field in dropped]


def _validate(value: Any, schema: dict[str, Any], path: str, errors: list[str]) -> None:
    """Value validation: types, enums, bounds, patterns, required fields, allOf/anyOf/oneOf."""
    if value is None:
        if not schema.get("nullable"):
            errors.append(f"{path}: null is not allowed")
        return
    if schema.get("x-kubernetes-preserve-unknown-fields") and "properties" not in schema:
        return
    if schema.get("x-kubernetes-int-or-string"):
        if not isinstance(value, (int, str)) or isinstance(value, bool):
            errors.append(f"{path}: expected int or string, got {type(value).__name__}")
        return
    for sub in schema.get("allOf", []):
        _validate(value, sub, path, errors)
    for key in ("anyOf", "oneOf"):
        if key in schema:
            branch_errors = []
            for sub in schema[key]:
                errs: list[str] = []
                _validate(value, sub, path, errs)
                branch_errors.append(errs)
            if all(branch_errors):
                errors.append(f"{path}: matches no branch of {key}: {branch_errors[0][:1]}")
    typ = schema.get("type")
    if typ:
        bad_bool = typ in ("integer", "number") and isinstance(value, bool)
        if not isinstance(value, TYPES[typ]) or bad_bool:
            errors.append(f"{path}: expected {typ}, got {type(value).__name__} ({value!r:.60})")
            return
    if "enum" in schema and value not in schema["enum"]:
        errors.append(f"{path}: {value!r} not in {schema['enum']}")
    if isinstance(value, str):
        _check_string(value, schema, path, errors)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if "minimum" in schema and value < schema["minimum"]:
            errors.append(f"{path}: {value} < minimum {schema['minimum']}")
        if "maximum" in schema and value > schema["maximum"]:
            errors.append(f"{path}: {value} > maximum {schema['maximum']}")
    if isinstance(value, list):
        _check_list(value, schema, path, errors)
    if isinstance(value, dict):
        _check_object(value, schema, path, errors)


def _check_string(value: str, schema: dict[str, Any], path: str, errors: list[str]) -> None:
    if "pattern" in schema and not re.search(schema["pattern"], value):
        errors.append(f"{path}: {value!r} does not match {schema['pattern']}")
    if "maxLength" in schema and len(value) > schema["maxLength"]:
        errors.append(f"{path}: longer than {schema['maxLength']}")
    if "minLength" in schema and len(value) < schema["minLength"]:
        errors.append(f"{path}: shorter than {schema['minLength']}")


def _check_list(value: list[Any], schema: dict[str, Any], path: str, errors: list[str]) -> None:
    if "maxItems" in schema and len(value) > schema["maxItems"]:
        errors.append(f"{path}: more than {schema['maxItems']} items")
    if "minItems" in schema and len(value) < schema["minItems"]:
        errors.append(f"{path}: fewer than {schema['minItems']} items")
    items = schema.get("items")
    if isinstance(items, dict):
        for i, item in enumerate(value):
            _validate(item, items, f"{path}[{i}]", errors)


def _check_object(value: dict[str, Any], schema: dict[str, Any], path: str, errors: list[str]) -> None:
    props = schema.get("properties")
    for req in schema.get("required", []):
        if req not in value:
            errors.append(f"{path}: missing required field {req!r}")
    extra = schema.get("additionalProperties")
    for key, sub in value.items():
        here = f"{path}.{key}"
        if props is not None and key in props:
            _validate(sub, props[key], here, errors)
        elif isinstance(extra, dict):
            _validate(sub, extra, here, errors)


def object_errors(obj: dict[str, Any], schema: dict[str, Any]) -> list[str]:
    """What the API server would refuse (or prune) in a whole custom resource."""
    errors: list[str] = []
    if not (obj.get("metadata") or {}).get("name"):
        errors.append("metadata.name: missing")
    props = schema.get("properties", {})
    for key, value in obj.items():
        if key in ("apiVersion", "kind", "metadata", "status"):
            continue
        if key in props:
            validate(value, props[key], key, errors)
        else:
            errors.append(f"{key}: unknown top-level field")
    errors += [f"missing required field {req!r}" for req in schema.get("required", []) if req not in obj]
    return errors


def check_objects(objects: Iterable[dict[str, Any]], source: str = "objects") -> tuple[int, str]:
    """Validate objects against upstream/crds: (0 if every object with a CRD here is valid and at least
    one was checked, else 1; a report naming each object and its errors)."""
    schemas = crd_schemas()
    lines: list[str] = []
    checked = skipped = failed = 0
    for obj in objects:
        key = (obj.get("apiVersion", ""), obj.get("kind", ""))
        schema = schemas.get(key)
        if schema is None:
            skipped += 1
            continue
        checked += 1
        label = f"{key[1]}/{(obj.get('metadata') or {}).get('name', '?')} ({source})"
        if errors := object_errors(obj, schema):
            failed += 1
            lines += [f"INVALID {label}", *(f"    {e}" for e in errors[:20])]
        else:
            lines.append(f"ok      {label}")
    lines.append(f"{checked} checked against upstream CRDs, {failed} invalid, {skipped} without a CRD here")
    return (1 if failed or not checked else 0), "\n".join(lines) + "\n"


def unknown_keys(values: Any, defaults: Any, path: str = "") -> list[str]:
    """Key paths of `values` that the chart's `defaults` do not have."""
    if not isinstance(values, dict) or not isinstance(defaults, dict) or not defaults:
        return []  # free-form below an empty map, null, list or scalar default
    out: list[str] = []
    for key, sub in values.items():
        here = f"{path}.{key}" if path else str(key)
        if key not in defaults:
            out.append(here)
        else:
            out.extend(unknown_keys(sub, defaults[key], here))
    return out


@functools.cache
def _chart_defaults(chart: str, version: str) -> Any:
    return yaml.load(values_file(chart, version).read_text(), Loader=Loader) or {}  # noqa: S506


def values_file(chart: str, version: str) -> Path:
    return CHART_VALUES / f"{chart}-{version}-values.yaml"


def check_values(chart: str, version: str, values: dict[str, Any]) -> tuple[int, str]:
    """(0 if every key of `values` exists in the chart's default values at `version`, else 1; a report)."""
    if not values_file(chart, version).exists():
        have = ", ".join(sorted(p.name.removesuffix("-values.yaml") for p in CHART_VALUES.glob("*.yaml")))
        return 1, f"no upstream values for {chart} {version}; have: {have}\n"
    bad = unknown_keys(values, _chart_defaults(chart, version))
    lines = [
        *(f"UNKNOWN {chart} {version}: {b}" for b in bad),
        f"{chart} {version}: {len(bad)} unknown value keys",
    ]
    return (1 if bad else 0), "\n".join(lines) + "\n"


def _load_objects(path: Path) -> list[dict[str, Any]]:
    """The objects of a YAML (multi-document) or JSON file (an object, a list, {"items": [...]}, a List)."""
    if path.suffix == ".json":
        data = json.loads(path.read_text())
        docs = data.get("items", [data]) if isinstance(data, dict) else data
    else:
        docs = [d for d in load_all(path.read_text()) if d is not None]
    out: list[dict[str, Any]] = []
    for d in docs:
        if isinstance(d, dict) and d.get("kind", "").endswith("List") and "items" in d:
            out.extend(d["items"])
        elif isinstance(d, dict):
            out.append(d)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m sim.contracts",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True)
    crd = sub.add_parser("crd", help="validate objects against upstream/crds")
    crd.add_argument("files", nargs="+", type=Path)
    keys = sub.add_parser("values", help="check a values file's keys against the chart's defaults")
    keys.add_argument("chart")
    keys.add_argument("version")
    keys.add_argument("file", type=Path)
    args = parser.parse_args(argv)
    if args.command == "crd":
        status = 0
        for path in args.files:
            code, report = check_objects(_load_objects(path), str(path))
            print(report, end="")
            status = max(status, code)
        return status
    text = args.file.read_text()
    values = json.loads(text) if args.file.suffix == ".json" else next(iter(load_all(text)), None)
    code, report = check_values(args.chart, args.version, values or {})
    print(report, end="")
    return code


if __name__ == "__main__":
    sys.exit(main())
