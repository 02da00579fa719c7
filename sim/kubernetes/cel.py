"""The CEL rules (`x-kubernetes-validations`) of the upstream CRDs in upstream/crds, evaluated
offline with cel-python the way the API server evaluates them on a create or an update.

What the API server does, and this module mirrors (k8s.io/apiextensions-apiserver
pkg/apiserver/schema/cel/validation.go and k8s.io/apiserver pkg/cel/common/equality.go):
- the object is defaulted from the schema first (`default:`; pkg/apiserver/schema/defaulting/algorithm.go);
- a rule runs on every value present at its schema node, with `self` bound to that value (list items,
  map values and object properties alike); an absent optional field runs none of its rules;
- a transition rule (one that names `oldSelf`) runs only on an update and only where an old value
  correlates: object properties and map values by key, `x-kubernetes-list-type: map` items by their
  map keys; items of atomic lists and sets never correlate. With `optionalOldSelf: true` it also runs
  without an old value, `oldSelf` then being an optional (`hasValue()`, `value()`, `orValue()`);
- rules run on non-null values only; a rule that evaluates to false, or fails to evaluate, rejects the
  request with its `messageExpression` (falling back to `message` if that fails or gives a blank,
  multi-line or over-long string), its `message`, or "failed rule: <rule>";
- on an update, a failing rule that does not name oldSelf is ratcheted (a warning, not a rejection) where
  the value, or its nearest correlatable ancestor, is unchanged (CRDValidationRatcheting, GA in 1.33).
Functions beyond cel-python's standard set come from the Kubernetes CEL libraries the rules call
(`find` from the regex library, `split` from the strings extension); a rule that calls anything else
fails when the rules are loaded, so no rule is ever skipped silently.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import celpy
import lark
import re2
from celpy import celtypes
from celpy.evaluation import CELEvalError, base_functions

from sim import contracts

CRD_DIR = contracts.CRDS
MISSING: Any = object()
MACROS = {"has", "all", "exists", "exists_one", "map", "filter"}
VARIABLES = {"self", "oldSelf"}


def _find(text: celtypes.StringType, pattern: celtypes.StringType) -> celtypes.StringType:
    """Kubernetes regex library: the first match of `pattern` in `text`, or ''."""
    match = re2.search(str(pattern), str(text))
    return celtypes.StringType(match.group(0) if match else "")


def _split(
    text: celtypes.StringType, sep: celtypes.StringType, limit: celtypes.IntType | None = None
) -> celtypes.ListType:
    """cel-go strings extension: Go's strings.SplitN (limit < 0: all; 0: none; n: at most n parts)."""
    n = -1 if limit is None else int(limit)
    if n == 0:
        return celtypes.ListType([])
    s, d = str(text), str(sep)
    parts = (list(s) if d == "" else s.split(d)) if n < 0 else _split_n(s, d, n)
    return celtypes.ListType([celtypes.StringType(p) for p in parts])


def _split_n(s: str, sep: str, n: int) -> list[str]:
    if sep == "":
        return [*s[: n - 1], s[n - 1 :]] if len(s) > n else list(s)
    return s.split(sep, n - 1)


@dataclass(frozen=True)
class CelOptional:
    """CEL's optional type, as `oldSelf` under `optionalOldSelf: true` (cel-python 0.5 has none)."""

    value: Any = MISSING


def _has_value(opt: CelOptional) -> celtypes.BoolType:
    return celtypes.BoolType(opt.value is not MISSING)


def _value(opt: CelOptional) -> Any:
    # Returned, not raised: CEL's `||` and `&&` absorb an error when the other side decides.
    return CELEvalError("optional.none() dereference") if opt.value is MISSING else opt.value


def _or_value(opt: CelOptional, default: Any) -> Any:
    return default if opt.value is MISSING else opt.value


K8S_FUNCTIONS = {
    "find": _find,
    "split": _split,
    "hasValue": _has_value,
    "value": _value,
    "orValue": _or_value,
}


class RuleError(Exception):
    """A rule this evaluator cannot compile or has no function for: fails the caller, never skipped."""


