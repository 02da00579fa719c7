"""The stack's KMS key: CloudWatch Logs (control-plane and VPC flow logs) and the data bucket use it.

The key policy keeps IAM in charge of the account's own principals (the root statement: without it
only the key policy could ever grant use of the key) and lets CloudWatch Logs use the key only for this
stack's log groups: CloudWatch Logs passes the log group's ARN as encryption context
(`kms:EncryptionContext:aws:logs:arn`, CloudWatch Logs User Guide, "Encrypt log data in CloudWatch Logs
using AWS KMS"). S3 needs no key-policy statement: a caller's IAM policy grants it (workloads/program.py
grants the job role kms:Decrypt/GenerateDataKey through S3 only).
"""

from __future__ import annotations

import json
from typing import Any

import pulumi
import pulumi_aws as aws

from infra.component_args import ComponentArgs


def eks_log_group_name(cluster_name: str) -> str:
    """EKS writes control-plane logs to exactly this group (it creates it, unencrypted and kept forever,
    unless it exists already)."""
    return f"/aws/eks/{cluster_name}/cluster"


def flow_log_group_name(cluster_name: str) -> str:
    return f"/aws/vpc/{cluster_name}/flow-logs"


def logs_service(region: str) -> str:
    return f"logs.{region}.amazonaws.com" + (".cn" if region.startswith("cn-") else "")


def key_policy(*, partition: str, region: str, account_id: str, cluster_name: str) -> dict[str, Any]:
    log_groups = f"arn:{partition}:logs:{region}:{account_id}:log-group:"
    return {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Sid": "AccountIamPolicies",
                "Effect": "Allow",
                "Principal": {"AWS": f"arn:{partition}:iam::{account_id}:root"},
                "Action": "kms:*",
                "Resource": "*",
            },
            {
                "Sid": "CloudWatchLogsOfThisStack",
                "Effect": "Allow",
                "Principal": {"Service": logs_service(region)},
                "Action": [
                    "kms:Encrypt*",
                    "kms:Decrypt*",
                    "kms:ReEncrypt*",
                    "kms:GenerateDataKey*",
                    "kms:Describe*",
                ],
                "Resource": "*",
                "Condition": {
                    "ArnLike": {
                        "kms:EncryptionContext:aws:logs:arn": [
                            log_groups + eks_log_group_name(cluster_name),
                            log_groups + flow_log_group_name(cluster_name),
                        ]
                    }
                },
            },
        ],
    }


class StackKeyArgs(ComponentArgs):
    cluster_name: str
    partition: str
    region: str
    account_id: pulumi.Output[str] | str
    tags: dict[str, str]


class StackKey(pulumi.ComponentResource):
    def __init__(self, name: str, args: StackKeyArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("mlops-eks:infra:StackKey", name, None, opts)
        self.key = aws.kms.Key(
            name,
            description=f"Logs and training data of {args.cluster_name}",
            enable_key_rotation=True,
            deletion_window_in_days=30,
            policy=pulumi.Output.from_input(args.account_id).apply(
                lambda account: json.dumps(
                    key_policy(
                        partition=args.partition,
                        region=args.region,
                        account_id=account,
                        cluster_name=args.cluster_name,
                    )
                )
            ),
            tags=args.tags,
            opts=pulumi.ResourceOptions(parent=self),
        )
        aws.kms.Alias(
            name,
            name=f"alias/{args.cluster_name}-data",
            target_key_id=self.key.key_id,
            opts=pulumi.ResourceOptions(parent=self),
        )
        self.arn = self.key.arn
        self.register_outputs({"arn": self.arn})
