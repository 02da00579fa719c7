"""tests/once_per_run.py: a session fixture shared by the pytest-xdist workers of one run."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from once_per_run import once_per_run


def _worker_temp(tmp_path: Path, worker: str) -> SimpleNamespace:
    """A worker's tmp_path_factory as pytest-xdist gives it: its basetemp one level under the run's. The
    run's is this test's own tmp_path, so nothing an earlier run (or a run without xdist) left is read."""
    return SimpleNamespace(getbasetemp=lambda: tmp_path / f"popen-{worker}")


def test_the_second_worker_loads_what_the_first_computed_and_a_plain_run_computes(tmp_path):
    calls = []

    def compute() -> dict:
        calls.append(1)
        return {"objects": [1, 2, 3]}

    name = "once-per-run-self-test"
    first = once_per_run(_worker_temp(tmp_path, "gw0"), "gw0", name, compute)
    second = once_per_run(_worker_temp(tmp_path, "gw1"), "gw1", name, compute)
    assert calls == [1] and second == first and second is not first  # each worker holds its own copy
    plain = once_per_run(_worker_temp(tmp_path, "master"), "master", name, compute)
    assert plain == first and calls == [1, 1]
