"""Kubernetes' CEL validation test tables run on sim/kubernetes/cel.py (the cases its features cover).

From apiextensions-apiserver pkg/apiserver/schema/cel/validation_test.go at release-1.35 (kubernetes/
apiextensions-apiserver v0.35.7): TestRatcheting, TestOptionalOldSelf, TestMessageExpression and the
transition-rule cases of TestValidationExpressions. Not vendored: the index holds no release-1.35 text of
the file (sim/models.yaml says so); transcribed from the tag, upstream's YAML schemas kept as written.
Each case keeps upstream's name; the SKIPPED_* lists say why a case is not run.
"""

from __future__ import annotations

import pytest
import yaml

from sim.kubernetes.cel import CrdRules, RuleError
from tests.sim.upstream_tables import assert_covered

BAZ_FOO = """
type: object
properties:
  foo:
    type: string
    x-kubernetes-validations:
    - rule: self == "bar"
      message: "gotta be bar"
"""
ATOMIC_BAR = """
type: array
x-kubernetes-list-type: atomic
items:
  type: object
  properties:
    bar:
      type: string
      x-kubernetes-validations:
      - rule: self == "baz"
        message: "gotta be baz"
"""
ODD_SET = """
type: array
x-kubernetes-list-type: set
items:
  type: number
  x-kubernetes-validations:
  - rule: int(self) % 2 == 1
    message: "gotta be odd"
"""
SET_WITH_SIBLING = """
type: object
properties:
  stringField:
    type: string
  setArray:
    type: array
    x-kubernetes-list-type: set
    items:
      type: number
      x-kubernetes-validations:
      - rule: int(self) % 2 == 1
        message: "gotta be odd"
"""
MAP_LIST = """
type: array
x-kubernetes-list-type: map
x-kubernetes-list-map-keys: ["key"]
items:
  type: object
  properties:
    key:
      type: string
    value:
      type: string
      x-kubernetes-validations:
      - rule: self == "baz"
        message: "gotta be baz"
"""
NESTED_MAP = """
type: object
properties:
  stringField:
    type: string
  mapField:
    type: object
    properties:
      foo:
        type: string
        x-kubernetes-validations:
        - rule: self == "baz"
          message: "gotta be baz"
      mapField:
        type: object
        properties:
          bar:
            type: string
            x-kubernetes-validations:
            - rule: self == "baz"
              message: "gotta be nested baz"
"""
NESTED_MAP_SIBLINGS = """
type: object
properties:
  stringField:
    type: string
  mapField:
    type: object
    properties:
      foo:
        type: string
        x-kubernetes-validations:
        - rule: self == "baz"
          message: "gotta be baz"
      mapField:
        type: object
        properties:
          bar:
            type: string
            x-kubernetes-validations:
            - rule: self == "baz"
              message: "gotta be baz"
          otherBar:
            type: string
            x-kubernetes-validations:
            - rule: self == "otherBaz"
              message: "gotta be otherBaz"
"""
ATOMIC_WITH_SIBLING = """
type: object
properties:
  stringField:
    type: string
  atomicArray:
    type: array
    x-kubernetes-list-type: atomic
    items:
      type: object
      properties:
        bar:
          type: string
          x-kubernetes-validations:
          - rule: self == "baz"
            message: "gotta be baz"
"""
TRANSITION = """
type: object
properties:
  foo:
    type: string
    x-kubernetes-validations:
    - rule: oldSelf != "bar" && self == "baz"
      message: gotta be baz
"""
FIELD_PATH = """
type: object
x-kubernetes-validations:
- rule: self.foo == "baz"
  message: gotta be baz
  fieldPath: ".foo"
properties:
  bar:
    type: string
  foo:
    type: string
"""
TYPEMETA = """
type: object
properties:
  apiVersion:
    type: string
    x-kubernetes-validations:
    - rule: self == "v1"
  kind:
    type: string
    x-kubernetes-validations:
    - rule: self == "Pod"
"""
V1 = {"type": "string", "x-kubernetes-validations": [{"rule": 'self == "v1"'}]}
POD = {"type": "string", "x-kubernetes-validations": [{"rule": 'self == "Pod"'}]}
NESTED_TYPEMETA = {
    "type": "object",
    "properties": {
        "list": {
            "type": "array",
            "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["name"],
            "maxItems": 2,
            "items": {
                "type": "object",
                "properties": {"name": {"type": "string"}, "apiVersion": V1, "kind": POD},
            },
        },
        "subField": {
            "type": "object",
            "properties": {"apiVersion": V1, "kind": POD, "otherField": {"type": "string"}},
        },
    },
}
NOT_BAZ = "gotta be baz"
# TestRatcheting: name -> (schema, old, new, errors, warnings); errors and warnings as (path, message),
# upstream's "root" path prefix dropped.
RATCHETING = {
    "normal CEL expression": (BAZ_FOO, {"foo": "baz"}, {"foo": "baz"}, [], [(".foo", "gotta be bar")]),
    "normal CEL expression thats a descendent of an atomic array whose parent is totally unchanged": (
        ATOMIC_BAR,
        [{"bar": "bar"}],
        [{"bar": "bar"}],
        [],
        [("[0].bar", NOT_BAZ)],
    ),
    "normal CEL expression thats a descendent of a set whose parent is totally unchanged": (
        ODD_SET,
        [1, 2],
        [1, 2],
        [],
        [("[1]", "gotta be odd")],
    ),
    "normal CEL expression thats a descendent of a set and one of its siblings has changed": (
        SET_WITH_SIBLING,
        {"stringField": "foo", "setArray": [1, 3, 2]},
        {"stringField": "changed but ratcheted", "setArray": [1, 3, 2]},
        [],
        [(".setArray[2]", "gotta be odd")],
    ),
    "descendent of a map list whose parent is unchanged": (
        MAP_LIST,
        [{"key": "foo", "value": "notbaz"}, {"key": "bar", "value": "notbaz"}],
        [
            {"key": "foo", "value": "notbaz"},
            {"key": "bar", "value": "notbaz"},
            {"key": "baz", "value": "baz"},
        ],
        [],
        [("[0].value", NOT_BAZ), ("[1].value", NOT_BAZ)],
    ),
    "descendent of a map list whose siblings have changed": (
        MAP_LIST,
        [{"key": "foo", "value": "notbaz"}, {"key": "bar", "value": "notbaz"}],
        [{"key": "foo", "value": "baz"}, {"key": "bar", "value": "notbaz"}],
        [],
        [("[1].value", NOT_BAZ)],
    ),
    "descendent of a map whose parent is totally unchanged": (
        NESTED_MAP,
        {"stringField": "foo", "mapField": {"foo": "notbaz", "mapField": {"bar": "notbaz"}}},
        {"stringField": "foo", "mapField": {"foo": "notbaz", "mapField": {"bar": "notbaz"}}},
        [],
        [(".mapField.foo", NOT_BAZ), (".mapField.mapField.bar", "gotta be nested baz")],
    ),
    "descendent of a map whose siblings have changed": (
        NESTED_MAP_SIBLINGS,
        {
            "stringField": "foo",
            "mapField": {"foo": "baz", "mapField": {"bar": "notbaz", "otherBar": "nototherBaz"}},
        },
        {
            "stringField": "foo",
            "mapField": {"foo": "notbaz", "mapField": {"bar": "notbaz", "otherBar": "otherBaz"}},
        },
        [(".mapField.foo", NOT_BAZ)],
        [(".mapField.mapField.bar", NOT_BAZ)],
    ),
    "normal CEL expression thats a descendent of an atomic array whose siblings has changed": (
        ATOMIC_WITH_SIBLING,
        {"stringField": "foo", "atomicArray": [{"bar": "bar"}]},
        {"stringField": "changed but ratcheted", "atomicArray": [{"bar": "bar"}]},
        [],
        [(".atomicArray[0].bar", NOT_BAZ)],
    ),
    "we can't ratchet a normal CEL expression from an uncorrelatable part of the schema whose parent nodes has changed": (  # noqa: E501
        ATOMIC_BAR,
        [{"bar": "bar"}],
        [{"bar": "bar"}, {"bar": "baz"}],
        [("[0].bar", NOT_BAZ)],
        [],
    ),
    "transition rules never ratchet for correlatable schemas": (
        TRANSITION,
        {"foo": "bar"},
        {"foo": "bar"},
        [(".foo", NOT_BAZ)],
        [],
    ),
    "typemeta fields are not ratcheted": (
        TYPEMETA,
        {"apiVersion": "v2", "kind": "Baz"},
        {"apiVersion": "v2", "kind": "Baz"},
        [(".apiVersion", 'failed rule: self == "v1"'), (".kind", 'failed rule: self == "Pod"')],
        [],
    ),
    "nested typemeta fields may still be ratcheted": (
        NESTED_TYPEMETA,
        {
            "subField": {"apiVersion": "v2", "kind": "Baz"},
            "list": [
                {"name": "entry1", "apiVersion": "v2", "kind": "Baz"},
                {"name": "entry2", "apiVersion": "v3", "kind": "Bar"},
            ],  # noqa: E501
        },
        {
            "subField": {"apiVersion": "v2", "kind": "Baz", "otherField": "newValue"},
            "list": [
                {"name": "entry1", "apiVersion": "v2", "kind": "Baz", "otherField": "newValue2"},
                {"name": "entry2", "apiVersion": "v3", "kind": "Bar", "otherField": "newValue3"},
            ],
        },
        [],
        [
            (".subField.apiVersion", 'failed rule: self == "v1"'),
            (".subField.kind", 'failed rule: self == "Pod"'),
            (".list[0].apiVersion", 'failed rule: self == "v1"'),
            (".list[0].kind", 'failed rule: self == "Pod"'),
            (".list[1].apiVersion", 'failed rule: self == "v1"'),
            (".list[1].kind", 'failed rule: self == "Pod"'),
        ],
    ),
}
COST = "the API server's CEL cost budget is not modelled"
SKIPPED_RATCHETING = {"cost budget errors are not ratcheted": COST}
RATCHETING_CASES = [  # TestRatcheting's case names, in order
    *list(RATCHETING)[:10],
    "transition rules never ratchet for correlatable schemas",
    "changing field path does not change ratcheting logic",
    "cost budget errors are not ratcheted",
    "compile errors are not ratcheted",
    "typemeta fields are not ratcheted",
    "nested typemeta fields may still be ratcheted",
]