@dataclass(frozen=True)
class Rule:
    crd: str
    kind: str
    version: str
    path: str  # the schema node, e.g. ".spec.trainer", ".spec.runtimePatches[]"
    rule: str
    message: str | None
    message_expression: str | None
    optional_old_self: bool
    transition: bool
    program: Any = field(compare=False, repr=False)
    message_program: Any = field(compare=False, repr=False)

    def __str__(self) -> str:
        return f"{self.kind} {self.version} {self.path or '<root>'}: {self.rule}"


@dataclass(frozen=True)
class Violation:
    kind: str
    name: str
    path: str  # the value's path in the object, e.g. ".spec.trainer"
    rule: Rule
    message: str

    def __str__(self) -> str:
        return f"{self.kind}/{self.name} {self.path or '<root>'}: {self.message} (rule: {self.rule.rule})"


@dataclass(frozen=True)
class Evaluation:
    """One rule run on one value (what was checked, for coverage assertions)."""

    kind: str
    name: str
    path: str
    rule: Rule
    ok: bool


def _calls(tree: lark.Tree) -> Iterator[tuple[str, str]]:
    """(node kind, name) of every function call and identifier in a parsed rule."""
    for node in tree.iter_subtrees():
        if node.data in ("member_dot_arg", "ident_arg", "dot_ident_arg", "ident"):
            token = next(c for c in node.children if isinstance(c, lark.Token) and c.type == "IDENT")
            yield node.data, token.value


def _compile(text: str, where: str) -> tuple[Any, bool]:
    """The runnable program and whether it names oldSelf. Raises RuleError for anything unsupported."""
    try:
        return _compiled(text)
    except RuleError as err:
        raise RuleError(f"{where}: {err}") from err.__cause__


@functools.cache
def _compiled(text: str) -> tuple[Any, bool]:
    """_compile's result, once per process for each rule text: a rule recurs in each served version of its
    CRD and in each CrdRules (about 40% of the rules repeat one before them; 0.85 s for all of them). A
    program keeps no state between evaluations (cel-python's runner makes a new evaluator for each)."""
    env = celpy.Environment()
    try:
        tree = env.compile(text)
    except Exception as err:  # CELParseError and lark errors alike
        raise RuleError(f"cannot compile {text!r}: {err}") from err
    known = MACROS | set(base_functions) | set(K8S_FUNCTIONS)
    comprehension_vars = _comprehension_variables(tree)
    transition = False
    for kind, name in _calls(tree):
        if kind == "ident":
            transition |= name == "oldSelf"
            if name not in VARIABLES | comprehension_vars | {"true", "false", "null"}:
                raise RuleError(f"{text!r} reads an unknown variable {name!r}")
        elif name not in known:
            raise RuleError(f"{text!r} calls {name!r}, which this evaluator does not implement")
    functions: Any = K8S_FUNCTIONS  # cel-python's annotation lists only its own value types
    return env.program(tree, functions=functions), transition


def _comprehension_variables(tree: lark.Tree) -> set[str]:
    """The iteration variables of all/exists/exists_one/map/filter (their first argument)."""
    names = set()
    for node in tree.iter_subtrees():
        if node.data != "member_dot_arg":
            continue
        method = node.children[1]
        if method in MACROS and len(node.children) > 2 and node.children[2] is not None:
            first = node.children[2].children[0]
            names |= {t.value for t in first.scan_values(lambda v: isinstance(v, lark.Token))}
    return names


