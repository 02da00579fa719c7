"""ValidatingAdmissionPolicies as the API server applies them to one request, offline (cel-python for the
CEL), for the platform's own policies (infra/addons/system_admission.py, infra/addons/gpu_node_check.py).

What the API server does, and this model mirrors (kubernetes/kubernetes staging/src/k8s.io/apiserver
pkg/admission/plugin/policy/matching/matching.go, pkg/admission/plugin/webhook/predicates/rules/rules.go,
pkg/admission/plugin/webhook/predicates/namespace/matcher.go, pkg/admission/plugin/policy/validating/
validator.go):
- a policy applies when a binding names it and its matchConstraints match: a resourceRule whose scope,
  apiGroups, apiVersions, operations and resources (`resource/subresource`, `*`, `*/sub`, `resource/*`)
  hold the request's (and whose resourceNames, if any, name its object), none of the
  excludeResourceRules, and a namespaceSelector that the request's namespace's labels satisfy (every
  namespace carries `kubernetes.io/metadata.name`; a namespace's own create or update is judged by the
  labels it sends); other cluster-scoped requests are matched by the rules only. Rules are matched as
  matchPolicy Exact: a request is not converted to an equivalent group or version, and objectSelector
  is not read;
- then every matchCondition must hold (one that fails to evaluate counts as failurePolicy says);
- `variables` are bound (here eagerly) as `variables.<name>`; every validation that is false, or fails
  to evaluate under failurePolicy Fail, denies the request with its message.
`object` is the object as sent (CREATE, UPDATE) and `oldObject` the stored one (UPDATE, DELETE).
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import celpy
from celpy import celtypes
from celpy.evaluation import CELEvalError

NAME_LABEL = "kubernetes.io/metadata.name"


@dataclass(frozen=True)
class Request:
    """One admission request: what the API server hands a policy as `request`, `object`, `oldObject`."""

    operation: str  # CREATE | UPDATE | DELETE | CONNECT
    group: str
    version: str
    resource: str
    username: str
    namespace: str = ""
    name: str = ""
    subresource: str = ""
    groups: tuple[str, ...] = ()
    extra: Mapping[str, Sequence[str]] = field(default_factory=dict)
    object: Mapping[str, Any] | None = None
    old_object: Mapping[str, Any] | None = None
    namespace_labels: Mapping[str, str] | None = None

    def as_cel(self) -> dict[str, Any]:
        return {
            "operation": self.operation,
            "name": self.name,
            "namespace": self.namespace,
            "resource": {"group": self.group, "version": self.version, "resource": self.resource},
            "subResource": self.subresource,
            "userInfo": {"username": self.username, "groups": list(self.groups), "extra": dict(self.extra)},
        }


def _exact_or_wildcard(items: Sequence[str], requested: str) -> bool:
    return "*" in items or requested in items


def _scope(rule: Mapping[str, Any], request: Request) -> bool:
    """A Namespace object is cluster-scoped even when its request names it as the namespace."""
    scope = rule.get("scope", "*")
    is_namespace = (request.group, request.version, request.resource) == ("", "v1", "namespaces")
    if scope == "*":
        return True
    if scope == "Namespaced":
        return not is_namespace and bool(request.namespace)
    if scope == "Cluster":
        return is_namespace or not request.namespace
    return False


def _operation(rule: Mapping[str, Any], request: Request) -> bool:
    return _exact_or_wildcard(rule.get("operations") or [], request.operation)


def _group(rule: Mapping[str, Any], request: Request) -> bool:
    return _exact_or_wildcard(rule.get("apiGroups") or [], request.group)


def _version(rule: Mapping[str, Any], request: Request) -> bool:
    return _exact_or_wildcard(rule.get("apiVersions") or [], request.version)


def _resource(rule: Mapping[str, Any], request: Request) -> bool:
    """`r` is the resource alone, `r/*` the resource and every subresource, `*` every resource but no
    subresource, `*/s` subresource s of every resource, `*/*` everything."""
    for entry in rule.get("resources") or []:
        resource, _, subresource = entry.partition("/")
        if resource in ("*", request.resource) and subresource in ("*", request.subresource):
            return True
    return False


# rules.go Matcher: a request matches a rule when every part does.
RULE_PARTS = {
    "scope": _scope,
    "operation": _operation,
    "group": _group,
    "version": _version,
    "resource": _resource,
}


def _rules_match(rules: Sequence[Mapping[str, Any]], request: Request) -> bool:
    """matching.go matchesResourceRules with matchPolicy Exact: a rule that matches, and names the request's
    object among its resourceNames when it lists any."""
    for rule in rules:
        if all(part(rule, request) for part in RULE_PARTS.values()):
            names = rule.get("resourceNames") or []
            if not names or request.name in names:
                return True
    return False


def namespace_labels(request: Request) -> dict[str, str]:
    """matcher.go GetNamespaceLabels: a namespace's own create or update is judged by the labels it sends,
    any other request by its namespace's stored labels (the request's `namespace_labels`). Both carry
    `kubernetes.io/metadata.name`, which the API server sets on every namespace."""
    if (
        request.resource == "namespaces"
        and not request.subresource
        and request.operation in ("CREATE", "UPDATE")
    ):
        metadata = (request.object or {}).get("metadata") or {}
        return {NAME_LABEL: metadata.get("name", request.name), **(metadata.get("labels") or {})}
    return {NAME_LABEL: request.namespace, **(request.namespace_labels or {})}


def _selector_matches(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """A label selector (an empty or missing one matches every namespace)."""
    if not selector:
        return True
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for e in selector.get("matchExpressions") or []:
        key, op, values = e["key"], e["operator"], e.get("values") or []
        present = key in labels
        if op == "In" and not (present and labels[key] in values):
            return False
        if op == "NotIn" and present and labels[key] in values:
            return False
        if op == "Exists" and not present:
            return False
        if op == "DoesNotExist" and present:
            return False
    return True


def namespace_selector_matches(selector: Mapping[str, Any] | None, request: Request) -> bool:
    """matcher.go MatchNamespaceSelector: a cluster-scoped request other than a namespace's own is never
    exempted; any other is judged by its namespace's labels."""
    if not request.namespace and request.resource != "namespaces":
        return True
    return _selector_matches(selector, namespace_labels(request))


