"""`python -m infra synth|check --stack dev|prod`: the platform program evaluated offline, no AWS account.

synth  runs the real program against Pulumi mocks with the stack's config file: every resource with its
       type, name, parent and inputs (secrets masked), the exports and the estimated idle cost per hour;
       `--json` prints only the resources, as a list of {"type", "name", "parent", "inputs"}
check  what would stop `pulumi up`: the config, whether the cluster is reachable from here, example values
       a real deploy refuses, the input rules pulumi-eks applies in its provider; exit 0 will deploy
Both exit 2 with the configuration error on invalid config.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path

from infra.config.platform import ConfigError
from infra.tools.check import check
from infra.tools.idle_cost import idle_cost_report
from infra.tools.synth import available_stacks, platform_stack_config, synth


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m infra", description=__doc__.split("\n", 1)[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("synth", help="evaluate a platform stack offline and print its resources")
    p.add_argument(
        "--stack", required=True, help=f"stack name (Pulumi.<stack>.yaml): {', '.join(available_stacks())}"
    )
    p.add_argument("--file", type=Path, help="read the config from this file instead of Pulumi.<stack>.yaml")
    p.add_argument("--json", action="store_true", help="print the resources as JSON only")
    c = sub.add_parser("check", help="what would stop `pulumi up` of a platform stack (exit 0 or 2)")
    c.add_argument("--stack", required=True, help=f"stack name: {', '.join(available_stacks())}")
    c.add_argument("--file", type=Path, help="read the config from this file instead of Pulumi.<stack>.yaml")
    args = parser.parse_args(argv)
    if args.command == "check":
        try:
            values = platform_stack_config(args.stack, args.file)
        except (ConfigError, FileNotFoundError) as e:
            print(f"error: {args.file or f'Pulumi.{args.stack}.yaml'}: {e}", file=sys.stderr)
            return 2
        result = check(args.stack, values)
        print(result.text())
        return 0 if not result.problems else 2

    try:
        config, resources, exports = synth(args.stack, platform_stack_config(args.stack, args.file))
    except (ConfigError, FileNotFoundError) as e:
        print(f"error: {args.file or f'Pulumi.{args.stack}.yaml'}: {e}", file=sys.stderr)
        return 2

    if args.json:
        print(json.dumps([asdict(r) for r in resources], indent=2, sort_keys=True))
        return 0
    for r in resources:
        print(f"{r.type}  {r.name}" + (f"  (parent: {r.parent})" if r.parent else ""))
        for key, value in sorted(r.inputs.items()):
            print(f"    {key}: {json.dumps(value, sort_keys=True)}")
    print(f"\n{len(resources)} resources. Exports:")
    for key, value in exports.items():
        print(f"  {key}: {json.dumps(value, sort_keys=True)}")
    print("\n" + idle_cost_report(config))
    return 0


if __name__ == "__main__":
    sys.exit(main())
