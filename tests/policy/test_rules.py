"""Each policy reports a minimal bad resource and passes the matching good one, so no policy can pass
by accident; plus the engine wrappers, run through pulumi-policy's own analyzer servicer."""

from __future__ import annotations

import json

import pytest

from policy.core import Resource, evaluate
from policy.pack import RULES, STACK_RULES
from tests.policy.engine_path import violations

RULE = {r.name: r for r in RULES}
LOGS = ["api", "audit", "authenticator", "controllerManager", "scheduler"]
GOOD_AWS_CLUSTER = {
    "version": "1.33",
    "enabledClusterLogTypes": LOGS,
    "encryptionConfig": {"provider": {"keyArn": "arn:aws:kms:us-east-1:1:key/k"}, "resources": ["secrets"]},
    "vpcConfig": {"endpointPrivateAccess": True, "endpointPublicAccess": False},
}
GOOD_EKS_CLUSTER = {
    "version": "1.34",
    "enabledClusterLogTypes": LOGS,
    "encryptionConfigKeyArn": "arn:aws:kms:us-east-1:1:key/k",
    "endpointPrivateAccess": True,
    "endpointPublicAccess": True,
    "publicAccessCidrs": ["203.0.113.0/24"],
    "skipDefaultNodeGroup": True,
    "vpcCniOptions": {"enableNetworkPolicy": True},
}
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "true", "effect": "NO_SCHEDULE"}
GOOD_GPU_NODE_GROUP = {
    "instanceTypes": ["g4dn.12xlarge"],
    "taints": [GPU_TAINT],
    "scalingConfig": {"minSize": 2, "maxSize": 2, "desiredSize": 2},  # reserved: a fixed size
    "launchTemplate": {"id": "lt-1", "version": "1"},
}
# A managed GPU group at minSize 0 that nothing scales: it never gets a node.
STRANDED = {"minSize": 0, "maxSize": 2, "desiredSize": 0}
GOOD_LT = {
    "metadataOptions": {"httpTokens": "required", "httpPutResponseHopLimit": 1, "httpEndpoint": "enabled"}
}
TLS_POLICY = json.dumps(
    {
        "Statement": [
            {
                "Effect": "Deny",
                "Principal": "*",
                "Action": "s3:*",
                "Resource": ["arn:aws:s3:::b", "arn:aws:s3:::b/*"],
                "Condition": {"Bool": {"aws:SecureTransport": "false"}},
            }
        ]
    }
)
OIDC = "oidc.eks.us-east-1.amazonaws.com/id/ABC"


def trust(statement: dict) -> dict:
    return {"assumeRolePolicy": json.dumps({"Version": "2012-10-17", "Statement": [statement]})}


IRSA = {"Effect": "Allow", "Principal": {"Federated": f"arn:aws:iam::1:oidc-provider/{OIDC}"}}
IRSA["Action"] = "sts:AssumeRoleWithWebIdentity"
POD_ID = {"Effect": "Allow", "Principal": {"Service": "pods.eks.amazonaws.com"}}
POD_ID["Action"] = ["sts:AssumeRole", "sts:TagSession"]
POD_ID_SCOPE = {
    "aws:RequestTag/eks-cluster-name": "mlops-dev",
    "aws:RequestTag/kubernetes-namespace": "team-a",
    "aws:RequestTag/kubernetes-service-account": "trainer",
}


def pod(spec_extra: dict | None = None, container_extra: dict | None = None, kind: str = "Pod") -> dict:
    container = {"name": "trainer", "image": "1.dkr.ecr.us-east-1.amazonaws.com/cuda:0.1.0"}
    container.update(container_extra or {})
    spec = {"securityContext": {"runAsNonRoot": True, "runAsUser": 1000}, "containers": [container]}
    spec.update(spec_extra or {})
    if kind == "Pod":
        return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": spec}
    replica = {"replicas": 1, "restartPolicy": "ExitCode", "template": {"spec": spec}}
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": kind,
        "spec": {"pytorchReplicaSpecs": {"Master": replica}},
    }


