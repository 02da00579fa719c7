"""The fault ledger's entries and figures. Each pytest process (an xdist worker, or the only one) records
into its own LEDGER; tests/conftest.py hands a worker's entries to the controller, which prints the
figures of the whole run."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass


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


def report(terminalreporter) -> None:
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