def _rules(schema: str | dict) -> tuple[CrdRules, dict]:
    node = yaml.safe_load(schema) if isinstance(schema, str) else schema
    return CrdRules.for_schema(node), node


def test_every_ratcheting_case_is_run_or_skipped():
    run = [
        *RATCHETING,
        "changing field path does not change ratcheting logic",
        "compile errors are not ratcheted",
    ]
    assert_covered(RATCHETING_CASES, run, SKIPPED_RATCHETING)


@pytest.mark.parametrize("name", RATCHETING)
def test_ratcheting(name):
    schema, old, new, errors, warnings = RATCHETING[name]
    rules, node = _rules(schema)
    found = rules.validate_value("Test", "t", new, old, node)
    assert sorted((v.path, v.message) for v in found) == sorted(errors)
    assert sorted((v.path, v.message) for v in rules.ratcheted) == sorted(warnings)


def test_ratcheting_changing_field_path_does_not_change_ratcheting_logic():
    """The rule sits on the changed parent object: not ratcheted, whatever its fieldPath names. (The
    fieldPath itself, which moves the error to .foo upstream, is not modelled: the error stays on the
    rule's own node.)"""
    rules, node = _rules(FIELD_PATH)
    found = rules.validate_value("Test", "t", {"foo": "bar", "bar": "invalid"}, {"foo": "bar"}, node)
    assert [v.message for v in found] == ["gotta be baz"] and rules.ratcheted == []


