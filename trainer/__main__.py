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
    except Exception as err:
        from trainer.dist import peer_lost
        from trainer.loop import RETRYABLE_EXIT

        if not peer_lost(err):
            raise
        reason = str(err).splitlines()[0][:200]
        print(
            f"trainer: lost a peer rank ({type(err).__name__}: {reason}); exiting {RETRYABLE_EXIT} so the "
            "job restarts from its last checkpoint",
            file=sys.stderr,
            flush=True,
        )
        return RETRYABLE_EXIT


if __name__ == "__main__":
    sys.exit(main())
