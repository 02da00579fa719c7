"""A command that needs a package `make demo` does not install says so, instead of a traceback.

`make demo` installs the trainer's packages only (the `train` extra); the Pulumi SDKs and the kubernetes
client (`infra`), the policy pack (`policy`) and the scanners and Helm engine (`dev`) come with `make dev`.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator

OUR_PACKAGES = frozenset({"infra", "workloads", "trainer", "policy"})


@contextlib.contextmanager
def needs_dev_install(command: str) -> Iterator[None]:
    """Around the imports of `command`'s dependencies: a third-party module that is not installed ends the
    command with exit 2 (a set-up error, permanent) and one line naming it and `make dev`."""
    try:
        yield
    except ModuleNotFoundError as err:
        package = (err.name or "").partition(".")[0]
        if not package or package in OUR_PACKAGES:
            raise  # a missing module of ours is a bug, not an install step
        print(
            f"error: {command} needs the Python package {package!r}, which is not installed here "
            "(`make demo` installs only the trainer's packages): run `make dev`",
            file=sys.stderr,
        )
        raise SystemExit(2) from None
