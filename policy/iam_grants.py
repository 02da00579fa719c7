"""What a set of IAM statements grants, read as IAM reads them (policy/iam_semantics.py). The rules hand
this every statement a principal holds (its inline, attached and AWS managed policies together), so an
escalation path split over two policies, or Resource patterns that only together name every role, count
as the whole they make.

- Escalations: every IAM action, iam:PassRole on every role, or all the actions of a privilege
  escalation path (cloudsplaining's list) on every resource. Conditions do not narrow them: none stops a
  principal from escalating through the resources it may use.
- Exposures: data reads and permissions management on every resource. A data read is every Read-level
  action (IAM's action database) on a resource type that holds data, the types cloudsplaining's data
  exfiltration actions read (S3 objects, SSM parameters, Secrets Manager secrets): s3:GetObjectVersion
  and ssm:GetParameterHistory as much as s3:GetObject. A tag condition (aws:ResourceTag/...) narrows a
  statement only when the holder cannot set that tag itself (no Tagging-level action of the service on
  every resource without a condition on the tag keys).
- Self-modification: permissions management on the holder itself (PutRolePolicy or AttachRolePolicy on
  its own role) or on a managed policy it holds (CreatePolicyVersion, SetDefaultPolicyVersion): it may
  grant itself anything.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from cloudsplaining.shared.constants import PRIVILEGE_ESCALATION_METHODS, READ_ONLY_DATA_EXFILTRATION_ACTIONS

from policy import globs
from policy.core import as_list
from policy.iam_semantics import (
    _privilege,
    access_level,
    all_actions,
    arn_formats,
    conditions,
    format_glob,
    granted,
    is_allow,
    on_every_resource,
    pinned_by,
    reaches_every,
    service_actions,
)

# Privilege escalation paths (Rhino Security Labs' research and pathfinding.cloud, as cloudsplaining
# 0.9 lists them): each is a set of actions that, all allowed on every resource, let a principal raise
# its own privileges. iam:PassRole on every role is the ingredient of most of them, and on its own
# hands any role (an admin one too) to a service the principal controls.
ESCALATIONS: dict[str, frozenset[str]] = {
    name: frozenset(a.lower() for a in actions) for name, actions in PRIVILEGE_ESCALATION_METHODS.items()
}
PASS_ROLE = "iam:passrole"
INGREDIENTS = frozenset().union(*ESCALATIONS.values()) | {PASS_ROLE}
Statement = Mapping[str, Any]


def _resource_types(action: str) -> list[str]:
    privilege = _privilege(action)
    return [k.rstrip("*") for k in privilege["resource_types"] if k] if privilege else []


@functools.cache
def data_types() -> frozenset[tuple[str, str]]:
    """(service, resource type) of the resources cloudsplaining's data exfiltration actions read."""
    return frozenset(
        (a.split(":")[0], t) for a in READ_ONLY_DATA_EXFILTRATION_ACTIONS for t in _resource_types(a.lower())
    )


# Which actions the rules judge is decided action by action, for the actions a principal's statements
# grant: a pass over all 20k of the database's (to list every data read, say) would cost each analyzer,
# whose first IAM resource may grant a handful, more than judging every resource of a stack.
@functools.cache
def is_data_read(action: str) -> bool:
    """A Read-level action on a resource type that holds data."""
    service = action.split(":")[0]
    return (
        action in all_actions()
        and access_level(action) == "Read"
        and any((service, t) in data_types() for t in _resource_types(action))
    )


# Permissions-management actions that change no one's access: reads the database files under that level
# (GetResourcePolicy returns a policy), and the service-linked role an AWS service needs, whose trust and
# permissions AWS defines and nobody can change (EKS's cluster policy creates its own).
READING_PREFIXES = ("get", "list", "describe")
SERVICE_LINKED_ROLE = "iam:createservicelinkedrole"


@functools.cache
def is_permissions_management(action: str) -> bool:
    """An action that changes who may use a resource (resource policies, ACLs, grants, IAM's own writes):
    on every resource it can publish any of them."""
    return (
        action in all_actions()
        and access_level(action) == "Permissions management"
        and not action.split(":")[1].startswith(READING_PREFIXES)
        and action != SERVICE_LINKED_ROLE
    )


@functools.cache
def is_tagging(action: str) -> bool:
    return action in all_actions() and access_level(action) == "Tagging"


@functools.cache
def _is_judged(action: str) -> bool:
    return (
        action in service_actions("iam")
        or action in INGREDIENTS
        or is_data_read(action)
        or is_permissions_management(action)
    )


def tag_keys(statement: Statement) -> frozenset[str]:
    """The statement's condition keys on resource or request tags (aws:ResourceTag/..., ec2:...)."""
    return frozenset(
        k
        for entries in conditions(statement).values()
        for k in entries
        if "resourcetag/" in k or "requesttag/" in k
    )


def _limits_tag_keys(statement: Statement) -> bool:
    """A condition on which tags a tagging call may set (aws:TagKeys or the request's tags)."""
    return any(k == "aws:tagkeys" or "requesttag/" in k for e in conditions(statement).values() for k in e)


