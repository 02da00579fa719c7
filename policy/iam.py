"""IAM rules: no full-admin grants, and pod roles that only one service account can assume."""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterator, Mapping
from typing import Any

from policy.core import Rule, as_list, dig, policy_document, statements, unparsable_policy

ROLE = "aws:iam/role:Role"
POLICY_TYPES = (
    "aws:iam/policy:Policy",
    "aws:iam/rolePolicy:RolePolicy",
    "aws:iam/userPolicy:UserPolicy",
    "aws:iam/groupPolicy:GroupPolicy",
)
ATTACHMENTS = (
    "aws:iam/rolePolicyAttachment:RolePolicyAttachment",
    "aws:iam/userPolicyAttachment:UserPolicyAttachment",
    "aws:iam/groupPolicyAttachment:GroupPolicyAttachment",
    "aws:iam/policyAttachment:PolicyAttachment",
)
# AWS managed policies that grant everything, in every partition (aws, aws-cn, aws-us-gov, aws-iso*):
# AdministratorAccess, and IAMFullAccess, with which a principal grants itself AdministratorAccess.
ADMIN_POLICY_ARN = re.compile(r"^arn:aws(-[a-z-]+)?:iam::aws:policy/(AdministratorAccess|IAMFullAccess)$")
POD_IDENTITY_SERVICE = "pods.eks.amazonaws.com"
POD_IDENTITY_TAGS = ("aws:RequestTag/kubernetes-namespace", "aws:RequestTag/kubernetes-service-account")
# What pins a Pod Identity trust to one cluster: the session tags EKS sets (eks-cluster-name/-arn) or
# the cluster ARN as aws:SourceArn (EKS user guide, pod-id-role). Without one, an association in any
# cluster of the account with the same namespace and service account name gets the role.
POD_IDENTITY_CLUSTER_KEYS = (
    "aws:RequestTag/eks-cluster-name",
    "aws:RequestTag/eks-cluster-arn",
    "aws:SourceArn",
)


def _documents(type_: str, inputs: Mapping[str, Any]) -> list[Any]:
    if type_ == ROLE:
        return [dig(p, "policy") for p in as_list(dig(inputs, "inlinePolicies"))]
    return [dig(inputs, "policy")]


def _grants_all_of_iam(action: str) -> bool:
    """Whether an action pattern matches every IAM action ("*", "*:*", "iam:*", "i*:*", any case):
    it matches "iam:" followed by nothing, which only a wildcard after the colon does."""
    return fnmatch.fnmatchcase("iam:", action.lower())


def _every_resource(s: Mapping[str, Any]) -> bool:
    """Resource "*" (or an ARN pattern of every service), or NotResource: all but a few resources."""
    if s.get("NotResource") is not None:
        return True
    return any(str(r) == "*" or str(r).startswith("arn:*") for r in as_list(s.get("Resource")))


def check_no_star_on_star(type_: str, inputs: Mapping[str, Any]) -> Iterator[str]:
    arns = [dig(inputs, "policyArn")] if type_ in ATTACHMENTS else []
    if type_ == ROLE:
        arns += as_list(dig(inputs, "managedPolicyArns"))
    for arn in arns:
        if isinstance(arn, str) and ADMIN_POLICY_ARN.match(arn):
            yield f"attaches {arn}"
    for doc in _documents(type_, inputs):
        if bad := unparsable_policy(doc):
            yield bad
        for s in statements(policy_document(doc)):
            if s.get("Effect") != "Allow" or not _every_resource(s):
                continue
            sid = s.get("Sid") or ""
            scope = "NotResource (all but a few)" if s.get("NotResource") is not None else "Resource '*'"
            wide = [str(a) for a in as_list(s.get("Action")) if _grants_all_of_iam(str(a))]
            if wide:
                yield f"statement {sid!r} allows {', '.join(wide)} on {scope}: every IAM action, so admin"
            elif s.get("NotAction") is not None:
                yield f"statement {sid!r} allows NotAction on {scope} (almost everything)"


def _single_exact(values: Any) -> str | None:
    vals = [str(v) for v in as_list(values)]
    return vals[0] if len(vals) == 1 and "*" not in vals[0] and "?" not in vals[0] else None


