"""`render` prints the job's AWS resources too, and they are the ones workloads.program creates (under
Pulumi mocks, with the AWS calls' values the mocks give)."""

from __future__ import annotations

import json

import pulumi
import yaml

from workloads.__main__ import main
from workloads.identity import ACCOUNT, aws_resources
from workloads.spec import parse_spec

JOB = {"name": "zimdb", "accelerator": "t4", "gpusPerNode": 4, "imageTag": "0.1.0", "output": {"s3": "out"}}
MOCK_ACCOUNT = "123456789012"  # tests/workloads/conftest.py's getCallerIdentity


def test_render_ends_with_the_jobs_aws_resources_marked_as_aws(capsys):
    assert main(["render", "--stack", "dev-zimdb"]) == 0
    out = capsys.readouterr().out
    docs = [d for d in yaml.safe_load_all(out) if d]
    aws = [d for d in docs if "awsResource" in d]
    assert [d["awsResource"] for d in aws] == [
        "aws:iam/role:Role",
        "aws:iam/rolePolicy:RolePolicy",
        "aws:eks/podIdentityAssociation:PodIdentityAssociation",
    ]
    assert all("kind" not in d and "apiVersion" not in d for d in aws)
    assert docs[-3:] == aws  # after every Kubernetes object, behind a comment saying what they are
    assert "# AWS resources (not Kubernetes objects)" in out


def test_render_kubernetes_only_leaves_the_aws_resources_out(capsys):
    assert main(["render", "--stack", "dev-zimdb", "--kubernetes-only"]) == 0
    docs = [d for d in yaml.safe_load_all(capsys.readouterr().out) if d]
    assert docs and all("kind" in d for d in docs)


def test_rendered_aws_resources_are_what_the_program_creates(workload_mocks, dev_platform):
    mocks = workload_mocks(JOB)

    @pulumi.runtime.test
    def run():
        from workloads.program import program

        program()

    run()
    created = {
        r.name: (r.typ, r.inputs)
        for r in mocks.resources
        if r.typ.startswith("aws:") and not r.typ.startswith("pulumi:providers")
    }
    rendered = aws_resources(parse_spec(JOB), dev_platform)
    assert {d["name"]: d["awsResource"] for d in rendered} == {
        name: typ for name, (typ, _) in created.items()
    }
    role, policy, association = rendered
    role_inputs = created[role["name"]][1]
    assert role_inputs["path"] == role["properties"]["path"]
    assert role_inputs["description"] == role["properties"]["description"]
    trust = json.dumps(role["properties"]["assumeRolePolicy"]).replace(ACCOUNT, MOCK_ACCOUNT)
    assert json.loads(role_inputs["assumeRolePolicy"]) == json.loads(trust)
    assert json.loads(created[policy["name"]][1]["policy"]) == policy["properties"]["policy"]
    assoc = created[association["name"]][1]
    expected = {k: v for k, v in association["properties"].items() if k != "roleArn"}
    assert {k: assoc[k] for k in expected} == expected
    assert assoc["roleArn"] == f"arn:aws:iam::{MOCK_ACCOUNT}:role/{role['name']}"
