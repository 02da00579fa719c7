"""`python -m infra synth`: once in a subprocess, as a reviewer runs it; the rest through its main(), which
prints the session's synth of the committed stack files (`committed_synths`) instead of running the program
again."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from infra.__main__ import main
from infra.config.platform import PlatformConfig
from infra.tools.idle_cost import idle_cost_lines
from infra.tools.synth import stack_config

REPO = Path(__file__).resolve().parents[2]
EXPECTED_TYPES = {
    "mlops-eks:infra:Network",
    "mlops-eks:infra:Cluster",
    "mlops-eks:infra:NodePool",
    "mlops-eks:infra:ManagedAddons",
    "mlops-eks:infra:Storage",
    "aws:ec2/vpc:Vpc",
    "aws:ec2/subnet:Subnet",
    "aws:ec2/natGateway:NatGateway",
    "aws:ec2/vpcEndpoint:VpcEndpoint",
    "aws:kms/key:Key",
    "aws:iam/role:Role",
    "eks:index:Cluster",
    "eks:index:ManagedNodeGroup",
    "aws:ec2/launchTemplate:LaunchTemplate",
    "aws:eks/addon:Addon",
    "pulumi:providers:kubernetes",
    "kubernetes:storage.k8s.io/v1:StorageClass",
    "aws:s3/bucket:Bucket",
    "aws:s3/bucketPolicy:BucketPolicy",
    "aws:ecr/repository:Repository",
}


def check_resources(resources: list[dict]) -> None:
    assert {r["type"] for r in resources} >= EXPECTED_TYPES
    assert all(set(r) == {"type", "name", "parent", "inputs", "deps"} for r in resources)
    # Property dependencies by resource name, as the engine gives the pack's stack rules: the data bucket's
    # versioning was computed from the bucket.
    versioning = next(r for r in resources if r["type"] == "aws:s3/bucketVersioning:BucketVersioning")
    bucket = next(r for r in resources if r["type"] == "aws:s3/bucket:Bucket")
    assert bucket["name"] in versioning["deps"]["bucket"]
    provider = next(r for r in resources if r["type"] == "pulumi:providers:kubernetes")
    assert provider["inputs"]["kubeconfig"] == "[secret]"


@pytest.fixture
def committed_synths(monkeypatch, dev, prod):
    """main()'s synth of the committed dev or prod stack file answered with the session's (tests/conftest.py:
    the same program under the same mocks, ~1.5 s a run): these tests read what main() prints of it. Any
    other stack or config runs the program."""
    from infra.tools import synth as synth_module

    real, done = synth_module.synth, {"dev": dev, "prod": prod}

    def synth(stack, values, **options):
        if stack in done and not options and values == stack_config(stack):
            return done[stack].config, done[stack].resources, done[stack].exports
        return real(stack, values, **options)

    monkeypatch.setattr(synth_module, "synth", synth)


def test_the_command_prints_json_on_stdout_and_warnings_on_stderr():
    """The real entry point, in a fresh process (as `make lint` and a reviewer run it)."""
    p = subprocess.run(
        [sys.executable, "-m", "infra", "synth", "--stack", "dev", "--json"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 0, p.stderr[-2000:]
    check_resources(json.loads(p.stdout))  # the warnings stay out of the JSON
    assert "no alert receiver" in p.stderr and '"null"' in p.stderr


def test_synth_json_lists_every_resource_with_type_name_parent_inputs(capsys, committed_synths):
    assert main(["synth", "--stack", "prod", "--json"]) == 0
    check_resources(json.loads(capsys.readouterr().out))


def test_synth_text_prints_exports_and_the_idle_cost(capsys, committed_synths):
    assert main(["synth", "--stack", "dev", "--details"]) == 0
    out = capsys.readouterr().out
    assert "eks:index:Cluster  cluster-eks  (parent: cluster)" in out
    assert 'kubeconfig: "[secret]"' in out
    assert "total per hour                   $   0.311" in out


def test_synth_fails_with_the_config_error_and_creates_nothing(tmp_path, capsys):
    config = stack_config("dev")
    config["mlops-eks:gpuPools"][1].pop("amiId")
    bad = tmp_path / "Pulumi.bad.yaml"
    bad.write_text(yaml.safe_dump({"config": config}))
    assert main(["synth", "--stack", "dev", "--file", str(bad), "--json"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert "mlops-eks:gpuPools[1].amiId" in err and "ami-0123456789abcdef0" in err


def test_unknown_stack_lists_the_stacks_there_are(capsys):
    assert main(["synth", "--stack", "staging"]) == 2
    err = capsys.readouterr().err
    assert "Pulumi.staging.yaml" in err and "dev" in err


def test_idle_cost_counts_control_plane_nat_system_nodes_and_gpu_minimums():
    dev = dict(idle_cost_lines(PlatformConfig.from_mapping(stack_config("dev"))))
    prod = dict(idle_cost_lines(PlatformConfig.from_mapping(stack_config("prod"))))
    assert dev["NAT gateways (1)"] == pytest.approx(0.045) and prod["NAT gateways (3)"] == pytest.approx(
        0.135
    )
    assert dev["system nodes (2 x t3.large)"] == pytest.approx(0.1664)
    assert prod["system nodes (3 x m6i.xlarge)"] == pytest.approx(0.576)
    assert dev["GPU pool t4 (0 x g4dn.12xlarge)"] == 0
    # A reserved (managed) pool runs its fixed size whether jobs run or not; Karpenter pools run none.
    warm = stack_config("dev")
    warm["mlops-eks:gpuPools"].append(
        {
            "name": "t4-reserved",
            "accelerator": "t4",
            "source": "managed",
            "size": 1,
            "instanceTypes": ["g4dn.12xlarge"],
        }
    )
    lines = dict(idle_cost_lines(PlatformConfig.from_mapping(warm)))
    assert lines["GPU pool t4-reserved (1 x g4dn.12xlarge)"] == pytest.approx(3.912)
    assert lines["GPU pool t4 (0 x g4dn.12xlarge)"] == 0


def test_an_invoke_the_offline_mock_does_not_know_is_an_error_naming_it():
    import pulumi

    from infra.tools.synth import PlatformMocks

    unknown = pulumi.runtime.MockCallArgs(token="aws:ec2/getVpc:getVpc", args={}, provider="")
    with pytest.raises(NotImplementedError, match="no answer for invoke aws:ec2/getVpc:getVpc"):
        PlatformMocks("us-east-1").call(unknown)


def test_a_version_past_standard_support_is_priced_and_announced_at_the_extended_support_rate():
    from datetime import date

    from infra.config.cluster_rules import extended_support_notice

    values = {**stack_config("dev"), "mlops-eks:kubernetesVersion": "1.33"}
    lines = dict(idle_cost_lines(PlatformConfig.from_mapping(values), today=date(2026, 11, 27)))
    assert lines["EKS control plane (extended support)"] == 0.60
    dev = PlatformConfig.from_mapping(stack_config("dev"))
    current = dict(idle_cost_lines(dev, today=date(2026, 11, 27)))
    assert current["EKS control plane"] == 0.10
    notice = extended_support_notice("1.33", date(2026, 11, 27))
    assert notice and "2026-07-29" in notice and "$0.60 per hour" in notice and "'1.35'" in notice
    assert extended_support_notice("1.34", date(2026, 12, 2)) is None  # its last day of standard support
    assert extended_support_notice("1.34", date(2026, 12, 3))


def test_synth_sums_up_by_type_as_pulumi_preview_does_and_details_on_request(capsys, committed_synths):
    assert main(["synth", "--stack", "dev"]) == 0
    out = capsys.readouterr().out
    total = int(re.search(r"^Resources: \+ (\d+) to create$", out, re.M).group(1))
    by_type = {kind: int(n) for n, kind in re.findall(r"^  \+ +(\d+)  (\S+)$", out, re.M)}
    assert sum(by_type.values()) == total and by_type["eks:index:Cluster"] == 1, out
    assert not re.search(r"^\S+  \S+  \(parent: ", out, re.M)  # no line per resource without --details
    assert f"{total} resources. Exports:" in out and "total per hour" in out


def test_a_managed_pool_without_a_published_price_is_named_not_priced():
    warm = stack_config("dev")
    warm["mlops-eks:gpuPools"].append(
        {
            "name": "h200",
            "accelerator": "h200",
            "source": "managed",
            "size": 2,
            "instanceTypes": ["p5e.48xlarge"],
        }
    )
    lines = dict(idle_cost_lines(PlatformConfig.from_mapping(warm)))
    assert lines["GPU pool h200 (2 x p5e.48xlarge): no published price, not counted"] == 0.0
