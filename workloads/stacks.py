"""Workload stack files (`Pulumi.<stack>.yaml`) read without the Pulumi CLI, for `render`, `run-local`
and the tests: the same two keys `pulumi up` reads through pulumi.Config."""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from infra.config import stack_files
from infra.config.secrets import is_secure, is_unset_secret
from infra.config.stack_files import PROJECT, PROVIDER_NAMESPACES
from workloads.spec import (
    CONFIG_KEY,
    HUB_TOKEN_CONFIG,
    MLFLOW_CREDENTIAL_CONFIG,
    SpecError,
    TrainingJobSpec,
    parse_spec,
)

REPO = Path(__file__).resolve().parents[1]
PLATFORM_KEY = stack_files.WORKLOAD_STACK_KEY
# The organization DIY backends (local, S3) use in fully qualified stack names.
DIY_ORGANIZATION = "organization"
# A stack name part (stack, or organization/project/stack); also the schema's pattern (schemas/generate.py).
NAME_PART = r"[A-Za-z0-9_.-]+"
PLATFORM_STACK_PATTERN = f"^{NAME_PART}(/{NAME_PART}/{NAME_PART})?$"
_NAME_PART = re.compile(f"^{NAME_PART}$")


def platform_stack_ref(value: str, organization: str | None) -> str:
    """mlops-eks:platformStack as a StackReference name. A bare stack name ("dev") is the platform stack
    of this project in the workload stack's own organization (pulumi.get_organization(): the Pulumi
    Cloud org, or "organization" on a DIY backend), so the committed stack files need no edit for either
    backend; "org/project/stack" names another organization's or project's stack as it is."""
    parts = value.split("/") if isinstance(value, str) else []
    if len(parts) not in (1, 3) or not all(_NAME_PART.match(p) for p in parts):
        raise SpecError(
            f"{PLATFORM_KEY}: {value!r} is not a stack name; allowed: a stack of this project (e.g. dev) "
            "or a fully qualified org/project/stack (e.g. acme/mlops-eks/dev)"
        )
    if len(parts) == 3:
        return value
    return f"{organization or DIY_ORGANIZATION}/{PROJECT}/{value}"


@dataclass(frozen=True)
class WorkloadStack:
    name: str
    platform_stack: str
    spec: TrainingJobSpec


def stack_file(stack: str, root: Path = REPO) -> Path:
    return stack_files.stack_file(root, stack)


def workload_stacks(root: Path = REPO) -> list[str]:
    """Every stack file in `root` that sets mlops-eks:platformStack."""
    return stack_files.workload_stacks(root)


def read_config(path: Path) -> dict[str, Any]:
    """The `config:` mapping of a stack file, or SpecError naming the file, the line and what is wrong."""
    try:
        return stack_files.read_config(path)
    except stack_files.StackFileError as err:
        raise SpecError(str(err)) from None


# The keys a workload stack's program reads; any other key of ours, or one in an unknown namespace
# (`mlopseks:job`), would be read by nothing.
WORKLOAD_KEYS = stack_files.WORKLOAD_KEYS


def unknown_keys(config: dict[str, Any], path: Path) -> list[str]:
    problems = []
    for key in config:
        namespace = key.split(":", 1)[0] if ":" in key else ""
        if key in WORKLOAD_KEYS or namespace in PROVIDER_NAMESPACES:
            continue
        close = difflib.get_close_matches(key, WORKLOAD_KEYS, n=1, cutoff=0.6)
        hint = f" (did you mean {close[0]}?)" if close else ""
        problems.append(
            f"{path.name}: {key}: unknown key, read by nothing{hint}; allowed: {', '.join(WORKLOAD_KEYS)} "
            f"or a provider's namespace ({', '.join(sorted(PROVIDER_NAMESPACES))})"
        )
    return problems