def test_ratcheting_compile_errors_are_not_ratcheted():
    """Upstream reports a rule that does not compile on every write; here it fails the load, so it can
    neither be skipped nor ratcheted."""
    schema = {
        "type": "string",
        "x-kubernetes-validations": [{"rule": "asdausidyhASDNJm", "message": "gotta be baz"}],
    }
    with pytest.raises(RuleError, match="asdausidyhASDNJm"):
        CrdRules.for_schema(schema)


def _object_rule(rule: str) -> dict:
    """withRulePtr(objectTypePtr({"foo": stringType}), rule), optionalOldSelf set as the test sets it."""
    validation = {"rule": rule, "optionalOldSelf": True}
    return {
        "type": "object",
        "properties": {"foo": {"type": "string"}},
        "x-kubernetes-validations": [validation],
    }


def _integer_rule(rule: str) -> dict:
    return {"type": "integer", "x-kubernetes-validations": [{"rule": rule, "optionalOldSelf": True}]}


NEW_MIN = "self >= 10 || (oldSelf.hasValue() && oldSelf.value() <= self)"
INVALID_UNLESS_OLD = "self.foo == 'valid' || (oldSelf.hasValue() && oldSelf.value().foo != 'valid')"
# TestOptionalOldSelf: name -> (schema, new, old or None, fails)
OPTIONAL_OLD_SELF = {
    "allow new value if old value is null": (
        _object_rule("self.foo == 'not bar' || !oldSelf.hasValue()"),
        {"foo": "bar"},
        None,
        False,
    ),
    "block new value if old value is not null": (
        _object_rule("self.foo == 'valid' || !oldSelf.hasValue()"),
        {"foo": "invalid"},
        {"foo": "bar"},
        True,
    ),
    "allow invalid new value if old value is also invalid": (
        _object_rule(INVALID_UNLESS_OLD),
        {"foo": "invalid again"},
        {"foo": "invalid"},
        False,
    ),
    "block invalid new value if old value is valid": (
        _object_rule(INVALID_UNLESS_OLD),
        {"foo": "invalid"},
        {"foo": "valid"},
        True,
    ),
    "create: new min or allow higher than oldValue": (_integer_rule(NEW_MIN), 10, None, False),
    "block create: new min or allow higher than oldValue": (_integer_rule(NEW_MIN), 9, None, True),
    "update: new min or allow higher than oldValue": (_integer_rule(NEW_MIN), 10, 5, False),
    "ratchet update: new min or allow higher than oldValue": (_integer_rule(NEW_MIN), 9, 5, False),
    "ratchet noop update: new min or allow higher than oldValue": (_integer_rule(NEW_MIN), 5, 5, False),
    "block update: new min or allow higher than oldValue": (_integer_rule(NEW_MIN), 4, 5, True),
}
SKIPPED_OPTIONAL_OLD_SELF = {
    "allow invalid new value if old value is also invalid with chained optionals": (
        "optional field selection (`oldSelf.foo` on an optional) is not in cel-python; no vendored "
        "CRD's rule uses optionalOldSelf"
    ),
}


