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
    "vpcCniOptions": {"enableNetworkPolicy": True},
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


def _irsa(action: Any = "sts:AssumeRoleWithWebIdentity", condition: Any = None) -> dict[str, Any]:
    statement = {"Effect": "Allow", "Principal": {"Federated": f"arn:aws:iam::1:oidc-provider/{OIDC}"}}
    return {**statement, "Action": action, **({"Condition": condition} if condition is not None else {})}


def _resource_policy(principal: Any, condition: Any = None, **extra: Any) -> dict[str, Any]:
    statement = {"Effect": "Allow", "Principal": principal, "Action": "*", "Resource": "*", **extra}
    if condition is not None:
        statement["Condition"] = condition
    return {"policy": _doc(statement)}


def _ingress(protocol: str, low: int, high: int, *cidrs: str) -> dict[str, Any]:
    return {
        "type": "ingress",
        "protocol": protocol,
        "fromPort": low,
        "toPort": high,
        "cidrBlocks": list(cidrs),
    }


def _binding(role: str, *subjects: dict[str, str]) -> dict[str, Any]:
    return {
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": list(subjects),
    }


def _webhook(rules: list[dict[str, Any]], url: str = "https://hooks.example.net/admit") -> dict[str, Any]:
    return {"webhooks": [{"name": "w.example.net", "clientConfig": {"url": url}, "rules": rules}]}


def _namespace(labels: dict[str, Any], name: str = "team-a") -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}


