"""Fixtures of the model tests: every committed workload stack's objects, and what the controllers create
from them (sim/admission/chain.py lifecycle), made once per session."""

from __future__ import annotations

import pytest

from sim.admission.chain import lifecycle
from workloads.platform import example_outputs_path, load_platform_outputs
from workloads.render import render
from workloads.stacks import load_stack, program_text, workload_stacks


@pytest.fixture(scope="session")
def stack_lives():
    """stack -> (rendered objects, platform facts, every object of its life as the controllers create it)."""
    lives = {}
    for name in workload_stacks():
        stack = load_stack(name)
        facts = load_platform_outputs(example_outputs_path(stack.platform_stack))
        objects = render(stack.spec, facts, program_text=program_text(stack.spec))
        lives[name] = (objects, facts, lifecycle(objects, facts))
    return lives


@pytest.fixture(scope="session")
def stack_jobs(stack_lives):
    """Every batch/v1 Job the controllers create for the committed stacks (a JobSet's, a submitter)."""
    jobs = [c.obj for _, _, life in stack_lives.values() for c in life if c.obj["kind"] == "Job"]
    assert {j["metadata"]["name"] for j in jobs}, "no Job among the committed stacks' objects"
    return jobs
