"""AWS controls of the platform, read from the program evaluated under mocks (dev and prod): the VPC
CNI's own identity, Pod Identity trusts pinned to the cluster, log groups with retention and the
stack's key, VPC flow logs, the data bucket's key and policy, and the S3 endpoint's policy. Policies
are evaluated (a small evaluator for the condition operators they use), not only compared."""

from __future__ import annotations

import ast
import json
from fnmatch import fnmatchcase
from pathlib import Path

import pytest

from infra.config.platform import ConfigError, PlatformConfig
from infra.platform import pod_identity
from infra.platform.storage import principal_patterns
from infra.tools.synth import ACCOUNT_ID, stack_config

ROLE = "aws:iam/role:Role"
ATTACHMENT = "aws:iam/rolePolicyAttachment:RolePolicyAttachment"
LOG_GROUP = "aws:cloudwatch/logGroup:LogGroup"


def _cluster_arn(stack) -> str:
    return f"arn:aws:eks:{stack.config.region}:{ACCOUNT_ID}:cluster/{stack.exports['cluster_name']}"


def _arn_like(value: str, patterns) -> bool:
    return any(fnmatchcase(value, p) for p in ([patterns] if isinstance(patterns, str) else patterns))


def _denied_by(policy: dict, principal_arn: str, action: str, resource: str, tls: bool = True) -> list[str]:
    """Sids of the Deny statements that match (operators used by the bucket policy only)."""
    sids = []
    for s in policy["Statement"]:
        actions = s["Action"] if isinstance(s["Action"], list) else [s["Action"]]
        if s["Effect"] != "Deny" or not _arn_like(resource, s["Resource"]):
            continue
        if not any(fnmatchcase(action, a) for a in actions):
            continue
        cond = s.get("Condition", {})
        if "Bool" in cond and (cond["Bool"]["aws:SecureTransport"] == "true") != tls:
            continue
        if "ArnNotLike" in cond and _arn_like(principal_arn, cond["ArnNotLike"]["aws:PrincipalArn"]):
            continue
        sids.append(s["Sid"])
    return sids


def _allowed_by_endpoint(policy: dict, action: str, resource: str, resource_account: str) -> bool:
    for s in policy["Statement"]:
        actions = s["Action"] if isinstance(s["Action"], list) else [s["Action"]]
        if not any(fnmatchcase(action, a) for a in actions) or not _arn_like(resource, s["Resource"]):
            continue
        wanted = s.get("Condition", {}).get("StringEquals", {}).get("aws:ResourceAccount")
        if wanted in (None, resource_account):
            return True
    return False


def test_node_roles_lose_the_cni_policy_and_the_vpc_cni_gets_its_own_pod_identity_role(stack):
    cni = [a for a in stack.of_type(ATTACHMENT) if a.inputs["policyArn"].endswith("/AmazonEKS_CNI_Policy")]
    assert [a.name for a in cni] == ["cluster-vpc-cni"]
    assert cni[0].inputs["role"] == "cluster-vpc-cni"
    association = stack.one("aws:eks/podIdentityAssociation:PodIdentityAssociation", "cluster-vpc-cni").inputs
    assert (association["namespace"], association["serviceAccount"]) == ("kube-system", "aws-node")
    assert association["roleArn"] == f"arn:aws:iam::{ACCOUNT_ID}:role/cluster-vpc-cni"
    # The vpc-cni add-on stays pulumi-eks's own (useDefaultVpcCni unset): one CNI, and no second
    # "vpc-cni" add-on of ours to collide with it.
    eks = stack.one("eks:index:Cluster").inputs
    assert "useDefaultVpcCni" not in eks
    assert "vpc-cni" not in {a.inputs["addonName"] for a in stack.of_type("aws:eks/addon:Addon")}


def test_every_pod_identity_role_trusts_one_service_account_of_this_cluster(stack):
    trusted = {}
    for role in stack.of_type(ROLE):
        (statement,) = json.loads(role.inputs["assumeRolePolicy"])["Statement"]
        if statement["Principal"].get("Service") == pod_identity.SERVICE:
            assert statement["Action"] == ["sts:AssumeRole", "sts:TagSession"], role.name
            equals = statement["Condition"]["StringEquals"]
            assert equals["aws:RequestTag/eks-cluster-arn"] == _cluster_arn(stack), role.name
            trusted[role.name] = (
                equals["aws:RequestTag/kubernetes-namespace"],
                equals["aws:RequestTag/kubernetes-service-account"],
            )
    assert trusted["cluster-vpc-cni"] == ("kube-system", "aws-node")
    assert trusted["addons-ebs-csi"] == ("kube-system", "ebs-csi-controller-sa")
    assert trusted["karpenter-controller"] == ("kube-system", "karpenter")


