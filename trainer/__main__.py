"""`python -m trainer [--config FILE] [--section.field VALUE ...]`: run one training job (see --help).

Exit codes: trainer/faults.py (0 done, 2 invalid config or data, 128+ retryable)."""

from __future__ import annotations

import logging
import os
import sys

from trainer import faults
from trainer.config import ConfigError, from_args
from trainer.report_once import report
from trainer.startup import imports_without_gc


def main(argv: list[str] | None = None) -> int:
    rank = os.environ.get("RANK", "0")
    logging.basicConfig(
        level=logging.INFO if rank == "0" else logging.WARNING,
        format=f"%(asctime)s rank{rank} %(levelname)s %(message)s",
    )
    try:
        cfg = from_args(argv)
        # The loop imports torch: seconds of silence otherwise, a minute on a fresh install. One rank says so.
        if os.environ.get("RANK", os.environ.get("OMPI_COMM_WORLD_RANK", "0")) == "0":
            print("[trainer] configuration valid; importing torch", flush=True)
        with imports_without_gc():
            # imported after validation: --help and bad flags stay fast
            import torch._dynamo  # noqa: F401  (every run's optimizer imports it: here, without the collector)

            from trainer.loop import run

        return run(cfg)
    except ConfigError as err:
        if not relayed(err):
            report(f"trainer: invalid configuration: {err}")
        return faults.INVALID
    except Exception as err:
        found = faults.verdict(err)
        if found is None:
            raise  # a bug: traceback and exit 1, permanent
        code, reason = found
        if not relayed(err):
            report(f"trainer: {reason}; exit {code} ({faults.describe(code)})")
        return code


def relayed(err: BaseException) -> bool:
    """A waiting rank's copy of local rank 0's failure (trainer/token_store.py): local rank 0 reports it."""
    return bool(getattr(err, "relayed", False))


if __name__ == "__main__":
    sys.exit(main())
