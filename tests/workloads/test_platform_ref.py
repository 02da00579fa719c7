"""mlops-eks:platformStack: a bare stack name follows the workload stack's organization (Pulumi Cloud or a
DIY backend's "organization"), so the committed stack files fit either backend unedited."""

from __future__ import annotations

import pulumi
import pytest
import yaml
from recording_mocks import RecordingMocks

from workloads.spec import SpecError
from workloads.stacks import PLATFORM_KEY, REPO, platform_stack_ref, workload_stacks

JOB = {"name": "zimdb", "accelerator": "t4", "gpusPerNode": 4, "imageTag": "0.1.0"}


@pytest.mark.parametrize(
    ("value", "org", "ref"),
    [
        ("dev", "acme", "acme/mlops-eks/dev"),
        ("dev", None, "organization/mlops-eks/dev"),  # DIY backends' fixed org; mocks without one
        ("other-org/mlops-eks/prod", "acme", "other-org/mlops-eks/prod"),
    ],
)
def test_platform_stack_ref(value, org, ref):
    assert platform_stack_ref(value, org) == ref


@pytest.mark.parametrize("value", ["acme/dev", "a/b/c/d", "", "dev prod", "acme//dev"])
def test_malformed_platform_stack_names_the_key_value_and_forms(value):
    with pytest.raises(SpecError) as err:
        platform_stack_ref(value, "acme")
    assert PLATFORM_KEY in str(err.value) and repr(value) in str(err.value)
    assert "org/project/stack" in str(err.value)


def test_program_references_the_platform_in_its_own_organization(dev_outputs, pulumi_mocks):
    mocks = RecordingMocks({**dev_outputs, "kubeconfig": '{"apiVersion": "v1"}'})
    config = {PLATFORM_KEY: "dev", "mlops-eks:job": JOB}
    pulumi_mocks(mocks, stack="dev-zimdb", config=config, organization="acme")

    @pulumi.runtime.test
    def run():
        from workloads.program import program

        program()

    run()
    (ref,) = mocks.of_type("pulumi:pulumi:StackReference")
    assert ref.name == "acme/mlops-eks/dev"


def test_committed_workload_stacks_name_their_platform_without_an_organization():
    stacks = workload_stacks()
    assert stacks, "no committed workload stack found"
    for stack in stacks:
        config = yaml.safe_load((REPO / f"Pulumi.{stack}.yaml").read_text())["config"]
        assert "/" not in config[PLATFORM_KEY], f"Pulumi.{stack}.yaml: {config[PLATFORM_KEY]}"
