"""Fixtures of the image tests: the three Dockerfiles and .dockerignore, parsed once."""

from __future__ import annotations

import pytest
from dockerfile_model import FLAVORS, REPO, Dockerfile, parse_dockerfile, read_dockerignore


@pytest.fixture(scope="session")
def dockerfiles() -> dict[str, Dockerfile]:
    return {flavor: parse_dockerfile(REPO / "docker" / flavor / "Dockerfile") for flavor in FLAVORS}


@pytest.fixture(scope="session")
def dockerignore() -> list[str]:
    return read_dockerignore()
