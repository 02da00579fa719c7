"""The whole-stack ways around the guardrails (tests/policy/bypasses_whole_stack.py) are each reported by
their policy, and the secure controls beside them pass every policy, through the engine's path."""

from __future__ import annotations

import pytest

from policy.pack import RULES, STACK_RULES
from tests.policy.bypasses_whole_stack import ATTEMPTS, SECURE
from tests.policy.engine_path import analyze_stack

POLICIES = {r.name for r in (*RULES, *STACK_RULES)}


def _reported(resources, prod) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for d in analyze_stack(resources, prod=prod):
        if not d.message.startswith("can't run policy"):
            found.setdefault(d.policy, []).append(d.message)
    return found


@pytest.mark.parametrize("attempt", ATTEMPTS, ids=[f"{a.policy}: {a.what}" for a in ATTEMPTS])
def test_policy_reports_the_attempt(attempt):
    assert attempt.policy in POLICIES
    found = _reported(attempt.resources, attempt.prod)
    assert attempt.policy in found, f"{attempt.policy} let through {attempt.what}: {found}"


@pytest.mark.parametrize("control", SECURE, ids=[c.what for c in SECURE])
def test_the_secure_control_passes_every_policy(control):
    found = {
        p: m
        for p, m in _reported(control.resources, control.prod).items()
        if p != "no-documentation-placeholders"
    }
    assert found == {}, f"{control.what}: {found}"
