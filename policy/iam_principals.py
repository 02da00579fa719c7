"""Each IAM principal of a stack judged on everything it holds: a role's, user's or group's inline
policies (inlinePolicies, RolePolicy...), the customer managed policies attached to it (by any attachment
resource, or managedPolicyArns), the AWS managed ones (what they grant on every resource towards an
escalation path, from policy/aws_managed_ingredients.json), and for a user its groups'. A reference is
followed by the engine's property dependencies where it has them (a preview's names are unknown), else
by the name, id or ARN the input holds. Findings that one document already shows alone are left to
iam-no-star-on-star; what is new here is what only the union grants, and what a principal may grant
itself (policy/iam_grants.py self_modification)."""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from policy import globs
from policy.core import UNKNOWN, Resource, as_list, dig, known, policy_document, statements
from policy.iam_grants import escalations, exposures, self_modification

MANAGED_INGREDIENTS_FILE = Path(__file__).with_name("aws_managed_ingredients.json")
MANAGED_ARN = re.compile(r"^arn:aws[a-z-]*:iam::aws:policy/(?:[^/]+/)*([^/]+)$", re.IGNORECASE)
POLICY = "aws:iam/policy:Policy"
KINDS = {"aws:iam/role:Role": "role", "aws:iam/user:User": "user", "aws:iam/group:Group": "group"}
INLINE = {
    "aws:iam/rolePolicy:RolePolicy": ("role", "role"),
    "aws:iam/userPolicy:UserPolicy": ("user", "user"),
    "aws:iam/groupPolicy:GroupPolicy": ("group", "group"),
}
ATTACH = {
    "aws:iam/rolePolicyAttachment:RolePolicyAttachment": ("role", "role", "policyArn"),
    "aws:iam/userPolicyAttachment:UserPolicyAttachment": ("user", "user", "policyArn"),
    "aws:iam/groupPolicyAttachment:GroupPolicyAttachment": ("group", "group", "policyArn"),
    "aws:iam/rolePolicyAttachmentsExclusive:RolePolicyAttachmentsExclusive": (
        "role",
        "roleName",
        "policyArns",
    ),
    "aws:iam/userPolicyAttachmentsExclusive:UserPolicyAttachmentsExclusive": (
        "user",
        "userName",
        "policyArns",
    ),
    "aws:iam/groupPolicyAttachmentsExclusive:GroupPolicyAttachmentsExclusive": (
        "group",
        "groupName",
        "policyArns",
    ),
}
POLICY_ATTACHMENT = "aws:iam/policyAttachment:PolicyAttachment"
USER_GROUPS = "aws:iam/userGroupMembership:UserGroupMembership"
GROUP_MEMBERS = "aws:iam/groupMembership:GroupMembership"


@functools.cache
def managed_ingredients() -> dict[str, list[str]]:
    """Lower-cased AWS managed policy name -> the escalation actions it grants on every resource."""
    return {k.lower(): v for k, v in json.loads(MANAGED_INGREDIENTS_FILE.read_text()).items()}


@dataclass
class Holder:
    kind: str  # role | user | group
    name: str  # the resource's name in the stack, or the name an input gives for one outside it
    resource: Resource | None = None
    documents: list[tuple[str, Any]] = field(default_factory=list)  # (where, document)
    policies: list[Resource] = field(default_factory=list)  # customer managed policies attached
    managed: list[str] = field(default_factory=list)  # AWS managed policy names
    groups: list[Holder] = field(default_factory=list)

    def own_arns(self) -> list[str]:
        """ARN patterns of the principal and of the customer managed policies it holds."""
        own = [_arn(self.kind, self.resource, self.name)]
        return sorted(set(own + [_arn("policy", p, p.name) for p in self.policies]))


def _arn(kind: str, resource: Resource | None, name: str) -> str:
    """The ARN a principal or policy gets, as a pattern with class tokens for the partition and account
    (policy/globs.py): its `name` input, else its namePrefix, else the Pulumi auto-name (the resource name
    and a random suffix)."""
    inputs = known(resource.inputs) if resource else {}
    path = str(dig(inputs, "path", default="/"))
    given, prefix = dig(inputs, "name"), dig(inputs, "namePrefix")
    if isinstance(given, str) and given != UNKNOWN:
        base = given
    elif isinstance(prefix, str) and prefix != UNKNOWN:
        base = prefix + "*"
    else:
        base = name + "*"  # the resource name and the engine's random suffix (or none, as synth names it)
    return f"arn:{globs.LOWER_WORD}:iam::{globs.DIGITS}:{kind}{path}{base}"


def _refers_to(value: Any, r: Resource) -> bool:
    """Whether an input value names resource `r`: its name, its `name` input, or an ARN ending in /<name> or
    :<name> (the engine's dependencies decide first: `_targets`)."""
    if not isinstance(value, str):
        return False
    names = {r.name, str(dig(known(r.inputs), "name", default=r.name))}
    return (
        value in names
        or value.rsplit("/", 1)[-1] in names
        or (value.startswith("arn:") and value.rsplit(":", 1)[-1] in names)
    )