def load_stack(stack: str, root: Path = REPO) -> WorkloadStack:
    path = stack_file(stack, root)
    configs = stack_files.stack_configs(root)
    names = [name for name, config in configs.items() if stack_files.is_workload_stack(config)]
    found = ", ".join(names) or "none"
    if not path.exists():
        hint = stack_files.did_you_mean(stack, names)
        allowed = f"allowed: a workload stack here ({found})"
        raise SpecError(f"stack {stack!r}: no {path.name} in {root}{hint}; {allowed}")
    config = read_config(path)
    platform = stack in configs and stack not in names
    if platform and not any(k.startswith(f"{PROJECT}:job") for k in config):
        raise SpecError(
            f"stack {stack!r} is a platform stack ({path.name} sets no {PLATFORM_KEY}); allowed: a workload "
            f"stack ({found}); a platform stack is checked with `python -m infra check --stack {stack}`"
        )
    if problems := unknown_keys(config, path):
        raise SpecError("\n".join(problems))
    if PLATFORM_KEY not in config:
        raise SpecError(
            f"{path.name}: {PLATFORM_KEY} is missing; a workload stack names its platform stack, "
            "e.g. dev (this project's stack in the same organization) or acme/mlops-eks/dev"
        )
    spec = parse_spec(config.get(CONFIG_KEY))
    problems = hub_token_problems(config, spec, path) + mlflow_credential_problems(config, spec, path)
    if problems:
        raise SpecError("\n".join(problems))
    return WorkloadStack(stack, str(config[PLATFORM_KEY]), spec)


def hub_token_problems(config: dict[str, Any], spec: TrainingJobSpec, path: Path) -> list[str]:
    """The Hub token only ever encrypted in the stack file, and there when the job asks for it."""
    token = config.get(HUB_TOKEN_CONFIG)
    name = HUB_TOKEN_CONFIG.split(":", 1)[1]
    how = f"`pulumi config set --secret {name} <token>` (the file then holds {{secure: ...}})"
    if not is_unset_secret(token) and not is_secure(token):
        return [f"{path.name}: {HUB_TOKEN_CONFIG}: a plaintext token in the stack file; allowed: {how}"]
    if spec.hub_token and is_unset_secret(token):
        return [f"{path.name}: {CONFIG_KEY}.hubToken is true but {HUB_TOKEN_CONFIG} is unset; allowed: {how}"]
    return []


def mlflow_credential_problems(config: dict[str, Any], spec: TrainingJobSpec, path: Path) -> list[str]:
    """The MLflow token or password only ever encrypted in the stack file, and there when the job's
    mlflow.auth needs it."""
    value = config.get(MLFLOW_CREDENTIAL_CONFIG)
    name = MLFLOW_CREDENTIAL_CONFIG.split(":", 1)[1]
    how = f"`pulumi config set --secret {name} <token or password>` (the file then holds {{secure: ...}})"
    if not is_unset_secret(value) and not is_secure(value):
        plaintext = f"{MLFLOW_CREDENTIAL_CONFIG}: a plaintext credential in the stack file"
        return [f"{path.name}: {plaintext}; allowed: {how}"]
    auth = spec.mlflow.auth if spec.mlflow else "none"
    if auth != "none" and is_unset_secret(value):
        unset = f"{CONFIG_KEY}.mlflow.auth is {auth} but {MLFLOW_CREDENTIAL_CONFIG} is unset"
        return [f"{path.name}: {unset}; allowed: {how}"]
    return []


def check_platform_stack(stack: WorkloadStack, root: Path = REPO) -> None:
    """A bare platformStack (a stack of this project) must be one of this project's platform stacks: a
    typo would only surface as `pulumi up`'s unknown-stack error. An org/project/stack is another
    project's, which only its backend knows."""
    name = stack.platform_stack
    if "/" in name:
        return
    platforms = stack_files.platform_stacks(root)
    if name in platforms:
        return
    kind = "a workload stack" if name in workload_stacks(root) else "no stack file here"
    raise SpecError(
        f"{PLATFORM_KEY}: {name!r} is {kind}{stack_files.did_you_mean(name, platforms)}; allowed: a platform "
        f"stack of this project ({', '.join(platforms) or 'none'}), or org/project/stack; a stack kept "
        "elsewhere: pass its outputs with --platform-outputs FILE"
    )


def program_text(spec: TrainingJobSpec, root: Path = REPO) -> str | None:
    """The script a `configmap` program ships, read from the repository (None for other deliveries)."""
    if spec.program.delivery != "configmap":
        return None
    path = root / (spec.program.file or "")
    if not path.is_file():
        raise SpecError(f"{CONFIG_KEY}.program.file: {spec.program.file!r} is not a file under {root}")
    return path.read_text()
