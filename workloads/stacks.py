"""Workload stack files (`Pulumi.<stack>.yaml`) read without the Pulumi CLI, for `render`, `run-local`
and the tests: the same two keys `pulumi up` reads through pulumi.Config."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from workloads.spec import CONFIG_KEY, SpecError, TrainingJobSpec, parse_spec

REPO = Path(__file__).resolve().parents[1]
PLATFORM_KEY = "mlops-eks:platformStack"


@dataclass(frozen=True)
class WorkloadStack:
    name: str
    platform_stack: str
    spec: TrainingJobSpec


def stack_file(stack: str, root: Path = REPO) -> Path:
    return root / f"Pulumi.{stack}.yaml"


def workload_stacks(root: Path = REPO) -> list[str]:
    """Every stack file in `root` that sets mlops-eks:platformStack."""
    names = []
    for f in sorted(root.glob("Pulumi.*.yaml")):
        config = (yaml.safe_load(f.read_text()) or {}).get("config") or {}
        if PLATFORM_KEY in config:
            names.append(f.name.removeprefix("Pulumi.").removesuffix(".yaml"))
    return names


def load_stack(stack: str, root: Path = REPO) -> WorkloadStack:
    path = stack_file(stack, root)
    if not path.exists():
        found = ", ".join(workload_stacks(root)) or "none"
        raise SpecError(f"stack {stack!r}: no {path.name} in {root}; workload stacks here: {found}")
    config: dict[str, Any] = (yaml.safe_load(path.read_text()) or {}).get("config") or {}
    if PLATFORM_KEY not in config:
        raise SpecError(
            f"{path.name}: {PLATFORM_KEY} is missing; a workload stack names its platform stack, "
            "e.g. organization/mlops-eks/dev"
        )
    return WorkloadStack(stack, str(config[PLATFORM_KEY]), parse_spec(config.get(CONFIG_KEY)))


def program_text(spec: TrainingJobSpec, root: Path = REPO) -> str | None:
    """The script a `configmap` program ships, read from the repository (None for other deliveries)."""
    if spec.program.delivery != "configmap":
        return None
    path = root / (spec.program.file or "")
    if not path.is_file():
        raise SpecError(f"{CONFIG_KEY}.program.file: {spec.program.file!r} is not a file under {root}")
    return path.read_text()