def _targets(r: Resource, key: str, candidates: Sequence[Resource]) -> list[Resource | str]:
    """What input `key` of `r` refers to: resources by the engine's dependencies, else by value; a value
    that names no resource of the stack stays a name."""
    deps = set((r.deps or {}).get(key, ()))
    found: list[Resource | str] = [c for c in candidates if c.name in deps]
    if found:
        return found
    for value in as_list(dig(known(r.inputs), key)):
        match = next((c for c in candidates if _refers_to(value, c)), None)
        found.append(match if match is not None else str(value))
    return found


def holders(resources: Sequence[Resource]) -> list[Holder]:
    by_kind: dict[str, dict[str, Holder]] = {"role": {}, "user": {}, "group": {}}
    principals = {k: [r for r in resources if KINDS.get(r.type) == k] for k in by_kind}
    policies = [r for r in resources if r.type == POLICY]

    def holder(kind: str, target: Resource | str) -> Holder:
        name = target.name if isinstance(target, Resource) else target
        found = by_kind[kind].get(name)
        if found is None:
            found = by_kind[kind][name] = Holder(kind, name, target if isinstance(target, Resource) else None)
        return found

    def attach(h: Holder, arn_target: Resource | str) -> None:
        if isinstance(arn_target, Resource):
            h.policies.append(arn_target)
            h.documents.append((f"policy {arn_target.name}", dig(known(arn_target.inputs), "policy")))
        elif match := MANAGED_ARN.match(arn_target):
            h.managed.append(match.group(1))

    for kind, rs in principals.items():
        for r in rs:
            h = holder(kind, r)
            inputs = known(r.inputs)
            for p in as_list(dig(inputs, "inlinePolicies")):
                h.documents.append((f"inline policy {dig(p, 'name', default='')}", dig(p, "policy")))
            for target in _targets(r, "managedPolicyArns", policies):
                attach(h, target)
    for r in resources:
        inputs = known(r.inputs)
        if r.type in INLINE:
            kind, key = INLINE[r.type]
            for target in _targets(r, key, principals[kind]):
                holder(kind, target).documents.append((f"{kind} policy {r.name}", dig(inputs, "policy")))
        elif r.type in ATTACH:
            kind, key, arns = ATTACH[r.type]
            for target in _targets(r, key, principals[kind]):
                for arn in _targets(r, arns, policies):
                    attach(holder(kind, target), arn)
        elif r.type == POLICY_ATTACHMENT:
            for kind, key in (("role", "roles"), ("user", "users"), ("group", "groups")):
                for target in _targets(r, key, principals[kind]):
                    for arn in _targets(r, "policyArn", policies):
                        attach(holder(kind, target), arn)
    for r in resources:
        if r.type == USER_GROUPS:
            for user in _targets(r, "user", principals["user"]):
                holder("user", user).groups += [
                    holder("group", g) for g in _targets(r, "groups", principals["group"])
                ]
        elif r.type == GROUP_MEMBERS:
            for group in _targets(r, "group", principals["group"]):
                for user in _targets(r, "users", principals["user"]):
                    holder("user", user).groups.append(holder("group", group))
    attached = {p.name for hs in by_kind.values() for h in hs.values() for p in h.policies}
    loose = [
        Holder("policy", p.name, p, [(f"policy {p.name}", dig(known(p.inputs), "policy"))], [p])
        for p in policies
        if p.name not in attached
    ]
    return [h for hs in by_kind.values() for h in hs.values()] + loose


def _statements(documents: Sequence[tuple[str, Any]]) -> list[Mapping[str, Any]]:
    return [s for _, doc in documents for s in statements(policy_document(doc))]


def _managed_statements(names: Sequence[str]) -> list[Mapping[str, Any]]:
    actions = sorted({a for n in names for a in managed_ingredients().get(n.lower(), [])})
    return [{"Effect": "Allow", "Action": actions, "Resource": "*"}] if actions else []


def judge(h: Holder) -> Iterator[str]:
    documents = h.documents + [d for g in h.groups for d in g.documents]
    managed = h.managed + [m for g in h.groups for m in g.managed]
    alone = {m for _, doc in documents for s in [statements(policy_document(doc))] for m in escalations(s)}
    alone |= {m for _, doc in documents for m in exposures(statements(policy_document(doc)))}
    union = _statements(documents) + _managed_statements(managed)
    together = [m for m in escalations(union) + exposures(union) if m not in alone]
    if together and len(documents) + len(managed) > 1:
        parts = [where for where, _ in documents] + [f"AWS managed {m}" for m in managed]
        yield f"{h.kind} {h.name} holds, across {', '.join(parts)}: {'; '.join(together)}"
    for finding in self_modification(_statements(documents), h.own_arns()):
        yield f"{h.kind} {h.name} {finding}"


def check_principals(resources: Sequence[Resource]) -> Iterator[tuple[str | None, str]]:
    for h in holders(resources):
        for message in judge(h):
            yield (h.resource.name if h.resource else None), message
