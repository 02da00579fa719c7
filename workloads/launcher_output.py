"""What `run-local` shows of its launcher's stderr: all of it, less torchrun's ChildFailedError block.

torchrun's `main` is wrapped in `@record` (torch 2.13 torch/distributed/run.py): when a worker fails, its
agent raises ChildFailedError (torch/distributed/launcher/api.py `launch_agent`), which leaves torchrun
as an uncaught exception. Python then prints the launcher's own traceback, then the exception line
`torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ` and its message, `format_msg`
(torch/distributed/elastic/multiprocessing/errors/__init__.py `_MSG_FORMAT_TEMPLATE`): a border of `=`,
the title, `Failures:`, `Root Cause (first observed failure):` with each failed rank's time, host, rank,
exit code and error file, and a closing border of `=`. None of it is the worker's error (the worker
printed that itself); the root cause's rank and exit code are kept for run-local's last line.

Only a complete block is left out: a traceback is held until its exception line, and shown as it came
when that line is any other exception's (a worker's crash) or when the stream ends inside the block.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

TRACEBACK = "Traceback (most recent call last):"
CHILD_FAILED = "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:"
_BORDER = re.compile(r"=+")
_RANK = re.compile(r"\s+rank\s+: (\d+) ")
_EXIT = re.compile(r"\s+exitcode\s+: (-?\d+) ")


@dataclass
class RootCause:
    """The first failed worker, as torchrun's block named it."""

    rank: int
    exit_code: int  # a worker killed by signal N: -N, as torchrun reports it


class ChildFailedFilter:
    """`lines`: the launcher's stderr less its ChildFailedError block; then `root_cause` names the block's."""

    def __init__(self) -> None:
        self.root_cause: RootCause | None = None

    def lines(self, stream: Iterable[str]) -> Iterator[str]:
        held: list[str] = []  # a traceback, or the block, not yet judged
        borders = None  # inside the block: the `=` borders seen (it ends at the second)
        for line in stream:
            text = line.rstrip("\n")
            if borders is not None:
                held.append(line)
                borders += bool(_BORDER.fullmatch(text))
                if borders == 2:
                    self.root_cause = _root_cause(held) or self.root_cause
                    held, borders = [], None
            elif held:  # inside a traceback: frames and source lines are indented
                held.append(line)
                if text.startswith(CHILD_FAILED):
                    borders = 0
                elif not text.startswith(" "):  # another exception's last line (or a worker's line)
                    yield from held
                    held = []
            elif text == TRACEBACK:
                held = [line]
            else:
                yield line
        yield from held  # a block cut short is shown as it came


def _root_cause(block: list[str]) -> RootCause | None:
    after = next((i for i, line in enumerate(block) if line.startswith("Root Cause")), None)
    if after is None:
        return None
    rank = next((m for line in block[after:] if (m := _RANK.match(line))), None)
    code = next((m for line in block[after:] if (m := _EXIT.match(line))), None)
    return RootCause(int(rank[1]), int(code[1])) if rank and code else None
