"""pulumi-eks's own input checks (sim/pulumi/eks_rules.py) on what dev and prod pass to it:
under mocks the component registers only itself, so these rules are the only offline evidence that the
provider accepts our eks.Cluster and eks.ManagedNodeGroup inputs."""

from __future__ import annotations

from pathlib import Path

import pulumi
import pytest

from infra.tools.synth import PlatformMocks, RecordingMonitor, stack_config, synth
from sim.pulumi import eks_rules as rules

REPO = Path(__file__).resolve().parents[2]
ROLE = "[resource cluster-node]"


@pytest.fixture(scope="module")
def synthesized(dev, prod) -> dict[str, list[dict]]:
    """Each platform stack as `python -m infra synth --json` prints it."""
    return {"dev": dev.as_json(), "prod": prod.as_json()}


def _one(resources: list[dict], type_: str, name: str | None = None) -> dict:
    return next(r for r in resources if r["type"] == type_ and (name is None or r["name"] == name))


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_the_stacks_pass_every_pulumi_eks_rule(synthesized, stack):
    resources = synthesized[stack]
    checked = [r for r in resources if r["type"] in (rules.CLUSTER, rules.NODE_GROUP)]
    assert {r["type"] for r in checked} == {rules.CLUSTER, rules.NODE_GROUP}, "nothing to check"
    assert rules.violations(resources) == []


def test_instance_roles_with_api_mode_is_what_pulumi_eks_refused(synthesized):
    """The cluster as the program registered it before: instanceRoles=[node role] with API mode."""
    resources = [dict(r) for r in synthesized["dev"]]
    cluster = _one(resources, rules.CLUSTER)
    cluster["inputs"] = {**cluster["inputs"], "instanceRoles": [ROLE]}
    assert rules.violations(resources) == [
        f"api-mode-no-config-map-mappings: {cluster['name']}: The 'instanceRoles' property does not "
        "support non-empty values when 'authenticationMode' is set to 'API'."
    ]


# (rule, bad inputs, the error pulumi-eks throws). Node group rules get (group, cluster) inputs.
API_CLUSTER = {"authenticationMode": "API", "instanceRoles": []}
BAD = [
    ("instance-role-exclusive", ({"instanceRole": ROLE, "instanceRoles": []},), "mutually exclusive"),
    ("subnet-ids-exclusive", ({"subnetIds": ["a"], "privateSubnetIds": ["b"]},), "mutually exclusive"),
    ("node-group-options-exclusive", ({"nodeGroupOptions": {}, "minSize": 1},), "mutually exclusive"),
    ("auto-mode-needs-access-entries", ({"autoMode": {"enabled": True}},), "EKS Auto Mode"),
    (
        "public-cidrs-need-public-endpoint",
        ({"endpointPublicAccess": False, "publicAccessCidrs": ["198.51.100.7/32"]},),
        "`publicAccessCidrs` can only be set when `endpointPublicAccess` is true",
    ),
    ("node-role-exclusive", ({"nodeRole": ROLE, "nodeRoleArn": "arn"}, API_CLUSTER), "both nodeRole"),
    ("node-role-required", ({}, API_CLUSTER), "An IAM role, or role ARN must be provided"),
    ("ami-id-exclusive", ({"nodeRole": ROLE, "amiId": "ami-1", "amiType": "CUSTOM"}, API_CLUSTER), "amiType"),
    (
        "node-role-in-instance-roles",
        ({"nodeRole": ROLE}, {"authenticationMode": "CONFIG_MAP"}),
        "without first setting its role in the cluster's instanceRoles",
    ),
    (
        "efa-needs-placement-zone",
        ({"nodeRole": ROLE, "enableEfaSupport": True}, API_CLUSTER),
        "placementGroup",
    ),
    (
        "launch-template-exclusive",
        ({"nodeRole": ROLE, "launchTemplate": {"id": "lt"}, "kubeletExtraArgs": "--v=2"}, API_CLUSTER),
        "custom launch template",
    ),
    (
        "user-data-exclusive",
        ({"nodeRole": ROLE, "userData": "#!", "nodeadmExtraOptions": []}, API_CLUSTER),
        "custom userData",
    ),
    (
        "taint-effects-valid",
        ({"nodeRole": ROLE, "taints": [{"key": "k", "value": "v", "effect": "NoSchedule"}]}, API_CLUSTER),
        "Invalid taint effect: NoSchedule",
    ),
]


def test_every_ported_rule_has_a_bad_case():
    covered = {b[0] for b in BAD} | {r.name for r in rules.RULES if r.source == rules.AUTH_MODE}
    assert covered == {r.name for r in rules.RULES}


@pytest.mark.parametrize(("name", "args", "error"), BAD, ids=[b[0] for b in BAD])
def test_each_rule_rejects_its_bad_input(name, args, error):
    rule = next(r for r in rules.RULES if r.name == name)
    message = rule.check(*args)
    assert message is not None and error in message


