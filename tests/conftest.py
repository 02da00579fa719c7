"""Fixtures shared by every test package.

Pulumi mocks are set per test through `pulumi_mocks` (never at import time), so every package's tests run
in one pytest process. The platform program is evaluated offline once per stack and session (`dev`,
`prod`) and its Helm releases rendered once (`rendered`): most platform and policy tests read those.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import json
import os
import signal
from dataclasses import asdict
from typing import Any

import botocore.loaders
import botocore.session
import fault_ledger
import pulumi
import pytest
from once_per_run import once_per_run
from recording_mocks import RecordingMocks
from synth_graph import Synth, synth_with_edges

from infra.tools.synth import install_mocks
from sim import contracts
from sim.pulumi.language_host import engine_values, handed_over

# botocore parses its service models and endpoint rules (megabytes of JSON) once per Session, and moto's
# mock_aws() gives every test a fresh Session: one loader for the process, as clients of one Session share it.
botocore.session.create_loader = functools.cache(botocore.loaders.create_loader)


def pytest_sessionfinish(session):
    if hasattr(session.config, "workeroutput"):  # an xdist worker: its fault ledger goes to the controller
        session.config.workeroutput["fault_ledger"] = [asdict(e) for e in fault_ledger.LEDGER]


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    """pytest-xdist, on the controller: a worker finished; add its fault ledger to the run's."""
    entries = getattr(node, "workeroutput", {}).get("fault_ledger", [])
    fault_ledger.LEDGER.extend(fault_ledger.Entry(**e) for e in entries)


def pytest_configure(config):
    """A test process holds millions of long-lived objects (torch, the Pulumi SDKs, parsed charts and CRDs).
    At CPython's default thresholds (700, 10, 10) the cycle collector walks them again and again: a fifth
    of the in-process tests' CPU time. Young objects are still collected; the oldest generation rarely."""
    gc.set_threshold(50_000, 50, 100)
    workers = int(getattr(config, "workerinput", {}).get("workercount", 1))
    if workers >= (os.cpu_count() or 1):
        # One pytest-xdist worker per core: torch's intra-op pool of one thread per core in each worker (and
        # in the processes it starts) would put two busy threads on every core, and OpenMP's spinning
        # threads then wait on each other. torch reads this when it is first imported.
        os.environ.setdefault("OMP_NUM_THREADS", "1")


# The files that take longest (a minute or more of a worker's time each: real multi-process runs, the
# rehearsal), collected first: pytest-xdist hands files out in collection order, so a worker that drew one
# of these last would still be running it long after the other ran out of work.
SLOWEST_FIRST = (
    "tests/infra/test_rehearsal.py",
    "tests/trainer/test_distributed.py",
    "tests/workloads/test_local_ray.py",
    "tests/trainer/test_llm_distributed.py",
    "tests/docker/test_python_deps.py",
    "tests/trainer/test_checkpoint.py",
    "tests/faults/test_retryable_exits.py",
    "tests/faults/test_checkpoint_faults.py",
)


def pytest_collection_modifyitems(config, items):
    rank = {path: i for i, path in enumerate(SLOWEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(rank)))  # stable: order kept within


def pytest_terminal_summary(terminalreporter):
    fault_ledger.report(terminalreporter)


@pytest.fixture
def keep_sigterm_handler():
    """For in-process trainer runs: the trainer sets its own SIGTERM handler; the test's is restored after."""
    handler = signal.getsignal(signal.SIGTERM)
    yield
    signal.signal(signal.SIGTERM, handler)


@pytest.fixture
def crd_check():
    """check(objects) -> (returncode, output): the objects validated against upstream/crds
    (sim/contracts.py, in-process; each CRD parsed once per process). The objects go through JSON first,
    as they would to the API server."""

    def check(objects: list[dict]) -> tuple[int, str]:
        return contracts.check_objects(json.loads(json.dumps(objects)))

    return check


@pytest.fixture
def values_check():
    """check(chart, version, values) -> (returncode, output): every key of a Helm values dict checked against
    the chart's upstream default values at that version (upstream/charts)."""

    def check(chart: str, version: str, values: dict) -> tuple[int, str]:
        return contracts.check_values(chart, version, json.loads(json.dumps(values)))

    return check


@pytest.fixture
def pulumi_mocks():
    """install(mocks=None, *, stack="dev", config=None, monitor=None, organization=None) -> the mocks:
    Pulumi mocks (a RecordingMocks unless given) set on a fresh event loop, with `config` as the stack's
    config. Call it again to start over within a test. Afterwards the config is empty and the event loop
    fresh, so no test sees another's."""

    handing_over = contextlib.ExitStack()

    def install(
        mocks: pulumi.runtime.Mocks | None = None,
        *,
        stack: str = "dev",
        config: dict[str, Any] | None = None,
        monitor: Any = None,
        organization: str | None = None,
    ) -> Any:
        mocks = mocks if mocks is not None else RecordingMocks()
        handing_over.close()
        handing_over.enter_context(handed_over(*engine_values(config or {})))
        install_mocks(mocks, stack, monitor, organization=organization)
        return mocks

    yield install
    handing_over.close()
    asyncio.set_event_loop(asyncio.new_event_loop())


@pytest.fixture(scope="session")
def dev(tmp_path_factory, worker_id) -> Synth:
    """The real platform program for Pulumi.dev.yaml, evaluated offline (infra.tools.synth), with the
    dependency graph the engine would receive."""
    return once_per_run(tmp_path_factory, worker_id, "dev", lambda: synth_with_edges("dev"))


@pytest.fixture(scope="session")
def prod(tmp_path_factory, worker_id) -> Synth:
    return once_per_run(tmp_path_factory, worker_id, "prod", lambda: synth_with_edges("prod"))


@pytest.fixture(scope="session")
def rendered(dev, prod, tmp_path_factory, worker_id):
    """Every Helm release of dev and prod rendered with its real chart and validated, once per run
    (sim/helm_render.py)."""
    from sim.helm_render import render_platform

    def render() -> dict:
        return {
            name: render_platform(synth.resources, synth.config.kubernetes_version)
            for name, synth in (("dev", dev), ("prod", prod))
        }

    return once_per_run(tmp_path_factory, worker_id, "rendered", render)
