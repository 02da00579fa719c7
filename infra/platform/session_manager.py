"""A node's shell is reached through AWS Systems Manager Session Manager, never SSH (no key pairs, no port
22), and only when the stack wants it (`sessionManager`, default on).

The node roles get the permissions Session Manager needs and nothing else (Systems Manager User Guide,
"Step 2: Verify or add instance permissions for Session Manager", the policy for a role that only does
Session Manager): register the instance with Systems Manager and open the session channels. Not
AmazonSSMManagedInstanceCore, which also lets every process on the node read every SSM parameter of the
account (ssm:GetParameter/GetParameters on every resource) and take Run Command jobs.
"""

from __future__ import annotations

import json
from typing import Any

import pulumi
import pulumi_aws as aws

ACTIONS = (
    "ssm:UpdateInstanceInformation",
    "ssmmessages:CreateControlChannel",
    "ssmmessages:CreateDataChannel",
    "ssmmessages:OpenControlChannel",
    "ssmmessages:OpenDataChannel",
)


def policy() -> dict[str, Any]:
    """The node role's inline policy for Session Manager (these actions take no resource ARNs)."""
    statement = {"Sid": "SessionManager", "Effect": "Allow", "Action": list(ACTIONS), "Resource": "*"}
    return {"Version": "2012-10-17", "Statement": [statement]}


def grant(name: str, role: aws.iam.Role, opts: pulumi.ResourceOptions) -> aws.iam.RolePolicy:
    """The Session Manager policy on a node role, as an inline policy of its own (RolePolicy)."""
    return aws.iam.RolePolicy(f"{name}-session-manager", role=role.id, policy=json.dumps(policy()), opts=opts)
