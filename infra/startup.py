"""Faster start for the Pulumi program (__main__.py) and the policy pack's analyzer (policy/__main__.py):
their imports run with the cycle collector off.

Importing the Pulumi SDKs allocates hundreds of thousands of objects that live as long as the process and
form almost no garbage; CPython's collector, triggered every 700 allocations, walks the growing heap again
and again meanwhile. Afterwards the imported objects are frozen (gc.freeze) out of later collections. The
trainer has its own copy (trainer/startup.py): the job image holds only `trainer/`."""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def imports_without_gc() -> Iterator[None]:
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if was_enabled:
            gc.enable()
