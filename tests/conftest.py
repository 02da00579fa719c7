"""Fixtures shared by every test package.

Pulumi mocks are set per test by fixtures in tests/infra and tests/workloads (never at import time),
so both packages' tests run in one pytest process.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
UPSTREAM_CHECK = SHARED / "tools" / "upstream_check.py"


def _require_shared() -> None:
    if not UPSTREAM_CHECK.exists():
        pytest.fail(f"{UPSTREAM_CHECK} is missing: upstream contract checks need ../shared beside the repo")


@pytest.fixture
def crd_check(tmp_path):
    """Validate Kubernetes objects against ../shared/upstream/crds. Returns (returncode, output)."""

    def check(objects: list[dict]) -> tuple[int, str]:
        _require_shared()
        f = tmp_path / "objects.json"
        f.write_text(json.dumps(objects))
        p = subprocess.run(
            [sys.executable, str(UPSTREAM_CHECK), "crd", str(f)], capture_output=True, text=True
        )
        return p.returncode, p.stdout + p.stderr

    return check


@pytest.fixture
def values_check(tmp_path):
    """Check a Helm values dict against the chart's upstream default values at a version."""

    def check(chart: str, version: str, values: dict) -> tuple[int, str]:
        _require_shared()
        f = tmp_path / f"{chart}-values.yaml"
        f.write_text(yaml.safe_dump(values))
        p = subprocess.run(
            [sys.executable, str(UPSTREAM_CHECK), "values", chart, version, str(f)],
            capture_output=True,
            text=True,
        )
        return p.returncode, p.stdout + p.stderr

    return check
