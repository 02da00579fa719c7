"""IAM rules, judged by what a policy allows (policy/iam_semantics.py reads it as IAM does): no grant that
makes a principal an admin or exposes every resource, pod roles that only one service account of one
cluster can assume, and no trust open to anyone."""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from policy.core import Rule, StackRule, as_list, dig, policy_document, statements, unparsable_policy
from policy.iam_grants import escalations, exposures
from policy.iam_principals import check_principals
from policy.iam_semantics import (
    admits_anyone,
    conditions,
    is_allow,
    is_web_identity,
    on_everything,
    principals,
)

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
# Attach a list of managed policies at once (input policyArns).
EXCLUSIVE_ATTACHMENTS = (
    "aws:iam/rolePolicyAttachmentsExclusive:RolePolicyAttachmentsExclusive",
    "aws:iam/userPolicyAttachmentsExclusive:UserPolicyAttachmentsExclusive",
    "aws:iam/groupPolicyAttachmentsExclusive:GroupPolicyAttachmentsExclusive",
)
# An AWS managed policy in any partition (aws, aws-cn, aws-us-gov, aws-iso*), under any path.
MANAGED_ARN = re.compile(r"^arn:aws[a-z-]*:iam::aws:policy/(?:[^/]+/)*([^/]+)$", re.IGNORECASE)
MANAGED_ESCALATIONS_FILE = Path(__file__).with_name("aws_managed_escalations.txt")
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


@functools.cache
def managed_escalations() -> dict[str, str]:
    """Lower-cased name -> why, of the AWS managed policies that make their holder an admin or expose
    every resource (scripts/refresh_managed_escalations.py)."""
    found = {}
    for line in MANAGED_ESCALATIONS_FILE.read_text().splitlines():
        name, _, why = line.partition("#")
        if name.strip():
            found[name.strip().lower()] = why.strip()
    return found


def admin_equivalent(document: Any) -> list[str]:
    """Why a policy document makes whoever holds it an admin ([] when it does not)."""
    found = escalations(statements(policy_document(document)))
    for s in statements(policy_document(document)):
        if is_allow(s) and s.get("NotAction") is not None and on_everything(s):
            found.append(
                f"statement {s.get('Sid') or ''!r} allows NotAction on every resource: almost everything"
            )
    return found


def _documents(type_: str, inputs: Mapping[str, Any]) -> list[Any]:
    if type_ == ROLE:
        return [dig(p, "policy") for p in as_list(dig(inputs, "inlinePolicies"))]
    return [dig(inputs, "policy")]


def _managed_arns(type_: str, inputs: Mapping[str, Any]) -> list[Any]:
    if type_ in ATTACHMENTS:
        return [dig(inputs, "policyArn")]
    if type_ in EXCLUSIVE_ATTACHMENTS:
        return as_list(dig(inputs, "policyArns"))
    return as_list(dig(inputs, "managedPolicyArns")) if type_ == ROLE else []


def check_no_star_on_star(type_: str, inputs: Mapping[str, Any]) -> Iterator[str]:
    for arn in _managed_arns(type_, inputs):
        match = MANAGED_ARN.match(arn) if isinstance(arn, str) else None
        why = managed_escalations().get(match.group(1).lower()) if match else None
        if why is not None:
            yield f"attaches {arn}, an AWS managed policy whose holder {why}"
    if type_ in (*ATTACHMENTS, *EXCLUSIVE_ATTACHMENTS):
        return
    for doc in _documents(type_, inputs):
        if bad := unparsable_policy(doc):
            yield bad
        yield from admin_equivalent(doc)
        yield from exposures(statements(policy_document(doc)))


def _single_exact(values: Any) -> str | None:
    vals = [str(v) for v in as_list(values)]
    return vals[0] if len(vals) == 1 and "*" not in vals[0] and "?" not in vals[0] else None


def _not_principal(s: Mapping[str, Any]) -> bool:
    return s.get("NotPrincipal") is not None


def _check_irsa(s: Mapping[str, Any]) -> Iterator[str]:
    others = [f"{kind}:{value}" for kind, value in principals(s) if kind.lower() != "federated"]
    if others or _not_principal(s):
        yield f"the web-identity trust also admits {others or 'NotPrincipal'}"
    found = conditions(s)
    subs = {k: v for k, v in found.get("StringEquals", {}).items() if k.endswith(":sub")}
    if any(k.endswith(":sub") for k in found.get("StringLike", {})):
        yield "the web-identity trust matches :sub with StringLike (wildcards admit other service accounts)"
    if not subs:
        yield "the web-identity trust has no StringEquals condition on <oidc>:sub"
        return
    for values in subs.values():
        sub = _single_exact(values)
        parts = (sub or "").split(":")
        if sub is None or len(parts) != 4 or parts[:2] != ["system", "serviceaccount"] or "" in parts:
            yield f"<oidc>:sub must be one system:serviceaccount:<namespace>:<name>, got {values!r}"


