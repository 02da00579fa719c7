"""`python -m workloads` (plan, render, run-local, status, logs): a workload stack without the Pulumi CLI.

plan       before deploying: will the job run, on which pool, how many nodes Karpenter launches and how
           soon, the hourly cost, whether its queue admits it, Pod Security and quota; exit 0 it runs, 2 it
           will not (a platform stack: the checks of `python -m infra check`)
render     prints what the stack creates, as YAML: the Kubernetes objects, then the job's AWS resources
           (IAM role, its policy, the Pod Identity association: documents with `awsResource:`); platform
           facts from --platform-outputs FILE, `pulumi stack output --json --show-secrets` of the
           platform stack, or the example outputs shipped in workloads/examples/ for that platform stack
run-local  runs the job's program with torchrun on this machine's CPU (gloo), same trainer config
status     the deployed job's state, read from the cluster: queued, waiting for a node, running (step,
           loss), failed (exit code, permanent or retryable) or succeeded (output location)
logs       every node's log, prefixed with its node rank; --follow streams them
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from infra.config.stack_files import platform_stacks, workload_stacks
from infra.extras import needs_dev_install
from workloads.identity import aws_resources
from workloads.platform import PlatformFacts, derived_facts, example_outputs_path, load_platform_outputs
from workloads.render import render
from workloads.spec import SpecError, TrainingJobSpec
from workloads.stacks import REPO, WorkloadStack, check_platform_stack, load_stack, program_text
from workloads.status import FAILED, NOT_FOUND, UNREACHABLE, ClusterError

if TYPE_CHECKING:
    from workloads.status import Cluster


class _Dumper(yaml.SafeDumper):
    """Readable YAML: no anchors, scripts and configs as literal blocks, lists of numbers on one line."""

    def ignore_aliases(self, data: object) -> bool:
        return True


def _represent_str(dumper: yaml.SafeDumper, data: str) -> yaml.Node:
    style = "|" if "\n" in data else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", data, style=style)


def _represent_list(dumper: yaml.SafeDumper, data: list) -> yaml.Node:
    flow = bool(data) and all(isinstance(x, int) for x in data)
    return dumper.represent_sequence("tag:yaml.org,2002:seq", data, flow_style=flow)


_Dumper.add_representer(list, _represent_list)
_Dumper.add_representer(str, _represent_str)


def to_yaml(objects: list[dict]) -> str:
    return yaml.dump_all(objects, Dumper=_Dumper, sort_keys=False, width=110)


def stack_facts(stack: WorkloadStack, outputs_file: Path | None) -> tuple[PlatformFacts, str]:
    """The platform facts a command judges the stack by: from --platform-outputs, else derived from its
    platform stack's file (which must be one of this project's)."""
    if outputs_file is None:
        check_platform_stack(stack)
    return platform_facts(stack.platform_stack, outputs_file)


def platform_facts(platform_stack: str, outputs_file: Path | None) -> tuple[PlatformFacts, str]:
    """(facts, where they come from): --platform-outputs; else the platform stack file here, read through
    its config model (a pool added there is planned onto, with no deploy); else the shipped examples."""
    if outputs_file is not None:
        if not outputs_file.exists():
            raise SpecError(
                f"--platform-outputs {outputs_file}: no such file; allowed: `pulumi stack output --json "
                f"-s {platform_stack}` saved to a file"
            )
        return load_platform_outputs(outputs_file), f"{outputs_file} (a deployed stack's outputs)"
    name = platform_stack.rsplit("/", 1)[-1]
    stack_file = REPO / f"Pulumi.{name}.yaml"
    if "/" not in platform_stack and stack_file.exists():
        source = (
            f"{stack_file.name}, derived offline (bucket and registry are known after deploy: "
            "--platform-outputs FILE for a deployed stack's outputs)"
        )
        return derived_facts(stack_file), source
    path = example_outputs_path(platform_stack)
    if not path.exists():
        raise SpecError(
            f"no platform outputs for {platform_stack}: no {stack_file.name} here and no example "
            f"{path.name}; pass --platform-outputs FILE (`pulumi stack output --json -s {platform_stack}`)"
        )
    source = f"{path} (the shipped example outputs: no {stack_file.name} here, no --platform-outputs)"
    return load_platform_outputs(path), source


def cmd_render(args: argparse.Namespace) -> int:
    stack = load_stack(args.stack)
    facts, source = stack_facts(stack, args.platform_outputs)
    print(f"# stack {stack.name}: platform {stack.platform_stack}, facts from {source}", file=sys.stderr)
    print(to_yaml(render(stack.spec, facts, program_text=program_text(stack.spec))), end="")
    aws = [] if args.kubernetes_only else aws_resources(stack.spec, facts)
    if aws:
        print("---\n# AWS resources (not Kubernetes objects): pulumi up creates them with the AWS provider")
        print(to_yaml(aws), end="")
    return 0


def _utc_time(text: str) -> datetime:
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r}: allowed: an ISO 8601 time such as 2026-12-01T12:00Z"
        ) from None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def cmd_plan(args: argparse.Namespace) -> int:
    if args.stack in platform_stacks(REPO) and args.stack not in workload_stacks(REPO):
        # The platform program imports Pulumi, which `workloads` never does: its own process checks it.
        command = [sys.executable, "-m", "infra", "check", "--stack", args.stack]
        return subprocess.run(command, cwd=REPO, check=False).returncode
    from workloads.plan import plan  # render's imports only

    stack = load_stack(args.stack)
    facts, source = stack_facts(stack, args.platform_outputs)
    result = plan(stack, facts, source, args.spot_prices, args.reservations, args.start)
    print(result.text())
    return 0 if result.runs else 2


def cmd_run_local(args: argparse.Namespace) -> int:
    from workloads.local import run_local  # imports nothing heavy, but keeps `render` independent of it

    return run_local(load_stack(args.stack), nproc=args.nproc, out=args.out, overrides=args.overrides)


def _cluster(args: argparse.Namespace) -> tuple[Cluster, TrainingJobSpec]:
    stack = load_stack(args.stack)
    with needs_dev_install(f"python -m workloads {args.command}"):  # the kubernetes client: `make dev`
        from workloads.status import Cluster, api_client

        return Cluster(api_client(args.kubeconfig, args.platform_outputs)), stack.spec


def cmd_status(args: argparse.Namespace) -> int:
    cluster, spec = _cluster(args)
    from workloads.status import status

    report = status(cluster, spec)
    print(report.text())
    return report.code


def cmd_logs(args: argparse.Namespace) -> int:
    cluster, spec = _cluster(args)
    from workloads.logs import logs

    return logs(cluster, spec, follow=args.follow, tail=args.tail, out=sys.stdout)


def _cluster_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--stack", required=True, help="workload stack, e.g. dev-zimdb")
    p.add_argument("--kubeconfig", type=Path, help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config)")
    p.add_argument(
        "--platform-outputs",
        type=Path,
        help="`pulumi stack output --json --show-secrets` of the platform stack: its `kubeconfig` is used "
        "when neither --kubeconfig nor $KUBECONFIG is given",
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m workloads", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True)
    render_p = sub.add_parser(
        "render",
        help="print the stack's Kubernetes objects as YAML",
        description="Print what `pulumi up` of the workload stack creates, as YAML: the Kubernetes objects, "
        "then the job's AWS resources. Platform facts: --platform-outputs FILE, else derived from the "
        "platform stack's file here (the shipped examples when there is none); stderr says which. Exit 0, "
        "or 2 for an invalid stack.",
    )
    render_p.add_argument(
        "--stack", required=True, help="workload stack, e.g. dev-zimdb (Pulumi.<stack>.yaml)"
    )
    render_p.add_argument("--platform-outputs", type=Path, help="platform stack outputs as JSON")
    render_p.add_argument(
        "--kubernetes-only",
        action="store_true",
        help="only the Kubernetes objects (for kubectl or scanners), not the job's AWS IAM role, policy and "
        "Pod Identity association",
    )
    render_p.set_defaults(run=cmd_render)
    plan_p = sub.add_parser(
        "plan",
        help="will the stack's job run: pool, nodes, time, cost, queue, Pod Security (exit 0 or 2)",
        description="Before anything is deployed: will the job run, on which pool, how many nodes and how "
        "soon, the hourly cost, its queue, namespace quota, what the pod will meet (its files and volumes), "
        "Pod Security and admission. Exit codes: 0 it will run, 2 it will not (or the stack is invalid). "
        "On a platform stack: `python -m infra check`.",
    )
    plan_p.add_argument("--stack", required=True, help="workload stack (or platform stack: infra check)")
    plan_p.add_argument("--platform-outputs", type=Path, help="platform stack outputs as JSON")
    plan_p.add_argument(
        "--spot-prices",
        type=Path,
        help="`aws ec2 describe-spot-price-history --output json` of the pool's instance types: current "
        "Spot prices instead of the on-demand ceiling",
    )
    plan_p.add_argument(
        "--reservations",
        type=Path,
        help="`aws ec2 describe-capacity-reservations --output json`: plan a reserved pool's job against "
        "its reservation's window and free instances",
    )
    plan_p.add_argument(
        "--start",
        type=_utc_time,
        help="when the job would be deployed, ISO 8601 (e.g. 2026-12-01T12:00Z; default: now)",
    )
    plan_p.set_defaults(run=cmd_plan)
    local_p = sub.add_parser(
        "run-local",
        help="run the stack's job with torchrun on this CPU",
        description="Run the stack's job on this machine: torchrun on CPU (gloo), the job's trainer config "
        "with checkpoints and outputs under --out/<stack>. Trainer flags after `--` apply over the job's "
        "config. Exit codes: the trainer's (0 done, 2 invalid config or data, 3 diverged, 128+ retryable; "
        "trainer/faults.py), 2 for an invalid stack or flag.",
    )
    local_p.add_argument("--stack", required=True, help="workload stack, e.g. dev-zimdb")
    local_p.add_argument("--nproc", type=int, help="processes (default: the job's, capped by CPU cores)")
    local_p.add_argument("--out", type=Path, default=REPO / "runs", help="local root of checkpoints/outputs")
    local_p.add_argument(
        "overrides", nargs=argparse.REMAINDER, help="after `--`: trainer flags, e.g. -- --train.max_steps 5"
    )
    local_p.set_defaults(run=cmd_run_local)
    status_p = sub.add_parser(
        "status",
        help="the deployed job's state, from the cluster's API server",
        description="The deployed job's state, read from the cluster: queued, waiting for a node, running "
        "(step, loss), failed (each pod's exit code, permanent or retryable) or succeeded (output location). "
        f"Exit codes: 0 running, queued or succeeded; {FAILED} failed; 2 a bad kubeconfig, outputs file or "
        f"stack; {NOT_FOUND} no such job on the cluster (not deployed, or deleted after its TTL); "
        f"{UNREACHABLE} the API server did not answer (retry).",
    )
    _cluster_args(status_p)
    status_p.set_defaults(run=cmd_status)
    logs_p = sub.add_parser(
        "logs",
        help="every node's log of the deployed job, prefixed with its rank",
        description="Every pod's log of the deployed job, each line prefixed with its node rank; --follow "
        f"streams them until the pods end. Exit codes: 0, 2 bad input, {UNREACHABLE} the API server did not "
        "answer (retry).",
    )
    _cluster_args(logs_p)
    logs_p.add_argument("--follow", "-f", action="store_true", help="stream the logs until the pods end")
    logs_p.add_argument("--tail", type=int, help="only the last N lines of each pod")
    logs_p.set_defaults(run=cmd_logs)
    args = parser.parse_args(argv)

    try:
        return args.run(args)
    except SpecError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except ClusterError as err:
        print(f"error: {err}", file=sys.stderr)
        return err.code


if __name__ == "__main__":
    sys.exit(main())
