"""The documented way to deploy runs the policy pack: `make preview` / `make up` pass `--policy-pack
policy`, and no command in the README or docs/ runs `pulumi preview` or `pulumi up` without it."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _code_lines(markdown: str) -> list[str]:
    """The lines inside fenced code blocks, comments cut off."""
    lines, inside = [], False
    for line in markdown.splitlines():
        if line.lstrip().startswith("```"):
            inside = not inside
        elif inside:
            lines.append(line.split("#", 1)[0])
    return lines


@pytest.mark.skipif(shutil.which("make") is None, reason="no make")
@pytest.mark.parametrize("target", ["preview", "up"])
def test_make_deploy_targets_run_the_policy_pack(target):
    p = subprocess.run(
        ["make", "-n", target, "STACK=prod", "ARGS=--diff"], cwd=REPO, capture_output=True, text=True
    )
    assert p.returncode == 0, p.stderr
    assert f"pulumi {target} --stack prod --policy-pack policy --diff" in p.stdout
    assert (REPO / "policy" / "PulumiPolicy.yaml").exists()


@pytest.mark.skipif(shutil.which("make") is None, reason="no make")
def test_make_up_without_a_stack_is_a_usage_error():
    p = subprocess.run(["make", "up"], cwd=REPO, capture_output=True, text=True)
    assert p.returncode != 0 and "usage: make up STACK=<stack>" in p.stderr


def test_no_documented_command_deploys_around_the_pack():
    pages = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
    lines = [line for page in pages for line in _code_lines(page.read_text())]
    deploys = [line for line in lines if re.search(r"\bpulumi (up|preview)\b", line)]
    assert all("--policy-pack policy" in line for line in deploys), deploys
    assert any(re.match(r"\s*make up STACK=dev\b", line) for line in lines)