class CrdRules:
    """Every CRD in `crd_dir` (or the given `documents`: (file, CRD)), its schemas indexed by
    (apiVersion, kind), every rule compiled."""

    def __init__(self, crd_dir: Path = CRD_DIR, documents: Iterable[tuple[str, dict]] | None = None):
        if documents is None and not crd_dir.is_dir():
            raise RuleError(f"{crd_dir} is missing: the CEL checks need the upstream CRDs")
        self.schemas: dict[tuple[str, str], dict] = {}
        self.rules: list[Rule] = []
        self._by_node: dict[int, list[Rule]] = {}
        self.evaluations: list[Evaluation] = []
        # Failures the API server turns into warnings: the value is unchanged from the old object's.
        self.ratcheted: list[Violation] = []
        # Parsed once per process, shared read-only.
        for file, crd in contracts.crd_documents(crd_dir) if documents is None else documents:
            self._load(file, crd)

    @classmethod
    def for_schema(cls, schema: dict, kind: str = "Test") -> CrdRules:
        """The rules of one openAPIV3Schema, as a CRD of group `test` version v1 would hold them."""
        names = {"kind": kind}
        crd = {
            "spec": {
                "group": "test",
                "names": names,
                "versions": [{"name": "v1", "schema": {"openAPIV3Schema": schema}}],
            }
        }
        return cls(documents=[("test", crd)])

    def _load(self, file: str, crd: dict) -> None:
        group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
        for version in crd["spec"]["versions"]:
            schema = version["schema"]["openAPIV3Schema"]
            self.schemas[(f"{group}/{version['name']}", kind)] = schema
            for path, node in _schema_nodes(schema, ""):
                if node.get("x-kubernetes-validations") and id(node) in self._by_node:
                    continue  # one node reached twice (a YAML alias): its rules run once per value
                for raw in node.get("x-kubernetes-validations", []):
                    self._add(file, kind, version["name"], path, node, raw)

    def _add(self, file: str, kind: str, version: str, path: str, node: dict, raw: dict) -> None:
        where = f"{file} {version} {path or '<root>'}"
        program, transition = _compile(raw["rule"], where)
        message_program = None
        if raw.get("messageExpression"):
            message_program, _ = _compile(raw["messageExpression"], where)
        rule = Rule(
            file,
            kind,
            version,
            path,
            raw["rule"],
            raw.get("message"),
            raw.get("messageExpression"),
            bool(raw.get("optionalOldSelf")),
            transition,
            program,
            message_program,
        )
        self.rules.append(rule)
        self._by_node.setdefault(id(node), []).append(rule)

    def schema_for(self, obj: dict) -> dict | None:
        return self.schemas.get((obj.get("apiVersion", ""), obj.get("kind", "")))

    def validate(self, obj: dict, old: dict | None = None) -> list[Violation]:
        """The violations the API server reports for creating `obj` (old None) or updating old -> obj."""
        schema = self.schema_for(obj)
        if schema is None:
            raise RuleError(f"no CRD for {obj.get('apiVersion')} {obj.get('kind')} in the upstream CRDs")
        new = default(copy.deepcopy(obj), schema)
        prior = None if old is None else default(copy.deepcopy(old), schema)
        name = obj.get("metadata", {}).get("name", "?")
        return self.validate_value(obj["kind"], name, new, prior, schema)

    def validate_value(self, kind: str, name: str, value: Any, old: Any, schema: dict) -> list[Violation]:
        """The violations of `value` under `schema` (one of this instance's schema nodes), `old` being the
        value it replaces (None: a create). Defaults are not applied here."""
        ratchet = _Ratchet() if old is None else _Ratchet((value, old))
        prior = MISSING if old is None else old
        return list(self._walk(kind, name, value, prior, schema, "", ratchet))

    def _walk(
        self, kind: str, name: str, value: Any, old: Any, node: dict, path: str, ratchet: _Ratchet
    ) -> Iterator[Violation]:
        if value is None:
            return  # validation.go: rules run on non-null values only
        for rule in self._by_node.get(id(node), []):
            violation = self._run(kind, name, rule, value, old, path)
            if violation is not None and not rule.transition and ratchet.unchanged():
                self.ratcheted.append(violation)  # CRDValidationRatcheting (GA in 1.33): a warning
            elif violation is not None:
                yield violation
        if isinstance(value, dict):
            props = node.get("properties") or {}
            extra = node.get("additionalProperties")
            for key, child in value.items():
                sub = props.get(key, extra if isinstance(extra, dict) else None)
                if sub is not None:
                    prior = old.get(key, MISSING) if isinstance(old, dict) else MISSING
                    yield from self._walk(kind, name, child, prior, sub, f"{path}.{key}", ratchet.key(key))
        elif isinstance(value, list) and isinstance(node.get("items"), dict):
            for i, item in enumerate(value):
                prior = _correlate(node, old, item)
                yield from self._walk(
                    kind, name, item, prior, node["items"], f"{path}[{i}]", ratchet.item(item, prior)
                )

    def _run(self, kind: str, name: str, rule: Rule, value: Any, old: Any, path: str) -> Violation | None:
        if rule.transition and old is MISSING and not rule.optional_old_self:
            return None  # a create, or no correlated old value: the API server does not run it
        activation: dict[str, Any] = {"self": celpy.json_to_cel(value)}
        if rule.transition:
            prior = MISSING if old is MISSING else celpy.json_to_cel(old)
            activation["oldSelf"] = CelOptional(prior) if rule.optional_old_self else prior
        error: Exception | str | None = None
        try:
            result = rule.program.evaluate(activation)
        except (CELEvalError, TypeError, ValueError, KeyError) as err:
            result, error = None, err
        if error is None and not isinstance(result, celtypes.BoolType):
            error = f"rule returned {type(result).__name__}, not a bool"
        ok = error is None and bool(result)
        self.evaluations.append(Evaluation(kind, name, path, rule, ok))
        if ok:
            return None
        message = _message(rule, activation)
        if error is not None:
            message = f"{message} (evaluation error: {error})"
        return Violation(kind, name, path, rule, message)