def matches(policy: Mapping[str, Any], request: Request) -> bool:
    """Whether a policy's matchConstraints select the request (no resourceRules: every request)."""
    constraints = policy["spec"].get("matchConstraints") or {}
    if not namespace_selector_matches(constraints.get("namespaceSelector"), request):
        return False
    if _rules_match(constraints.get("excludeResourceRules") or [], request):
        return False
    rules = constraints.get("resourceRules") or []
    return not rules or _rules_match(rules, request)


class _Evaluator:
    def __init__(self, activation: dict[str, Any]):
        self.env = celpy.Environment()
        self.activation = activation

    def __call__(self, expression: str) -> Any:
        program = self.env.program(self.env.compile(expression))
        result = program.evaluate(self.activation)
        if isinstance(result, CELEvalError):
            raise result
        return result


def denials(policy: Mapping[str, Any], request: Request) -> list[str]:
    """The messages with which `policy` (bound with validationActions Deny) refuses the request; [] when it
    admits it or does not apply."""
    if not matches(policy, request):
        return []
    spec = policy["spec"]
    fail = spec.get("failurePolicy", "Fail") == "Fail"
    values: dict[str, Any] = {
        "object": dict(request.object) if request.object is not None else None,
        "oldObject": dict(request.old_object) if request.old_object is not None else None,
        "request": request.as_cel(),
    }
    activation: dict[str, Any] = {k: celpy.json_to_cel(v) for k, v in values.items()}
    evaluate = _Evaluator(activation)
    try:
        if not all(bool(evaluate(c["expression"])) for c in spec.get("matchConditions") or []):
            return []
        variables: dict[celtypes.StringType, Any] = {}
        for v in spec.get("variables") or []:
            activation["variables"] = celtypes.MapType(variables)
            variables[celtypes.StringType(v["name"])] = evaluate(v["expression"])
        activation["variables"] = celtypes.MapType(variables)
    except Exception as err:  # noqa: BLE001 (any evaluation error counts as failurePolicy says)
        return [f"policy {policy['metadata']['name']} failed to evaluate: {err}"] if fail else []
    found = []
    for v in spec.get("validations") or []:
        try:
            held = bool(evaluate(v["expression"]))
        except Exception as err:  # noqa: BLE001
            if fail:
                found.append(f"{v.get('message', 'failed to evaluate')}: {err}")
            continue
        if not held:
            message = v.get("message")
            if "messageExpression" in v:
                # A messageExpression that fails leaves the static message, as upstream.
                with contextlib.suppress(Exception):
                    message = str(evaluate(v["messageExpression"]))
            found.append(message or f"failed expression: {v['expression']}")
    return found


def refusals(objects: Sequence[Mapping[str, Any]], request: Request) -> list[str]:
    """What the bound policies among `objects` say about the request ([]: admitted)."""
    bound = {
        o["spec"]["policyName"]
        for o in objects
        if o.get("kind") == "ValidatingAdmissionPolicyBinding"
        and "Deny" in o["spec"].get("validationActions", [])
    }
    return [
        message
        for o in objects
        if o.get("kind") == "ValidatingAdmissionPolicy" and o["metadata"]["name"] in bound
        for message in denials(o, request)
    ]
