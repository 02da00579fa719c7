"""The fault ledger: every hostile input the fault tests feed is recorded with whether it was rejected,
whether the message named the offending key (or said what was refused), and what was created anyway.
The figures are printed at the end of the pytest run (section "fault and bad-input figures";
tests/fault_ledger.py gathers them from every xdist worker)."""

from __future__ import annotations

from collections.abc import Callable

import pulumi
import pytest
from fault_ledger import LEDGER, Entry, is_clear


@pytest.fixture
def ledger():
    """record(category, case, error=<message or None>, names=<key or path>, created=<count>) -> entry.
    Refused means: an error, and nothing created."""

    def record(category: str, case: str, *, error: str | None, names: str, created: int = 0) -> Entry:
        entry = Entry(category, case, error is not None and created == 0, is_clear(error, names), created)
        LEDGER.append(entry)
        return entry

    return record


@pytest.fixture
def program_error(pulumi_mocks) -> Callable[[Callable[[], object]], str | None]:
    """Run a Pulumi program under the mocks installed with `pulumi_mocks`; its error message, or None."""

    def run(program: Callable[[], object]) -> str | None:
        @pulumi.runtime.test
        def go():
            program()

        try:
            go()
        except Exception as err:  # the engine wraps the program's exception in a RunError
            return str(err)
        return None

    return run
