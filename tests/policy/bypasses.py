"""Ways around each guardrail that a determined user (or a copied snippet) tries: every entry is an input
the named policy must report. `python -m tests.policy.bypasses` prints, per policy, how many of them
the policy pack in the working tree reports (the figure the security review quotes)."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any, NamedTuple

ADMIN = "arn:aws:iam::aws:policy/AdministratorAccess"
GOOD_CLUSTER = {
    "version": "1.35",
    "enabledClusterLogTypes": ["api", "audit", "authenticator", "controllerManager", "scheduler"],
    "encryptionConfigKeyArn": "arn:aws:kms:us-east-1:1:key/k",
    "endpointPrivateAccess": True,
    "endpointPublicAccess": True,
    "skipDefaultNodeGroup": True,
}
POD_ID = {"Service": "pods.eks.amazonaws.com"}
POD_TAGS = {
    "aws:RequestTag/eks-cluster-name": "mlops-prod",
    "aws:RequestTag/kubernetes-namespace": "team-a",
    "aws:RequestTag/kubernetes-service-account": "trainer",
}
BUCKET = "arn:aws:s3:::mlops-data"
INSECURE = {"Bool": {"aws:SecureTransport": "false"}}
OIDC = "oidc.eks.us-east-1.amazonaws.com/id/ABC"


class Attempt(NamedTuple):
    policy: str
    what: str
    type_: str
    inputs: dict[str, Any]
    prod: bool = False


def _cluster(*cidrs: str) -> dict[str, Any]:
    return {**GOOD_CLUSTER, "publicAccessCidrs": list(cidrs)}


def _doc(*statements: dict[str, Any]) -> str:
    return json.dumps({"Version": "2012-10-17", "Statement": list(statements)})


def _allow(action: Any, **extra: Any) -> dict[str, Any]:
    return {"Effect": "Allow", "Action": action, **extra}


def _trust(*statements: dict[str, Any]) -> dict[str, Any]:
    return {"assumeRolePolicy": _doc(*statements)}


def _pod_trust(principal: dict[str, Any] = POD_ID, tags: dict[str, str] = POD_TAGS) -> dict[str, Any]:
    return {
        "Effect": "Allow",
        "Principal": principal,
        "Action": ["sts:AssumeRole", "sts:TagSession"],
        "Condition": {"StringEquals": tags},
    }


def _tls_deny(resource: Any, principal: Any = "*") -> dict[str, Any]:
    deny = {"Effect": "Deny", "Principal": principal, "Action": "s3:*", "Resource": resource}
    return {"bucket": "mlops-data", "policy": _doc({**deny, "Condition": INSECURE})}


def _pod(spec: dict[str, Any] | None = None, ctx: dict[str, Any] | None = None, kind: str = "Pod") -> dict:
    container = {"name": "c", "image": "1.dkr.ecr.us-east-1.amazonaws.com/x:1", "securityContext": ctx or {}}
    pod_spec = {"containers": [container], **(spec or {})}
    if kind == "Pod":
        return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": pod_spec}
    return {
        "apiVersion": "apps/v1",
        "kind": kind,
        "metadata": {"name": "p"},
        "spec": {"template": {"spec": pod_spec}},
    }


def _host_path(path: str) -> dict[str, Any]:
    return {"volumes": [{"name": "host", "hostPath": {"path": path}}]}


EKS = "eks:index:Cluster"
AWS_CLUSTER = "aws:eks/cluster:Cluster"
POLICY = "aws:iam/policy:Policy"
ROLE = "aws:iam/role:Role"
ROLE_POLICY = "aws:iam/rolePolicy:RolePolicy"
BUCKET_POLICY = "aws:s3/bucketPolicy:BucketPolicy"
POD = "kubernetes:core/v1:Pod"

ATTEMPTS: tuple[Attempt, ...] = (
    Attempt(
        "eks-endpoint-not-open", "two /1 halves are the internet", EKS, _cluster("0.0.0.0/1", "128.0.0.0/1")
    ),
    Attempt(
        "eks-endpoint-not-open",
        "four /2s are the internet",
        EKS,
        _cluster("0.0.0.0/2", "64.0.0.0/2", "128.0.0.0/2", "192.0.0.0/2"),
    ),
    Attempt(
        "eks-endpoint-not-open",
        "halves on the aws.eks.Cluster child",
        AWS_CLUSTER,
        {
            **{k: v for k, v in GOOD_CLUSTER.items() if not k.startswith("endpoint")},
            "vpcConfig": {
                "endpointPrivateAccess": True,
                "endpointPublicAccess": True,
                "publicAccessCidrs": ["0.0.0.0/1", "128.0.0.0/1"],
            },
        },
    ),
    Attempt("eks-endpoint-not-open", "two /16s make a /15", EKS, _cluster("100.64.0.0/16", "100.65.0.0/16")),
    Attempt(
        "eks-prod-endpoint-deployer-only",
        "two /24s make a /23 in prod",
        EKS,
        _cluster("198.51.100.0/24", "198.51.101.0/24"),
        prod=True,
    ),
    Attempt("iam-no-star-on-star", "iam:* on *", POLICY, {"policy": _doc(_allow("iam:*", Resource="*"))}),
    Attempt(
        "iam-no-star-on-star",
        "IAM:* in another case",
        POLICY,
        {"policy": _doc(_allow(["IAM:*"], Resource="*"))},
    ),
    Attempt(
        "iam-no-star-on-star",
        "*:* with NotResource",
        POLICY,
        {"policy": _doc(_allow("*:*", NotResource="x"))},
    ),
    Attempt(
        "iam-no-star-on-star",
        "* with NotResource",
        ROLE_POLICY,
        {"policy": _doc(_allow("*", NotResource=["x"]))},
    ),
    Attempt(
        "iam-no-star-on-star",
        "NotAction with NotResource",
        POLICY,
        {"policy": _doc({"Effect": "Allow", "NotAction": "s3:*", "NotResource": "arn:aws:s3:::x"})},
    ),
    Attempt(
        "iam-no-star-on-star",
        "a statement object, not a list, inline on a role",
        ROLE,
        {
            "inlinePolicies": [
                {"name": "p", "policy": json.dumps({"Statement": _allow("iam:*", Resource="*")})}
            ]
        },
    ),
    Attempt(
        "iam-no-star-on-star",
        "AdministratorAccess in Role.managedPolicyArns",
        ROLE,
        {"managedPolicyArns": [ADMIN]},
    ),
    Attempt(
        "iam-no-star-on-star",
        "AdministratorAccess attached to a user",
        "aws:iam/userPolicyAttachment:UserPolicyAttachment",
        {"user": "u", "policyArn": ADMIN},
    ),
    Attempt(
        "iam-no-star-on-star",
        "AdministratorAccess attached to a group",
        "aws:iam/groupPolicyAttachment:GroupPolicyAttachment",
        {"group": "g", "policyArn": ADMIN},
    ),
    Attempt(
        "iam-no-star-on-star",
        "AdministratorAccess in aws-cn",
        "aws:iam/rolePolicyAttachment:RolePolicyAttachment",
        {"role": "r", "policyArn": "arn:aws-cn:iam::aws:policy/AdministratorAccess"},
    ),
    Attempt(
        "iam-no-star-on-star",
        "AdministratorAccess in aws-us-gov",
        "aws:iam/policyAttachment:PolicyAttachment",
        {"roles": ["r"], "policyArn": "arn:aws-us-gov:iam::aws:policy/AdministratorAccess"},
    ),
    Attempt(
        "iam-no-star-on-star",
        "IAMFullAccess (grants itself the rest)",
        "aws:iam/rolePolicyAttachment:RolePolicyAttachment",
        {"role": "r", "policyArn": "arn:aws:iam::aws:policy/IAMFullAccess"},
    ),
    Attempt(
        "iam-pod-role-trust-scoped",
        "an AWS principal next to the Pod Identity service",
        ROLE,
        _trust(_pod_trust({**POD_ID, "AWS": "arn:aws:iam::111122223333:root"})),
    ),
    Attempt(
        "iam-pod-role-trust-scoped",
        "a second statement for an AWS principal, same tags",
        ROLE,
        _trust(_pod_trust(), _pod_trust({"AWS": "arn:aws:iam::111122223333:root"})),
    ),
    Attempt(
        "iam-pod-role-trust-scoped",
        "Principal * next to the service",
        ROLE,
        _trust(_pod_trust({**POD_ID, "AWS": "*"})),
    ),
    Attempt(
        "iam-pod-role-trust-scoped",
        "no cluster condition",
        ROLE,
        _trust(_pod_trust(tags={k: v for k, v in POD_TAGS.items() if "cluster" not in k})),
    ),
    Attempt(
        "iam-pod-role-trust-scoped",
        "a cluster condition with a wildcard",
        ROLE,
        _trust(_pod_trust(tags={**POD_TAGS, "aws:RequestTag/eks-cluster-name": "*"})),
    ),
    Attempt(
        "iam-pod-role-trust-scoped",
        "an AWS principal next to the IRSA provider",
        ROLE,
        _trust(
            {
                "Effect": "Allow",
                "Principal": {
                    "Federated": f"arn:aws:iam::1:oidc-provider/{OIDC}",
                    "AWS": "arn:aws:iam::1:root",
                },
                "Action": "sts:AssumeRoleWithWebIdentity",
                "Condition": {"StringEquals": {f"{OIDC}:sub": "system:serviceaccount:team-a:trainer"}},
            }
        ),
    ),
    Attempt("s3-tls-only", "Deny on the bucket ARN only", BUCKET_POLICY, _tls_deny(BUCKET)),
    Attempt("s3-tls-only", "Deny on the objects only", BUCKET_POLICY, _tls_deny(f"{BUCKET}/*")),
    Attempt(
        "s3-tls-only",
        "Deny for one principal",
        BUCKET_POLICY,
        _tls_deny([BUCKET, f"{BUCKET}/*"], {"AWS": "arn:aws:iam::111122223333:role/x"}),
    ),
    Attempt(
        "k8s-no-privileged-containers", "SYS_ADMIN", POD, _pod(ctx={"capabilities": {"add": ["SYS_ADMIN"]}})
    ),
    Attempt(
        "k8s-no-privileged-containers",
        "CAP_SYS_ADMIN",
        POD,
        _pod(ctx={"capabilities": {"add": ["CAP_SYS_ADMIN"]}}),
    ),
    Attempt(
        "k8s-no-privileged-containers", "ALL capabilities", POD, _pod(ctx={"capabilities": {"add": ["ALL"]}})
    ),
    Attempt(
        "k8s-no-privileged-containers",
        "allowPrivilegeEscalation",
        POD,
        _pod(ctx={"allowPrivilegeEscalation": True}),
    ),
    Attempt("k8s-no-privileged-containers", "hostPath /", POD, _pod(_host_path("/"))),
    Attempt("k8s-no-privileged-containers", "hostPath /etc/", POD, _pod(_host_path("/etc/"))),
    Attempt(
        "k8s-no-privileged-containers",
        "the containerd socket",
        POD,
        _pod(_host_path("/run/containerd/containerd.sock")),
    ),
    Attempt(
        "k8s-no-privileged-containers",
        "hostPID in a DaemonSet",
        "kubernetes:apps/v1:DaemonSet",
        _pod({"hostPID": True}, kind="DaemonSet"),
    ),
    Attempt(
        "k8s-no-privileged-containers",
        "hostNetwork in a Deployment",
        "kubernetes:apps/v1:Deployment",
        _pod({"hostNetwork": True}, kind="Deployment"),
    ),
)


def reported(attempt: Attempt, rules: Any) -> bool:
    """Whether the pack's policy `attempt.policy` reports the attempt (False when no such policy)."""
    rule = next((r for r in rules if r.name == attempt.policy), None)
    return rule is not None and bool(rule.violations(attempt.type_, attempt.inputs, attempt.prod))


def figures(rules: Any) -> dict[str, tuple[int, int]]:
    """policy -> (attempts reported, attempts)."""
    total = Counter(a.policy for a in ATTEMPTS)
    caught = Counter(a.policy for a in ATTEMPTS if reported(a, rules))
    return {p: (caught[p], n) for p, n in total.items()}


if __name__ == "__main__":
    import argparse

    argparse.ArgumentParser(prog="python -m tests.policy.bypasses", description=__doc__).parse_args()
    from policy.pack import RULES

    results = figures(RULES)
    for policy, (caught, n) in results.items():
        print(f"{policy}: {caught}/{n}")
    print(f"all: {sum(c for c, _ in results.values())}/{len(ATTEMPTS)}")
