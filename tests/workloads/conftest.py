"""Fixtures of the workload tests: the example platform outputs and Pulumi mocks for workloads.program."""

from __future__ import annotations

import json

import pulumi
import pytest

from workloads.platform import example_outputs_path, load_platform_outputs


@pytest.fixture
def dev_outputs() -> dict:
    return json.loads(example_outputs_path("dev").read_text())


@pytest.fixture
def dev_platform():
    return load_platform_outputs(example_outputs_path("dev"))


@pytest.fixture
def prod_platform():
    return load_platform_outputs(example_outputs_path("prod"))


class WorkloadMocks(pulumi.runtime.Mocks):
    """Records every resource; the StackReference returns the platform's outputs."""

    def __init__(self, platform_outputs: dict):
        self.platform_outputs = platform_outputs
        self.resources: list[pulumi.runtime.MockResourceArgs] = []

    def new_resource(self, args: pulumi.runtime.MockResourceArgs):
        self.resources.append(args)
        if args.typ == "pulumi:pulumi:StackReference":
            return f"{args.name}-id", {"name": args.name, "outputs": self.platform_outputs}
        state = dict(args.inputs)
        if args.typ == "aws:iam/role:Role":
            state["arn"] = f"arn:aws:iam::123456789012:role/{args.name}"
        return f"{args.name}-id", state

    def call(self, args: pulumi.runtime.MockCallArgs):
        if args.token == "aws:index/getCallerIdentity:getCallerIdentity":
            return {"accountId": "123456789012", "arn": "arn:aws:iam::123456789012:user/mock", "id": "x"}
        return {}

    def of_type(self, typ: str) -> list[pulumi.runtime.MockResourceArgs]:
        return [r for r in self.resources if r.typ == typ]


@pytest.fixture
def workload_mocks(dev_outputs):
    """Set per test: Pulumi mocks and the config of a workload stack (set `mocks.config` first)."""

    def install(job: dict, platform_outputs: dict | None = None, stack: str = "dev-test") -> WorkloadMocks:
        mocks = WorkloadMocks({**(platform_outputs or dev_outputs), "kubeconfig": '{"apiVersion": "v1"}'})
        pulumi.runtime.set_mocks(mocks, project="mlops-eks", stack=stack, preview=False)
        pulumi.runtime.set_all_config(
            {"mlops-eks:platformStack": "organization/mlops-eks/dev", "mlops-eks:job": json.dumps(job)}
        )
        return mocks

    yield install
    pulumi.runtime.set_all_config({})
