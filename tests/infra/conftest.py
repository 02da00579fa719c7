"""Fixtures for the platform tests: the real program evaluated under Pulumi mocks, once per stack."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import pytest

from infra.config.platform import PlatformConfig
from infra.tools.synth import Registered, stack_config, synth


@dataclass
class Synth:
    config: PlatformConfig
    resources: list[Registered]
    exports: dict

    def of_type(self, type_: str) -> list[Registered]:
        return [r for r in self.resources if r.type == type_]

    def one(self, type_: str, name: str | None = None) -> Registered:
        found = [r for r in self.of_type(type_) if name is None or r.name == name]
        assert len(found) == 1, f"expected one {type_} {name or ''}, found {[r.name for r in found]}"
        return found[0]


def _synth(stack: str) -> Synth:
    # synth() sets the mocks (and a fresh event loop) itself; give later tests a clean loop back.
    try:
        return Synth(*synth(stack, stack_config(stack)))
    finally:
        asyncio.set_event_loop(asyncio.new_event_loop())


@pytest.fixture(scope="session")
def dev() -> Synth:
    return _synth("dev")


@pytest.fixture(scope="session")
def prod() -> Synth:
    return _synth("prod")


@pytest.fixture(params=["dev", "prod"])
def stack(request, dev, prod) -> Synth:
    return {"dev": dev, "prod": prod}[request.param]


@pytest.fixture(scope="session")
def rendered(dev, prod):
    """Every Helm release of dev and prod rendered with its real chart and validated, once
    (policy/helm_render.py)."""
    from policy.helm_render import render_platform

    return {
        name: render_platform(synth.resources, synth.config.kubernetes_version)
        for name, synth in (("dev", dev), ("prod", prod))
    }