def _check_pod_identity(s: Mapping[str, Any]) -> Iterator[str]:
    others = [
        f"{kind}:{value}"
        for kind, value in principals(s)
        if (kind.lower(), value.lower()) != ("service", POD_IDENTITY_SERVICE)
    ]
    if others or _not_principal(s):
        yield (
            f"the Pod Identity trust also admits {others or 'NotPrincipal'}: any of them could assume the "
            "role and tag its own session with the namespace and service account the condition expects"
        )
    found = conditions(s)
    equals = found.get("StringEquals", {})
    for tag in POD_IDENTITY_TAGS:
        if _single_exact(equals.get(tag.lower())) is None:
            yield (
                f"the Pod Identity trust lacks StringEquals {tag} with exactly one value, without wildcards "
                f"(got {equals.get(tag.lower())!r})"
            )
    pins = {**equals, **found.get("ArnEquals", {})}
    if not any(_single_exact(pins.get(key.lower())) for key in POD_IDENTITY_CLUSTER_KEYS):
        yield (
            "the Pod Identity trust does not pin the cluster: add StringEquals "
            f"{' or '.join(POD_IDENTITY_CLUSTER_KEYS)} with exactly one value"
        )


def _pod_identity(s: Mapping[str, Any]) -> bool:
    return any((k.lower(), v.lower()) == ("service", POD_IDENTITY_SERVICE) for k, v in principals(s))


def _trust_allows(inputs: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [s for s in statements(policy_document(dig(inputs, "assumeRolePolicy"))) if is_allow(s)]


def check_pod_role_trust(type_: str, inputs: Mapping[str, Any]) -> Iterator[str]:
    if bad := unparsable_policy(dig(inputs, "assumeRolePolicy")):
        yield f"assumeRolePolicy: {bad}"
    allows = _trust_allows(inputs)
    # IRSA however its Action is spelled (sts:AssumeRoleWithWebIdentity, STS:assumerolewithwebidentity,
    # sts:AssumeRole*, sts:*, *): what counts is whether it grants the web-identity assumption.
    pod_role = any(is_web_identity(s) or _pod_identity(s) for s in allows)
    for s in allows:
        if is_web_identity(s):
            yield from _check_irsa(s)
        elif pod_role:
            # Every statement of a pod role's trust is held to the Pod Identity rules: a second statement
            # for another principal is the same bypass as a second principal in the first.
            yield from _check_pod_identity(s)


def check_trust_not_open(type_: str, inputs: Mapping[str, Any]) -> Iterator[str]:
    """A trust statement that admits anyone: NotPrincipal (everyone but a few), or Principal "*" / AWS
    "*" (every AWS account) without a condition that pins the caller's account, organization or ARN."""
    for s in _trust_allows(inputs):
        if whom := admits_anyone(s):
            yield f"trust statement {s.get('Sid') or ''!r} lets anyone assume the role: {whom}"


RULES = (
    Rule(
        name="iam-no-star-on-star",
        description="No IAM policy (inline, customer managed, or an AWS managed one attached to a role, "
        "user or group) makes its holder an admin or reaches every resource's data: every IAM action, "
        "NotAction, iam:PassRole or a privilege-escalation path on every resource; data reads or "
        "permissions management on every resource; however the actions and resources are spelled.",
        remediation="List the actions the principal needs and scope Resource to ARNs (see the Karpenter "
        "reference policy in infra/addons/karpenter/controller.py for the pattern); pass only named roles; "
        "attach narrow managed policies.",
        level="mandatory",
        severity="critical",
        types=(*POLICY_TYPES, ROLE, *ATTACHMENTS, *EXCLUSIVE_ATTACHMENTS),
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
    Rule(
        name="iam-trust-not-open",
        description='No role\'s trust policy admits anyone: no NotPrincipal, and Principal "*" (or AWS '
        '"*") only with a condition that pins the caller\'s account, organization or ARN.',
        remediation="Name the principals (an account root, a role ARN, a service) in Principal; for a "
        "broad principal add StringEquals aws:PrincipalOrgID / aws:PrincipalAccount / aws:SourceAccount.",
        level="mandatory",
        severity="critical",
        types=(ROLE,),
        check=check_trust_not_open,
    ),
)

STACK_RULES = (
    StackRule(
        name="iam-principal-no-escalation",
        description="Each role, user and group is judged on the union of everything it holds (inline, "
        "attached customer managed and AWS managed policies, a user's groups): no escalation path, data "
        "read or permissions management on every resource that only the policies together grant, and no "
        "permissions management on itself or on a managed policy it holds (PutRolePolicy on its own role, "
        "CreatePolicyVersion on its own policy).",
        remediation="Scope Resource to the ARNs the principal works on, leaving out its own role and the "
        "policies attached to it; split duties that together form an escalation path across principals.",
        level="mandatory",
        severity="critical",
        check=check_principals,
    ),
)
