"""The Pulumi mocks of the component and workload tests (the platform program's own are
infra.tools.synth.PlatformMocks). Set them through the `pulumi_mocks` fixture (tests/conftest.py)."""

from __future__ import annotations

import pulumi

from infra.tools.synth import ACCOUNT_ID


class RecordingMocks(pulumi.runtime.Mocks):
    """The cloud of the component and workload tests: every registration is kept; a resource's state is
    its inputs over a name, a URL and an IAM-style ARN; a StackReference answers with `stack_outputs` (the
    platform's exports); getCallerIdentity answers with the mock account, any other invoke with nothing."""

    def __init__(self, stack_outputs: dict | None = None):
        self.stack_outputs = stack_outputs or {}
        self.resources: list[pulumi.runtime.MockResourceArgs] = []

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str, dict]:
        self.resources.append(args)
        if args.typ == "pulumi:pulumi:StackReference":
            return f"{args.name}-id", {"name": args.name, "outputs": self.stack_outputs}
        state = {"name": args.name, "url": f"https://{args.name}", **args.inputs}
        state["arn"] = f"arn:aws:iam::{ACCOUNT_ID}:role/{args.name}"
        if args.typ == "random:index/randomPassword:RandomPassword":
            state["result"] = "generated-password"
        return f"{args.name}-id", state

    def call(self, args: pulumi.runtime.MockCallArgs) -> dict:  # type: ignore[override]
        if args.token == "aws:index/getCallerIdentity:getCallerIdentity":
            return {"accountId": ACCOUNT_ID, "arn": f"arn:aws:iam::{ACCOUNT_ID}:user/mock", "id": "x"}
        return {}

    def of_type(self, typ: str) -> list[pulumi.runtime.MockResourceArgs]:
        return [r for r in self.resources if r.typ == typ]

    def by_name(self, typ: str) -> dict[str, dict]:
        """The inputs of each resource of `typ`, by resource name."""
        return {r.name: r.inputs for r in self.of_type(typ)}
