"""Ways around the guardrails that only a reading of meaning or of the whole stack catches: grants split
over policies, patterns or rules that add up to everything, wildcards in the values that should pin a
caller, tags the holder may set, pods found by their fields, Helm values however given, and the classes of
resources the pack did not look at. Each attempt is a stack (one resource or several, linked by the
engine's property dependencies, sometimes with the values a first preview does not know yet) that the
named policy must report; each SECURE entry is a stack it must pass. Both run through the engine's path
(tests/policy/engine_path.py)."""

from __future__ import annotations

import json
import string
from typing import Any, NamedTuple

from policy.core import Resource
from tests.policy.engine_path import UNKNOWN

ACCOUNT = "111122223333"
ROLE = "aws:iam/role:Role"
POLICY = "aws:iam/policy:Policy"
ROLE_POLICY = "aws:iam/rolePolicy:RolePolicy"
ATTACHMENT = "aws:iam/rolePolicyAttachment:RolePolicyAttachment"
BUCKET_POLICY = "aws:s3/bucketPolicy:BucketPolicy"
KMS_KEY = "aws:kms/key:Key"
SECRET_POLICY = "aws:secretsmanager/secretPolicy:SecretPolicy"
ECR_POLICY = "aws:ecr/repositoryPolicy:RepositoryPolicy"


class Attempt(NamedTuple):
    policy: str
    what: str
    resources: tuple[Resource, ...]
    prod: bool = False


def doc(*statements: dict[str, Any]) -> str:
    return json.dumps({"Version": "2012-10-17", "Statement": list(statements)})


def allow(action: Any, resource: Any = "*", **extra: Any) -> dict[str, Any]:
    return {"Effect": "Allow", "Action": action, "Resource": resource, **extra}


def one(type_: str, inputs: dict[str, Any], name: str = "r") -> tuple[Resource, ...]:
    return (Resource(type=type_, name=name, inputs=inputs),)


def role(name: str = "builder", **inputs: Any) -> Resource:
    trust = doc(
        {"Effect": "Allow", "Principal": {"Service": "ec2.amazonaws.com"}, "Action": "sts:AssumeRole"}
    )
    return Resource(type=ROLE, name=name, inputs={"assumeRolePolicy": trust, **inputs})


def role_policy(name: str, document: str, role_name: str = "builder", preview: bool = False) -> Resource:
    """An inline policy of `role_name`; in a preview its role's name is not known yet, only the
    dependency the engine records."""
    inputs = {"role": UNKNOWN if preview else role_name, "policy": document}
    return Resource(type=ROLE_POLICY, name=name, inputs=inputs, deps={"role": [role_name]})


def policy(resource_name: str, document: str, **inputs: Any) -> Resource:
    return Resource(type=POLICY, name=resource_name, inputs={"policy": document, **inputs})


def attachment(name: str, policy_name: str, role_name: str = "builder") -> Resource:
    inputs = {"role": UNKNOWN, "policyArn": UNKNOWN}
    return Resource(
        type=ATTACHMENT, name=name, inputs=inputs, deps={"role": [role_name], "policyArn": [policy_name]}
    )


def managed(name: str, policy_name: str, role_name: str = "builder") -> Resource:
    inputs = {"role": role_name, "policyArn": f"arn:aws:iam::aws:policy/{policy_name}"}
    return Resource(type=ATTACHMENT, name=name, inputs=inputs)


TLS_ONLY = {
    "Effect": "Deny",
    "Principal": "*",
    "Action": "s3:*",
    "Resource": ["arn:aws:s3:::b", "arn:aws:s3:::b/*"],
    "Condition": {"Bool": {"aws:SecureTransport": "false"}},
}


def public(condition: dict[str, Any], action: str = "*") -> dict[str, Any]:
    return {"Effect": "Allow", "Principal": "*", "Action": action, "Resource": "*", "Condition": condition}


def trust(condition: dict[str, Any]) -> dict[str, Any]:
    statement = {
        "Effect": "Allow",
        "Principal": {"AWS": "*"},
        "Action": "sts:AssumeRole",
        "Condition": condition,
    }
    return {"assumeRolePolicy": doc(statement)}


NAME_CHARS = sorted(set(string.ascii_letters + string.digits + "+=,.@_-/:"))
ROLES = f"arn:aws:iam::{ACCOUNT}:role/"
EVERY_ROLE_BY_PREFIX = [f"{ROLES}{ch}*" for ch in NAME_CHARS]
HALF = len(EVERY_ROLE_BY_PREFIX) // 2
# ec2:ModifyInstanceAttribute, then a stop and a start, runs new user data as the instance's role.
USER_DATA = ["ec2:ModifyInstanceAttribute"]
RESTART = ["ec2:StopInstances", "ec2:StartInstances"]

