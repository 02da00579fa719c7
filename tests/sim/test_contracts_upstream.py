"""Kubernetes' pruning test table (apiextensions-apiserver pkg/apiserver/schema/pruning/algorithm_test.go
TestPrune, release-1.35, vendored under sim/vendored/kubernetes/kubernetes/release-1.35/) run on
sim/contracts.py: pruned_fields must name exactly the fields upstream prunes, and validate() must report
exactly those as unknown. Each case keeps upstream's name; upstream's Go schemas are written as the
openAPIV3Schema they stand for (a nil schema is None)."""

from __future__ import annotations

import json

import pytest

from sim.contracts import pruned_fields, validate
from tests.sim.upstream_tables import assert_covered, case_names

PRUNING_TEST = (
    "kubernetes/kubernetes/release-1.35/staging/src/k8s.io/apiextensions-apiserver/pkg/apiserver/schema/"
    "pruning/algorithm_test.go"
)
OBJECT = {"type": "object"}
PRESERVE = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
EMBEDDED = {"x-kubernetes-embedded-resource": True}
ARRAY_OF_A_AND_C = {"items": {"properties": {"a": {}, "c": {}}}}
NESTED_JSON = """{
  "unspecified":"bar", "alpha": "abc", "beta": 42.0, "unspecifiedObject": {"unspecified": "bar"},
  "pruning": {"unspecified": "bar", "unspecifiedObject": {"unspecified": "bar"},
              "pruning": {"unspecified": "bar"}, "apiVersion": "unknown",
              "preserving": {"unspecified": "bar"}},
  "preserving": {"unspecified": "bar", "unspecifiedObject": {"unspecified": "bar"},
                 "pruning": {"unspecified": "bar"}, "preserving": {"unspecified": "bar"},
                 "preservingUnknownType": [{"foo":true},{"bar":true}]},
  "preservingAdditionalPropertiesNotInheritingXPreserveUnknownFields": {
     "foo": {"specified": {"unspecified":"bar"}, "unspecified": "bar"}},
  "preservingAdditionalPropertiesKeyPruneValues": {
     "foo": {"specified": {"unspecified":"bar"}, "unspecified": "bar"}}
}"""
SPECIFIED = {**OBJECT, "properties": {"specified": OBJECT}}
NESTED_SCHEMA = {
    **PRESERVE,
    "properties": {
        "alpha": {"type": "string"},
        "beta": {"type": "number"},
        "pruning": {**OBJECT, "properties": {"preserving": PRESERVE, "pruning": OBJECT}},
        "preserving": {
            **PRESERVE,
            "properties": {
                "preserving": PRESERVE,
                "preservingUnknownType": {"x-kubernetes-preserve-unknown-fields": True},
                "pruning": OBJECT,
            },
        },
        "preservingAdditionalPropertiesNotInheritingXPreserveUnknownFields": {
            **PRESERVE,
            "additionalProperties": SPECIFIED,
        },
        "preservingAdditionalPropertiesKeyPruneValues": {**OBJECT, "additionalProperties": SPECIFIED},
    },
}
META = '"metadata": {"name": "instance", "unspecified": "bar"}'
META_NS = (
    '"metadata": {"name": "instance", "namespace": "myns", "labels": {"foo": "bar"}, "unspecified": "bar"}'
)


def _embedded_json(meta: str) -> str:
    resource = f'"apiVersion": "foo/v1", "kind": "Foo", "unspecified": "bar", {meta}'
    embedded = f'{{{resource}, "spec": {{"unspecified": "bar"}}}}'
    return f"""{{
  "apiVersion": "foo/v1", "kind": "Foo", {meta}, "unspecified": "bar",
  "pruned": {{{resource}, "spec": {{"unspecified": "bar"}}}},
  "preserving": {{{resource}, "spec": {{"unspecified": "bar"}}}},
  "nested": {{{resource}, "spec": {{"unspecified": "bar", "embedded": {embedded}}}}}
}}"""


def _embedded_schema(metadata: bool) -> dict:
    meta = {"metadata": OBJECT} if metadata else {}
    return {
        **OBJECT,
        "properties": {
            **meta,
            "pruned": {**OBJECT, **EMBEDDED, "properties": {**meta, "spec": OBJECT}},
            "preserving": {**PRESERVE, **EMBEDDED},
            "nested": {
                **OBJECT,
                **EMBEDDED,
                "properties": {
                    "spec": {
                        **OBJECT,
                        "properties": {
                            "embedded": {**OBJECT, **EMBEDDED, "properties": {**meta, "spec": OBJECT}}
                        },
                    }
                },
            },
        },
    }


