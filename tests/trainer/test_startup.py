"""Entry points import with the cycle collector off, then freeze what they imported out of later
collections: trainer/startup.py for the trainer's entry points, infra/startup.py for the Pulumi program and
the policy pack (nothing outside the job image imports the trainer)."""

from __future__ import annotations

import gc
import subprocess
import sys

import pytest
from trainer_runs import REPO, run_env

from infra import startup as infra_startup
from trainer import startup as trainer_startup

BOTH = pytest.mark.parametrize(
    "imports_without_gc", [trainer_startup.imports_without_gc, infra_startup.imports_without_gc]
)


@BOTH
def test_the_collector_is_off_inside_and_on_after_with_what_was_made_frozen(imports_without_gc):
    frozen = gc.get_freeze_count()
    with imports_without_gc():
        assert not gc.isenabled()
        made = [[] for _ in range(1000)]  # containers the collector tracks, as modules and classes are
    assert gc.isenabled() and gc.get_freeze_count() >= frozen + len(made)


@BOTH
def test_a_collector_that_was_off_stays_off(imports_without_gc):
    gc.disable()
    try:
        with imports_without_gc():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()


@pytest.mark.parametrize(
    ("entry_point", "objects"),
    [("trainer.launch", 100_000), ("policy.__main__", 10_000)],  # torch's; the pack's and the Pulumi SDK's
)
def test_an_entry_point_imports_without_the_collector(entry_point, objects):
    """What the entry point imported at module level was frozen; the collector is on again."""
    if entry_point == "policy.__main__":  # stop before the pack starts serving
        probe = (
            "import gc, sys, pulumi_policy; pulumi_policy.PolicyPack = lambda **kw: sys.exit("
            "f'{gc.isenabled()} {gc.get_freeze_count()}'); import policy.__main__"
        )
    else:
        probe = f"import gc, {entry_point}; print(gc.isenabled(), gc.get_freeze_count())"
    proc = subprocess.run(
        [sys.executable, "-c", probe], cwd=REPO, env=run_env(), capture_output=True, text=True, timeout=120
    )
    enabled, frozen = (proc.stdout + proc.stderr).split()[-2:]
    assert enabled == "True" and int(frozen) > objects, proc.stdout + proc.stderr