def test_trust_helper_refuses_wildcards_and_non_cluster_arns():
    with pytest.raises(ValueError, match="service_account"):
        pod_identity.trust_policy(
            cluster_arn="arn:aws:eks:us-east-1:1:cluster/c", namespace="jobs", service_account="*"
        )
    with pytest.raises(ValueError, match="cluster_arn"):
        pod_identity.trust_policy(cluster_arn="c", namespace="jobs", service_account="sa")


def test_log_groups_exist_before_writers_with_retention_and_the_stack_key(stack):
    name = stack.exports["cluster_name"]
    groups = {g.inputs["name"]: g.inputs for g in stack.of_type(LOG_GROUP)}
    assert set(groups) == {f"/aws/eks/{name}/cluster", f"/aws/vpc/{name}/flow-logs"}
    key_arn = f"arn:aws:kms:{stack.config.region}:{ACCOUNT_ID}:key/stack-key"
    for group in groups.values():
        assert group["retentionInDays"] == {"prod": 90, "dev": 14}[stack.config.environment]
        assert group["kmsKeyId"] == key_arn
    # CloudWatch Logs may use the key for exactly these groups (its encryption context).
    key = stack.one("aws:kms/key:Key", "stack-key").inputs
    assert key["enableKeyRotation"] is True
    (logs,) = [s for s in json.loads(key["policy"])["Statement"] if "Service" in s["Principal"]]
    assert logs["Principal"]["Service"] == f"logs.{stack.config.region}.amazonaws.com"
    allowed = logs["Condition"]["ArnLike"]["kms:EncryptionContext:aws:logs:arn"]
    for group in stack.of_type(LOG_GROUP):
        arn = f"arn:aws:logs:{stack.config.region}:{ACCOUNT_ID}:log-group:{group.inputs['name']}"
        assert _arn_like(arn, allowed)
    other = f"arn:aws:logs:{stack.config.region}:{ACCOUNT_ID}:log-group:/aws/eks/other/cluster"
    assert not _arn_like(other, allowed)


def test_vpc_flow_logs_go_to_their_group_through_a_role_scoped_to_it(stack):
    flow = stack.one("aws:ec2/flowLog:FlowLog").inputs
    group = stack.one(LOG_GROUP, "network-flow-logs")
    assert flow["trafficType"] == "ALL" and flow["vpcId"] == "network-vpc-id"
    group_arn = f"arn:aws:logs:{stack.config.region}:{ACCOUNT_ID}:log-group:{group.inputs['name']}"
    assert flow["logDestination"] == group_arn
    role = stack.one(ROLE, "network-flow-logs").inputs
    (trust,) = json.loads(role["assumeRolePolicy"])["Statement"]
    assert trust["Principal"] == {"Service": "vpc-flow-logs.amazonaws.com"}
    assert trust["Condition"]["StringEquals"] == {"aws:SourceAccount": ACCOUNT_ID}
    (grant,) = json.loads(stack.one("aws:iam/rolePolicy:RolePolicy", "network-flow-logs").inputs["policy"])[
        "Statement"
    ]
    assert grant["Resource"] == [group_arn, f"{group_arn}:*"]


def test_the_vpcs_default_security_group_is_adopted_with_no_rules(stack):
    """AWS Foundational Security Best Practices EC2.2: the default security group of the platform's VPC
    allows no traffic in or out (the provider removes every rule of a group it adopts without any)."""
    (group,) = stack.of_type("aws:ec2/defaultSecurityGroup:DefaultSecurityGroup")
    assert group.inputs["vpcId"] == "network-vpc-id"  # the platform's VPC (aws:ec2/vpc:Vpc "network-vpc")
    assert not group.inputs.get("ingress") and not group.inputs.get("egress")
    assert stack.of_type("aws:ec2/securityGroupRule:SecurityGroupRule") == []