IAM_ATTEMPTS: tuple[Attempt, ...] = (
    Attempt(
        "iam-no-star-on-star",
        "PassRole over prefixes that together name every role",
        one(POLICY, {"policy": doc(allow("iam:PassRole", EVERY_ROLE_BY_PREFIX))}),
    ),
    Attempt(
        "iam-no-star-on-star",
        "PassRole on role/? and role/??*: every name of one character and of more",
        one(POLICY, {"policy": doc(allow("iam:PassRole", [f"{ROLES}?", f"{ROLES}??*"]))}),
    ),
    Attempt(
        "iam-no-star-on-star",
        "s3:GetObjectVersion on every object",
        one(POLICY, {"policy": doc(allow("s3:GetObjectVersion"))}),
    ),
    Attempt(
        "iam-no-star-on-star",
        "ssm:GetParameterHistory on every parameter",
        one(POLICY, {"policy": doc(allow("ssm:GetParameterHistory"))}),
    ),
    Attempt(
        "iam-no-star-on-star",
        "reads narrowed by a tag the holder may set itself",
        one(
            POLICY,
            {
                "policy": doc(
                    allow("s3:GetObject", Condition={"StringEquals": {"aws:ResourceTag/team": "a"}}),
                    allow("s3:PutObjectTagging"),
                )
            },
        ),
    ),
    Attempt(
        "iam-no-star-on-star",
        "PassRole narrowed to roles tagged passable, with iam:TagRole on every role",
        one(
            POLICY,
            {
                "policy": doc(
                    allow("iam:PassRole", Condition={"StringEquals": {"iam:ResourceTag/passable": "true"}}),
                    allow("iam:TagRole"),
                )
            },
        ),
    ),
    Attempt(
        "iam-principal-no-escalation",
        "secrets narrowed by a tag that another policy of the role lets it set",
        (
            role(),
            role_policy(
                "read",
                doc(
                    allow(
                        "secretsmanager:GetSecretValue",
                        Condition={"StringEquals": {"aws:ResourceTag/team": "a"}},
                    )
                ),
            ),
            role_policy("tag", doc(allow("secretsmanager:TagResource"))),
        ),
    ),
    Attempt(
        "iam-no-star-on-star",
        "AmazonS3ReadOnlyAccess attached (reads every object)",
        one(ATTACHMENT, {"role": "r", "policyArn": "arn:aws:iam::aws:policy/AmazonS3ReadOnlyAccess"}),
    ),
    Attempt(
        "iam-no-star-on-star",
        "ReadOnlyAccess in managedPolicyArns",
        one(ROLE, {"managedPolicyArns": ["arn:aws:iam::aws:policy/ReadOnlyAccess"]}),
    ),
    Attempt(
        "iam-no-star-on-star",
        "AmazonSSMFullAccess through an exclusive attachment",
        one(
            "aws:iam/rolePolicyAttachmentsExclusive:RolePolicyAttachmentsExclusive",
            {"roleName": "r", "policyArns": ["arn:aws:iam::aws:policy/AmazonSSMFullAccess"]},
        ),
    ),
    Attempt(
        "iam-no-star-on-star",
        "AmazonSSMManagedInstanceCore (ssm:GetParameter on every parameter)",
        one(ATTACHMENT, {"role": "r", "policyArn": "arn:aws:iam::aws:policy/AmazonSSMManagedInstanceCore"}),
    ),
    Attempt(
        "iam-principal-no-escalation",
        "an escalation path split over two inline policies of one role (a preview: names unknown)",
        (
            role(),
            role_policy("a", doc(allow(USER_DATA)), preview=True),
            role_policy("b", doc(allow(RESTART))),
        ),
    ),
    Attempt(
        "iam-principal-no-escalation",
        "PassRole prefixes split over two customer managed policies",
        (
            role(),
            policy("first", doc(allow("iam:PassRole", EVERY_ROLE_BY_PREFIX[:HALF]))),
            policy("second", doc(allow("iam:PassRole", EVERY_ROLE_BY_PREFIX[HALF:]))),
            attachment("first", "first"),
            attachment("second", "second"),
        ),
    ),
    Attempt(
        "iam-principal-no-escalation",
        "the rest of a path in an AWS managed policy beside an inline one",
        (
            role(),
            role_policy("a", doc(allow(USER_DATA))),
            managed("m", "AWSQuickSetupStartStopInstancesExecutionPolicy"),
        ),
    ),
    Attempt(
        "iam-principal-no-escalation",
        "a policy that may rewrite itself (CreatePolicyVersion on policy/mlops-*)",
        (
            role(),
            policy(
                "ci",
                doc(
                    allow(
                        ["iam:CreatePolicyVersion", "iam:SetDefaultPolicyVersion"],
                        f"arn:aws:iam::{ACCOUNT}:policy/mlops-*",
                    )
                ),
                name="mlops-ci",
            ),
            attachment("ci", "ci"),
        ),
    ),
    Attempt(
        "iam-principal-no-escalation",
        "a loose policy that may rewrite itself, auto-named",
        (
            policy(
                "mlops-deployer",
                doc(allow("iam:CreatePolicyVersion", f"arn:aws:iam::{ACCOUNT}:policy/mlops-*")),
            ),
        ),
    ),
    Attempt(
        "iam-principal-no-escalation",
        "PutRolePolicy on its own role",
        (
            role(),
            role_policy("self", doc(allow("iam:PutRolePolicy", f"arn:aws:iam::{ACCOUNT}:role/builder"))),
        ),
    ),
    Attempt(
        "iam-principal-no-escalation",
        "AttachRolePolicy on its own role, named by a prefix",
        (
            role("deployer", namePrefix="ci-"),
            role_policy(
                "self", doc(allow("iam:AttachRolePolicy", f"arn:aws:iam::{ACCOUNT}:role/ci-*")), "deployer"
            ),
        ),
    ),
)

PIN_ATTEMPTS: tuple[Attempt, ...] = (
    Attempt(
        "resource-policy-not-public",
        "bucket policy for every organization (o-*)",
        one(
            BUCKET_POLICY,
            {"bucket": "b", "policy": doc(public({"StringLike": {"aws:PrincipalOrgID": "o-*"}}))},
        ),
    ),
    Attempt(
        "resource-policy-not-public",
        "KMS key for every VPC endpoint (vpce-*)",
        one(KMS_KEY, {"policy": doc(public({"StringLike": {"aws:SourceVpce": "vpce-*"}}))}),
    ),
    Attempt(
        "resource-policy-not-public",
        "secret for every role session (AROA*)",
        one(
            SECRET_POLICY, {"secretArn": "s", "policy": doc(public({"StringLike": {"aws:userid": "AROA*"}}))}
        ),
    ),
    Attempt(
        "resource-policy-not-public",
        "ECR repository for every AWS principal (arn:aws:*)",
        one(
            ECR_POLICY,
            {"repository": "r", "policy": doc(public({"ArnLike": {"aws:PrincipalArn": "arn:aws:*"}}))},
        ),
    ),
    Attempt(
        "resource-policy-not-public",
        "ForAllValues over an org id the anonymous caller does not carry",
        one(
            BUCKET_POLICY,
            {
                "bucket": "b",
                "policy": doc(public({"ForAllValues:StringEquals": {"aws:PrincipalOrgID": "o-a1b2c3d4e5"}})),
            },
        ),
    ),
    Attempt(
        "iam-trust-not-open",
        "trust for every account's roles (arn:aws:iam::*:role/*)",
        one(ROLE, trust({"ArnLike": {"aws:PrincipalArn": "arn:aws:iam::*:role/*"}})),
    ),
    Attempt(
        "iam-trust-not-open",
        "trust for every organization path (o-*/*)",
        one(ROLE, trust({"ForAnyValue:StringLike": {"aws:PrincipalOrgPaths": "o-*/*"}})),
    ),
)

