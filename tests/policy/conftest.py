"""What the guardrail tests scan, produced once per session: the platform stacks as `infra synth`
prints them and the workload stacks as `workloads render` prints them (the real CLIs, in subprocesses)."""

from __future__ import annotations

import pytest

from policy.scan import PLATFORM_STACKS, rendered_objects, synth_resources, workload_stacks


@pytest.fixture(scope="session")
def platform_resources() -> dict[str, list[dict]]:
    return {stack: synth_resources(stack) for stack in PLATFORM_STACKS}


@pytest.fixture(scope="session")
def workload_objects() -> dict[str, list[dict]]:
    stacks = workload_stacks()
    assert stacks, "no Pulumi.<stack>.yaml sets mlops-eks:platformStack"
    return {stack: rendered_objects(stack) for stack in stacks}
