"""Regenerate workloads/examples/platform-<stack>.json: the platform program's exports under Pulumi mocks.

`render` and the workload tests read these files as the platform's outputs, so they are generated from
the program, never written by hand (tests/sim/test_scheduling.py fails when they are stale):
    .venv/bin/python scripts/platform_examples.py
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

EXAMPLES = Path(__file__).resolve().parents[1] / "workloads" / "examples"


def platform_exports(stack: str) -> dict[str, Any]:
    """The exports of platform stack `stack` as JSON values (secrets masked as "[secret]")."""
    from infra.tools.synth import stack_config, synth

    _, _, exports = synth(stack, stack_config(stack))
    return json.loads(json.dumps(exports))


def main(argv: list[str] | None = None) -> int:
    argparse.ArgumentParser(
        prog="scripts/platform_examples.py",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    ).parse_args(argv)  # no options: --help answers before the Pulumi SDKs are imported
    from infra.extras import needs_dev_install

    with needs_dev_install("scripts/platform_examples.py"):
        from infra.tools.synth import available_stacks

    for stack in available_stacks():
        path = EXAMPLES / f"platform-{stack}.json"
        path.write_text(json.dumps(platform_exports(stack), indent=2, sort_keys=True) + "\n")
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