def test_every_optional_old_self_case_is_run_or_skipped():
    upstream = [
        *list(OPTIONAL_OLD_SELF)[:3],
        "allow invalid new value if old value is also invalid with chained optionals",
        *list(OPTIONAL_OLD_SELF)[3:],
    ]
    assert_covered(upstream, OPTIONAL_OLD_SELF, SKIPPED_OPTIONAL_OLD_SELF)


@pytest.mark.parametrize("name", OPTIONAL_OLD_SELF)
def test_optional_old_self(name):
    schema, new, old, fails = OPTIONAL_OLD_SELF[name]
    found = CrdRules.for_schema(schema).validate_value("Test", "t", new, old, schema)
    assert [v.message.startswith("failed rule") for v in found] == ([True] if fails else [])


# TestMessageExpression: name -> (message, messageExpression, the error's text); the rule is "false".
LONG = '"' + "a" * 5121 + '"'
MESSAGE_EXPRESSION = {
    "no cost error expected": ("", '"static string"', "static string"),
    "messageExpression takes precedence over message": (
        "invisible",
        '"this is messageExpression"',
        "this is messageExpression",
    ),  # noqa: E501
    "default rule message used if messageExpression does not eval to string": (
        "",
        "true",
        "failed rule: false",
    ),
    "messageExpression budget (str concat)": ("", '"str1 " + self.str', "str1 a string"),
    "runtime cost preserved if messageExpression fails during evaluation": (
        "message not messageExpression",
        '"str1 " + ["a", "b", "c", "d"][4]',
        "message not messageExpression",
    ),
    "runtime cost preserved if messageExpression fails during evaluation (no message set)": (
        "",
        '"str1 " + ["a", "b", "c", "d"][4]',
        "failed rule: false",
    ),
    "messageExpression is not allowed to generate a string with newlines": (
        "message not messageExpression",
        '"str with \\na newline"',
        "message not messageExpression",
    ),
    "messageExpression is not allowed to generate messages >5000 characters": (
        "message not messageExpression",
        LONG,
        "message not messageExpression",
    ),
    "messageExpression is not allowed to generate an empty string": (
        "message not messageExpression",
        'string("")',
        "message not messageExpression",
    ),
    "messageExpression is not allowed to generate a string with only spaces": (
        "message not messageExpression",
        'string("     ")',
        "message not messageExpression",
    ),
}
SKIPPED_MESSAGE_EXPRESSION = {
    "limit exceeded": COST,
    "per-call limit exceeded during messageExpression execution": COST,
}
MESSAGE_EXPRESSION_CASES = [
    *list(MESSAGE_EXPRESSION)[:3],
    "limit exceeded",
    *list(MESSAGE_EXPRESSION)[3:6],
    "per-call limit exceeded during messageExpression execution",
    *list(MESSAGE_EXPRESSION)[6:],
]