NACL = "aws:ec2/networkAcl:NetworkAcl"
NACL_RULE = "aws:ec2/networkAclRule:NetworkAclRule"
SG_RULE = "aws:ec2/securityGroupRule:SecurityGroupRule"
PREFIX_LIST = "aws:ec2/managedPrefixList:ManagedPrefixList"
NETPOL = "kubernetes:networking.k8s.io/v1:NetworkPolicy"


def acl_entry(rule_no: int, action: str, cidr: str, low: int = 22, high: int = 22) -> dict[str, Any]:
    return {
        "ruleNo": rule_no,
        "action": action,
        "protocol": "tcp",
        "fromPort": low,
        "toPort": high,
        "cidrBlock": cidr,
    }


def prefix_list(*cidrs: str) -> Resource:
    entries = [{"cidr": c} for c in cidrs]
    return Resource(
        type=PREFIX_LIST, name="office", inputs={"name": "office", "maxEntries": 5, "entries": entries}
    )


def ssh_from_prefix_list(preview: bool = True) -> Resource:
    inputs = {"type": "ingress", "protocol": "tcp", "fromPort": 22, "toPort": 22, "securityGroupId": "sg-1"}
    inputs["prefixListIds"] = [UNKNOWN if preview else "office-id"]
    return Resource(type=SG_RULE, name="ssh", inputs=inputs, deps={"prefixListIds": ["office"]})


def netpol(direction: str, *rules: dict[str, Any]) -> dict[str, Any]:
    return {
        "metadata": {"name": "n", "namespace": "team-a"},
        "spec": {"podSelector": {}, direction: list(rules)},
    }


NETWORK_ATTEMPTS: tuple[Attempt, ...] = (
    Attempt(
        "network-no-internet-admin-ports",
        "a network ACL that admits SSH from everywhere",
        one(NACL, {"vpcId": "vpc-1", "ingress": [acl_entry(100, "allow", "0.0.0.0/0")]}),
    ),
    Attempt(
        "network-no-internet-admin-ports",
        "a NetworkAclRule for ports 1024-65535 (RDP among them) from the internet",
        one(
            NACL_RULE,
            {
                "networkAclId": "acl-1",
                "ruleNumber": 100,
                "egress": False,
                "ruleAction": "allow",
                "protocol": "6",
                "fromPort": 1024,
                "toPort": 65535,
                "cidrBlock": "0.0.0.0/0",
            },
        ),
    ),
    Attempt(
        "network-no-internet-admin-ports",
        "an ACL deny that comes after the allow it should stop",
        one(
            NACL,
            {
                "vpcId": "vpc-1",
                "ingress": [acl_entry(100, "allow", "0.0.0.0/0"), acl_entry(200, "deny", "0.0.0.0/0")],
            },
        ),
    ),
    Attempt(
        "network-default-security-group-closed",
        "the default security group left open inside the VPC",
        one(
            "aws:ec2/defaultSecurityGroup:DefaultSecurityGroup",
            {"vpcId": "vpc-1", "ingress": [{"protocol": "-1", "fromPort": 0, "toPort": 0, "self": True}]},
        ),
    ),
    Attempt(
        "network-prefix-lists-not-internet",
        "SSH from a prefix list holding the internet in halves (a preview: its id unknown)",
        (prefix_list("0.0.0.0/1", "128.0.0.0/1"), ssh_from_prefix_list()),
    ),
    Attempt(
        "network-prefix-lists-not-internet",
        "SSH from a prefix list the stack does not define",
        (
            Resource(
                type=SG_RULE,
                name="ssh",
                inputs={**ssh_from_prefix_list(False).inputs, "prefixListIds": ["pl-0123"]},
            ),
        ),
    ),
    Attempt(
        "k8s-no-allow-all-network-policy",
        "egress to everyone on ports split over two rules",
        one(
            NETPOL,
            netpol(
                "egress",
                {"to": [{"ipBlock": {"cidr": "0.0.0.0/0"}}], "ports": [{"port": 1, "endPort": 32767}]},
                {"to": [{"ipBlock": {"cidr": "0.0.0.0/0"}}], "ports": [{"port": 32768, "endPort": 65535}]},
            ),
        ),
    ),
    Attempt(
        "k8s-no-allow-all-network-policy",
        "ingress from the internet in halves, one peer each",
        one(
            NETPOL,
            netpol(
                "ingress",
                {"from": [{"ipBlock": {"cidr": "0.0.0.0/1"}}, {"ipBlock": {"cidr": "128.0.0.0/1"}}]},
            ),
        ),
    ),
    Attempt(
        "k8s-no-allow-all-network-policy",
        "an exception given back by a second block",
        one(
            NETPOL,
            netpol(
                "egress",
                {
                    "to": [
                        {"ipBlock": {"cidr": "0.0.0.0/0", "except": ["10.0.0.0/8"]}},
                        {"ipBlock": {"cidr": "10.0.0.0/8"}},
                    ]
                },
            ),
        ),
    ),
)

RELEASE = "kubernetes:helm.sh/v3:Release"
ASSET_SIG = {"4dabf18193072939515e22adb298388d": "c44067f5952c0a294b673a41bacd8c17"}
IMAGE = "1.dkr.ecr.us-east-1.amazonaws.com/x:1"


def kind(api: str, kind_: str, spec: dict[str, Any]) -> tuple[Resource, ...]:
    group, _, version = api.rpartition("/")
    token = f"kubernetes:{group or 'core'}/{version}:{kind_}"
    return one(
        token,
        {"apiVersion": api, "kind": kind_, "metadata": {"name": "w", "namespace": "team-a"}, "spec": spec},
    )