def _netpol(**spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": "open", "namespace": "team-a"}, "spec": {"podSelector": {}, **spec}}


def _workload(kind: str, api: str, pod_spec: dict[str, Any]) -> dict[str, Any]:
    template = {"spec": pod_spec}
    spec: dict[str, Any] = {"template": template}
    if kind == "CronJob":
        spec = {"schedule": "@daily", "jobTemplate": {"spec": {"template": template}}}
    elif kind == "RayJob":
        spec = {"rayClusterSpec": {"headGroupSpec": {"template": template}}}
    elif kind == "MPIJob":
        spec = {"mpiReplicaSpecs": {"Worker": {"template": template}}}
    return {"apiVersion": api, "kind": kind, "metadata": {"name": "w"}, "spec": spec}


def _root_pod(ctx: dict[str, Any] | None = None, pod_ctx: dict[str, Any] | None = None) -> dict[str, Any]:
    container = {"name": "c", "image": "1.dkr.ecr.us-east-1.amazonaws.com/x:1", "securityContext": ctx or {}}
    return {"securityContext": pod_ctx or {}, "containers": [container]}


PV = "kubernetes:core/v1:PersistentVolume"
SG = "aws:ec2/securityGroup:SecurityGroup"
SG_RULE = "aws:ec2/securityGroupRule:SecurityGroupRule"
INGRESS_RULE = "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule"
CRB = "kubernetes:rbac.authorization.k8s.io/v1:ClusterRoleBinding"
RB = "kubernetes:rbac.authorization.k8s.io/v1:RoleBinding"
CLUSTER_ROLE = "kubernetes:rbac.authorization.k8s.io/v1:ClusterRole"
MUTATING = "kubernetes:admissionregistration.k8s.io/v1:MutatingWebhookConfiguration"
VALIDATING = "kubernetes:admissionregistration.k8s.io/v1:ValidatingWebhookConfiguration"
NAMESPACE = "kubernetes:core/v1:Namespace"
NAMESPACE_PATCH = "kubernetes:core/v1:NamespacePatch"
NETPOL = "kubernetes:networking.k8s.io/v1:NetworkPolicy"
RELEASE = "kubernetes:helm.sh/v3:Release"
LT = "aws:ec2/launchTemplate:LaunchTemplate"
ENFORCE = "pod-security.kubernetes.io/enforce"
SUB = {"StringEquals": {f"{OIDC}:sub": "system:serviceaccount:team-a:trainer"}}

# Written against the rules that read meaning (IAM's semantics, Pod Security's allow-lists) and the
# classes that had no rule: each is a spelling or a path the earlier attempts did not try.
MEANING_ATTEMPTS: tuple[Attempt, ...] = (
    # IAM: actions as IAM matches them, resources as IAM matches them.
    Attempt(
        "iam-no-star-on-star", "iam:Pass* on *", POLICY, {"policy": _doc(_allow("iam:Pass*", Resource="*"))}
    ),
    Attempt("iam-no-star-on-star", "*Role* on *", POLICY, {"policy": _doc(_allow("*Role*", Resource="*"))}),
    Attempt(
        "iam-no-star-on-star",
        "s3:*Object* on *",
        POLICY,
        {"policy": _doc(_allow("s3:*Object*", Resource="*"))},
    ),
    Attempt(
        "iam-no-star-on-star",
        "iam:* on arn:aws:iam::*:*",
        POLICY,
        {"policy": _doc(_allow("iam:*", Resource="arn:aws:iam::*:*"))},
    ),
    Attempt(
        "iam-no-star-on-star",
        "iam:* on arn:aws:*:*:*:*",
        POLICY,
        {"policy": _doc(_allow("iam:*", Resource="arn:aws:*:*:*:*"))},
    ),
    Attempt(
        "iam-no-star-on-star", "iam:* on arn:*", POLICY, {"policy": _doc(_allow("iam:*", Resource="arn:*"))}
    ),
    Attempt(
        "iam-no-star-on-star",
        "PassRole on every role of the account",
        POLICY,
        {"policy": _doc(_allow("iam:PassRole", Resource="arn:aws:iam::111122223333:role/*"))},
    ),
    Attempt(
        "iam-no-star-on-star",
        "PassRole with a condition that narrows no role",
        ROLE_POLICY,
        {
            "policy": _doc(
                _allow(
                    "iam:PassRole",
                    Resource="*",
                    Condition={"StringEquals": {"iam:PassedToService": "lambda.amazonaws.com"}},
                )
            )
        },
    ),
    Attempt(
        "iam-no-star-on-star",
        "i?m:PutRolePolicy (a ? for a letter)",
        POLICY,
        {"policy": _doc(_allow("i?m:PutRolePolicy", Resource="*"))},
    ),
    Attempt(
        "iam-no-star-on-star",
        "iam:putrolepolicy lower case",
        POLICY,
        {"policy": _doc(_allow("iam:putrolepolicy", Resource="*"))},
    ),
    Attempt(
        "iam-no-star-on-star",
        "every IAM action split over A* ... Z*",
        POLICY,
        {"policy": _doc(_allow([f"iam:{chr(c)}*" for c in range(65, 91)], Resource="*"))},
    ),
    Attempt(
        "iam-no-star-on-star",
        "PassRole and RunInstances in two statements",
        POLICY,
        {
            "policy": _doc(
                _allow("iam:PassRole", Resource="arn:aws:iam::*:role/*"), _allow("ec2:*", Resource="*")
            )
        },
    ),
    Attempt(
        "iam-no-star-on-star",
        "CreatePolicyVersion on every policy",
        POLICY,
        {"policy": _doc(_allow("iam:CreatePolicyVersion", Resource="arn:aws:iam::*:policy/*"))},
    ),
    Attempt(
        "iam-no-star-on-star",
        "UpdateAssumeRolePolicy on every role",
        ROLE_POLICY,
        {"policy": _doc(_allow("iam:UpdateAssumeRolePolicy", Resource="arn:aws:iam::*:role/*"))},
    ),
    Attempt(
        "iam-no-star-on-star",
        "secretsmanager:GetSecretValue on *",
        POLICY,
        {"policy": _doc(_allow("secretsmanager:Get*", Resource="*"))},
    ),
    Attempt(
        "iam-no-star-on-star",
        "kms:PutKeyPolicy on every key",
        POLICY,
        {"policy": _doc(_allow("kms:PutKeyPolicy", Resource="arn:aws:kms:*:*:key/*"))},
    ),
    Attempt(
        "iam-no-star-on-star",
        "NotAction with Resource arn:*",
        POLICY,
        {"policy": _doc({"Effect": "Allow", "NotAction": "s3:*", "Resource": "arn:*"})},
    ),
    Attempt(
        "iam-no-star-on-star",
        "PowerUserAccess attached",
        "aws:iam/rolePolicyAttachment:RolePolicyAttachment",
        {"role": "r", "policyArn": "arn:aws:iam::aws:policy/PowerUserAccess"},
    ),
    Attempt(
        "iam-no-star-on-star",
        "AWSLambda_FullAccess (PassRole on every role)",
        "aws:iam/rolePolicyAttachment:RolePolicyAttachment",
        {"role": "r", "policyArn": "arn:aws:iam::aws:policy/AWSLambda_FullAccess"},
    ),
    Attempt(
        "iam-no-star-on-star",
        "administratoraccess in lower case, in a list of exclusive attachments",
        "aws:iam/rolePolicyAttachmentsExclusive:RolePolicyAttachmentsExclusive",
        {"roleName": "r", "policyArns": ["arn:aws:iam::aws:policy/administratoraccess"]},
    ),
    Attempt(
        "iam-no-star-on-star",
        "an inline role policy with Effect in lower case",
        ROLE,
        {
            "inlinePolicies": [
                {"name": "p", "policy": _doc({"Effect": "allow", "Action": "*", "Resource": "*"})}
            ]
        },
    ),
    # Trust policies: IRSA recognised however spelled, so its :sub pin is required; Pod Identity pins.
    Attempt(
        "iam-pod-role-trust-scoped",
        "IRSA with sts:AssumeRoleWith* and no :sub",
        ROLE,
        _trust(_irsa("sts:AssumeRoleWith*")),
    ),
    Attempt(
        "iam-pod-role-trust-scoped",
        "IRSA with STS:ASSUMEROLEWITHWEBIDENTITY and no :sub",
        ROLE,
        _trust(_irsa("STS:ASSUMEROLEWITHWEBIDENTITY")),
    ),
    Attempt("iam-pod-role-trust-scoped", "IRSA with sts:* and no :sub", ROLE, _trust(_irsa("sts:*"))),
    Attempt(
        "iam-pod-role-trust-scoped",
        "IRSA :sub pinned to a namespace wildcard in StringEquals",
        ROLE,
        _trust(_irsa(condition={"StringEquals": {f"{OIDC}:sub": "system:serviceaccount:team-a:*"}})),
    ),
    Attempt(
        "iam-pod-role-trust-scoped",
        "IRSA :sub as a list of two service accounts",
        ROLE,
        _trust(
            _irsa(
                condition={
                    "StringEquals": {
                        f"{OIDC}:sub": ["system:serviceaccount:a:x", "system:serviceaccount:b:y"]
                    }
                }
            )
        ),
    ),
    Attempt(
        "iam-pod-role-trust-scoped",
        "IRSA :aud pinned, :sub left out",
        ROLE,
        _trust(_irsa(condition={"StringEquals": {f"{OIDC}:aud": "sts.amazonaws.com"}})),
    ),
    Attempt(
        "iam-pod-role-trust-scoped",
        "Pod Identity namespace *",
        ROLE,
        _trust(_pod_trust(tags={**POD_TAGS, "aws:RequestTag/kubernetes-namespace": "*"})),
    ),
    Attempt(
        "iam-pod-role-trust-scoped",
        "Pod Identity service account team-*",
        ROLE,
        _trust(_pod_trust(tags={**POD_TAGS, "aws:RequestTag/kubernetes-service-account": "team-*"})),
    ),
    Attempt(
        "iam-pod-role-trust-scoped",
        "Pod Identity namespace as a list",
        ROLE,
        _trust(_pod_trust(tags={**POD_TAGS, "aws:RequestTag/kubernetes-namespace": ["team-a", "team-b"]})),
    ),
    Attempt(
        "iam-pod-role-trust-scoped",
        "Pod Identity service account with ?",
        ROLE,
        _trust(_pod_trust(tags={**POD_TAGS, "aws:RequestTag/kubernetes-service-account": "traine?"})),
    ),
    Attempt(
        "iam-pod-role-trust-scoped",
        "Pod Identity service name in another case, no tags",
        ROLE,
        _trust(_pod_trust({"Service": "PODS.EKS.AMAZONAWS.COM"}, tags={})),
    ),
    Attempt(
        "iam-trust-not-open",
        "trust for AWS *",
        ROLE,
        _trust({"Effect": "Allow", "Principal": {"AWS": "*"}, "Action": "sts:AssumeRole"}),
    ),
    Attempt(
        "iam-trust-not-open",
        "trust for Principal *",
        ROLE,
        _trust({"Effect": "Allow", "Principal": "*", "Action": "sts:AssumeRole"}),
    ),
    Attempt(
        "iam-trust-not-open",
        "trust with NotPrincipal",
        ROLE,
        _trust(
            {"Effect": "Allow", "NotPrincipal": {"AWS": "arn:aws:iam::1:root"}, "Action": "sts:AssumeRole"}
        ),
    ),
    Attempt(
        "iam-trust-not-open",
        "trust for * with a condition that pins nobody (SecureTransport)",
        ROLE,
        _trust(
            {
                "Effect": "Allow",
                "Principal": {"AWS": ["*"]},
                "Action": "sts:AssumeRole",
                "Condition": {"Bool": {"aws:SecureTransport": "true"}},
            }
        ),
    ),
    Attempt(
        "iam-trust-not-open",
        "trust for * pinned with StringNotEquals (everyone else)",
        ROLE,
        _trust(
            {
                "Effect": "Allow",
                "Principal": "*",
                "Action": "sts:AssumeRole",
                "Condition": {"StringNotEquals": {"aws:PrincipalAccount": "111122223333"}},
            }
        ),
    ),
    Attempt(
        "iam-trust-not-open",
        "trust for * with aws:PrincipalArn arn:aws:iam::*:*",
        ROLE,
        _trust(
            {
                "Effect": "Allow",
                "Principal": "*",
                "Action": "sts:AssumeRole",
                "Condition": {"ArnLike": {"aws:PrincipalArn": "arn:aws:iam::*:*"}},
            }
        ),
    ),
    # Resource policies open to anyone.
    Attempt(
        "resource-policy-not-public",
        "KMS key policy for Principal *",
        "aws:kms/key:Key",
        _resource_policy("*"),
    ),
    Attempt(
        "resource-policy-not-public",
        "ECR repository policy for AWS *",
        "aws:ecr/repositoryPolicy:RepositoryPolicy",
        _resource_policy({"AWS": "*"}),
    ),
    Attempt(
        "resource-policy-not-public",
        "SQS queue policy for AWS [*]",
        "aws:sqs/queuePolicy:QueuePolicy",
        _resource_policy({"AWS": ["*"]}),
    ),
    Attempt(
        "resource-policy-not-public",
        "S3 bucket policy Allow for * (no condition)",
        BUCKET_POLICY,
        _resource_policy("*"),
    ),
    Attempt(
        "resource-policy-not-public",
        "S3 bucket policy for * with IfExists org pin",
        BUCKET_POLICY,
        _resource_policy("*", {"StringEqualsIfExists": {"aws:PrincipalOrgID": "o-abc123"}}),
    ),
    Attempt(
        "resource-policy-not-public",
        "SQS Queue's own policy input with NotPrincipal",
        "aws:sqs/queue:Queue",
        {
            "policy": _doc(
                {
                    "Effect": "Allow",
                    "NotPrincipal": {"AWS": "arn:aws:iam::1:root"},
                    "Action": "sqs:*",
                    "Resource": "*",
                }
            )
        },
    ),
    Attempt(
        "resource-policy-not-public",
        "SNS topic policy for Principal *",
        "aws:sns/topicPolicy:TopicPolicy",
        {"arn": "t", **_resource_policy("*")},
    ),
    Attempt(
        "resource-policy-not-public",
        "Lambda permission for *",
        "aws:lambda/permission:Permission",
        {"action": "lambda:InvokeFunction", "function": "f", "principal": "*"},
    ),
    # Security groups.
    Attempt(
        "network-no-internet-admin-ports", "SSH from 0.0.0.0/0", SG_RULE, _ingress("tcp", 22, 22, "0.0.0.0/0")
    ),
    Attempt(
        "network-no-internet-admin-ports",
        "kubelet inside a 1-65535 range",
        SG_RULE,
        _ingress("tcp", 1, 65535, "0.0.0.0/0"),
    ),
    Attempt(
        "network-no-internet-admin-ports",
        "all traffic (-1) from ::/0",
        SG_RULE,
        {"type": "ingress", "protocol": "-1", "fromPort": 0, "toPort": 0, "ipv6CidrBlocks": ["::/0"]},
    ),
    Attempt(
        "network-no-internet-admin-ports",
        "etcd from two /1 halves",
        SG,
        {
            "ingress": [
                {
                    "protocol": "tcp",
                    "fromPort": 2379,
                    "toPort": 2380,
                    "cidrBlocks": ["0.0.0.0/1", "128.0.0.0/1"],
                }
            ]
        },
    ),
    Attempt(
        "network-no-internet-admin-ports",
        "RDP as protocol 6 on a vpc ingress rule",
        INGRESS_RULE,
        {"ipProtocol": "6", "fromPort": 3389, "toPort": 3389, "cidrIpv4": "0.0.0.0/0"},
    ),
    Attempt(
        "network-no-internet-admin-ports",
        "API server 6443 from a /8 of public space",
        SG_RULE,
        _ingress("tcp", 6443, 6443, "52.0.0.0/8"),
    ),
    # IMDS on an instance.
    Attempt(
        "nodes-imdsv2-hop-limit-1",
        "an instance with IMDSv1 optional",
        "aws:ec2/instance:Instance",
        {"metadataOptions": {"httpTokens": "optional", "httpPutResponseHopLimit": 1}},
    ),
    Attempt(
        "nodes-imdsv2-hop-limit-1",
        "a launch template with hop limit 2",
        LT,
        {"metadataOptions": {"httpTokens": "required", "httpPutResponseHopLimit": 2}},
    ),
    Attempt(
        "nodes-imdsv2-hop-limit-1",
        "a launch configuration without metadata options",
        "aws:ec2/launchConfiguration:LaunchConfiguration",
        {"imageId": "ami-1"},
    ),
    # RBAC, webhooks, namespaces, network policies.
    Attempt(
        "k8s-rbac-no-cluster-admin-grants",
        "cluster-admin to system:authenticated",
        CRB,
        _binding("cluster-admin", {"kind": "Group", "name": "system:authenticated"}),
    ),
    Attempt(
        "k8s-rbac-no-cluster-admin-grants",
        "cluster-admin to a job's service account",
        CRB,
        _binding("cluster-admin", {"kind": "ServiceAccount", "name": "zimdb", "namespace": "zimdb"}),
    ),
    Attempt(
        "k8s-rbac-no-cluster-admin-grants",
        "cluster-admin in a namespace through a RoleBinding",
        RB,
        _binding("cluster-admin", {"kind": "ServiceAccount", "name": "default", "namespace": "zimdb"}),
    ),
    Attempt(
        "k8s-rbac-no-cluster-admin-grants",
        "edit to every service account",
        CRB,
        _binding("edit", {"kind": "Group", "name": "system:serviceaccounts"}),
    ),
    Attempt(
        "k8s-rbac-no-cluster-admin-grants",
        "a ClusterRole with * on * (cluster-admin by another name)",
        CLUSTER_ROLE,
        {"rules": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]},
    ),
    Attempt(
        "k8s-rbac-no-cluster-admin-grants",
        "impersonate on every resource",
        CLUSTER_ROLE,
        {"rules": [{"apiGroups": [""], "resources": ["*"], "verbs": ["impersonate"]}]},
    ),
    Attempt(
        "k8s-webhooks-stay-in-cluster",
        "every object to an external URL",
        VALIDATING,
        _webhook([{"apiGroups": ["*"], "apiVersions": ["*"], "resources": ["*"], "operations": ["*"]}]),
    ),
    Attempt(
        "k8s-webhooks-stay-in-cluster",
        "Secrets to an external URL",
        VALIDATING,
        _webhook(
            [{"apiGroups": [""], "apiVersions": ["v1"], "resources": ["secrets"], "operations": ["CREATE"]}]
        ),
    ),
    Attempt(
        "k8s-webhooks-stay-in-cluster",
        "an external mutating webhook on pods",
        MUTATING,
        _webhook(
            [{"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"], "operations": ["CREATE"]}]
        ),
    ),
    Attempt(
        "k8s-namespace-pod-security-not-lowered",
        "a job namespace enforcing privileged",
        NAMESPACE,
        _namespace({ENFORCE: "privileged"}),
    ),
    Attempt(
        "k8s-namespace-pod-security-not-lowered",
        "a namespace without an enforce label",
        NAMESPACE,
        _namespace({"team": "a"}),
    ),
    Attempt(
        "k8s-namespace-pod-security-not-lowered",
        "a platform namespace patched down to baseline",
        NAMESPACE_PATCH,
        _namespace({ENFORCE: "baseline"}, name="kubeflow-system"),
    ),
    Attempt(
        "k8s-namespace-pod-security-not-lowered",
        "restricted pinned to v1.22 (before runAsUser)",
        NAMESPACE,
        _namespace({ENFORCE: "restricted", "pod-security.kubernetes.io/enforce-version": "v1.22"}),
    ),
    Attempt("k8s-no-allow-all-network-policy", "an empty ingress rule", NETPOL, _netpol(ingress=[{}])),
    Attempt(
        "k8s-no-allow-all-network-policy",
        "egress to 0.0.0.0/0 on every port",
        NETPOL,
        _netpol(policyTypes=["Egress"], egress=[{"to": [{"ipBlock": {"cidr": "0.0.0.0/0"}}]}]),
    ),
    Attempt(
        "k8s-no-allow-all-network-policy",
        "ingress from namespaceSelector {} on ports 1-65535",
        NETPOL,
        _netpol(ingress=[{"from": [{"namespaceSelector": {}}], "ports": [{"port": 1, "endPort": 65535}]}]),
    ),
    # Pods: allow-lists instead of deny-lists, every pod-bearing kind.
    Attempt(
        "k8s-no-privileged-containers",
        "NET_ADMIN (not on any deny-list)",
        POD,
        _pod(ctx={"capabilities": {"add": ["NET_ADMIN"]}}),
    ),
    Attempt(
        "k8s-no-privileged-containers",
        "cap_dac_read_search in lower case",
        POD,
        _pod(ctx={"capabilities": {"add": ["cap_dac_read_search"]}}),
    ),
    Attempt(
        "k8s-no-privileged-containers",
        "a training pod adding CHOWN (baseline allows, restricted not)",
        "kubernetes:kubeflow.org/v1:PyTorchJob",
        {
            "kind": "PyTorchJob",
            "spec": {
                "pytorchReplicaSpecs": {
                    "Master": {
                        "template": {
                            "spec": _root_pod({"capabilities": {"add": ["CHOWN"]}, "runAsNonRoot": True})
                        }
                    }
                }
            },
        },
    ),
    Attempt("k8s-no-privileged-containers", "procMount Unmasked", POD, _pod(ctx={"procMount": "Unmasked"})),
    Attempt(
        "k8s-no-privileged-containers",
        "seccomp Unconfined on the pod",
        POD,
        _pod({"securityContext": {"seccompProfile": {"type": "Unconfined"}}}),
    ),
    Attempt(
        "k8s-no-privileged-containers",
        "AppArmor Unconfined on a container",
        POD,
        _pod(ctx={"appArmorProfile": {"type": "Unconfined"}}),
    ),
    Attempt(
        "k8s-no-privileged-containers",
        "AppArmor unconfined by annotation",
        POD,
        {
            **_pod(),
            "metadata": {
                "name": "p",
                "annotations": {"container.apparmor.security.beta.kubernetes.io/c": "unconfined"},
            },
        },
    ),
    Attempt(
        "k8s-no-privileged-containers",
        "hostPort 10250",
        POD,
        {
            **_pod(),
            "spec": {
                "containers": [
                    {"name": "c", "image": "x:1", "ports": [{"containerPort": 80, "hostPort": 10250}]}
                ]
            },
        },
    ),
    Attempt("k8s-no-privileged-containers", "hostPath /./etc", POD, _pod(_host_path("/./etc"))),
    Attempt(
        "k8s-no-privileged-containers",
        "hostPath //var/lib/kubelet",
        POD,
        _pod(_host_path("//var/lib/kubelet")),
    ),
    Attempt(
        "k8s-no-privileged-containers",
        "hostPath /opt (not on any deny-list)",
        POD,
        _pod(_host_path("/opt/x")),
    ),
    Attempt(
        "k8s-no-privileged-containers",
        "hostPath through a PersistentVolume",
        PV,
        {"kind": "PersistentVolume", "spec": {"hostPath": {"path": "/"}, "capacity": {"storage": "1Gi"}}},
    ),
    Attempt(
        "k8s-no-privileged-containers",
        "a sysctl outside the safe set",
        POD,
        _pod({"securityContext": {"sysctls": [{"name": "kernel.core_pattern", "value": "|/x"}]}}),
    ),
    Attempt(
        "k8s-no-privileged-containers",
        "SELinux type spc_t",
        POD,
        _pod(ctx={"seLinuxOptions": {"type": "spc_t"}}),
    ),
    Attempt(
        "k8s-no-privileged-containers",
        "hostNetwork in a CronJob",
        "kubernetes:batch/v1:CronJob",
        _workload(
            "CronJob", "batch/v1", {"hostNetwork": True, "containers": [{"name": "c", "image": "x:1"}]}
        ),
    ),
    Attempt(
        "k8s-training-run-as-non-root",
        "runAsUser 0 in a RayJob head",
        "kubernetes:ray.io/v1:RayJob",
        _workload("RayJob", "ray.io/v1", _root_pod({"runAsUser": 0})),
    ),
    Attempt(
        "k8s-training-run-as-non-root",
        "runAsUser 0 on a StatefulSet pod",
        "kubernetes:apps/v1:StatefulSet",
        _workload("StatefulSet", "apps/v1", _root_pod(pod_ctx={"runAsUser": 0})),
    ),
    Attempt(
        "k8s-training-run-as-non-root",
        "runAsUser 0 in a CronJob",
        "kubernetes:batch/v1:CronJob",
        _workload("CronJob", "batch/v1", _root_pod({"runAsUser": 0})),
    ),
    Attempt(
        "k8s-training-run-as-non-root",
        "a RayJob without runAsNonRoot",
        "kubernetes:ray.io/v1:RayJob",
        _workload("RayJob", "ray.io/v1", _root_pod()),
    ),
    Attempt(
        "k8s-training-run-as-non-root",
        "an MPIJob worker as root",
        "kubernetes:kubeflow.org/v2beta1:MPIJob",
        _workload("MPIJob", "kubeflow.org/v2beta1", _root_pod(pod_ctx={"runAsUser": 0})),
    ),
    Attempt(
        "k8s-images-pinned",
        ":main",
        POD,
        {**_pod(), "spec": {"containers": [{"name": "c", "image": "r/x:main"}]}},
    ),
    Attempt(
        "k8s-images-pinned",
        ":stable in a Deployment",
        "kubernetes:apps/v1:Deployment",
        _workload("Deployment", "apps/v1", {"containers": [{"name": "c", "image": "ghcr.io/o/x:stable"}]}),
    ),
    Attempt(
        "k8s-images-pinned",
        "a malformed digest",
        POD,
        {**_pod(), "spec": {"containers": [{"name": "c", "image": "r/x@sha256:abc"}]}},
    ),
    Attempt(
        "k8s-helm-values-no-privilege",
        "privileged through release values",
        RELEASE,
        {"chart": "c", "values": {"controller": {"securityContext": {"privileged": True}}}},
    ),
    Attempt(
        "k8s-helm-values-no-privilege",
        "hostPath through release values",
        RELEASE,
        {"chart": "c", "values": {"extraVolumes": [{"name": "h", "hostPath": {"path": "//etc"}}]}},
    ),
    Attempt(
        "k8s-helm-values-no-privilege",
        "runAsUser 0 through release values",
        RELEASE,
        {"chart": "c", "values": {"podSecurityContext": {"runAsUser": 0}}},
    ),
    Attempt(
        "k8s-helm-values-no-privilege",
        "SYS_PTRACE through release values",
        RELEASE,
        {"chart": "c", "values": {"securityContext": {"capabilities": {"add": ["sys_ptrace"]}}}},
    ),
    Attempt(
        "k8s-helm-values-no-privilege",
        "image tag main through release values",
        RELEASE,
        {"chart": "c", "values": {"image": {"repository": "r/x", "tag": "main"}}},
    ),
)
ATTEMPTS = ATTEMPTS + MEANING_ATTEMPTS


def reported(attempt: Attempt) -> bool:
    """Whether the pack's policy `attempt.policy` reports the attempt as the engine runs the pack
    (tests/policy/engine_path.py: the inputs as the analyzer receives them)."""
    from tests.policy.engine_path import policies_reporting

    return attempt.policy in policies_reporting(attempt.type_, attempt.inputs, prod=attempt.prod)


def figures() -> dict[str, tuple[int, int]]:
    """policy -> (attempts reported, attempts)."""
    total = Counter(a.policy for a in ATTEMPTS)
    caught = Counter(a.policy for a in ATTEMPTS if reported(a))
    return {p: (caught[p], n) for p, n in total.items()}


if __name__ == "__main__":
    import argparse

    argparse.ArgumentParser(prog="python -m tests.policy.bypasses", description=__doc__).parse_args()
    results = figures()
    for policy, (caught, n) in results.items():
        print(f"{policy}: {caught}/{n}")
    print(f"all: {sum(c for c, _ in results.values())}/{len(ATTEMPTS)}")
    new = sum(reported(a) for a in MEANING_ATTEMPTS)
    print(f"of which the attempts against meaning: {new}/{len(MEANING_ATTEMPTS)}")