GPU = {"resources": {"limits": {"nvidia.com/gpu": 4}}}
GPU_TOLERATION = {"tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]}

# rule, type, good inputs, bad inputs
CASES = [
    (
        "eks-secrets-encryption",
        "aws:eks/cluster:Cluster",
        GOOD_AWS_CLUSTER,
        {**GOOD_AWS_CLUSTER, "encryptionConfig": None},
    ),
    (
        "eks-secrets-encryption",
        "eks:index:Cluster",
        GOOD_EKS_CLUSTER,
        {**GOOD_EKS_CLUSTER, "encryptionConfigKeyArn": None},
    ),
    (
        "eks-control-plane-logs",
        "aws:eks/cluster:Cluster",
        GOOD_AWS_CLUSTER,
        {**GOOD_AWS_CLUSTER, "enabledClusterLogTypes": ["api"]},
    ),
    (
        "eks-control-plane-logs",
        "eks:index:Cluster",
        GOOD_EKS_CLUSTER,
        {**GOOD_EKS_CLUSTER, "enabledClusterLogTypes": LOGS[:4]},
    ),
    (
        "eks-endpoint-not-open",
        "eks:index:Cluster",
        GOOD_EKS_CLUSTER,
        {**GOOD_EKS_CLUSTER, "publicAccessCidrs": None},
    ),
    (
        "eks-endpoint-not-open",
        "eks:index:Cluster",
        GOOD_EKS_CLUSTER,
        {**GOOD_EKS_CLUSTER, "endpointPrivateAccess": False},
    ),
    (
        "eks-endpoint-not-open",
        "eks:index:Cluster",
        GOOD_EKS_CLUSTER,
        {**GOOD_EKS_CLUSTER, "publicAccessCidrs": ["100.0.0.0/8"]},
    ),
    (
        "eks-endpoint-not-open",
        "aws:eks/cluster:Cluster",
        GOOD_AWS_CLUSTER,
        {
            **GOOD_AWS_CLUSTER,
            "vpcConfig": {"endpointPrivateAccess": True, "publicAccessCidrs": ["0.0.0.0/0"]},
        },
    ),
    ("eks-supported-version", "eks:index:Cluster", GOOD_EKS_CLUSTER, {**GOOD_EKS_CLUSTER, "version": "1.29"}),
    (
        "eks-supported-version",
        "aws:eks/cluster:Cluster",
        GOOD_AWS_CLUSTER,
        {**GOOD_AWS_CLUSTER, "version": None},
    ),
    (
        "nodes-imdsv2-hop-limit-1",
        "aws:ec2/launchTemplate:LaunchTemplate",
        GOOD_LT,
        {"metadataOptions": {"httpTokens": "optional", "httpPutResponseHopLimit": 1}},
    ),
    (
        "nodes-imdsv2-hop-limit-1",
        "aws:ec2/launchTemplate:LaunchTemplate",
        GOOD_LT,
        {"metadataOptions": {"httpTokens": "required", "httpPutResponseHopLimit": 2}},
    ),
    (
        "nodes-imdsv2-hop-limit-1",
        "eks:index:ManagedNodeGroup",
        GOOD_GPU_NODE_GROUP,
        {**GOOD_GPU_NODE_GROUP, "launchTemplate": None, "enableIMDSv2": True},
    ),
    (
        "nodes-imdsv2-hop-limit-1",
        "aws:eks/nodeGroup:NodeGroup",
        GOOD_GPU_NODE_GROUP,
        {**GOOD_GPU_NODE_GROUP, "launchTemplate": None},
    ),
    (
        "nodes-imdsv2-hop-limit-1",
        "kubernetes:karpenter.k8s.aws/v1:EC2NodeClass",
        {"spec": {"role": "r"}},
        {"spec": {"metadataOptions": {"httpPutResponseHopLimit": 2}}},
    ),
    (
        "nodes-no-ssh",
        "aws:eks/nodeGroup:NodeGroup",
        GOOD_GPU_NODE_GROUP,
        {**GOOD_GPU_NODE_GROUP, "remoteAccess": {"ec2SshKey": "k"}},
    ),
    ("nodes-no-ssh", "aws:ec2/launchTemplate:LaunchTemplate", GOOD_LT, {**GOOD_LT, "keyName": "ops"}),
    (
        "nodes-no-ssh",
        "eks:index:Cluster",
        GOOD_EKS_CLUSTER,
        {**GOOD_EKS_CLUSTER, "nodePublicKey": "ssh-ed25519 AAA"},
    ),
    (
        "gpu-nodes-tainted",
        "eks:index:ManagedNodeGroup",
        GOOD_GPU_NODE_GROUP,
        {**GOOD_GPU_NODE_GROUP, "taints": []},
    ),
    (
        "gpu-nodes-tainted",
        "aws:eks/nodeGroup:NodeGroup",
        {"instanceTypes": ["g4ad.16xlarge"], "taints": [{**GPU_TAINT, "key": "amd.com/gpu"}]},
        {"instanceTypes": ["g4ad.16xlarge"], "taints": [GPU_TAINT]},  # NVIDIA taint on an AMD pool
    ),
    (
        "gpu-nodes-tainted",
        "kubernetes:karpenter.sh/v1:NodePool",
        {
            "spec": {
                "template": {
                    "spec": {
                        "requirements": [
                            {"key": "karpenter.k8s.aws/instance-family", "operator": "In", "values": ["p4d"]}
                        ],
                        "taints": [{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}],
                    }
                }
            }
        },
        {
            "spec": {
                "template": {
                    "spec": {
                        "requirements": [
                            {"key": "karpenter.k8s.aws/instance-family", "operator": "In", "values": ["p4d"]}
                        ]
                    }
                }
            }
        },
    ),
    (
        "gpu-node-groups-scale-to-zero",
        "eks:index:ManagedNodeGroup",
        GOOD_GPU_NODE_GROUP,
        {**GOOD_GPU_NODE_GROUP, "scalingConfig": STRANDED},
    ),
    (
        "gpu-node-groups-scale-to-zero",
        "kubernetes:karpenter.sh/v1:NodePool",
        {"spec": {"limits": {"nvidia.com/gpu": "8"}, "disruption": {"consolidateAfter": "10m"}}},
        {"spec": {"limits": {"nvidia.com/gpu": "8"}, "disruption": {"consolidateAfter": "Never"}}},
    ),
    (
        "s3-public-access-blocked",
        "aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock",
        dict.fromkeys(
            ["blockPublicAcls", "blockPublicPolicy", "ignorePublicAcls", "restrictPublicBuckets"], True
        ),
        {"blockPublicAcls": True},
    ),
    (
        "s3-public-access-blocked",
        "aws:s3/bucket:Bucket",
        {"bucket": "b"},
        {"bucket": "b", "acl": "public-read"},
    ),
    (
        "s3-encryption",
        "aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration",
        {"rules": [{"applyServerSideEncryptionByDefault": {"sseAlgorithm": "aws:kms"}}]},
        {"rules": []},
    ),
    (
        "s3-tls-only",
        "aws:s3/bucketPolicy:BucketPolicy",
        {"policy": TLS_POLICY},
        {"policy": json.dumps({"Statement": []})},
    ),
    (
        "no-documentation-placeholders",
        "aws:eks/accessEntry:AccessEntry",
        {"principalArn": "arn:aws:iam::210987654321:role/platform-admin"},
        {"principalArn": "arn:aws:iam::123456789012:role/platform-admin"},
    ),
    (
        "s3-versioning",
        "aws:s3/bucketVersioning:BucketVersioning",
        {"versioningConfiguration": {"status": "Enabled"}},
        {"versioningConfiguration": {"status": "Suspended"}},
    ),
    (
        "ecr-scan-and-immutable-tags",
        "aws:ecr/repository:Repository",
        {"imageScanningConfiguration": {"scanOnPush": True}, "imageTagMutability": "IMMUTABLE"},
        {"imageScanningConfiguration": {"scanOnPush": True}},
    ),
    (
        "ecr-scan-and-immutable-tags",
        "aws:ecr/repository:Repository",
        {"imageScanningConfiguration": {"scanOnPush": True}, "imageTagMutability": "IMMUTABLE"},
        {"imageTagMutability": "IMMUTABLE"},
    ),
    (
        "sqs-encryption",
        "aws:sqs/queue:Queue",
        {"sqsManagedSseEnabled": True},
        {"messageRetentionSeconds": 300},
    ),
    ("kms-key-rotation", "aws:kms/key:Key", {"enableKeyRotation": True}, {"enableKeyRotation": False}),
    (
        "iam-no-star-on-star",
        "aws:iam/policy:Policy",
        {
            "policy": json.dumps(
                {
                    "Statement": [
                        {"Effect": "Allow", "Action": "s3:GetObject", "Resource": "arn:aws:s3:::b/jobs/*"}
                    ]
                }
            )
        },
        {"policy": json.dumps({"Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]})},
    ),
    (
        "iam-no-star-on-star",
        "aws:iam/role:Role",
        {"inlinePolicies": []},
        {
            "inlinePolicies": [
                {
                    "name": "x",
                    "policy": {"Statement": {"Effect": "Allow", "Action": ["*:*"], "Resource": ["*"]}},
                }
            ]
        },
    ),
    (
        "iam-no-star-on-star",
        "aws:iam/rolePolicyAttachment:RolePolicyAttachment",
        {"policyArn": "arn:aws:iam::aws:policy/AmazonEKSWorkerNodePolicy"},
        {"policyArn": "arn:aws:iam::aws:policy/AdministratorAccess"},
    ),
    (
        "iam-pod-role-trust-scoped",
        "aws:iam/role:Role",
        trust(
            {**IRSA, "Condition": {"StringEquals": {f"{OIDC}:sub": "system:serviceaccount:team-a:trainer"}}}
        ),
        trust({**IRSA, "Condition": {"StringLike": {f"{OIDC}:sub": "system:serviceaccount:team-a:*"}}}),
    ),
    (
        "iam-pod-role-trust-scoped",
        "aws:iam/role:Role",
        trust({**POD_ID, "Condition": {"StringEquals": POD_ID_SCOPE}}),
        trust(POD_ID),
    ),
    (
        "k8s-no-privileged-containers",
        "kubernetes:core/v1:Pod",
        pod(),
        pod(container_extra={"securityContext": {"privileged": True}}),
    ),
    (
        "k8s-training-no-host-namespaces",
        "kubernetes:kubeflow.org/v1:PyTorchJob",
        pod(kind="PyTorchJob"),
        pod({"hostNetwork": True}, kind="PyTorchJob"),
    ),
    ("k8s-training-no-host-namespaces", "kubernetes:core/v1:Pod", pod(), pod({"hostIPC": True})),
    ("k8s-training-run-as-non-root", "kubernetes:core/v1:Pod", pod(), pod({"securityContext": {}})),
    (
        "k8s-training-run-as-non-root",
        "kubernetes:kubeflow.org/v1:PyTorchJob",
        pod(kind="PyTorchJob"),
        pod(container_extra={"securityContext": {"runAsUser": 0}}, kind="PyTorchJob"),
    ),
    ("k8s-images-pinned", "kubernetes:core/v1:Pod", pod(), pod(container_extra={"image": "busybox:latest"})),
    (
        "k8s-images-pinned",
        "kubernetes:core/v1:Pod",
        pod(container_extra={"image": "r/x@sha256:" + "a" * 64}),
        pod(container_extra={"image": "registry:5000/busybox"}),
    ),
    (
        "k8s-images-pinned",
        "kubernetes:trainer.kubeflow.org/v1alpha1:TrainJob",
        {"kind": "TrainJob", "spec": {"trainer": {"image": "r/cuda:1"}}},
        {"kind": "TrainJob", "spec": {"trainer": {"image": "r/cuda"}}},
    ),
    (
        "k8s-gpu-requests-tolerate-taint",
        "kubernetes:kubeflow.org/v1:PyTorchJob",
        pod(GPU_TOLERATION, GPU, kind="PyTorchJob"),
        pod(None, GPU, kind="PyTorchJob"),
    ),
    (
        # The engine sends every number as a float: a request of 0 GPUs arrives as 0.0, and is none.
        "k8s-gpu-requests-tolerate-taint",
        "kubernetes:core/v1:Pod",
        pod(None, {"resources": {"limits": {"nvidia.com/gpu": 0}}}),
        pod(None, {"resources": {"limits": {"nvidia.com/gpu": "1"}}}),
    ),
    (
        "k8s-gpu-requests-tolerate-taint",
        "kubernetes:trainer.kubeflow.org/v1alpha1:TrainJob",
        {
            "kind": "TrainJob",
            "spec": {
                "trainer": {"resourcesPerNode": GPU["resources"]},
                "runtimePatches": [
                    {
                        "manager": "m",
                        "trainingRuntimeSpec": {
                            "template": {
                                "spec": {
                                    "replicatedJobs": [
                                        {
                                            "name": "node",
                                            "template": {
                                                "spec": {
                                                    "template": {"spec": {**GPU_TOLERATION, "containers": []}}
                                                }
                                            },
                                        }
                                    ]
                                }
                            }
                        },
                    }
                ],
            },
        },
        {"kind": "TrainJob", "spec": {"trainer": {"resourcesPerNode": GPU["resources"]}}},
    ),
    (
        "iam-trust-not-open",
        "aws:iam/role:Role",
        trust({**IRSA, "Principal": {"AWS": "arn:aws:iam::111122223333:root"}}),
        trust({**IRSA, "Principal": {"AWS": "*"}}),
    ),
    (
        "resource-policy-not-public",
        "aws:sqs/queuePolicy:QueuePolicy",
        {
            "policy": json.dumps(
                {
                    "Statement": [
                        {
                            "Effect": "Allow",
                            "Principal": {"Service": "events.amazonaws.com"},
                            "Action": "sqs:SendMessage",
                            "Resource": "q",
                        }
                    ]
                }
            )
        },
        {
            "policy": json.dumps(
                {"Statement": [{"Effect": "Allow", "Principal": "*", "Action": "sqs:*", "Resource": "q"}]}
            )
        },
    ),
    (
        "network-no-internet-admin-ports",
        "aws:ec2/securityGroupRule:SecurityGroupRule",
        {
            "type": "ingress",
            "protocol": "tcp",
            "fromPort": 22,
            "toPort": 22,
            "cidrBlocks": ["198.51.100.7/32"],
        },
        {"type": "ingress", "protocol": "tcp", "fromPort": 22, "toPort": 22, "cidrBlocks": ["0.0.0.0/0"]},
    ),
    (  # a security group's inline rule, spelled for IPv6: ipv6CidrBlocks
        "network-no-internet-admin-ports",
        "aws:ec2/securityGroup:SecurityGroup",
        {"ingress": [{"protocol": "tcp", "fromPort": 443, "toPort": 443, "ipv6CidrBlocks": ["::/0"]}]},
        {"ingress": [{"protocol": "tcp", "fromPort": 22, "toPort": 22, "ipv6CidrBlocks": ["::/0"]}]},
    ),
    (
        "k8s-rbac-no-cluster-admin-grants",
        "kubernetes:rbac.authorization.k8s.io/v1:ClusterRoleBinding",
        {"roleRef": {"kind": "ClusterRole", "name": "view"}, "subjects": [{"kind": "Group", "name": "ops"}]},
        {
            "roleRef": {"kind": "ClusterRole", "name": "cluster-admin"},
            "subjects": [{"kind": "Group", "name": "ops"}],
        },
    ),
    (
        "k8s-webhooks-stay-in-cluster",
        "kubernetes:admissionregistration.k8s.io/v1:ValidatingWebhookConfiguration",
        {
            "webhooks": [
                {
                    "name": "w",
                    "clientConfig": {"service": {"name": "s", "namespace": "n"}},
                    "rules": [{"apiGroups": ["*"], "resources": ["*"]}],
                }
            ]
        },
        {
            "webhooks": [
                {
                    "name": "w",
                    "clientConfig": {"url": "https://example.net/hook"},
                    "rules": [{"apiGroups": ["*"], "resources": ["*"]}],
                }
            ]
        },
    ),
    (
        "k8s-namespace-pod-security-not-lowered",
        "kubernetes:core/v1:Namespace",
        {"metadata": {"name": "team-a", "labels": {"pod-security.kubernetes.io/enforce": "restricted"}}},
        {"metadata": {"name": "team-a", "labels": {"pod-security.kubernetes.io/enforce": "privileged"}}},
    ),
    (
        "k8s-no-allow-all-network-policy",
        "kubernetes:networking.k8s.io/v1:NetworkPolicy",
        {"spec": {"podSelector": {}, "ingress": [{"from": [{"podSelector": {}}]}]}},
        {"spec": {"podSelector": {}, "ingress": [{}]}},
    ),
    (
        # Halves of the port range and of the address space, in separate rules, are the whole.
        "k8s-no-allow-all-network-policy",
        "kubernetes:networking.k8s.io/v1:NetworkPolicy",
        {
            "spec": {
                "egress": [
                    {"to": [{"ipBlock": {"cidr": "0.0.0.0/1"}}], "ports": [{"port": 1, "endPort": 32767}]},
                    {"to": [{"ipBlock": {"cidr": "128.0.0.0/1"}}], "ports": [{"port": 1, "endPort": 65535}]},
                ]
            }
        },
        {
            "spec": {
                "egress": [
                    {"to": [{"ipBlock": {"cidr": "0.0.0.0/1"}}], "ports": [{"port": 1, "endPort": 65535}]},
                    {
                        "to": [{"ipBlock": {"cidr": "128.0.0.0/1"}}],
                        "ports": [{"port": 1, "endPort": 32767}, {"port": 32768, "endPort": 65535}],
                    },
                ]
            }
        },
    ),
    (
        "k8s-services-not-exposed",
        "kubernetes:core/v1:Service",
        {"spec": {"type": "ClusterIP", "ports": [{"port": 8265}]}},
        {"spec": {"type": "LoadBalancer", "ports": [{"port": 8265}]}},
    ),
    (
        "k8s-no-legacy-service-account-tokens",
        "kubernetes:core/v1:Secret",
        {"type": "Opaque", "metadata": {"name": "s"}},
        {"type": "kubernetes.io/service-account-token", "metadata": {"name": "s"}},
    ),
    (
        "eks-admin-access-for-named-people",
        "aws:eks/accessPolicyAssociation:AccessPolicyAssociation",
        {
            "principalArn": "arn:aws:iam::210987654321:role/platform-admin",
            "policyArn": "arn:aws:eks::aws:cluster-access-policy/AmazonEKSClusterAdminPolicy",
            "accessScope": {"type": "cluster"},
        },
        {
            "principalArn": "arn:aws:iam::210987654321:root",
            "policyArn": "arn:aws:eks::aws:cluster-access-policy/AmazonEKSClusterAdminPolicy",
            "accessScope": {"type": "cluster"},
        },
    ),
    (
        "eks-network-policy-enforced",
        "aws:eks/addon:Addon",
        {"addonName": "vpc-cni", "configurationValues": '{"enableNetworkPolicy": "true"}'},
        {"addonName": "vpc-cni", "configurationValues": "{}"},
    ),
    (
        "resource-policy-service-principals-pinned",
        "aws:sqs/queuePolicy:QueuePolicy",
        {
            "policy": json.dumps(
                {
                    "Statement": [
                        {
                            "Effect": "Allow",
                            "Principal": {"Service": "events.amazonaws.com"},
                            "Action": "sqs:SendMessage",
                            "Resource": "arn:aws:sqs:us-east-1:1:q",
                            "Condition": {
                                "ArnEquals": {"aws:SourceArn": "arn:aws:events:us-east-1:1:rule/r"}
                            },
                        }
                    ]
                }
            )
        },
        {
            "policy": json.dumps(
                {
                    "Statement": [
                        {
                            "Effect": "Allow",
                            "Principal": {"Service": ["events.amazonaws.com", "sqs.amazonaws.com"]},
                            "Action": "sqs:SendMessage",
                            "Resource": "arn:aws:sqs:us-east-1:1:q",
                        }
                    ]
                }
            )
        },
    ),
    (
        "k8s-controller-images-by-digest",
        "kubernetes:apps/v1:Deployment",
        pod(
            None,
            {"image": "ghcr.io/example/controller@sha256:" + "a" * 64},
            kind="Deployment",
        )
        | {"metadata": {"name": "c", "namespace": "kube-system"}},
        pod(None, {"image": "ghcr.io/example/controller:v1.2.3"}, kind="Deployment")
        | {"metadata": {"name": "c", "namespace": "kube-system"}},
    ),
    (
        "network-default-security-group-closed",
        "aws:ec2/defaultSecurityGroup:DefaultSecurityGroup",
        {"vpcId": "vpc-1", "ingress": [], "egress": []},
        {
            "vpcId": "vpc-1",
            "egress": [{"protocol": "-1", "fromPort": 0, "toPort": 0, "cidrBlocks": ["0.0.0.0/0"]}],
        },
    ),
    (
        "k8s-helm-values-no-privilege",
        "kubernetes:helm.sh/v3:Release",
        {"values": {"securityContext": {"runAsNonRoot": True, "capabilities": {"drop": ["ALL"]}}}},
        {"values": {"securityContext": {"privileged": True}}},
    ),
]


@pytest.mark.parametrize(
    ("rule", "type_", "good", "bad"),
    CASES,
    ids=[f"{c[0]}-{c[1].rsplit(':', 1)[-1]}-{i}" for i, c in enumerate(CASES)],
)
def test_rule_reports_bad_and_passes_good(rule, type_, good, bad):
    """Through the engine's path (tests/policy/engine_path.py), as `pulumi up` hands the pack its inputs."""
    assert violations(rule, type_, good) == []
    assert violations(rule, type_, bad), f"{rule} missed {bad}"


def test_every_rule_has_a_bad_case():
    assert {c[0] for c in CASES} | {
        "eks-prod-endpoint-deployer-only",
        "gpu-node-groups-scale-to-zero-prod",
    } == set(RULE)


def test_prod_only_rules_apply_only_in_prod():
    office = {**GOOD_EKS_CLUSTER, "publicAccessCidrs": ["100.64.16.0/20"]}
    dev = evaluate([Resource(type="eks:index:Cluster", name="c", inputs=office)], RULES)
    prod = evaluate([Resource(type="eks:index:Cluster", name="c", inputs=office)], RULES, prod=True)
    assert dev == []
    assert [f.rule for f in prod] == ["eks-prod-endpoint-deployer-only"]
    warm = Resource(
        type="eks:index:ManagedNodeGroup",
        name="g",
        inputs={**GOOD_GPU_NODE_GROUP, "scalingConfig": STRANDED},
    )
    assert [(f.rule, f.level) for f in evaluate([warm], RULES, prod=True)] == [
        ("gpu-node-groups-scale-to-zero-prod", "advisory")
    ]
    assert [(f.rule, f.level) for f in evaluate([warm], RULES)] == [
        ("gpu-node-groups-scale-to-zero", "mandatory")
    ]


def _bucket_stack(*skip: str) -> list[Resource]:
    companions = {
        "pab": (
            "aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock",
            dict.fromkeys(
                ["blockPublicAcls", "blockPublicPolicy", "ignorePublicAcls", "restrictPublicBuckets"], True
            ),
        ),
        "sse": (
            "aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration",
            {"rules": [{"applyServerSideEncryptionByDefault": {"sseAlgorithm": "aws:kms"}}]},
        ),
        "ver": (
            "aws:s3/bucketVersioning:BucketVersioning",
            {"versioningConfiguration": {"status": "Enabled"}},
        ),
        "pol": ("aws:s3/bucketPolicy:BucketPolicy", {"policy": TLS_POLICY}),
    }
    out = [Resource(type="aws:s3/bucket:Bucket", name="data", inputs={"bucket": "mlops-data"})]
    for key, (type_, inputs) in companions.items():
        if key not in skip:
            out.append(Resource(type=type_, name=f"data-{key}", inputs={**inputs, "bucket": "mlops-data"}))
    return out


def test_bucket_stack_rule_requires_every_companion():
    rule = next(r for r in STACK_RULES if r.name == "s3-bucket-guardrails-present")
    assert list(rule.check(_bucket_stack())) == []
    for missing in ("pab", "sse", "ver", "pol"):
        assert [name for name, _ in rule.check(_bucket_stack(missing))] == ["data"], missing


def test_a_bucket_is_matched_to_its_companions_by_what_the_engine_hands_over():
    """Through the engine's path: a companion configures a bucket whose name it names (`pulumi up`: both
    known) or whose `bucket` input the bucket computed (a preview: the engine's property dependencies).
    A companion of another bucket is not one of its own, whatever that bucket's name looks like."""
    from tests.policy.engine_path import UNKNOWN, analyze_stack

    def reported(resources: list[Resource]) -> list[str]:
        return [d.message for d in analyze_stack(resources) if d.policy == "s3-bucket-guardrails-present"]

    bucket, *companions = _bucket_stack()
    assert reported([bucket, *companions]) == []
    # Companions of a bucket named "data-id" or "data" (this bucket's resource name, and its mock id):
    # they configure another bucket.
    for other in ("data-id", "data"):
        elsewhere = [
            Resource(type=c.type, name=c.name, inputs={**c.inputs, "bucket": other}) for c in companions
        ]
        assert len(reported([bucket, *elsewhere])) == 4, other
    # A preview: names unknown, the companions computed from the bucket.
    unnamed = Resource(type=bucket.type, name=bucket.name, inputs={"bucket": UNKNOWN})
    computed = [
        Resource(
            type=c.type, name=c.name, inputs={**c.inputs, "bucket": UNKNOWN}, deps={"bucket": [bucket.name]}
        )
        for c in companions
    ]
    assert reported([unnamed, *computed]) == []
    assert len(reported([unnamed, *computed[1:]])) == 1  # no public access block


def test_pack_wrappers_report_through_the_policy_servicer():
    """The pulumi-policy analyzer (what `pulumi preview --policy-pack` talks to) runs our rules on
    protobuf-encoded inputs behind its read-only proxies, with severity, level and remediation."""
    from google.protobuf import json_format, struct_pb2
    from pulumi.runtime.proto import analyzer_pb2
    from pulumi_policy.policy import EnforcementLevel, _PolicyAnalyzerServicer

    from policy.pack import policies

    servicer = _PolicyAnalyzerServicer(
        "mlops-eks-guardrails", "0.1.0", policies(), EnforcementLevel.MANDATORY
    )

    def analyze(type_: str, props: dict) -> list:
        request = analyzer_pb2.AnalyzeRequest(
            type=type_,
            properties=json_format.ParseDict(props, struct_pb2.Struct()),
            urn=f"urn:x::{type_}::r",
            name="r",
        )
        return list(servicer.Analyze(request, None).diagnostics)

    bad = analyze("aws:ec2/launchTemplate:LaunchTemplate", {"metadataOptions": {"httpTokens": "optional"}})
    assert {d.policyName for d in bad} == {"nodes-imdsv2-hop-limit-1"}
    assert "Remediation:" in bad[0].message and "httpTokens" in bad[0].message
    assert bad[0].enforcementLevel == analyzer_pb2.MANDATORY
    assert analyze("aws:ec2/launchTemplate:LaunchTemplate", GOOD_LT) == []
    assert analyze("kubernetes:kubeflow.org/v1:PyTorchJob", pod(GPU_TOLERATION, GPU, kind="PyTorchJob")) == []
    assert [
        d.policyName
        for d in analyze("kubernetes:kubeflow.org/v1:PyTorchJob", pod(None, GPU, kind="PyTorchJob"))
    ] == ["k8s-gpu-requests-tolerate-taint"]


def test_the_pack_entry_point_starts_an_analyzer(tmp_path):
    """`pulumi preview --policy-pack policy` runs policy/__main__.py (pulumi.policy's runner does
    runpy.run_path on the directory): it must build the pack and print the port its analyzer serves."""
    import subprocess
    import sys
    from pathlib import Path

    pack_dir = Path(__file__).resolve().parents[2] / "policy"
    proc = subprocess.Popen(
        [sys.executable, str(pack_dir)],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        port = proc.stdout.readline().strip()
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=30)
    assert port.isdigit(), err


def test_stack_policy_matches_companions_through_the_engines_property_dependencies():
    """In a real preview the bucket name is unknown; the engine links a companion to its bucket by the
    `bucket` input's dependencies. Missing versioning is reported against the bucket's URN."""
    from google.protobuf import json_format, struct_pb2
    from pulumi.runtime.proto import analyzer_pb2
    from pulumi_policy.policy import EnforcementLevel, _PolicyAnalyzerServicer

    from policy.pack import policies

    servicer = _PolicyAnalyzerServicer(
        "mlops-eks-guardrails", "0.1.0", policies(), EnforcementLevel.MANDATORY
    )
    bucket_urn = "urn:pulumi:dev::mlops-eks::aws:s3/bucket:Bucket::data"
    resources = [analyzer_pb2.AnalyzerResource(type="aws:s3/bucket:Bucket", urn=bucket_urn, name="data")]
    for r in _bucket_stack("ver")[1:]:
        resources.append(
            analyzer_pb2.AnalyzerResource(
                type=r.type,
                name=r.name,
                urn=f"urn:pulumi:dev::mlops-eks::{r.type}::{r.name}",
                properties=json_format.ParseDict({**r.inputs, "bucket": "computed-id"}, struct_pb2.Struct()),
                propertyDependencies={"bucket": analyzer_pb2.AnalyzerPropertyDependencies(urns=[bucket_urn])},
            )
        )
    response = servicer.AnalyzeStack(analyzer_pb2.AnalyzeStackRequest(resources=resources), None)
    reported = [(d.policyName, d.urn) for d in response.diagnostics]
    assert reported == [("s3-bucket-guardrails-present", bucket_urn)]
    assert "versioning" in response.diagnostics[0].message


PRIVATE_ONLY = {**GOOD_EKS_CLUSTER, "endpointPublicAccess": False, "publicAccessCidrs": None}


@pytest.mark.parametrize(
    ("type_", "inputs", "allowed"),
    [
        ("eks:index:Cluster", {**GOOD_EKS_CLUSTER, "publicAccessCidrs": ["198.51.100.7/32"]}, True),
        ("eks:index:Cluster", GOOD_EKS_CLUSTER, True),  # a /24: the widest prod admits
        ("eks:index:Cluster", {**GOOD_EKS_CLUSTER, "publicAccessCidrs": ["203.0.112.0/23"]}, False),
        ("eks:index:Cluster", PRIVATE_ONLY, False),
        ("eks:index:Cluster", {**PRIVATE_ONLY, "clusterTags": {"mlops-eks:deploy-from-vpc": "true"}}, True),
        ("aws:eks/cluster:Cluster", GOOD_AWS_CLUSTER, False),
        (
            "aws:eks/cluster:Cluster",
            {**GOOD_AWS_CLUSTER, "tags": {"mlops-eks:deploy-from-vpc": "true"}},
            True,
        ),
    ],
)
def test_prod_endpoint_admits_the_deployer_or_a_deployer_inside_the_vpc(type_, inputs, allowed):
    """The same rule as the config's (infra/config/cluster_rules.py): narrow public CIDRs, or private-only
    when pulumi runs inside the VPC (the program tags the cluster then)."""
    found = RULE["eks-prod-endpoint-deployer-only"].violations(type_, inputs, prod=True)
    assert (found == []) is allowed, found


@pytest.mark.parametrize("document", ["{not json", '["Statement"]'])
def test_a_policy_document_that_is_not_a_json_object_is_a_finding_not_a_pass(document):
    # Read as "no statements", such a document would pass every statement check unseen.
    for type_, inputs, rule in (
        ("aws:iam/policy:Policy", {"policy": document}, "iam-no-star-on-star"),
        ("aws:iam/role:Role", {"assumeRolePolicy": document}, "iam-pod-role-trust-scoped"),
    ):
        (message,) = RULE[rule].violations(type_, inputs)
        assert "policy document is" in message and "cannot be checked" in message


@pytest.mark.parametrize(
    ("value", "placeholder"),
    [
        ("0.0.0.0/0", False),  # every route table's default route, every job NetworkPolicy's egress
        ("192.0.0.0/16", False),  # contains TEST-NET-1 but is a real network
        ("10.0.0.0/8", False),
        ("192.0.2.0/24", True),
        ("198.51.100.7/32", True),
        ("203.0.113.128/25", True),
    ],
)
def test_a_network_is_a_placeholder_only_inside_a_documentation_range(value, placeholder):
    from infra.config.placeholders import placeholder_problem

    assert (placeholder_problem(value) is not None) == placeholder
    route = {"routes": [{"cidrBlock": value, "natGatewayId": "nat-1"}]}
    findings = evaluate([Resource(type="aws:ec2/routeTable:RouteTable", name="rt", inputs=route)], RULES)
    assert any(f.rule == "no-documentation-placeholders" for f in findings) == placeholder