def test_data_bucket_uses_the_stack_key_and_admits_only_the_platform(stack):
    sse = stack.one("aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration")
    (rule,) = sse.inputs["rules"]
    assert rule["applyServerSideEncryptionByDefault"] == {
        "sseAlgorithm": "aws:kms",
        "kmsMasterKeyId": f"arn:aws:kms:{stack.config.region}:{ACCOUNT_ID}:key/stack-key",
    }
    assert rule["bucketKeyEnabled"] is True
    policy = json.loads(stack.one("aws:s3/bucketPolicy:BucketPolicy").inputs["policy"])
    bucket = "arn:aws:s3:::" + stack.exports["bucket_name"]
    obj = f"{bucket}/jobs/zimdb/checkpoint"
    cluster = stack.exports["cluster_name"]
    job_role = f"arn:aws:iam::{ACCOUNT_ID}:role/mlops-eks/{cluster}/zimdb-job-1a2b"
    deployer = f"arn:aws:iam::{ACCOUNT_ID}:user/mock"  # the mocked caller identity
    assert _denied_by(policy, job_role, "s3:GetObject", obj) == []
    assert _denied_by(policy, deployer, "s3:PutObject", obj) == []
    for admin in stack.config.admin_principal_arns:
        assert _denied_by(policy, admin, "s3:ListBucket", bucket) == []
    stranger = f"arn:aws:iam::{ACCOUNT_ID}:role/some-ci-role"
    assert _denied_by(policy, stranger, "s3:GetObject", obj) == ["DenyObjectsOutsideThePlatform"]
    assert _denied_by(policy, stranger, "s3:ListBucket", bucket) == ["DenyListingOutsideThePlatform"]
    other_cluster = f"arn:aws:iam::{ACCOUNT_ID}:role/mlops-eks/mlops-eks-other/job"
    assert _denied_by(policy, other_cluster, "s3:GetObject", obj)
    # TLS-only stays, for everyone, on the bucket and its objects.
    assert _denied_by(policy, job_role, "s3:GetObject", obj, tls=False) == ["DenyInsecureTransport"]
    assert _denied_by(policy, job_role, "s3:ListBucket", bucket, tls=False) == ["DenyInsecureTransport"]


def test_an_assumed_role_deployer_is_admitted_as_its_role_with_or_without_a_path():
    patterns = principal_patterns(
        partition="aws",
        account_id="111122223333",
        cluster_name="c",
        principal_arns=["arn:aws:sts::111122223333:assumed-role/Deployer/ci-run-7"],
    )
    assert _arn_like("arn:aws:iam::111122223333:role/Deployer", patterns)
    assert _arn_like("arn:aws:iam::111122223333:role/ci/Deployer", patterns)
    assert not _arn_like("arn:aws:iam::111122223333:role/Other", patterns)
    assert not _arn_like("arn:aws:sts::111122223333:assumed-role/Deployer/ci-run-7", patterns[1:2])


def test_s3_endpoint_admits_the_platform_buckets_and_what_nodes_read_only(stack):
    region = stack.config.region
    policy = json.loads(stack.one("aws:ec2/vpcEndpoint:VpcEndpoint").inputs["policy"])
    bucket = "arn:aws:s3:::" + stack.exports["bucket_name"]
    assert _allowed_by_endpoint(policy, "s3:PutObject", f"{bucket}/jobs/x", ACCOUNT_ID)
    assert not _allowed_by_endpoint(policy, "s3:PutObject", f"{bucket}/jobs/x", "999999999999")
    layers = f"arn:aws:s3:::prod-{region}-starport-layer-bucket/docker/layer"
    assert _allowed_by_endpoint(policy, "s3:GetObject", layers, "aws")
    assert not _allowed_by_endpoint(policy, "s3:PutObject", layers, "aws")
    repo = f"arn:aws:s3:::al2023-repos-{region}-de612dc2/core/mirrors/latest/x86_64/mirror.list"
    assert _allowed_by_endpoint(policy, "s3:GetObject", repo, "aws")
    assert not _allowed_by_endpoint(policy, "s3:GetObject", "arn:aws:s3:::exfil-bucket/x", ACCOUNT_ID)


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("logRetentionDays", 10, "mlops-eks:logRetentionDays"),
        ("s3EndpointExtraBuckets", ["arn:aws:s3:::data"], "mlops-eks:s3EndpointExtraBuckets[0]"),
    ],
)
def test_config_refuses_bad_log_retention_and_endpoint_buckets(key, value, message):
    values = {**stack_config("dev"), f"mlops-eks:{key}": value}
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("]", r"\]")):
        PlatformConfig.from_mapping(values)


