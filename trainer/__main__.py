"""`python -m trainer [--config FILE] [--section.field VALUE ...]`: run one training job (see --help)."""

from __future__ import annotations

import logging
import os
import sys

from trainer.config import ConfigError, from_args

INVALID_CONFIG_EXIT = 2  # permanent: a retry would fail the same way


def main(argv: list[str] | None = None) -> int:
    rank = os.environ.get("RANK", "0")
    logging.basicConfig(
        level=logging.INFO if rank == "0" else logging.WARNING,
        format=f"%(asctime)s rank{rank} %(levelname)s %(message)s",
    )
    try:
        cfg = from_args(argv)
        from trainer.loop import run  # imported after validation: --help and bad flags stay fast

        return run(cfg)
    except ConfigError as err:
        print(f"trainer: invalid configuration: {err}", file=sys.stderr, flush=True)
        return INVALID_CONFIG_EXIT


if __name__ == "__main__":
    sys.exit(main())