def test_the_node_role_need_not_be_listed_on_an_api_mode_cluster(synthesized):
    """EKS creates a managed node group role's access entry itself; pulumi-eks lists the role only for
    aws-auth clusters. The same group on a CONFIG_MAP cluster would be refused."""
    resources = synthesized["dev"]
    group = _one(resources, rules.NODE_GROUP)
    cluster = _one(resources, rules.CLUSTER)["inputs"]
    assert rules.node_role_in_instance_roles(group["inputs"], cluster) is None
    assert rules.node_role_in_instance_roles(group["inputs"], {**cluster, "authenticationMode": "CONFIG_MAP"})


class CallerIsTheAdminRole(PlatformMocks):
    """`aws sts get-caller-identity` as the dev stack's admin role, assumed in a session."""

    def call(self, args):  # type: ignore[override]
        if args.token == "aws:index/getCallerIdentity:getCallerIdentity":
            arn = "arn:aws:sts::123456789012:assumed-role/platform-admin/alice"
            return {"accountId": "123456789012", "arn": arn, "userId": "AROA:alice", "id": "x"}
        return super().call(args)


def test_deploying_as_an_admin_principal_fails_before_the_cluster_is_registered(pulumi_mocks):
    """pulumi-eks always sets bootstrapClusterCreatorAdminPermissions: true (cluster.ts), so EKS creates
    the creator's admin entry and a second one for the same role fails (pulumi/pulumi-eks#2373)."""
    from infra.program import program

    values = stack_config("dev")
    assert values["mlops-eks:adminPrincipalArns"] == ["arn:aws:iam::123456789012:role/platform-admin"]
    mocks = CallerIsTheAdminRole(values["aws:region"])
    monitor = RecordingMonitor(mocks)
    pulumi_mocks(mocks, config=values, monitor=monitor)

    @pulumi.runtime.test
    def run():
        program(placeholders="warn")

    with pytest.raises(Exception, match=r"adminPrincipalArns\[0\].*cluster's creator"):
        run()
    assert not [r for r in monitor.registered if r.type == rules.CLUSTER]


def test_a_private_only_prod_deployed_from_the_vpc_passes_pulumi_eks_and_the_prod_policy():
    from policy.eks import RULES as EKS_POLICIES

    values = stack_config("prod")
    values = {k: v for k, v in values.items() if k != "mlops-eks:publicAccessCidrs"}
    values |= {
        "mlops-eks:endpointPublicAccess": False,
        "mlops-eks:deployFromVpc": True,
        "mlops-eks:deployerCidrs": ["10.30.0.0/19"],
    }
    # An update from a runner inside the VPC (the first deploy cannot be: tests/infra/test_rehearsal.py).
    creator = {"mlops-eks:cluster-creator": "arn:aws:iam::123456789012:user/mock"}
    _, registered, _ = synth("prod", values, clusters={"mlops-eks-prod": creator})
    resources = [{"type": r.type, "name": r.name, "inputs": r.inputs} for r in registered]
    assert rules.violations(resources) == []
    cluster = _one(resources, rules.CLUSTER)["inputs"]
    assert cluster["endpointPublicAccess"] is False and "publicAccessCidrs" not in cluster
    assert cluster["clusterTags"] == {**creator, "mlops-eks:deploy-from-vpc": "true"}
    prod_endpoint = next(r for r in EKS_POLICIES if r.name == "eks-prod-endpoint-deployer-only")
    assert prod_endpoint.violations(rules.CLUSTER, cluster, prod=True) == []
    untagged = {k: v for k, v in cluster.items() if k != "clusterTags"}
    assert prod_endpoint.violations(rules.CLUSTER, untagged, prod=True)
    # The runner's subnet reaches the private endpoint: 443 into the cluster security group, from it only.
    (rule,) = [r["inputs"] for r in resources if r["type"] == "aws:ec2/securityGroupRule:SecurityGroupRule"]
    assert (rule["type"], rule["fromPort"], rule["toPort"], rule["protocol"]) == ("ingress", 443, 443, "tcp")
    assert rule["cidrBlocks"] == ["10.30.0.0/19"] and rule["securityGroupId"] == "sg-0cluster"


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_every_node_role_can_join_the_api_mode_cluster(synthesized, stack):
    """Without aws-auth, a node joins only through an EC2_LINUX access entry: EKS creates it for a managed
    node group's role, the program must create it for the role Karpenter's nodes use."""
    resources = synthesized[stack]
    groups = [r for r in resources if r["type"] == rules.NODE_GROUP]
    assert groups and {g["inputs"]["nodeRole"] for g in groups} == {ROLE}
    karpenter_role = _one(resources, "aws:iam/role:Role", "karpenter-node")
    entries = [r["inputs"] for r in resources if r["type"] == "aws:eks/accessEntry:AccessEntry"]
    assert [e["type"] for e in entries if e["principalArn"].endswith(f"role/{karpenter_role['name']}")] == [
        "EC2_LINUX"
    ]