def taggable_services(statements: Sequence[Statement], services: frozenset[str]) -> frozenset[str]:
    """Those of `services` whose every resource the statements let their holder tag with any key."""
    found: set[str] = set()
    for s in statements:
        if not is_allow(s) or _limits_tag_keys(s):
            continue
        wanted = services - found
        actions = {a for a in granted(s) if a.split(":")[0] in wanted and is_tagging(a)}
        found |= {a.split(":")[0] for a in actions if on_every_resource(s, a)}
    return frozenset(found)


def _tag_narrowed(statements: Sequence[Statement]) -> list[Statement]:
    """The statements a tag condition narrows to resources their holder cannot retag."""
    narrowed = [s for s in statements if pinned_by(s, tag_keys(s))]
    if not narrowed:
        return []
    services = frozenset(a.split(":")[0] for s in narrowed for a in granted(s))
    taggable = taggable_services(statements, services)
    return [s for s in narrowed if not {a.split(":")[0] for a in granted(s)} & taggable]


def on_every(statements: Iterable[Statement], narrowed_ok: bool = False) -> set[str]:
    """The actions (of those the rules judge) Allow statements grant on every resource, each judged on
    the union of the Resource patterns of every statement that grants it; with `narrowed_ok`, statements
    a tag condition narrows (and whose tags the holder cannot set) do not count."""
    try:
        key = json.dumps(list(statements), sort_keys=True)
    except TypeError:  # not JSON (a proxy the engine handed over): judge it as it is
        return _on_every(list(statements), narrowed_ok)
    return set(_on_every_cached(key, narrowed_ok))


@functools.lru_cache(maxsize=4096)
def _on_every_cached(key: str, narrowed_ok: bool) -> frozenset[str]:
    """on_every of the same statements again (a principal's documents are judged alone and together)."""
    return frozenset(_on_every(json.loads(key), narrowed_ok))


def _on_every(statements: list[Statement], narrowed_ok: bool) -> set[str]:
    allows = [s for s in statements if is_allow(s)]
    skipped = [id(s) for s in _tag_narrowed(allows)] if narrowed_ok else []
    everywhere: set[str] = set()
    patterns: dict[str, set[str]] = {}
    for s in allows:
        if id(s) in skipped:
            continue
        actions = {a for a in granted(s) if _is_judged(a)}
        if s.get("NotResource") is not None:
            everywhere |= actions
            continue
        resources = {str(p) for p in as_list(s.get("Resource"))}
        for a in actions:
            patterns.setdefault(a, set()).update(resources)
    return everywhere | {a for a, found in patterns.items() if reaches_every(found, a)}


def escalations(statements: Iterable[Statement]) -> list[str]:
    """What Allow statements grant on every resource that makes the principal an admin."""
    granted_everywhere = on_every(statements)
    found = []
    if service_actions("iam") <= granted_everywhere:
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


def exposures(statements: Iterable[Statement]) -> list[str]:
    """Data reads and permissions management on every resource (module docstring)."""
    granted_everywhere = on_every(statements, narrowed_ok=True)
    reads = sorted(a for a in granted_everywhere if is_data_read(a))
    manage = sorted(a for a in granted_everywhere if is_permissions_management(a))
    found = []
    if reads:
        shown = ", ".join(reads[:6]) + (f" and {len(reads) - 6} more" if len(reads) > 6 else "")
        found.append(f"reads every resource's data ({shown})")
    if manage:
        shown = ", ".join(manage[:6]) + (f" and {len(manage) - 6} more" if len(manage) > 6 else "")
        found.append(f"manages the permissions of every resource ({shown})")
    return found


def _touches(pattern: str, own: str, action: str) -> bool:
    """Whether a Resource pattern lets `action` act on the ARN(s) `own` stands for."""
    formats, _ = arn_formats(action)
    return globs.overlap(pattern, own) and any(globs.overlap(format_glob(f, {}), own) for f in formats)


def self_modification(statements: Iterable[Statement], own: Sequence[str]) -> list[str]:
    """Permissions-management actions of IAM that statements allow on the holder's own ARNs (`own`: ARN
    patterns of its role, user or group and of the managed policies it holds), not counting those it
    holds on every resource anyway (exposures reports them)."""
    allows = [s for s in statements if is_allow(s)]
    everywhere = on_every(allows)
    # Passing its own role to a service hands it no more than it has.
    iam_management = {a for a in service_actions("iam") if is_permissions_management(a)} - {PASS_ROLE}
    found: dict[str, set[str]] = {}
    for s in allows:
        actions = (granted(s) & iam_management) - everywhere
        if not actions:
            continue
        patterns = ["*"] if s.get("NotResource") is not None else [str(p) for p in as_list(s.get("Resource"))]
        for action in sorted(actions):
            for arn in own:
                if any(_touches(p, arn, action) for p in patterns):
                    found.setdefault(arn, set()).add(action)
    return [
        f"may change its own permissions: {', '.join(sorted(a))} on {_shown(arn)}" for arn, a in found.items()
    ]


def _shown(pattern: str) -> str:
    """A pattern with class tokens as a reader writes it (`*` for each)."""
    return "".join("*" if ch in globs.CLASSES else ch for ch in pattern)
