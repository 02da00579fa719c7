"""`python -m infra rehearse --stack S`: the steps of docs/deploy.md "Deploy to AWS", run against the real
program, the real policy pack and the real config path, without AWS (sim/pulumi/engine.py stands in for
the engine and the cloud). What it rehearses, step by step (`STEPS`, that page's commands in its order):

1. `pulumi config set --path ...`: the stack file's example values replaced by the user's (`--value
   account=...`, defaults: `USER_VALUES`), as `pulumi config set --path` writes them;
2. the config the CLI hands the program: the file merged with Pulumi.yaml's defaults
   (sim/pulumi/merge_config.py, a port of the CLI's mergeConfig), secrets decrypted and listed apart;
3. `make preview` then `make up`: the program under its engine branch, the policy pack at its own levels over
   every registration (any mandatory finding, any error logged, a non-zero exit fails the rehearsal);
4. an update by a second identity (`adminPrincipalArns[0]`, as CI would run it): it must pass too, the
   recorded cluster creator and the bucket's deployer principal unchanged.

A workload stack is rehearsed after its platform stack, reading the platform's rehearsed exports through its
StackReference. What only AWS confirms (quotas, capacity, add-on versions, the provider's own checks) is
listed in docs/deploy.md "What only a real `pulumi up` verifies".
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from infra.config import go_yaml, stack_files
from infra.tools.synth import PlatformMocks
from sim.pulumi.engine import ORGANIZATION, RunResult, StartAnalyzer, StartProgram, run_program
from sim.pulumi.merge_config import ProjectConfigError, merge_config

REPO = Path(__file__).resolve().parents[2]
USER_ACCOUNT = "210987654321"
# What a user puts where docs/deploy.md writes <...>: a real-looking account, role, egress IP and AMI.
USER_VALUES = {
    "account": USER_ACCOUNT,
    "your-admin-role": "platform-admin",
    "your-egress-ip": "52.94.76.10",
    "your-amd-ami": "ami-0a1b2c3d4e5f60718",
    "your-reservation-id": "cr-0a1b2c3d4e5f60718",
}
# Who runs the first `make up`: an SSO or CI session, an identity not listed in adminPrincipalArns.
FIRST_DEPLOYER = f"arn:aws:sts::{USER_ACCOUNT}:assumed-role/deployer/first-deploy"
SECRET_PREFIX = "rehearsal:"  # how `--secret` values are "encrypted" in the rehearsed stack file

Kind = Literal["outside", "select", "config", "rehearse", "preview", "up", "up-second-identity"]


@dataclass(frozen=True)
class Step:
    command: str  # as docs/deploy.md writes it: {stack} and <placeholders> filled in per stack and user
    kind: Kind


# The command block of docs/deploy.md "Deploy to AWS", in order (tests/test_readme.py compares them).
STEPS = (
    Step("pulumi login", "outside"),
    Step("pulumi stack select {stack} --create", "select"),
    Step("pulumi config set aws:region us-east-1", "config"),
    Step(
        "pulumi config set --path 'mlops-eks:adminPrincipalArns[0]' "
        "arn:aws:iam::<account>:role/<your-admin-role>",
        "config",
    ),
    Step("pulumi config set --path 'mlops-eks:publicAccessCidrs[0]' <your-egress-ip>/32", "config"),
    Step("pulumi config set --path 'mlops-eks:gpuPools[1].amiId' <your-amd-ami>", "config"),
    Step(
        "pulumi config set --path 'mlops-eks:gpuPools[2].reservation.ids[0]' <your-reservation-id>", "config"
    ),
    Step("python -m infra rehearse --stack {stack}", "rehearse"),
    Step("make preview STACK={stack}", "preview"),
    Step("make up STACK={stack}", "up"),
    Step("make up STACK={stack}", "up-second-identity"),
)
# A workload stack's steps (docs/workloads.md): its file holds the job, nothing to replace.
WORKLOAD_STEPS = (
    Step("pulumi stack select {stack} --create", "select"),
    Step("make preview STACK={stack}", "preview"),
    Step("make up STACK={stack}", "up"),
)


class RehearsalError(Exception):
    """A step the real path would fail at; the message names the step and why."""


def project_file() -> dict[str, Any]:
    return go_yaml.load((REPO / "Pulumi.yaml").read_text())  # as the CLI reads it


def fill(command: str, stack: str, values: Mapping[str, str]) -> str:
    command = command.replace("{stack}", stack)
    return re.sub(r"<([a-z-]+)>", lambda m: values.get(m[1], m[0]), command)


_PATH = re.compile(r"\[(\d+)\]|\.?([A-Za-z_][\w-]*)")


def set_path(config: dict[str, Any], path: str, value: Any) -> bool:
    """`pulumi config set --path KEY[i].field VALUE`, replacing an example value: applied (True) only where
    the stack file has a value at that path (dev's AMD pool has an amiId, prod's pools do not)."""
    namespace, _, rest = path.partition(":")
    name = re.match(r"[\w-]+", rest)
    assert name, path
    key, parts = f"{namespace}:{name[0]}", [m[1] or m[2] for m in _PATH.finditer(rest[name.end() :])]
    if not parts:
        config[key] = value
        return True
    node: Any = config.get(key)
    for i, part in enumerate(parts):
        index: Any = int(part) if part.isdigit() else part
        last = i == len(parts) - 1
        has = (isinstance(node, list) and isinstance(index, int) and index < len(node)) or (
            isinstance(node, dict) and index in node
        )
        if not has:
            return False
        if last:
            node[index] = value
            return True
        node = node[index]
    return False


def apply_config_step(config: dict[str, Any], command: str) -> bool:
    """One `pulumi config set [--secret] [--path] KEY VALUE` on the stack file's `config:`."""
    words = [w for w in shlex.split(command.split("#", 1)[0]) if w]
    assert words[:3] == ["pulumi", "config", "set"], command
    flags = {w for w in words[3:] if w.startswith("--")}
    key, value = [w for w in words[3:] if not w.startswith("--")]
    stored: Any = {"secure": SECRET_PREFIX + value} if "--secret" in flags else value
    if "--path" in flags:
        return set_path(config, key, stored)
    config[key] = stored
    return True


