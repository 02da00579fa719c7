"""Regenerate workloads/examples/platform-<stack>.json: the platform program's exports under Pulumi mocks.

`render` and `plan` read these files for a platform stack that has no stack file here, and the tests
check that what they derive from a stack file equals them; so they are generated from the program, never
written by hand (tests/sim/test_scheduling.py fails when they are stale):
    .venv/bin/python scripts/platform_examples.py
An invalid platform stack file is named (exit 2) and the other stacks' files are still written.
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

    from infra.config.errors import ConfigError

    failed = []
    for stack in available_stacks():
        path = EXAMPLES / f"platform-{stack}.json"
        try:
            exports = platform_exports(stack)
        except ConfigError as err:  # one invalid stack file: said, and the others still written
            print(f"error: Pulumi.{stack}.yaml is invalid, {path.name} not written:\n{err}", file=sys.stderr)
            failed.append(stack)
            continue
        path.write_text(json.dumps(exports, indent=2, sort_keys=True) + "\n")
        print(f"wrote {path}")
    return 2 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