MAX_MESSAGE = 5120  # validation.go evalMessageExpression: a longer message falls back


def _message(rule: Rule, activation: dict[str, Any]) -> str:
    """The messageExpression's string, unless it fails, is not a string, is blank, has a line break or is
    longer than MAX_MESSAGE (validation.go evalMessageExpression); then message, or "failed rule: <rule>"."""
    if rule.message_program is not None:
        try:
            text = rule.message_program.evaluate(activation)
        except (CELEvalError, TypeError, ValueError, KeyError):
            text = None
        if isinstance(text, str) and text.strip() and "\n" not in text and len(text) <= MAX_MESSAGE:
            return str(text)  # `+` on strings gives a plain str
    return rule.message or f"failed rule: {rule.rule}"


@dataclass(frozen=True)
class _Ratchet:
    """Where a value sits for ratcheting (validation.go ratchetingOptions, common/equality.go
    CorrelatedObject): the (new, old) pair of the node when it correlates with an old value, else the
    nearest ancestor's that does. A failure is ratcheted when that pair is unchanged."""

    current: tuple[Any, Any] | None = None
    parent: tuple[Any, Any] | None = None

    def unchanged(self) -> bool:
        pair = self.current if self.current is not None else self.parent
        return pair is not None and pair[0] == pair[1]

    def key(self, field: str) -> _Ratchet:
        if self.current is None:
            return self
        if self.parent is None and field in ("apiVersion", "kind"):
            return _Ratchet()  # the root's type fields are never ratcheted
        new, old = self.current
        both = isinstance(old, dict) and field in old and field in new
        return _Ratchet((new[field], old[field]) if both else None, self.current)

    def item(self, new: Any, old: Any) -> _Ratchet:
        """A list item: it correlates only in a map list (`old` is MISSING otherwise)."""
        if self.current is None:
            return self
        return _Ratchet(None if old is MISSING else (new, old), self.current)


def _correlate(node: dict, old: Any, item: Any) -> Any:
    """The old item a new list item correlates with (map lists only, by their map keys)."""
    if not isinstance(old, list) or node.get("x-kubernetes-list-type") != "map" or not isinstance(item, dict):
        return MISSING
    keys = node.get("x-kubernetes-list-map-keys") or []
    for candidate in old:
        if isinstance(candidate, dict) and all(candidate.get(k) == item.get(k) for k in keys):
            return candidate
    return MISSING


def _schema_nodes(node: dict, path: str) -> Iterator[tuple[str, dict]]:
    yield path, node
    for key, child in (node.get("properties") or {}).items():
        yield from _schema_nodes(child, f"{path}.{key}")
    if isinstance(node.get("items"), dict):
        yield from _schema_nodes(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        yield from _schema_nodes(node["additionalProperties"], f"{path}{{}}")


def default(value: Any, node: dict) -> Any:
    """Apply the schema's defaults in place, as the API server does before validating: a missing
    property with a default gets it, then every present value is defaulted by its own schema."""
    if isinstance(value, dict):
        props = node.get("properties") or {}
        for key, child in props.items():
            if key not in value and "default" in child:
                value[key] = copy.deepcopy(child["default"])
        extra = node.get("additionalProperties")
        for key, child in value.items():
            sub = props.get(key, extra if isinstance(extra, dict) else None)
            if sub is not None:
                default(child, sub)
    elif isinstance(value, list) and isinstance(node.get("items"), dict):
        for item in value:
            default(item, node["items"])
    return value