def _decrypt(text: str) -> str:
    if not text.startswith(SECRET_PREFIX):
        raise RehearsalError(
            "the stack file holds a value encrypted with your secrets provider, which the rehearsal cannot "
            "decrypt; pass it with --secret KEY=VALUE"
        )
    return text.removeprefix(SECRET_PREFIX)


def stack_fqn(stack: str) -> str:
    return f"{ORGANIZATION}/{stack_files.PROJECT}/{stack}"


@dataclass
class Rehearsal:
    """Everything rehearsed in one session: later stacks read earlier stacks' exports."""

    values: Mapping[str, str] = field(default_factory=lambda: dict(USER_VALUES))
    secrets: Mapping[str, str] = field(default_factory=dict)
    progress: Callable[[str], None] = lambda line: None
    outputs: dict[str, dict[str, Any]] = field(default_factory=dict)
    runs: dict[tuple[str, str], RunResult] = field(default_factory=dict)
    # The account's EKS clusters and their tags, as the rehearsed updates created them.
    clusters: dict[str, dict[str, str]] = field(default_factory=dict)
    # None: each run starts a fresh interpreter, as the language host does; the tests, which rehearse every
    # stack, fork the runs from one that imported the SDKs once (engine.run_program's `start`), and the
    # policy pack's analyzer from one that imported the pack (`start_analyzer`).
    start: StartProgram | None = None
    start_analyzer: StartAnalyzer | None = None

    def stack_config(self, stack: str, path: Path | None = None) -> tuple[dict[str, Any], list[str]]:
        """The stack file after the documented config steps: (its `config:`, the commands applied)."""
        path = path or stack_files.stack_file(REPO, stack)
        if not path.exists():
            names = list(stack_files.stack_configs(REPO))
            raise RehearsalError(
                f"no stack file {path}{stack_files.did_you_mean(stack, names)}; "
                f"allowed: a stack here ({', '.join(names)})"
            )
        try:
            document = stack_files.read_config(path)
        except stack_files.StackFileError as err:
            raise RehearsalError(str(err)) from None
        config = json.loads(json.dumps(document))
        applied = []
        steps = WORKLOAD_STEPS if stack_files.is_workload_stack(config) else STEPS
        for step in steps:
            if step.kind == "config":
                command = fill(step.command, stack, self.values)
                if apply_config_step(config, command):
                    applied.append(command)
        for key, value in self.secrets.items():
            command = f"pulumi config set --secret {key} {value}"
            apply_config_step(config, command)
            applied.append(f"pulumi config set --secret {key} ********")
        return config, applied

    def merged(self, stack: str, config: dict[str, Any]) -> tuple[dict[str, str], list[str]]:
        try:
            result = merge_config(stack, project_file(), {"config": config}, decrypt=_decrypt)
        except ProjectConfigError as err:
            raise RehearsalError(f"pulumi (before running the program): {err}") from None
        return result.values, result.secret_keys

    def run(self, stack: str, path: Path | None = None) -> list[str]:
        """Rehearse `stack` (its platform first, for a workload stack); returns the steps it ran."""
        config, applied = self.stack_config(stack, path)
        platform = config.get(stack_files.WORKLOAD_STACK_KEY)
        if platform is not None and stack_fqn(str(platform).split("/")[-1]) not in self.outputs:
            self.run(str(platform).split("/")[-1])
        values, secret_keys = self.merged(stack, config)
        region = str(values.get(stack_files.REGION_KEY) or "us-east-1")
        ran = [*applied]
        steps = WORKLOAD_STEPS if platform is not None else STEPS
        for step in steps:
            if step.kind not in ("preview", "up", "up-second-identity"):
                continue
            command = fill(step.command, stack, self.values)
            caller = FIRST_DEPLOYER if step.kind != "up-second-identity" else second_identity(values)
            self.progress(f"==> {stack}: {command} (as {caller})")
            result = run_program(
                stack=stack,
                preview=step.kind == "preview",
                config=values,
                secret_keys=secret_keys,
                cloud=PlatformMocks(
                    region, account_id=self.values["account"], caller_arn=caller, clusters=self.clusters
                ),
                stack_outputs=self.outputs,
                start=self.start,
                start_analyzer=self.start_analyzer,
            )
            self.runs[(stack, step.kind)] = result
            check(stack, command, result)
            if step.kind != "preview":
                self.outputs[stack_fqn(stack)] = _plain(result.outputs)
            ran.append(command)
        if (stack, "up-second-identity") in self.runs:
            check_identities(stack, self.runs[(stack, "up")], self.runs[(stack, "up-second-identity")])
        return ran


