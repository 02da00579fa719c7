"""Pulumi.yaml and every Pulumi.<stack>.yaml, checked as the Pulumi CLI checks them before it runs the
program: the project file against Pulumi's own project schema (upstream/pulumi-project-schema.json),
the project's config declarations as `Project.Validate` does, and each stack's values against the
declared types as `validateStackConfigValues` does (pulumi/pulumi v3.259.0,
sdk/go/common/workspace/project.go and config.go). A file the CLI would refuse fails here."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
SCHEMA = REPO / "upstream" / "pulumi-project-schema.json"
STACK_FILES = sorted(REPO.glob("Pulumi.*.yaml"))


def project_schema() -> dict:
    return json.loads(SCHEMA.read_text())


def validate_config_value(type_name: str, items: dict | None, value: Any) -> bool:
    """project.go ValidateConfigValue. Scalar stack values reach it as the strings the CLI stores
    (`3` -> "3", `true` -> "true"); structured ones as decoded JSON."""
    if type_name == "string":
        return isinstance(value, str)
    if type_name == "integer":
        if isinstance(value, bool):
            return False
        if isinstance(value, int) or (isinstance(value, float) and value == math.trunc(value)):
            return True
        return isinstance(value, str) and re.fullmatch(r"[+-]?\d+", value) is not None
    if type_name == "boolean":
        return value in ("true", "false") or isinstance(value, bool)
    if type_name == "object":
        return isinstance(value, dict)
    if not isinstance(value, list) or items is None:
        return False
    return all(validate_config_value(items["type"], items.get("items"), item) for item in value)


def as_stored(value: Any) -> Any:
    """What the CLI hands the validator for a stack value: scalars as their string form (Go's %v, so
    YAML true is "true"), lists and maps as JSON."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (dict, list)):
        return json.loads(json.dumps(value))
    return str(value)


def project_problems(project: dict) -> list[str]:
    """Project.Validate for keys of the project's namespace, and the project schema."""
    problems = [
        f"Pulumi.yaml: {'/'.join(map(str, e.path))}: {e.message}"
        for e in jsonschema.Draft202012Validator(project_schema()).iter_errors(project)
    ]
    for key, decl in (project.get("config") or {}).items():
        if not isinstance(decl, dict) or "type" not in decl:
            continue
        if decl["type"] == "array" and "items" not in decl:
            problems.append(f"The configuration key '{key}' declares an array but does not specify 'items'")
        if "default" in decl and not validate_config_value(decl["type"], decl.get("items"), decl["default"]):
            problems.append(
                f"The default value specified for configuration key '{key}' is not of the expected type"
            )
    return problems


def stack_problems(project: dict, stack: str, config: dict) -> list[str]:
    """validateStackConfigValues plus the project's own rule: every key in our namespace is declared
    (an undeclared one is a typo the program would otherwise find only at `pulumi up`)."""
    name = project["name"]
    declared = project.get("config") or {}
    problems = []
    for key, decl in declared.items():
        full = key if ":" in key else f"{name}:{key}"
        if full not in config:
            if not isinstance(decl, dict) or ("default" not in decl and "value" not in decl):
                problems.append(f"Stack '{stack}' is missing configuration value '{key}'")
            continue
        if isinstance(decl, dict) and "type" in decl:
            value = config[full]
            if decl.get("secret") and not (isinstance(value, dict) and "secure" in value):
                problems.append(
                    f"Stack '{stack}' with configuration key '{key}' must be encrypted as it's secret"
                )
            elif not validate_config_value(decl["type"], decl.get("items"), as_stored(value)):
                problems.append(
                    f"Stack '{stack}' with configuration key '{key}' must be of type '{decl['type']}'"
                )
    for key in config:
        namespace, _, bare = key.partition(":")
        if namespace == name and bare not in declared:
            problems.append(f"Stack '{stack}' sets '{key}', which Pulumi.yaml does not declare")
    return problems


def load(path: Path) -> dict:
    return yaml.safe_load(path.read_text()) or {}


def test_pulumi_yaml_is_a_valid_project():
    assert project_problems(load(REPO / "Pulumi.yaml")) == []


@pytest.mark.parametrize("path", STACK_FILES, ids=[p.name for p in STACK_FILES])
def test_stack_file_values_have_the_declared_types(path):
    project = load(REPO / "Pulumi.yaml")
    stack = path.name[len("Pulumi.") : -len(".yaml")]
    assert stack_problems(project, stack, load(path).get("config") or {}) == []


def test_the_checks_refuse_what_the_cli_refuses():
    project = load(REPO / "Pulumi.yaml")
    bad_project = {key: value for key, value in project.items() if key != "name"} | {
        "config": {
            **project["config"],
            "zones": {"type": "array", "default": []},
            "nodes": {"type": "integer", "default": "three"},
            "ratio": {"type": "float", "default": 1.5},
        }
    }
    problems = project_problems(bad_project)
    assert any("'name' is a required property" in p for p in problems), problems
    assert any(p.startswith("Pulumi.yaml: config/ratio:") for p in problems), problems
    assert any("'zones' declares an array" in p for p in problems)
    assert any("'nodes' is not of the expected type" in p for p in problems)

    stack = {
        "aws:region": "us-east-1",
        "mlops-eks:availabilityZoneCount": "three",
        "mlops-eks:endpointPublicAccess": "yes",
        "mlops-eks:publicAccessCidrs": "198.51.100.7/32",
        "mlops-eks:availabilityZones": [1, 2],
        "mlops-eks:gpuPool": [],
    }
    problems = stack_problems(project, "bad", stack)
    for key, type_ in [
        ("availabilityZoneCount", "integer"),
        ("endpointPublicAccess", "boolean"),
        ("publicAccessCidrs", "array"),
        ("availabilityZones", "array"),
    ]:
        assert f"Stack 'bad' with configuration key '{key}' must be of type '{type_}'" in problems
    assert "Stack 'bad' sets 'mlops-eks:gpuPool', which Pulumi.yaml does not declare" in problems
    # As the CLI: a quoted number is a valid integer, "true" a valid boolean.
    assert (
        stack_problems(
            project, "ok", {"mlops-eks:availabilityZoneCount": "3", "mlops-eks:forceDestroy": "true"}
        )
        == []
    )
