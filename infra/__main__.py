"""`python -m infra` (synth, check, rehearse): the platform program evaluated offline, no AWS account.

synth     runs the real program against Pulumi mocks with the stack's config file: how many resources of
          each type it creates (as `pulumi preview` sums them up), the exports and the estimated idle cost
          per hour; `--details` adds every resource with its parent and inputs (secrets masked), `--json`
          prints only the resources, as a list of {"type", "name", "parent", "inputs"}
check     what would stop `pulumi up`: the config, whether the cluster is reachable from here, example
          values a real deploy refuses, the input rules pulumi-eks applies in its provider; exit 0 will deploy
rehearse  the deploy steps of docs/deploy.md for any stack (platform or workload) through the real program,
          config path and policy pack, without AWS (infra/tools/rehearse.py)
images    the commands that copy into the stack's ECR registry the images ECR cannot cache itself
          (infra/tools/images.py)
All exit 2 with the configuration error on invalid config, or when the Pulumi SDKs are not installed.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter
from dataclasses import asdict
from pathlib import Path

from infra.config import stack_files
from infra.extras import needs_dev_install

REPO = Path(__file__).resolve().parents[1]


def _described() -> dict[str, str]:
    """Each sub-command's paragraph of the module docstring, with the exit codes every one shares."""
    doc = __doc__ or ""
    shared = " ".join(doc[doc.index("All exit") :].split())
    found = re.findall(r"^(\w+) +(.+?)(?=^\w+ +|^All exit)", doc, re.M | re.S)
    return {name: f"{' '.join(text.split())}. {shared}" for name, text in found}


def main(argv: list[str] | None = None) -> int:
    described = _described()
    stacks = ", ".join(sorted(stack_files.platform_stacks(REPO)))
    parser = argparse.ArgumentParser(prog="python -m infra", description=__doc__.split("\n", 1)[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser(
        "synth",
        description=described["synth"],
        help="evaluate a platform stack offline and print its resources",
    )
    p.add_argument("--stack", required=True, help=f"stack name (Pulumi.<stack>.yaml): {stacks}")
    p.add_argument("--file", type=Path, help="read the config from this file instead of Pulumi.<stack>.yaml")
    p.add_argument("--json", action="store_true", help="print the resources as JSON only")
    p.add_argument(
        "--details", action="store_true", help="every resource with its parent and inputs, after the summary"
    )
    c = sub.add_parser(
        "check",
        description=described["check"],
        help="what would stop `pulumi up` of a platform stack (exit 0 or 2)",
    )
    c.add_argument("--stack", required=True, help=f"stack name: {stacks}")
    c.add_argument("--file", type=Path, help="read the config from this file instead of Pulumi.<stack>.yaml")
    i = sub.add_parser(
        "images",
        description=described["images"],
        help="the commands that copy the images ECR cannot cache into its registry",
    )
    i.add_argument("--stack", required=True, help=f"stack name: {stacks}")
    i.add_argument("--account", required=True, help="the AWS account the stack deploys to (12 digits)")
    i.add_argument("--file", type=Path, help="read the config from this file instead of Pulumi.<stack>.yaml")
    rehearsal = sub.add_parser(
        "rehearse",
        description=described["rehearse"],
        help="rehearse `make preview` and `make up` of a stack before the first deploy",
    )
    rehearsal.add_argument("--stack", required=True, help="any stack, workload stacks too")
    rehearsal.add_argument("--file", type=Path, help="start from this stack file")
    rehearsal.add_argument(
        "--value",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="what the <NAME> of docs/deploy.md is for you (account, your-admin-role, your-egress-ip, "
        "your-amd-ami)",
    )
    rehearsal.add_argument(
        "--secret", action="append", default=[], metavar="KEY=VALUE", help="a `config set --secret`"
    )
    args = parser.parse_args(argv)  # --help answers here, before the Pulumi SDKs are imported
    if args.command == "rehearse":
        return rehearse(args)
    with needs_dev_install(f"python -m infra {args.command}"):
        from infra.config.platform import ConfigError
        from infra.tools.check import check
        from infra.tools.idle_cost import idle_cost_report
        from infra.tools.images import image_report
        from infra.tools.synth import platform_stack_config, synth

    try:
        values = platform_stack_config(args.stack, args.file)
        if args.command == "check":
            result = check(args.stack, values)
            print(result.text())
            return 0 if not result.problems else 2
        if args.command == "images":
            if not re.fullmatch(r"\d{12}", args.account):
                raise ConfigError([f"--account: {args.account!r}; allowed: an AWS account id (12 digits)"])
            print(image_report(args.stack, values, args.account))
            return 0
        config, resources, exports = synth(args.stack, values)
    except (ConfigError, FileNotFoundError) as e:
        print(f"error: {args.file or f'Pulumi.{args.stack}.yaml'}: {e}", file=sys.stderr)
        return 2

    if args.json:
        print(json.dumps([asdict(r) for r in resources], indent=2, sort_keys=True))
        return 0
    print(resource_summary(resources))
    if args.details:
        for r in resources:
            print(f"{r.type}  {r.name}" + (f"  (parent: {r.parent})" if r.parent else ""))
            for key, value in sorted(r.inputs.items()):
                print(f"    {key}: {json.dumps(value, sort_keys=True)}")
    else:
        print("(every resource with its inputs: --details; as JSON: --json)")
    print(f"\n{len(resources)} resources. Exports:")
    for key, value in exports.items():
        print(f"  {key}: {json.dumps(value, sort_keys=True)}")
    print("\n" + idle_cost_report(config))
    return 0


def rehearse(args: argparse.Namespace) -> int:
    with needs_dev_install("python -m infra rehearse"):
        from infra.tools.rehearse import USER_VALUES, Rehearsal, RehearsalError

    try:
        values = {**USER_VALUES, **dict(_pair(v) for v in args.value)}
        secrets = dict(_pair(v) for v in args.secret)
        rehearsal = Rehearsal(values=values, secrets=secrets, progress=lambda line: print(line, flush=True))
        ran = rehearsal.run(args.stack, args.file)
    except (RehearsalError, ValueError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(rehearsed(args.stack, ran))
    return 0


def resource_summary(resources: list) -> str:
    """What `pulumi preview` ends with: how many resources of each type would be created."""
    counts = Counter(r.type for r in resources)
    width = max((len(str(n)) for n in counts.values()), default=1)
    lines = [f"Resources: + {len(resources)} to create"]
    lines += [
        f"  + {n:>{width}}  {kind}" for kind, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    ]
    return "\n".join(lines)


def rehearsed(stack: str, ran: list[str]) -> str:
    """The closing lines: how many steps passed, and each of them (the config steps print no progress)."""
    return "\n".join(
        [f"rehearsed {stack}: {len(ran)} steps passed", *(f"  {n}. {s}" for n, s in enumerate(ran, 1))]
    )


def _pair(text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise ValueError(f"{text!r}: expected NAME=VALUE")
    return name, value


if __name__ == "__main__":
    sys.exit(main())