def test_the_trust_helper_is_pure_so_workloads_may_import_it():
    source = Path(pod_identity.__file__).read_text()
    imported = {
        alias.name.split(".")[0]
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in (node.names if isinstance(node, ast.Import) else [ast.alias(node.module or "")])
    }
    assert imported <= {"__future__", "typing"}, imported


def test_s3_endpoint_admits_ecrs_layer_bucket_read_only_and_no_other_registrys(stack):
    """Every image a node pulls comes from ECR (infra/platform/registries.py), whose layers are in its S3
    bucket of the region: through the gateway endpoint, a bucket the policy does not admit is a 403 and the
    image never pulls; no other registry's bucket (registry.k8s.io's, Quay's) is admitted."""
    region = stack.config.region
    policy = json.loads(stack.one("aws:ec2/vpcEndpoint:VpcEndpoint").inputs["policy"])
    blob = f"arn:aws:s3:::prod-{region}-starport-layer-bucket/a1b2/sha256:0a1b"
    assert _allowed_by_endpoint(policy, "s3:GetObject", blob, "aws")
    assert not _allowed_by_endpoint(policy, "s3:PutObject", blob, "aws")
    for other in (f"prod-registry-k8s-io-{region}", "quayio-production-s3"):
        assert not _allowed_by_endpoint(policy, "s3:GetObject", f"arn:aws:s3:::{other}/x", "aws"), other


def test_node_roles_reach_session_manager_and_read_no_parameter(stack):
    """Session Manager's own actions instead of AmazonSSMManagedInstanceCore (ssm:GetParameter* on every
    parameter), on both node roles; none with sessionManager false."""
    from infra.platform.session_manager import ACTIONS
    from infra.tools.synth import synth

    node_roles = {"cluster-node", "karpenter-node"}
    managed = {
        a.inputs["role"]: a.inputs["policyArn"]
        for a in stack.of_type(ATTACHMENT)
        if a.inputs["role"] in node_roles
    }
    assert not any(arn.endswith("AmazonSSMManagedInstanceCore") for arn in managed.values())
    inline = {
        p.inputs["role"]: json.loads(p.inputs["policy"])
        for p in stack.of_type("aws:iam/rolePolicy:RolePolicy")
    }
    for role in node_roles:
        (statement,) = inline[f"{role}-id"]["Statement"]
        assert statement["Action"] == list(ACTIONS) and not any("GetParameter" in a for a in ACTIONS)
    values = {**stack_config("dev"), "mlops-eks:sessionManager": False}
    _, resources, _ = synth("dev", values)
    roles = {r.inputs["role"] for r in resources if r.type == "aws:iam/rolePolicy:RolePolicy"}
    assert not roles & {f"{r}-id" for r in node_roles}


def test_no_iam_oidc_provider_nothing_uses(stack):
    assert stack.one("eks:index:Cluster").inputs["createOidcProvider"] is False
    assert not {"oidc_provider_arn", "oidc_provider_url"} & set(stack.exports)
    federated = [r for r in stack.of_type(ROLE) if "Federated" in r.inputs["assumeRolePolicy"]]
    assert federated == []  # every pod role is a Pod Identity role


def test_the_interruption_queue_takes_messages_from_the_stacks_rules_only(stack):
    (policy,) = [json.loads(p.inputs["policy"]) for p in stack.of_type("aws:sqs/queuePolicy:QueuePolicy")]
    allow = policy["Statement"][0]
    rules = {r.name for r in stack.of_type("aws:cloudwatch/eventRule:EventRule")}
    assert allow["Principal"] == {"Service": "events.amazonaws.com"}
    sources = allow["Condition"]["ArnEquals"]["aws:SourceArn"]
    assert len(sources) == len(rules) == 5 and all(s.rsplit(":", 1)[-1] in rules for s in sources)
