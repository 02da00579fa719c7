"""The one trust policy of every EKS Pod Identity role (platform add-ons and workload jobs alike).

EKS Pod Identity assumes the role as the service principal `pods.eks.amazonaws.com` and tags the
session with the pod's cluster, namespace and service account (EKS User Guide, "Create IAM role with
trust policy required by EKS Pod Identity" and "List of session tags added by EKS Pod Identity":
eks-cluster-arn, eks-cluster-name, kubernetes-namespace, kubernetes-service-account,
kubernetes-pod-name, kubernetes-pod-uid). A trust without conditions on those tags lets any
association in the account, on any cluster, use the role; the cluster ARN pins account, region and
cluster at once. Pure (no Pulumi import): `workloads` imports it too.
"""

from __future__ import annotations

from typing import Any

SERVICE = "pods.eks.amazonaws.com"
ACTIONS = ("sts:AssumeRole", "sts:TagSession")


def cluster_arn(*, partition: str, region: str, account_id: str, cluster_name: str) -> str:
    return f"arn:{partition}:eks:{region}:{account_id}:cluster/{cluster_name}"


def role_path(cluster_name: str) -> str:
    """The IAM path of every role that pods of the cluster assume: the data bucket's policy admits
    principals under it (infra/platform/storage.py), so only who may create roles there reaches the data."""
    return f"/mlops-eks/{cluster_name}/"


def partition_of(region: str) -> str:
    if region.startswith("cn-"):
        return "aws-cn"
    return "aws-us-gov" if region.startswith("us-gov-") else "aws"


def trust_policy(*, cluster_arn: str, namespace: str, service_account: str) -> dict[str, Any]:
    """Assumable only through a Pod Identity association of `namespace/service_account` on the cluster
    `cluster_arn` (sts:TagSession: EKS passes the session tags the conditions read)."""
    if not cluster_arn.startswith("arn:") or ":cluster/" not in cluster_arn:
        raise ValueError(f"cluster_arn: {cluster_arn!r} is not an EKS cluster ARN")
    if not namespace or not service_account or "*" in namespace + service_account:
        raise ValueError(
            f"namespace/service_account: {namespace!r}/{service_account!r}; allowed: one exact name each"
        )
    return {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Sid": "EksPodIdentity",
                "Effect": "Allow",
                "Principal": {"Service": SERVICE},
                "Action": list(ACTIONS),
                "Condition": {
                    "StringEquals": {
                        "aws:RequestTag/eks-cluster-arn": cluster_arn,
                        "aws:RequestTag/kubernetes-namespace": namespace,
                        "aws:RequestTag/kubernetes-service-account": service_account,
                    }
                },
            }
        ],
    }