def runtime_patch(pod_patch: dict[str, Any]) -> dict[str, Any]:
    """A TrainJob's spec whose runtime patch sets pod fields and repeats no container."""
    replicated = {"name": "node", "template": {"spec": {"template": {"spec": pod_patch}}}}
    patch = {"manager": "x", "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [replicated]}}}}
    return {"runtimeRef": {"name": "torch"}, "trainer": {"image": IMAGE}, "runtimePatches": [patch]}


def release(**inputs: Any) -> tuple[Resource, ...]:
    return one(RELEASE, {"chart": "c", "version": "1.0.0", **inputs})


POD_ATTEMPTS: tuple[Attempt, ...] = (
    Attempt(
        "k8s-no-privileged-containers",
        "a DeploymentPatch that turns on hostNetwork without repeating containers",
        one(
            "kubernetes:apps/v1:DeploymentPatch",
            {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {"name": "coredns", "namespace": "kube-system"},
                "spec": {"template": {"spec": {"hostNetwork": True}}},
            },
        ),
    ),
    Attempt(
        "k8s-training-run-as-non-root",
        "a TrainJob runtime patch that runs the pod as root",
        kind(
            "trainer.kubeflow.org/v1alpha1", "TrainJob", runtime_patch({"securityContext": {"runAsUser": 0}})
        ),
    ),
    Attempt(
        "k8s-training-no-host-namespaces",
        "a TrainJob runtime patch that shares the node's PID namespace",
        kind("trainer.kubeflow.org/v1alpha1", "TrainJob", runtime_patch({"hostPID": True})),
    ),
    Attempt(
        "k8s-training-run-as-non-root",
        "a StatefulSetPatch that sets UID 0 on the pod",
        one(
            "kubernetes:apps/v1:StatefulSetPatch",
            {
                "apiVersion": "apps/v1",
                "kind": "StatefulSet",
                "metadata": {"name": "s"},
                "spec": {"template": {"spec": {"securityContext": {"runAsUser": 0}}}},
            },
        ),
    ),
    Attempt(
        "k8s-no-privileged-containers",
        "an Argo template's container: privileged",
        kind(
            "argoproj.io/v1alpha1",
            "Workflow",
            {
                "entrypoint": "main",
                "templates": [
                    {"name": "main", "container": {"image": IMAGE, "securityContext": {"privileged": True}}}
                ],
            },
        ),
    ),
    Attempt(
        "k8s-no-privileged-containers",
        "an Argo template's hostPath volume beside its script",
        kind(
            "argoproj.io/v1alpha1",
            "WorkflowTemplate",
            {
                "templates": [
                    {
                        "name": "main",
                        "script": {"image": IMAGE, "source": "id"},
                        "volumes": [{"name": "root", "hostPath": {"path": "/"}}],
                    }
                ]
            },
        ),
    ),
    Attempt(
        "k8s-no-privileged-containers",
        "an Argo podSpecPatch string",
        kind("argoproj.io/v1alpha1", "Workflow", {"podSpecPatch": "hostNetwork: true\n", "templates": []}),
    ),
    Attempt(
        "k8s-helm-values-no-privilege",
        "privileged through a valueYamlFiles text asset",
        release(valueYamlFiles=[{**ASSET_SIG, "text": "securityContext:\n  privileged: true\n"}]),
    ),
    Attempt(
        "k8s-helm-values-no-privilege",
        "privileged through a valueYamlFiles file",
        release(valueYamlFiles=[{**ASSET_SIG, "path": "tests/policy/data/privileged-values.yaml"}]),
    ),
    Attempt(
        "k8s-helm-values-no-privilege",
        "a valueYamlFiles file that is not there (cannot be judged)",
        release(valueYamlFiles=[{**ASSET_SIG, "path": "values/missing.yaml"}]),
    ),
    Attempt(
        "k8s-helm-values-no-privilege",
        "a privileged sidecar in a YAML string the chart passes through tpl",
        release(values={"extraContainers": "- name: x\n  securityContext:\n    privileged: true\n"}),
    ),
    Attempt(
        "k8s-helm-values-no-privilege",
        'hostNetwork: "true" (Helm renders the string as true)',
        release(values={"hostNetwork": "true"}),
    ),
    Attempt(
        "k8s-helm-values-no-privilege",
        'runAsUser: "0" as a string',
        release(values={"securityContext": {"runAsUser": "0"}}),
    ),
    Attempt(
        "k8s-helm-values-no-privilege",
        "imageTag: latest",
        release(values={"controller": {"imageTag": "latest"}}),
    ),
    Attempt(
        "k8s-helm-values-no-privilege", "image: repo:main", release(values={"image": "ghcr.io/o/x:main"})
    ),
)

RBAC_API = "rbac.authorization.k8s.io/v1"


def rbac_rule(group: str, resources: list[str], verbs: list[str], **extra: Any) -> dict[str, Any]:
    return {"apiGroups": [group], "resources": resources, "verbs": verbs, **extra}


def cluster_role(name: str, *rules: dict[str, Any], **meta: Any) -> Resource:
    inputs = {
        "apiVersion": RBAC_API,
        "kind": "ClusterRole",
        "metadata": {"name": name, **meta},
        "rules": list(rules),
    }
    return Resource(type="kubernetes:rbac.authorization.k8s.io/v1:ClusterRole", name=name, inputs=inputs)


def ns_role(name: str, namespace: str, *rules: dict[str, Any]) -> Resource:
    meta = {"name": name, "namespace": namespace}
    inputs = {"apiVersion": RBAC_API, "kind": "Role", "metadata": meta, "rules": list(rules)}
    return Resource(
        type="kubernetes:rbac.authorization.k8s.io/v1:Role", name=f"{namespace}-{name}", inputs=inputs
    )


SA = {"kind": "ServiceAccount", "name": "runner", "namespace": "team-a"}


def binding(
    role: str, *subjects: dict[str, str], namespace: str | None = None, kind_: str = "ClusterRole"
) -> Resource:
    kind_name = "RoleBinding" if namespace else "ClusterRoleBinding"
    meta: dict[str, Any] = {"name": f"{role}-binding"}
    if namespace:
        meta["namespace"] = namespace
    inputs = {
        "apiVersion": RBAC_API,
        "kind": kind_name,
        "metadata": meta,
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": kind_, "name": role},
        "subjects": list(subjects or (SA,)),
    }
    return Resource(
        type=f"kubernetes:rbac.authorization.k8s.io/v1:{kind_name}",
        name=f"{role}-{namespace}-b",
        inputs=inputs,
    )


RBAC_ATTEMPTS: tuple[Attempt, ...] = (
    Attempt(
        "k8s-rbac-no-cluster-admin-grants",
        "escalate on clusterroles (not on *)",
        (cluster_role("r", rbac_rule("rbac.authorization.k8s.io", ["clusterroles"], ["escalate"])),),
    ),
    Attempt(
        "k8s-rbac-no-cluster-admin-grants",
        "bind on roles in a team namespace",
        (ns_role("r", "team-a", rbac_rule("rbac.authorization.k8s.io", ["roles"], ["bind"])),),
    ),
    Attempt(
        "k8s-rbac-no-cluster-admin-grants",
        "impersonate users",
        (cluster_role("r", rbac_rule("", ["users"], ["impersonate"])),),
    ),
    Attempt(
        "k8s-rbac-no-cluster-admin-grants",
        "an aggregation rule whose selector names no label value (every ClusterRole)",
        (
            Resource(
                type="kubernetes:rbac.authorization.k8s.io/v1:ClusterRole",
                name="all",
                inputs={
                    "metadata": {"name": "all"},
                    "aggregationRule": {
                        "clusterRoleSelectors": [{"matchExpressions": [{"key": "app", "operator": "Exists"}]}]
                    },
                    "rules": [],
                },
            ),
        ),
    ),
    Attempt(
        "k8s-rbac-no-cluster-admin-grants",
        "Secret reads added to the built-in view role",
        (
            cluster_role(
                "peek",
                rbac_rule("", ["secrets"], ["get", "list"]),
                labels={"rbac.authorization.k8s.io/aggregate-to-view": "true"},
            ),
        ),
    ),
    Attempt(
        "k8s-rbac-no-cluster-admin-grants",
        "the built-in edit in every namespace",
        (binding("edit", {"kind": "Group", "name": "developers"}),),
    ),
    Attempt(
        "k8s-rbac-no-cluster-admin-grants",
        "the built-in admin in kube-system",
        (binding("admin", namespace="kube-system"),),
    ),
    Attempt(
        "k8s-rbac-no-cluster-admin-grants",
        "cluster-admin to a User named like a service account",
        (binding("cluster-admin", {"kind": "User", "name": "system:serviceaccount:team-a:runner"}),),
    ),
    Attempt(
        "k8s-rbac-no-cluster-admin-grants",
        "the kubelet's role to a service account",
        (binding("system:node"),),
    ),
    Attempt(
        "k8s-rbac-effective-privileges",
        "nodes/proxy through a ClusterRoleBinding",
        (cluster_role("kubelet-api", rbac_rule("", ["nodes/proxy"], ["get"])), binding("kubelet-api")),
    ),
    Attempt(
        "k8s-rbac-effective-privileges",
        "service account tokens in every namespace",
        (cluster_role("tokens", rbac_rule("", ["serviceaccounts/token"], ["create"])), binding("tokens")),
    ),
    Attempt(
        "k8s-rbac-effective-privileges",
        "pods/exec in kube-system",
        (
            ns_role("debug", "kube-system", rbac_rule("", ["pods/exec"], ["create"])),
            binding("debug", namespace="kube-system", kind_="Role"),
        ),
    ),
    Attempt(
        "k8s-rbac-effective-privileges",
        "Secrets of every namespace (list)",
        (cluster_role("secrets", rbac_rule("", ["secrets"], ["list"])), binding("secrets")),
    ),
    Attempt(
        "k8s-rbac-effective-privileges",
        "a ClusterRole for Secrets bound in gpu-system",
        (
            cluster_role("secrets", rbac_rule("", ["secrets"], ["get"])),
            binding("secrets", namespace="gpu-system"),
        ),
    ),
    Attempt(
        "k8s-rbac-effective-privileges",
        "deleting the admission policy bindings",
        (
            cluster_role(
                "lift",
                rbac_rule("admissionregistration.k8s.io", ["validatingadmissionpolicybindings"], ["delete"]),
            ),
            binding("lift"),
        ),
    ),
    Attempt(
        "k8s-rbac-effective-privileges",
        "approving certificate signing requests",
        (
            cluster_role(
                "approve",
                rbac_rule("certificates.k8s.io", ["certificatesigningrequests/approval"], ["update"]),
            ),
            binding("approve"),
        ),
    ),
    Attempt(
        "k8s-rbac-effective-privileges",
        "creating PersistentVolumes",
        (cluster_role("pv", rbac_rule("", ["persistentvolumes"], ["create"])), binding("pv")),
    ),
    Attempt(
        "k8s-rbac-effective-privileges",
        "patching Namespaces (their Pod Security labels)",
        (cluster_role("ns", rbac_rule("", ["namespaces"], ["patch"])), binding("ns")),
    ),
    Attempt(
        "k8s-rbac-effective-privileges",
        "pods/exec aggregated into a role bound cluster-wide",
        (
            cluster_role("exec", rbac_rule("", ["pods/exec"], ["create"]), labels={"team": "ops"}),
            Resource(
                type="kubernetes:rbac.authorization.k8s.io/v1:ClusterRole",
                name="ops",
                inputs={
                    "metadata": {"name": "ops"},
                    "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {"team": "ops"}}]},
                    "rules": [],
                },
            ),
            binding("ops"),
        ),
    ),
)

SERVICE = "kubernetes:core/v1:Service"
ADMIN_POLICY = "arn:aws:eks::aws:cluster-access-policy/AmazonEKSClusterAdminPolicy"
ASSOCIATION = "aws:eks/accessPolicyAssociation:AccessPolicyAssociation"
ADDON = "aws:eks/addon:Addon"
TEMPLATE = "aws:ecr/repositoryCreationTemplate:RepositoryCreationTemplate"
PULL_THROUGH = "aws:ecr/pullThroughCacheRule:PullThroughCacheRule"
WEBHOOK = "kubernetes:admissionregistration.k8s.io/v1:ValidatingWebhookConfiguration"


def service(
    spec: dict[str, Any], annotations: dict[str, str] | None = None, name: str = "dashboard"
) -> Resource:
    meta = {"name": name, "namespace": "team-a", "annotations": annotations or {}}
    return Resource(
        type=SERVICE,
        name=name,
        inputs={"apiVersion": "v1", "kind": "Service", "metadata": meta, "spec": spec},
    )


def ray_head(service_type: str) -> dict[str, Any]:
    pod = {"securityContext": {"runAsNonRoot": True, "runAsUser": 1000}}
    template = {"spec": {**pod, "containers": [{"name": "ray-head", "image": IMAGE}]}}
    return {"headGroupSpec": {"serviceType": service_type, "rayStartParams": {}, "template": template}}


def association(principal: str, policy_arn: str = ADMIN_POLICY, **scope: Any) -> dict[str, Any]:
    return {
        "clusterName": "c",
        "principalArn": principal,
        "policyArn": policy_arn,
        "accessScope": {"type": "cluster", **scope},
    }


def node_role() -> Resource:
    trust = doc(
        {"Effect": "Allow", "Principal": {"Service": "ec2.amazonaws.com"}, "Action": "sts:AssumeRole"}
    )
    return Resource(type=ROLE, name="node", inputs={"assumeRolePolicy": trust})


def template(prefix: str, mutability: str = "IMMUTABLE", **inputs: Any) -> Resource:
    fields = {
        "prefix": prefix,
        "appliedFors": ["PULL_THROUGH_CACHE"],
        "imageTagMutability": mutability,
        **inputs,
    }
    return Resource(type=TEMPLATE, name=f"template-{prefix}", inputs=fields)


def pull_through(prefix: str) -> Resource:
    inputs = {"ecrRepositoryPrefix": prefix, "upstreamRegistryUrl": "registry.k8s.io"}
    return Resource(type=PULL_THROUGH, name=f"cache-{prefix}", inputs=inputs)


def webhook_to(service_name: str) -> Resource:
    hook = {
        "name": "v.example.com",
        "clientConfig": {"service": {"namespace": "team-a", "name": service_name}},
        "rules": [
            {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}
        ],
    }
    return Resource(type=WEBHOOK, name="hook", inputs={"metadata": {"name": "hook"}, "webhooks": [hook]})


CLASS_ATTEMPTS: tuple[Attempt, ...] = (
    Attempt(
        "k8s-services-not-exposed",
        "the Ray dashboard behind an internet-facing LoadBalancer",
        (service({"type": "LoadBalancer", "ports": [{"port": 8265}]}),),
    ),
    Attempt(
        "k8s-services-not-exposed",
        "a NodePort Service",
        (service({"type": "NodePort", "ports": [{"port": 8265}]}),),
    ),
    Attempt(
        "k8s-services-not-exposed",
        "a LoadBalancer whose source ranges are the internet in halves",
        (service({"type": "LoadBalancer", "loadBalancerSourceRanges": ["0.0.0.0/1", "128.0.0.0/1"]}),),
    ),
    Attempt(
        "k8s-services-not-exposed",
        "externalIPs",
        (service({"type": "ClusterIP", "externalIPs": ["10.0.0.9"]}),),
    ),
    Attempt(
        "k8s-services-not-exposed",
        "a RayCluster head of type LoadBalancer",
        kind("ray.io/v1", "RayCluster", ray_head("LoadBalancer")),
    ),
    Attempt(
        "k8s-services-not-exposed",
        "a RayJob's cluster head as a NodePort",
        kind("ray.io/v1", "RayJob", {"entrypoint": "python x.py", "rayClusterSpec": ray_head("NodePort")}),
    ),
    Attempt(
        "k8s-helm-values-no-privilege",
        "a chart's Service made a LoadBalancer through values",
        release(values={"dashboard": {"service": {"type": "LoadBalancer"}}}),
    ),
    Attempt(
        "eks-admin-access-for-named-people",
        "cluster-admin for the account root",
        one(ASSOCIATION, association(f"arn:aws:iam::{ACCOUNT}:root")),
    ),
    Attempt(
        "eks-admin-access-for-named-people",
        "AmazonEKSAdminPolicy in kube-system for a pattern of roles",
        one(
            ASSOCIATION,
            {
                **association(
                    f"arn:aws:iam::{ACCOUNT}:role/*",
                    "arn:aws:eks::aws:cluster-access-policy/AmazonEKSAdminPolicy",
                ),
                "accessScope": {"type": "namespace", "namespaces": ["kube-system"]},
            },
        ),
    ),
    Attempt(
        "eks-admin-access-for-named-people",
        "an access entry in system:masters",
        one(
            "eks:index:Cluster",
            {
                "vpcCniOptions": {"enableNetworkPolicy": True},
                "accessEntries": {
                    "ci": {
                        "principalArn": f"arn:aws:iam::{ACCOUNT}:role/ci",
                        "kubernetesGroups": ["system:masters"],
                    }
                },
            },
        ),
    ),
    Attempt(
        "eks-admin-access-for-named-people",
        "aws-auth mapping a role into system:masters",
        one(
            "kubernetes:core/v1:ConfigMapPatch",
            {
                "metadata": {"name": "aws-auth", "namespace": "kube-system"},
                "data": {
                    "mapRoles": f"- rolearn: arn:aws:iam::{ACCOUNT}:role/ci\n  username: ci\n"
                    "  groups:\n    - system:masters\n"
                },
            },
        ),
    ),
    Attempt(
        "eks-admin-access-not-for-workloads",
        "cluster-admin for the nodes' role (a preview: its ARN unknown)",
        (
            node_role(),
            Resource(
                type=ASSOCIATION,
                name="nodes-admin",
                inputs=association(UNKNOWN),
                deps={"principalArn": ["node"]},
            ),
        ),
    ),
    Attempt(
        "eks-network-policy-enforced",
        "the vpc-cni add-on without the network policy agent",
        one(ADDON, {"clusterName": "c", "addonName": "vpc-cni", "configurationValues": '{"env": {}}'}),
    ),
    Attempt(
        "eks-network-policy-enforced",
        "pulumi-eks's default VPC CNI",
        one("eks:index:Cluster", {"useDefaultVpcCni": True}),
    ),
    Attempt(
        "s3-public-access-blocked",
        "the account's public access block with public policies allowed",
        one(
            "aws:s3/accountPublicAccessBlock:AccountPublicAccessBlock",
            {
                "blockPublicAcls": True,
                "blockPublicPolicy": False,
                "ignorePublicAcls": True,
                "restrictPublicBuckets": True,
            },
        ),
    ),
    Attempt(
        "s3-public-access-blocked",
        "a bucket ACL grant to AllUsers",
        one(
            "aws:s3/bucketAclV2:BucketAclV2",
            {
                "bucket": "b",
                "accessControlPolicy": {
                    "owner": {"id": "o"},
                    "grants": [
                        {
                            "grantee": {
                                "type": "Group",
                                "uri": "http://acs.amazonaws.com/groups/global/AllUsers",
                            },
                            "permission": "READ",
                        }
                    ],
                },
            },
        ),
    ),
    Attempt(
        "s3-public-access-blocked",
        "a public-read bucket ACL",
        one("aws:s3/bucketAcl:BucketAcl", {"bucket": "b", "acl": "public-read"}),
    ),
    Attempt(
        "s3-public-access-blocked",
        "a public-read object",
        one("aws:s3/bucketObjectv2:BucketObjectv2", {"bucket": "b", "key": "k", "acl": "public-read"}),
    ),
    Attempt(
        "s3-public-access-blocked",
        "an access point that lets public bucket policies through",
        one(
            "aws:s3/accessPoint:AccessPoint",
            {"bucket": "b", "name": "ap", "publicAccessBlockConfiguration": {"restrictPublicBuckets": False}},
        ),
    ),
    Attempt(
        "resource-policy-not-public",
        "an access point policy for everyone",
        one(
            "aws:s3control/accessPointPolicy:AccessPointPolicy",
            {"accessPointArn": "a", "policy": doc(public({}))},
        ),
    ),
    Attempt(
        "ecr-scan-and-immutable-tags", "a creation template with mutable tags", (template("ROOT", "MUTABLE"),)
    ),
    Attempt(
        "resource-policy-not-public",
        "a creation template whose repository policy lets anyone pull",
        one(
            TEMPLATE,
            {
                "prefix": "ROOT",
                "appliedFors": ["CREATE_ON_PUSH"],
                "imageTagMutability": "IMMUTABLE",
                "repositoryPolicy": doc(public({})),
            },
        ),
    ),
    Attempt(
        "ecr-pull-through-templated", "a pull-through cache rule without a template", (pull_through("k8s"),)
    ),
    Attempt(
        "ecr-pull-through-templated",
        "a pull-through rule whose template is for another prefix",
        (pull_through("k8s"), template("quay")),
    ),
    Attempt(
        "k8s-no-legacy-service-account-tokens",
        "a legacy service account token Secret",
        one(
            "kubernetes:core/v1:Secret",
            {
                "type": "kubernetes.io/service-account-token",
                "metadata": {"name": "t", "annotations": {"kubernetes.io/service-account.name": "runner"}},
            },
        ),
    ),
    Attempt(
        "k8s-webhook-services-in-cluster",
        "a webhook behind an ExternalName Service",
        (
            service({"type": "ExternalName", "externalName": "hooks.example.net"}, name="hook"),
            webhook_to("hook"),
        ),
    ),
)

ATTEMPTS: tuple[Attempt, ...] = (
    IAM_ATTEMPTS + PIN_ATTEMPTS + NETWORK_ATTEMPTS + POD_ATTEMPTS + RBAC_ATTEMPTS + CLASS_ATTEMPTS
)


class Secure(NamedTuple):
    what: str
    resources: tuple[Resource, ...]
    prod: bool = False


SECURE: tuple[Secure, ...] = (
    Secure("a ClusterIP Service", (service({"type": "ClusterIP", "ports": [{"port": 8265}]}),)),
    Secure(
        "an internal load balancer",
        (
            service(
                {"type": "LoadBalancer", "ports": [{"port": 443}]},
                {"service.beta.kubernetes.io/aws-load-balancer-scheme": "internal"},
            ),
        ),
    ),
    Secure(
        "an internet-facing load balancer for one office block",
        (service({"type": "LoadBalancer", "loadBalancerSourceRanges": ["100.64.7.0/24"]}),),
    ),
    Secure("a RayCluster whose head is ClusterIP", kind("ray.io/v1", "RayCluster", ray_head("ClusterIP"))),
    Secure(
        "cluster-admin for a named role, view for the account",
        (
            Resource(
                type=ASSOCIATION,
                name="admin",
                inputs=association(f"arn:aws:iam::{ACCOUNT}:role/platform-admin"),
            ),
            Resource(
                type=ASSOCIATION,
                name="view",
                inputs=association(
                    f"arn:aws:iam::{ACCOUNT}:root",
                    "arn:aws:eks::aws:cluster-access-policy/AmazonEKSViewPolicy",
                ),
            ),
        ),
    ),
    Secure(
        "the vpc-cni add-on with the network policy agent",
        one(
            ADDON,
            {
                "clusterName": "c",
                "addonName": "vpc-cni",
                "configurationValues": '{"enableNetworkPolicy": "true"}',
            },
        ),
    ),
    Secure(
        "every public access block on, an access point with the defaults",
        (
            Resource(
                type="aws:s3/accountPublicAccessBlock:AccountPublicAccessBlock",
                name="account",
                inputs=dict.fromkeys(
                    ["blockPublicAcls", "blockPublicPolicy", "ignorePublicAcls", "restrictPublicBuckets"],
                    True,
                ),
            ),
            Resource(type="aws:s3/accessPoint:AccessPoint", name="ap", inputs={"bucket": "b", "name": "ap"}),
            Resource(
                type="aws:s3/bucketAclV2:BucketAclV2", name="acl", inputs={"bucket": "b", "acl": "private"}
            ),
        ),
    ),
    Secure("a pull-through rule with its immutable template", (pull_through("k8s"), template("k8s"))),
    Secure(
        "an Opaque Secret", one("kubernetes:core/v1:Secret", {"type": "Opaque", "metadata": {"name": "s"}})
    ),
    Secure(
        "a webhook behind a ClusterIP Service",
        (service({"type": "ClusterIP", "ports": [{"port": 443}]}, name="hook"), webhook_to("hook")),
    ),
    Secure(
        "a controller that reads pods everywhere",
        (cluster_role("reader", rbac_rule("", ["pods"], ["get", "list", "watch"])), binding("reader")),
    ),
    Secure(
        "pods/exec and Secrets in the team's own namespace",
        (
            ns_role("debug", "team-a", rbac_rule("", ["pods/exec", "secrets"], ["create", "get"])),
            binding("debug", namespace="team-a", kind_="Role"),
        ),
    ),
    Secure(
        "the built-in edit in a team namespace",
        (binding("edit", {"kind": "Group", "name": "team-a"}, namespace="team-a"),),
    ),
    Secure("the built-in view in every namespace", (binding("view", {"kind": "Group", "name": "auditors"}),)),
    Secure(
        "one named Secret everywhere",
        (
            cluster_role("one", rbac_rule("", ["secrets"], ["get"], resourceNames=["ca-bundle"])),
            binding("one"),
        ),
    ),
    Secure(
        "a DeploymentPatch that only pins the pods to system nodes",
        one(
            "kubernetes:apps/v1:DeploymentPatch",
            {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {"name": "d"},
                "spec": {"template": {"spec": {"nodeSelector": {"role": "system"}}}},
            },
        ),
    ),
    Secure(
        "a TrainJob runtime patch that only adds tolerations and a node selector",
        kind(
            "trainer.kubeflow.org/v1alpha1",
            "TrainJob",
            runtime_patch(
                {"nodeSelector": {"pool": "t4"}, "securityContext": {"runAsNonRoot": True, "runAsUser": 1000}}
            ),
        ),
    ),
    Secure(
        "an Argo template run as a user, without privileges",
        kind(
            "argoproj.io/v1alpha1",
            "Workflow",
            {
                "securityContext": {"runAsNonRoot": True, "runAsUser": 1000},
                "templates": [
                    {
                        "name": "main",
                        "container": {"image": IMAGE, "securityContext": {"allowPrivilegeEscalation": False}},
                    }
                ],
            },
        ),
    ),
    Secure(
        "release values that tighten, with version tags, in a file and as strings",
        release(
            values={
                "securityContext": {"privileged": "false", "runAsNonRoot": True},
                "imageTag": "v1.2.3",
                "note": "multi\nline text",
            },
            valueYamlFiles=[{**ASSET_SIG, "text": "image:\n  tag: 0.19.2\n"}],
        ),
    ),
    Secure(
        "an ACL whose lower-numbered deny stops SSH from the internet",
        one(
            NACL,
            {
                "vpcId": "vpc-1",
                "ingress": [acl_entry(90, "deny", "0.0.0.0/0"), acl_entry(100, "allow", "0.0.0.0/0")],
            },
        ),
    ),
    Secure(
        "an ACL that admits SSH from the office only, HTTPS from everywhere",
        one(
            NACL,
            {
                "vpcId": "vpc-1",
                "ingress": [
                    acl_entry(100, "allow", "100.64.7.0/24"),
                    acl_entry(110, "allow", "0.0.0.0/0", 443, 443),
                ],
            },
        ),
    ),
    Secure(
        "the default security group closed",
        one(
            "aws:ec2/defaultSecurityGroup:DefaultSecurityGroup",
            {"vpcId": "vpc-1", "ingress": [], "egress": []},
        ),
    ),
    Secure(
        "SSH from a prefix list holding the office", (prefix_list("100.64.7.0/24"), ssh_from_prefix_list())
    ),
    Secure(
        "egress to HTTPS outside private space (a job namespace's)",
        one(
            NETPOL,
            netpol(
                "egress",
                {
                    "to": [{"ipBlock": {"cidr": "0.0.0.0/0", "except": ["10.0.0.0/8", "172.16.0.0/12"]}}],
                    "ports": [{"port": 443, "protocol": "TCP"}],
                },
            ),
        ),
    ),
    Secure(
        "PassRole on one named role",
        one(POLICY, {"policy": doc(allow("iam:PassRole", f"{ROLES}mlops-node"))}),
    ),
    Secure(
        "PassRole on most prefixes but not all",
        one(POLICY, {"policy": doc(allow("iam:PassRole", EVERY_ROLE_BY_PREFIX[1:]))}),
    ),
    Secure(
        "reads of one bucket's prefix",
        one(
            POLICY,
            {"policy": doc(allow(["s3:GetObject", "s3:GetObjectVersion"], "arn:aws:s3:::mlops-data/jobs/*"))},
        ),
    ),
    Secure(
        "reads narrowed by a tag the holder cannot set",
        one(
            POLICY,
            {"policy": doc(allow("s3:GetObject", Condition={"StringEquals": {"aws:ResourceTag/team": "a"}}))},
        ),
    ),
    Secure(
        "a role whose two policies form no path",
        (
            role(),
            role_policy("a", doc(allow(USER_DATA))),
            role_policy("b", doc(allow("ec2:DescribeInstances"))),
        ),
    ),
    Secure(
        "a policy that manages other policies, not itself",
        (
            role(),
            policy(
                "ci",
                doc(allow("iam:CreatePolicyVersion", f"arn:aws:iam::{ACCOUNT}:policy/app-*")),
                name="ci-admin",
            ),
            attachment("ci", "ci"),
        ),
    ),
    Secure(
        "PutRolePolicy on another role only",
        (
            role(),
            role_policy("other", doc(allow("iam:PutRolePolicy", f"arn:aws:iam::{ACCOUNT}:role/app-runner"))),
        ),
    ),
    Secure(
        "bucket policy pinned to one organization",
        one(
            BUCKET_POLICY,
            {
                "bucket": "b",
                "policy": doc(TLS_ONLY, public({"StringEquals": {"aws:PrincipalOrgID": "o-a1b2c3d4e5"}})),
            },
        ),
    ),
    Secure(
        "ForAllValues with the key demanded by a Null condition",
        one(
            BUCKET_POLICY,
            {
                "bucket": "b",
                "policy": doc(
                    TLS_ONLY,
                    public(
                        {
                            "ForAllValues:StringEquals": {"aws:PrincipalOrgID": "o-a1b2c3d4e5"},
                            "Null": {"aws:PrincipalOrgID": "false"},
                        }
                    ),
                ),
            },
        ),
    ),
    Secure(
        "trust for one account's roles",
        one(ROLE, trust({"ArnLike": {"aws:PrincipalArn": f"arn:aws:iam::{ACCOUNT}:role/*"}})),
    ),
    Secure(
        "secret for one role's sessions",
        one(
            SECRET_POLICY,
            {"secretArn": "s", "policy": doc(public({"StringLike": {"aws:userid": "AROAEXAMPLEID:*"}}))},
        ),
    ),
    Secure(
        "Session Manager's own permissions on a node role",
        (
            role("node"),
            role_policy(
                "ssm",
                doc(allow(["ssm:UpdateInstanceInformation", "ssmmessages:CreateControlChannel"])),
                "node",
            ),
        ),
    ),
)
