"""`python -m infra check`: a platform stack is judged before `pulumi up` by its config, its reachability,
its documentation placeholders and the input rules pulumi-eks applies in its provider, on the inputs the
real program passes (offline, under Pulumi mocks); exit 0 will deploy, 2 will not."""

from __future__ import annotations

import copy

import pytest

from infra.__main__ import main
from infra.tools import check as check_module
from infra.tools.synth import REPO, stack_config, synth

# Values a user puts where the committed files hold the documentation's examples.
OWN = {
    "dev": {
        "mlops-eks:publicAccessCidrs": ["52.94.76.0/24"],
        "mlops-eks:adminPrincipalArns": ["arn:aws:iam::210987654321:role/platform-admin"],
    },
    "prod": {
        "mlops-eks:publicAccessCidrs": ["52.94.76.7/32"],
        "mlops-eks:adminPrincipalArns": ["arn:aws:iam::210987654321:role/platform-admin"],
    },
}


def own(stack: str) -> dict:
    values = {**copy.deepcopy(stack_config(stack)), **OWN[stack]}
    for pool in values["mlops-eks:gpuPools"]:
        if "amiId" in pool:
            pool["amiId"] = "ami-0a1b2c3d4e5f60718"
        if "reservation" in pool:
            pool["reservation"] = {**pool["reservation"], "ids": ["cr-0a1b2c3d4e5f60718"]}
    return values


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_a_committed_stack_will_not_deploy_only_for_its_example_values(capsys, stack):
    assert main(["check", "--stack", stack]) == 2
    out = capsys.readouterr().out
    assert "config: valid (PlatformConfig)" in out
    rules = "pulumi-eks input rules: 16 rules on 1 eks.Cluster, 1 eks.ManagedNodeGroup: none broken"
    assert rules in out
    reasons = out.split("verdict: will not deploy because:")[1].strip().splitlines()
    refused = "a real preview or update refuses it (allowed: a real value)"
    assert reasons and all(refused in r for r in reasons)


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_with_the_users_own_values_it_will_deploy(stack):
    result = check_module.check(stack, own(stack))
    assert result.problems == [] and result.text().endswith("verdict: will deploy")
    assert any(line.startswith("Estimated idle cost") for line in result.lines)


def test_an_input_pulumi_eks_refuses_fails_the_check_with_its_own_message(monkeypatch):
    """The rules run on what the program registers: a cluster whose authenticationMode would not take
    access entries is refused as pulumi-eks's validateAuthenticationMode refuses it."""

    def config_map_cluster(stack, values, monitor_type=None):
        config, resources, exports = synth(stack, values, monitor_type)
        for r in resources:
            if r.type == "eks:index:Cluster":
                r.inputs["authenticationMode"] = "CONFIG_MAP"
        return config, resources, exports

    monkeypatch.setattr(check_module, "synth", config_map_cluster)
    result = check_module.check("dev", own("dev"))
    assert result.problems == [
        "pulumi-eks would refuse it: access-entries-need-api-mode: cluster-eks: The 'accessEntries' property "
        "is not supported when 'authenticationMode' is set to 'CONFIG_MAP'.",
        "pulumi-eks would refuse it: node-role-in-instance-roles: system: A managed node group cannot be "
        "created without first setting its role in the cluster's instanceRoles",
    ]


def test_a_cluster_the_deployer_cannot_reach_will_not_deploy(capsys):
    values = {**own("dev"), "mlops-eks:endpointPublicAccess": False, "mlops-eks:publicAccessCidrs": []}
    result = check_module.check("dev", values)
    assert "reachable from here: no (pulumi-eks rules not run until it is)" in result.lines
    assert any("deployFromVpc true when pulumi runs inside the VPC" in p for p in result.problems)


def test_bad_config_exits_2_with_the_configs_own_message(capsys, tmp_path):
    path = tmp_path / "Pulumi.dev.yaml"
    text = (REPO / "Pulumi.dev.yaml").read_text()
    path.write_text(text.replace("natGateways: single", "natGateways: one"))
    assert main(["check", "--stack", "dev", "--file", str(path)]) == 2
    out = capsys.readouterr().out
    assert "config: refused (PlatformConfig)" in out
    assert "mlops-eks:natGateways: Input should be 'single' or 'per-az' (got 'one'); allowed:" in out