def second_identity(values: Mapping[str, str]) -> str:
    """A session of the first adminPrincipalArns role: the identity CI would deploy as later."""
    admins = json.loads(values.get(f"{stack_files.PROJECT}:adminPrincipalArns", "[]"))
    if not admins:
        raise RehearsalError(
            "an update by a second identity needs adminPrincipalArns[0]; the stack lists none"
        )
    account, role = re.match(r"arn:[\w-]+:iam::(\d+):role/(?:.*/)?([\w+=,.@-]+)$", admins[0]).groups()  # type: ignore[union-attr]
    return f"arn:aws:sts::{account}:assumed-role/{role}/ci"


def _plain(outputs: Mapping[str, Any]) -> dict[str, Any]:
    from sim.pulumi.engine import _unwrap

    return {k: _unwrap(v) for k, v in outputs.items()}


def _inputs(result: RunResult, type_: str) -> list[dict[str, Any]]:
    from sim.pulumi.engine import _unwrap

    return [_unwrap(r.inputs) for r in result.registrations if r.type == type_]


def check_identities(stack: str, first: RunResult, second: RunResult) -> None:
    """After an update by a second identity: the creator recorded at the first deploy is still the
    creator, the second identity has its own access entry (the creator keeps EKS's), and the bucket
    policy's principals did not change hands."""
    from infra.platform.creator import CREATOR_EXPORT

    problems = []
    creators = {_plain(r.outputs).get(CREATOR_EXPORT) for r in (first, second)}
    if creators != {FIRST_DEPLOYER}:
        problems.append(f"the recorded creator changed: {sorted(map(str, creators))}")
    clusters = _inputs(second, "eks:index:Cluster")
    entries = [e.get("principalArn") for c in clusters for e in (c.get("accessEntries") or {}).values()]
    role = re.sub(r"^arn:aws:sts::(\d+):assumed-role/([^/]+)/.*$", r"arn:aws:iam::\1:role/\2", second.caller)
    if role not in entries:
        problems.append(f"the second identity {role} has no access entry (entries: {entries})")
    policies = [
        [p.get("policy") for p in _inputs(r, "aws:s3/bucketPolicy:BucketPolicy")] for r in (first, second)
    ]
    if policies[0] != policies[1]:
        problems.append("the data bucket's policy changed with the deploying identity")
    if problems:
        raise RehearsalError(f"{stack}: update by a second identity: " + "; ".join(problems))


def check(stack: str, command: str, result: RunResult) -> None:
    problems = [f"error: {e}" for e in result.errors]
    problems += [f"policy: {d}" for d in result.mandatory]
    if result.returncode != 0 and not problems:
        problems.append(f"the program exited {result.returncode}:\n{result.output[-3000:]}")
    if problems:
        raise RehearsalError(f"{stack}: `{command}` fails:\n  " + "\n  ".join(problems))
