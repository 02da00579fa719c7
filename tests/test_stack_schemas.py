"""schemas/*.schema.json: generated from the config models (equal to what schemas/generate.py writes now),
every committed stack file valid against its schema, and the mistakes an editor should flag flagged."""

from __future__ import annotations

import copy
import json

import jsonschema
import pytest
import yaml

from schemas import generate
from workloads.stacks import REPO, workload_stacks

STACKS = sorted(p.name.removeprefix("Pulumi.").removesuffix(".yaml") for p in REPO.glob("Pulumi.*.yaml"))


def validator(kind: str) -> jsonschema.Draft202012Validator:
    schema = json.loads((REPO / "schemas" / f"{kind}-stack.schema.json").read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def stack(name: str) -> dict:
    return yaml.safe_load((REPO / f"Pulumi.{name}.yaml").read_text())


def errors(kind: str, document: dict) -> list[str]:
    return [f"{list(e.absolute_path)}: {e.message}" for e in validator(kind).iter_errors(document)]


def test_committed_schemas_are_the_generated_ones():
    for path, text in generate.schemas().items():
        assert path.read_text() == text, f"{path.name} is stale: run `python schemas/generate.py`"
    assert generate.main(["--check"]) == 0


@pytest.mark.parametrize("name", STACKS)
def test_every_committed_stack_file_is_valid(name):
    kind = "workload" if name in workload_stacks() else "platform"
    assert errors(kind, stack(name)) == []


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("mlopseks:natGateways", "single"),  # misspelled namespace
        ("mlops_eks:environment", "dev"),
        ("mlops-eks:natGateway", "single"),  # misspelled key
        ("mlops-eks:natGateways", "three"),  # not one of the allowed values
        ("mlops-eks:availabilityZoneCount", "two"),
        ("mlops-eks:endpointPublicAccess", "yes"),
    ],
)
def test_platform_mistakes_are_flagged(key, value):
    document = copy.deepcopy(stack("dev"))
    document["config"][key] = value
    assert errors("platform", document)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("mlops-eks:availabilityZoneCount", "2"),  # as `pulumi config set` writes it
        ("mlops-eks:endpointPublicAccess", "true"),
        ("mlops-eks:grafanaAdminPassword", {"secure": "v1:abc"}),  # `pulumi config set --secret`
        ("aws:profile", "work"),  # a provider's own key
    ],
)
def test_platform_values_pulumi_writes_are_accepted(key, value):
    document = copy.deepcopy(stack("dev"))
    document["config"][key] = value
    assert errors("platform", document) == []


def test_workload_job_keys_are_checked():
    document = copy.deepcopy(stack("dev-zimdb"))
    document["config"]["mlops-eks:job"]["gpuPerNode"] = 4
    assert any("gpuPerNode" in e for e in errors("workload", document))
    del document["config"]["mlops-eks:job"]["gpuPerNode"]
    document["config"]["mlops-eks:platformStack"] = "acme/dev"
    assert errors("workload", document)
