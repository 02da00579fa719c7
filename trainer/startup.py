"""Faster process start: an entry point's imports run with the cycle collector off.

Importing torch (or the Pulumi SDKs) allocates millions of objects that live as long as the process and
form almost no garbage. CPython's collector, triggered every 700 allocations, walks the ever larger heap
again and again meanwhile: a fifth of the CPU time of `import torch` on CPython 3.11. Afterwards the
imported objects are frozen (gc.freeze), so the collections of the run itself do not walk them either.
Used by the trainer's entry points; this module imports only the standard library (the Pulumi program and
the policy pack have their own, infra/startup.py: nothing outside the job image imports the trainer)."""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def imports_without_gc() -> Iterator[None]:
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if enabled:
            gc.enable()