EMBEDDED_PRUNED = [
    "nested.spec.embedded.spec.unspecified",
    "nested.spec.embedded.unspecified",
    "nested.spec.unspecified",
    "nested.unspecified",
    "pruned.spec.unspecified",
    "pruned.unspecified",
    "unspecified",
]
# TestPrune: name -> (json, isResourceRoot, schema, expectedPruned)
PRUNE = {
    "empty": ("null", False, None, []),
    "scalar": ("4", False, {}, []),
    "scalar array": ("[1,2]", False, {"items": {}}, []),
    "object array": ('[{"a":1},{"b":1},{"a":1,"b":2,"c":3}]', False, ARRAY_OF_A_AND_C, ["[1].b", "[2].b"]),
    "object array with nil schema": (
        '[{"a":1},{"b":1},{"a":1,"b":2,"c":3}]',
        False,
        None,
        ["[0].a", "[1].b", "[2].a", "[2].b", "[2].c"],
    ),
    "object array object": (
        '{"array":[{"a":1},{"b":1},{"a":1,"b":2,"c":3}],"unspecified":{"a":1},"specified":{"a":1,"b":2,"c":3}}',
        False,
        {"properties": {"array": ARRAY_OF_A_AND_C, "specified": {"properties": {"a": {}, "c": {}}}}},
        ["array[1].b", "array[2].b", "specified.b", "unspecified"],
    ),
    "nested x-kubernetes-preserve-unknown-fields": (
        NESTED_JSON,
        False,
        NESTED_SCHEMA,
        [
            "preserving.pruning.unspecified",
            "preservingAdditionalPropertiesKeyPruneValues.foo.specified.unspecified",
            "preservingAdditionalPropertiesKeyPruneValues.foo.unspecified",
            "preservingAdditionalPropertiesNotInheritingXPreserveUnknownFields.foo.specified.unspecified",
            "preservingAdditionalPropertiesNotInheritingXPreserveUnknownFields.foo.unspecified",
            "pruning.apiVersion",
            "pruning.pruning.unspecified",
            "pruning.unspecified",
            "pruning.unspecifiedObject",
        ],
    ),
    "additionalProperties with schema": (
        '{"a":1,"b":1,"c":{"a":1,"b":2,"c":{"a":1}}}',
        False,
        {"properties": {"a": {}, "c": {"additionalProperties": {"type": "integer"}}}},
        ["b", "c.c.a"],
    ),
    "additionalProperties with bool": (
        '{"a":1,"b":1,"c":{"a":1,"b":2,"c":{"a":1, "apiVersion": "unknown"}}}',
        False,
        {"properties": {"a": {}, "c": {"additionalProperties": False}}},
        ["b", "c.c.a", "c.c.apiVersion"],
    ),
    "x-kubernetes-embedded-resource": (_embedded_json(META), False, _embedded_schema(False), EMBEDDED_PRUNED),
    "x-kubernetes-embedded-resource, with root=true": (
        _embedded_json(META_NS),
        True,
        _embedded_schema(True),
        EMBEDDED_PRUNED,
    ),
}


def test_every_pruning_case_is_run():
    assert_covered(case_names(PRUNING_TEST), PRUNE, {})


@pytest.mark.parametrize("name", PRUNE)
def test_prune(name):
    document, resource_root, schema, expected = PRUNE[name]
    value = json.loads(document)
    before = json.dumps(value, sort_keys=True)
    assert pruned_fields(value, schema, resource_root) == expected
    assert json.dumps(value, sort_keys=True) == before, "pruned_fields reports; it does not change the value"


@pytest.mark.parametrize("name", [n for n, case in PRUNE.items() if case[2] is not None])
def test_validate_reports_what_pruning_drops(name):
    document, resource_root, schema, expected = PRUNE[name]
    errors: list[str] = []
    validate(json.loads(document), schema, "", errors, resource_root)
    assert sorted(e.split(": ")[0] for e in errors if "unknown field" in e) == expected
