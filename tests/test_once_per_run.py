"""tests/once_per_run.py: a session fixture shared by the pytest-xdist workers of one run."""

from __future__ import annotations

from once_per_run import once_per_run


def test_the_second_worker_loads_what_the_first_computed_and_a_plain_run_computes(tmp_path_factory):
    calls = []

    def compute() -> dict:
        calls.append(1)
        return {"objects": [1, 2, 3]}

    name = "once-per-run-self-test"
    first = once_per_run(tmp_path_factory, "gw0", name, compute)
    second = once_per_run(tmp_path_factory, "gw1", name, compute)
    assert calls == [1] and second == first and second is not first  # each worker holds its own copy
    assert once_per_run(tmp_path_factory, "master", name, compute) == first and calls == [1, 1]
