"""What the guardrail tests scan, produced once per session: the platform stacks as `infra synth --json`
prints them (the session's offline synth, tests/conftest.py), the objects their Helm releases install
and the workload stacks as `workloads render` prints them (the command's own code, in-process: one
subprocess per stack cost ~0.9 s of a cold interpreter each; test_stacks.py checks the command prints the same
in a process of its own)."""

from __future__ import annotations

import contextlib
import io

import pytest
import yaml
from once_per_run import once_per_run

from policy.scan import PLATFORM_STACKS, workload_stacks
from sim import helm_render


@pytest.fixture(scope="session")
def platform_resources(dev, prod) -> dict[str, list[dict]]:
    return {"dev": dev.as_json(), "prod": prod.as_json()}


@pytest.fixture(scope="session")
def chart_objects(rendered) -> dict[str, list[dict]]:
    """Every object the platform's Helm releases install, per stack: the session's `rendered` releases (what
    policy.scan.helm_objects returns, without rendering them again), refused as it refuses them."""
    if not helm_render.HELM_PACKAGES.exists():  # a skip would let the chart rules go unchecked
        pytest.fail(f"{helm_render.HELM_PACKAGES} is missing: the chart packages are part of the repository")
    assert set(rendered) == set(PLATFORM_STACKS)
    for stack, result in rendered.items():
        assert not result.errors and not result.invalid, (stack, result.errors, result.invalid)
    return {stack: result.all_objects for stack, result in rendered.items()}


@pytest.fixture(scope="session")
def workload_objects(tmp_path_factory, worker_id) -> dict[str, list[dict]]:
    stacks = workload_stacks()
    assert stacks, "no Pulumi.<stack>.yaml sets mlops-eks:platformStack"

    def render() -> dict[str, list[dict]]:
        return {stack: rendered_in_process(stack) for stack in stacks}

    return once_per_run(tmp_path_factory, worker_id, "workload-objects", render)


def rendered_in_process(stack: str) -> list[dict]:
    """What policy.scan.rendered_objects reads from `python -m workloads render --stack <stack>
    --kubernetes-only`, from the same command run in this process."""
    from workloads.__main__ import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        code = main(["render", "--stack", stack, "--kubernetes-only"])
    assert code == 0, f"workloads render --stack {stack} exited {code}"
    return [d for d in yaml.safe_load_all(out.getvalue()) if isinstance(d, dict)]
