"""The rule model every policy is written in, free of the Pulumi engine.

A rule is a plain function over (resource type, inputs, stack facts) that returns violation messages,
plus the metadata CrossGuard shows (description, remediation, enforcement level, severity). Tests call
rules directly on synthesized resources; `policy.pack` wraps the same rules as pulumi-policy policies.
Inputs may be pulumi-policy's read-only proxies, so checks only use the Mapping / Sequence protocols.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from infra.config import stack_files
from infra.config.environment import is_prod

Level = Literal["mandatory", "advisory"]
Severity = Literal["low", "medium", "high", "critical"]
# Which stacks a rule runs in: the "advisory in prod" rules come as a non-prod + prod pair.
Scope = Literal["all", "prod", "non-prod"]

REPO = Path(__file__).resolve().parents[1]


@dataclass(frozen=True, kw_only=True)
class Resource:
    """One resource as the engine (or `infra synth`) shows it. `deps` maps an input name to the names
    of the resources it was computed from, where known (the engine knows; synth output may not)."""

    type: str
    name: str
    inputs: Mapping[str, Any]
    deps: Mapping[str, Sequence[str]] | None = None


@dataclass(frozen=True, kw_only=True)
class Rule:
    name: str
    description: str
    remediation: str
    level: Level
    severity: Severity
    # Exact type tokens, or prefixes ending in ":" / "/" (e.g. "kubernetes:").
    types: tuple[str, ...]
    check: Callable[[str, Mapping[str, Any]], Iterable[str]]
    scope: Scope = "all"
    # The level outside a real engine (offline synth of the committed example stacks), where set.
    offline_level: Level | None = None

    def applies_to(self, type_: str, prod: bool) -> bool:
        if not in_scope(self.scope, prod):
            return False
        return any(type_ == t or (t[-1] in ":/" and type_.startswith(t)) for t in self.types)

    def violations(self, type_: str, inputs: Mapping[str, Any], prod: bool = False) -> list[str]:
        return list(self.check(type_, inputs)) if self.applies_to(type_, prod) else []


@dataclass(frozen=True, kw_only=True)
class StackRule:
    """A rule over all resources of a stack (relations such as "every bucket has a versioning
    resource"). `check` returns (resource name or None, message) pairs."""

    name: str
    description: str
    remediation: str
    level: Level
    severity: Severity
    check: Callable[[Sequence[Resource]], Iterable[tuple[str | None, str]]]
    scope: Scope = "all"


@dataclass(frozen=True)
class Finding:
    rule: str
    level: Level
    resource_type: str
    resource_name: str | None
    message: str

    def __str__(self) -> str:
        return f"[{self.level}] {self.rule}: {self.resource_type} {self.resource_name}: {self.message}"


def in_scope(scope: Scope, prod: bool) -> bool:
    return scope == "all" or (scope == "prod") == prod


def stack_config(stack: str) -> dict[str, Any]:
    """The `config:` mapping of the committed Pulumi.<stack>.yaml (what offline runs judge a stack by)."""
    path = stack_files.stack_file(REPO, stack)
    return stack_files.read_config(path) if path.exists() else {}


def stack_is_prod(stack: str) -> bool:
    """Offline (scan, tests): whether a committed stack is prod, by the rule the program and the pack
    use (infra/config/environment.py: its config's mlops-eks:environment, prod when unset)."""
    return is_prod(stack_config(stack))


def evaluate(
    resources: Iterable[Resource],
    rules: Sequence[Rule],
    stack_rules: Sequence[StackRule] = (),
    *,
    prod: bool = False,
    engine: bool = False,
) -> list[Finding]:
    """Run every rule over every resource (and the stack rules over all of them). Offline (`engine`
    False) a rule with an `offline_level` reports at that level."""
    resources = list(resources)
    findings = [
        Finding(
            rule.name, rule.level if engine else rule.offline_level or rule.level, r.type, r.name, message
        )
        for r in resources
        for rule in rules
        for message in rule.violations(r.type, r.inputs, prod)
    ]
    by_name = {r.name: r.type for r in resources}
    for rule in stack_rules:
        if not in_scope(rule.scope, prod):
            continue
        for name, message in rule.check(resources):
            findings.append(Finding(rule.name, rule.level, by_name.get(name or "", "stack"), name, message))
    return findings


# Helpers for the checks.


def as_list(value: Any) -> list[Any]:
    """AWS JSON allows a single value where a list is meant ("Action": "s3:*")."""
    if value is None:
        return []
    if isinstance(value, str | Mapping):
        return [value]
    if isinstance(value, Sequence):
        return list(value)
    return [value]


def dig(obj: Any, *path: str | int, default: Any = None) -> Any:
    for key in path:
        if isinstance(key, int):
            if not isinstance(obj, Sequence) or isinstance(obj, str) or len(obj) <= key:
                return default
            obj = obj[key]
        else:
            if not isinstance(obj, Mapping) or key not in obj:
                return default
            obj = obj[key]
    return default if obj is None else obj


def policy_document(value: Any) -> Mapping[str, Any] | None:
    """An IAM / resource policy as a dict, whether given as a JSON string or an object."""
    if isinstance(value, str):
        try:
            doc = json.loads(value)
        except json.JSONDecodeError:
            return None
        return doc if isinstance(doc, Mapping) else None
    return value if isinstance(value, Mapping) else None


# How the Pulumi engine passes a value not known until apply (pulumi/sdk/python/lib/pulumi/runtime/rpc.py
# UNKNOWN): a preview's policy document may be this; it is judged at `up`, not refused here.
UNKNOWN = "04da6b54-80e4-46f7-96ec-b56ff0331ba9"


def known(value: Any) -> Any:
    """A plain copy of `value` without what a preview does not know yet: pulumi-policy's proxies raise
    when a rule reads an unknown value, which stops the whole policy for that resource, so a rule that
    walks every value (e.g. for placeholders) reads this copy and judges what is known."""
    return _known_copy()(value)


@functools.cache
def _known_copy() -> Callable[[Any], Any]:
    """known(): a proxy's items read from what it wraps, not one by one through the proxy, which raises for
    exactly those items that pulumi-policy's `_is_unknown` names (the stack rules copy every resource's
    inputs, rule after rule)."""
    from pulumi_policy.proxy import _DictProxy, _is_unknown, _ListProxy

    proxies = (_DictProxy, _ListProxy)

    def item(value: Any) -> Any:
        if isinstance(value, proxies):
            return copy(value)
        return UNKNOWN if _is_unknown(value) else value

    def copy(value: Any) -> Any:
        wrapped = value["__target"]  # the proxy's items: plain values and proxies of nested ones
        if isinstance(value, _DictProxy):
            return {k: item(v) for k, v in wrapped.items()}
        return [item(v) for v in wrapped]

    return lambda value: copy(value) if isinstance(value, proxies) else value  # plain values: no unknowns


def unparsable_policy(value: Any) -> str | None:
    """Why a policy given as a string is not a JSON object (None when it is one, or is not a string):
    policy_document() reads such a document as no statements, which no check may take as a pass."""
    if not isinstance(value, str) or value == UNKNOWN:
        return None
    try:
        doc = json.loads(value)
    except json.JSONDecodeError as err:
        return f"policy document is not valid JSON ({err.msg} at {err.pos}): its statements cannot be checked"
    if not isinstance(doc, Mapping):
        kind = type(doc).__name__
        return f"policy document is a JSON {kind}, not an object: its statements cannot be checked"
    return None


def statements(doc: Mapping[str, Any] | None) -> list[Mapping[str, Any]]:
    if doc is None:
        return []
    return [s for s in as_list(doc.get("Statement")) if isinstance(s, Mapping)]


def from_synth(records: Iterable[Mapping[str, Any]]) -> list[Resource]:
    """Resources from `python -m infra synth --json` records ({"type", "name", "parent", "inputs", "deps"}),
    with their property dependencies as the engine hands them to stack rules."""
    return [
        Resource(type=r["type"], name=r["name"], inputs=r["inputs"], deps=r.get("deps") or None)
        for r in records
    ]