def test_every_message_expression_case_is_run_or_skipped():
    assert_covered(MESSAGE_EXPRESSION_CASES, MESSAGE_EXPRESSION, SKIPPED_MESSAGE_EXPRESSION)


@pytest.mark.parametrize("name", MESSAGE_EXPRESSION)
def test_message_expression(name):
    message, expression, expected = MESSAGE_EXPRESSION[name]
    rule = {"rule": "false", "messageExpression": expression, **({"message": message} if message else {})}
    schema = {"type": "object", "properties": {"str": {"type": "string"}}, "x-kubernetes-validations": [rule]}
    (violation,) = CrdRules.for_schema(schema).validate_value("Test", "t", {"str": "a string"}, None, schema)
    assert violation.message == expected


# TestValidationExpressions, its transition-rule cases: name -> (schema, new, old, rules run)
V_OBJECT = {"type": "object", "properties": {"v": {"type": "string"}}}
F_OBJECT = {"type": "object", "properties": {"f": {"type": "string"}}}
STRINGS = {"type": "array", "items": {"type": "string"}}
TRANSITION_RULES = {
    "transition rules": (
        V_OBJECT,
        {"v": "new"},
        {"v": "old"},
        ["oldSelf.v != self.v", "oldSelf.v == 'old' && self.v == 'new'"],
    ),  # noqa: E501
    "skipped transition rule for nil old primitive": (
        {"type": "string"},
        "exists",
        None,
        ["oldSelf == self"],
    ),
    "skipped transition rule for nil old array": (STRINGS, [], None, ["oldSelf == self"]),
    "skipped transition rule for nil old object": (F_OBJECT, {"f": "exists"}, None, ["oldSelf.f == self.f"]),
    "skipped transition rule for old with non-nil interface but nil value": (
        STRINGS,
        [],
        None,
        ["oldSelf == self"],
    ),
}


@pytest.mark.parametrize("name", TRANSITION_RULES)
def test_transition_rules(name):
    """Every rule holds (upstream's `valid`); with no old value, none runs at all (`expectSkipped`)."""
    node, new, old, valid = TRANSITION_RULES[name]
    schema = {**node, "x-kubernetes-validations": [{"rule": r} for r in valid]}
    rules = CrdRules.for_schema(schema)
    assert rules.validate_value("Test", "t", new, old, schema) == []
    assert len(rules.evaluations) == (len(valid) if old is not None else 0)


def test_rules_run_on_non_null_values_only():
    """validation.go validateExpressions: "We only validate non-null values" (a null optional field)."""
    schema = {
        "type": "object",
        "properties": {
            "f": {"type": "string", "nullable": True, "x-kubernetes-validations": [{"rule": "self == 'x'"}]}
        },
    }
    rules = CrdRules.for_schema(schema)
    assert rules.validate_value("Test", "t", {"f": None}, None, schema) == [] and rules.evaluations == []