def _check_irsa(s: Mapping[str, Any]) -> Iterator[str]:
    others = [p for p in _principals(s) if not p.startswith("Federated:")]
    if others or s.get("NotPrincipal") is not None:
        yield f"the web-identity trust also admits {others or 'NotPrincipal'}"
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


def _principals(s: Mapping[str, Any]) -> list[str]:
    """Every principal a statement names, as "<kind>:<value>" ("*" for Principal "*")."""
    principal = s.get("Principal")
    if not isinstance(principal, Mapping):
        return [] if principal is None else [f"*:{principal}"]
    return [f"{kind}:{value}" for kind, values in principal.items() for value in as_list(values)]


def _check_pod_identity(s: Mapping[str, Any]) -> Iterator[str]:
    others = [p for p in _principals(s) if p != f"Service:{POD_IDENTITY_SERVICE}"]
    if others or s.get("NotPrincipal") is not None:
        yield (
            f"the Pod Identity trust also admits {others or 'NotPrincipal'}: any of them could assume the "
            "role and tag its own session with the namespace and service account the condition expects"
        )
    equals = dig(s, "Condition", "StringEquals", default={})
    for tag in POD_IDENTITY_TAGS:
        if _single_exact(equals.get(tag)) is None:
            yield f"the Pod Identity trust lacks StringEquals {tag} with exactly one value"
    pins = {**equals, **dig(s, "Condition", "ArnEquals", default={})}
    if not any(_single_exact(pins.get(key)) for key in POD_IDENTITY_CLUSTER_KEYS):
        yield (
            "the Pod Identity trust does not pin the cluster: add StringEquals "
            f"{' or '.join(POD_IDENTITY_CLUSTER_KEYS)} with exactly one value"
        )


def _is_irsa(s: Mapping[str, Any]) -> bool:
    actions = {str(a) for a in as_list(s.get("Action"))}
    return "sts:AssumeRoleWithWebIdentity" in actions and bool(dig(s, "Principal", "Federated"))


def check_pod_role_trust(type_: str, inputs: Mapping[str, Any]) -> Iterator[str]:
    if bad := unparsable_policy(dig(inputs, "assumeRolePolicy")):
        yield f"assumeRolePolicy: {bad}"
    allows = [
        s for s in statements(policy_document(dig(inputs, "assumeRolePolicy"))) if s.get("Effect") == "Allow"
    ]
    irsa = [s for s in allows if _is_irsa(s)]
    pod_role = irsa or any(f"Service:{POD_IDENTITY_SERVICE}" in _principals(s) for s in allows)
    for s in allows:
        if _is_irsa(s):
            yield from _check_irsa(s)
        elif pod_role:
            # Every statement of a pod role's trust is held to the Pod Identity rules: a second statement
            # for another principal is the same bypass as a second principal in the first.
            yield from _check_pod_identity(s)


RULES = (
    Rule(
        name="iam-no-star-on-star",
        description="No IAM policy, inline or attached to a role, user or group, allows every action (or "
        "every IAM action) on every resource, nor attaches AdministratorAccess or IAMFullAccess.",
        remediation="List the actions the principal needs and scope Resource to ARNs (see the Karpenter "
        "reference policy in infra/addons/karpenter/controller.py for the pattern).",
        level="mandatory",
        severity="critical",
        types=(*POLICY_TYPES, ROLE, *ATTACHMENTS),
        check=check_no_star_on_star,
    ),
    Rule(
        name="iam-pod-role-trust-scoped",
        description="Pod roles (IRSA or EKS Pod Identity) can be assumed by one namespace/service account "
        "of one cluster only, and by no other principal.",
        remediation="IRSA: Condition StringEquals {'<oidc>:sub': 'system:serviceaccount:<ns>:<sa>', "
        "'<oidc>:aud': 'sts.amazonaws.com'}. Pod Identity: Condition StringEquals "
        "{'aws:RequestTag/kubernetes-namespace': '<ns>', "
        "'aws:RequestTag/kubernetes-service-account': '<sa>', 'aws:RequestTag/eks-cluster-name': "
        "'<cluster>'} and Principal {'Service': 'pods.eks.amazonaws.com'} alone.",
        level="mandatory",
        severity="high",
        types=(ROLE,),
        check=check_pod_role_trust,
    ),
)
