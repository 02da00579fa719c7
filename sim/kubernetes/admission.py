"""ValidatingAdmissionPolicies as the API server applies them to one request, offline (cel-python for the
CEL), for the platform's own policies (infra/addons/system_admission.py, infra/addons/gpu_node_check.py).

What the API server does, and this model mirrors (kubernetes/kubernetes staging/src/k8s.io/apiserver
pkg/admission/plugin/policy/matching/matching.go, pkg/admission/plugin/webhook/predicates/rules/rules.go,
pkg/admission/plugin/webhook/predicates/namespace/matcher.go, pkg/admission/plugin/policy/validating/
validator.go):
- a policy applies when a binding names it and its matchConstraints match: a resourceRule whose
  apiGroups, apiVersions, operations and resources (`resource/subresource`, `*`, `*/sub`, `resource/*`)
  hold the request's, and a namespaceSelector that the request's namespace's labels satisfy (every
  namespace carries `kubernetes.io/metadata.name`); cluster-scoped requests are matched by the rules only;
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


def _listed(values: Sequence[str], value: str) -> bool:
    return "*" in values or value in values


def _resource_matches(resources: Sequence[str], resource: str, subresource: str) -> bool:
    """rules.go ruleMatcher.resource: `*` matches every resource but no subresource; `*/*` everything."""
    wanted = f"{resource}/{subresource}" if subresource else resource
    for r in resources:
        if r in ("*/*", wanted):
            return True
        if r == "*" and not subresource:
            return True
        base, _, sub = r.partition("/")
        if sub and (
            (base == "*" and sub == subresource) or (base == resource and sub == "*" and subresource)
        ):
            return True
    return False


def _rule_matches(rule: Mapping[str, Any], request: Request) -> bool:
    return (
        _listed(rule.get("apiGroups", []), request.group)
        and _listed(rule.get("apiVersions", []), request.version)
        and _listed(rule.get("operations", []), request.operation)
        and _resource_matches(rule.get("resources", []), request.resource, request.subresource)
    )


def _selector_matches(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """A label selector (matcher.go: an empty or missing selector matches every namespace)."""
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


def matches(policy: Mapping[str, Any], request: Request) -> bool:
    """Whether a policy's matchConstraints select the request."""
    constraints = policy["spec"].get("matchConstraints") or {}
    if not any(_rule_matches(r, request) for r in constraints.get("resourceRules") or []):
        return False
    if any(_rule_matches(r, request) for r in constraints.get("excludeResourceRules") or []):
        return False
    if request.namespace:
        labels = {NAME_LABEL: request.namespace, **(request.namespace_labels or {})}
        return _selector_matches(constraints.get("namespaceSelector"), labels)
    return True


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
