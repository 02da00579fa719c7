"""What the guardrail tests scan, produced once per session: the platform stacks as `infra synth --json`
prints them (the session's offline synth, tests/conftest.py), the objects their Helm releases install
and the workload stacks as `workloads render` prints them (the real CLI, in subprocesses)."""

from __future__ import annotations

import pytest

from policy import helm_render
from policy.scan import PLATFORM_STACKS, helm_objects, rendered_objects, workload_stacks


@pytest.fixture(scope="session")
def platform_resources(dev, prod) -> dict[str, list[dict]]:
    return {"dev": dev.as_json(), "prod": prod.as_json()}


@pytest.fixture(scope="session")
def chart_objects(platform_resources) -> dict[str, list[dict]]:
    """Every object the platform's Helm releases install, per stack (policy.scan.helm_objects)."""
    if not helm_render.HELM_PACKAGES.exists():  # a skip would let the chart rules go unchecked
        pytest.fail(f"{helm_render.HELM_PACKAGES} is missing: the chart packages are part of the repository")
    return {stack: helm_objects(platform_resources[stack]) for stack in PLATFORM_STACKS}


@pytest.fixture(scope="session")
def workload_objects() -> dict[str, list[dict]]:
    stacks = workload_stacks()
    assert stacks, "no Pulumi.<stack>.yaml sets mlops-eks:platformStack"
    return {stack: rendered_objects(stack) for stack in stacks}
