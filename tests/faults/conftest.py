"""The fault ledger: every hostile input the fault tests feed is recorded with whether it was rejected,
whether the message named the offending key (or said what was refused), and what was created anyway.
The figures are printed at the end of the pytest run (section "fault and bad-input figures")."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass

import pulumi
import pytest


@dataclass
class Entry:
    category: str
    case: str
    rejected: bool  # refused (or, for outages, survived)
    clear: bool  # the message names the key / file and what is allowed or what was wrong
    created: int  # resources registered (config) or checkpoints damaged (storage) despite the fault


LEDGER: list[Entry] = []


# Words that show the message says what is wrong, not only where.
EXPLAINS = (
    "allowed",
    "got",
    "missing",
    "expected",
    "does not match",
    "truncated",
    "incomplete",
    "corrupt",
    "unreadable",
    "complete",
    "failed",
    "refusing",
    "cannot",
)


def is_clear(message: str | None, names: str) -> bool:
    """The message names the key (or file) and says what was wrong or what is allowed."""
    return message is not None and names in message and any(w in message for w in EXPLAINS)


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


def figures() -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = defaultdict(
        lambda: {"hostile": 0, "rejected": 0, "clear": 0, "created": 0}
    )
    for e in LEDGER:
        row = out[e.category]
        row["hostile"] += 1
        row["rejected"] += e.rejected
        row["clear"] += e.rejected and e.clear
        row["created"] += e.created
    return dict(out)


def pytest_terminal_summary(terminalreporter):
    if not LEDGER:
        return
    terminalreporter.section("fault and bad-input figures")
    total = {"hostile": 0, "rejected": 0, "clear": 0, "created": 0}
    for category, row in sorted(figures().items()):
        terminalreporter.write_line(
            f"{category:<28} {row['hostile']:>3} hostile inputs, {row['rejected']:>3} rejected/survived, "
            f"{row['clear']:>3} with a clear message, {row['created']} created/damaged"
        )
        for k in total:
            total[k] += row[k]
    terminalreporter.write_line(
        f"{'total':<28} {total['hostile']:>3} hostile inputs, {total['rejected']:>3} rejected/survived, "
        f"{total['clear']:>3} with a clear message, {total['created']} created/damaged"
    )
