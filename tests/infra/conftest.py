"""Fixtures for the platform tests: the real program evaluated under Pulumi mocks once per stack (`dev`,
`prod` and `rendered` live in tests/conftest.py, shared with the policy tests)."""

from __future__ import annotations

import pytest


@pytest.fixture(params=["dev", "prod"])
def stack(request, dev, prod):
    return {"dev": dev, "prod": prod}[request.param]
