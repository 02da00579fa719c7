"""IAM rules: no full-admin grants, and pod roles that only one service account can assume."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from policy.core import Rule, as_list, dig, policy_document, statements

ROLE = "aws:iam/role:Role"
POLICY_TYPES = (
    "aws:iam/policy:Policy",
    "aws:iam/rolePolicy:RolePolicy",
    "aws:iam/userPolicy:UserPolicy",
    "aws:iam/groupPolicy:GroupPolicy",
)
ATTACHMENTS = (
    "aws:iam/rolePolicyAttachment:RolePolicyAttachment",
    "aws:iam/policyAttachment:PolicyAttachment",
)
ADMIN_POLICY_ARNS = ("arn:aws:iam::aws:policy/AdministratorAccess",)
POD_IDENTITY_SERVICE = "pods.eks.amazonaws.com"
POD_IDENTITY_TAGS = ("aws:RequestTag/kubernetes-namespace", "aws:RequestTag/kubernetes-service-account")


def _documents(type_: str, inputs: Mapping[str, Any]) -> list[Any]:
    if type_ == ROLE:
        return [dig(p, "policy") for p in as_list(dig(inputs, "inlinePolicies"))]
    return [dig(inputs, "policy")]


def check_no_star_on_star(type_: str, inputs: Mapping[str, Any]) -> Iterator[str]:
    if type_ in ATTACHMENTS:
        arn = dig(inputs, "policyArn")
        if arn in ADMIN_POLICY_ARNS:
            yield f"attaches {arn}"
        return
    for doc in _documents(type_, inputs):
        for s in statements(policy_document(doc)):
            if s.get("Effect") != "Allow":
                continue
            actions = {str(a) for a in as_list(s.get("Action"))}
            resources = {str(r) for r in as_list(s.get("Resource"))}
            if actions & {"*", "*:*"} and "*" in resources:
                yield f"statement {s.get('Sid') or ''!r} allows Action '*' on Resource '*'"
            elif s.get("NotAction") is not None and "*" in resources:
                yield f"statement {s.get('Sid') or ''!r} allows NotAction on Resource '*' (almost everything)"


def _single_exact(values: Any) -> str | None:
    vals = [str(v) for v in as_list(values)]
    return vals[0] if len(vals) == 1 and "*" not in vals[0] and "?" not in vals[0] else None


def _check_irsa(s: Mapping[str, Any]) -> Iterator[str]:
    equals = dig(s, "Condition", "StringEquals", default={})
    subs = [k for k in equals if str(k).endswith(":sub")]
    like = [k for k in dig(s, "Condition", "StringLike", default={}) if str(k).endswith(":sub")]
    if like:
        yield "the web-identity trust matches :sub with StringLike (wildcards admit other service accounts)"
    if not subs:
        yield "the web-identity trust has no StringEquals condition on <oidc>:sub"
        return
    sub = _single_exact(equals[subs[0]])
    parts = (sub or "").split(":")
    if sub is None or len(parts) != 4 or parts[:2] != ["system", "serviceaccount"]:
        yield f"<oidc>:sub must be one system:serviceaccount:<namespace>:<name>, got {equals[subs[0]]!r}"


def _check_pod_identity(s: Mapping[str, Any]) -> Iterator[str]:
    equals = dig(s, "Condition", "StringEquals", default={})
    for tag in POD_IDENTITY_TAGS:
        if _single_exact(equals.get(tag)) is None:
            yield f"the Pod Identity trust lacks StringEquals {tag} with exactly one value"


def check_pod_role_trust(type_: str, inputs: Mapping[str, Any]) -> Iterator[str]:
    for s in statements(policy_document(dig(inputs, "assumeRolePolicy"))):
        if s.get("Effect") != "Allow":
            continue
        actions = {str(a) for a in as_list(s.get("Action"))}
        services = {str(p) for p in as_list(dig(s, "Principal", "Service"))}
        if "sts:AssumeRoleWithWebIdentity" in actions and dig(s, "Principal", "Federated"):
            yield from _check_irsa(s)
        elif POD_IDENTITY_SERVICE in services:
            yield from _check_pod_identity(s)


RULES = (
    Rule(
        name="iam-no-star-on-star",
        description="No IAM policy allows every action on every resource (nor attaches AdministratorAccess).",
        remediation="List the actions the principal needs and scope Resource to ARNs (see the Karpenter "
        "reference policy in infra/karpenter.py for the pattern).",
        level="mandatory",
        severity="critical",
        types=(*POLICY_TYPES, ROLE, *ATTACHMENTS),
        check=check_no_star_on_star,
    ),
    Rule(
        name="iam-pod-role-trust-scoped",
        description="Pod roles (IRSA or EKS Pod Identity) can be assumed by one namespace/service account "
        "only.",
        remediation="IRSA: Condition StringEquals {'<oidc>:sub': 'system:serviceaccount:<ns>:<sa>', "
        "'<oidc>:aud': 'sts.amazonaws.com'}. Pod Identity: Condition StringEquals "
        "{'aws:RequestTag/kubernetes-namespace': '<ns>', "
        "'aws:RequestTag/kubernetes-service-account': '<sa>'}.",
        level="mandatory",
        severity="high",
        types=(ROLE,),
        check=check_pod_role_trust,
    ),
)
