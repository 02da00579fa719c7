"""Reading `Pulumi.<stack>.yaml`, and which stacks are platform or workload stacks: one reader for the
platform tools (`infra synth`, the policy scan, the schema generator) and the workload tools (`workloads
render/run-local/status`). Pure: no Pulumi import, so `workloads` may use it.
The project file `Pulumi.yaml` has the same shape (its `config:` declares every key) and is read alike."""

from __future__ import annotations

import copy
import difflib
import functools
from pathlib import Path
from typing import Any

import yaml

from infra.config import go_yaml
from infra.contract import PLATFORM_STACK_KEY

PROJECT = "mlops-eks"
# Namespaces a stack file may hold besides the project's: the providers' and Pulumi's own settings. A key
# in any other namespace (`mlopseks:natGateways`) would be read by nothing, so it is refused, not dropped.
PROVIDER_NAMESPACES = frozenset({"aws", "kubernetes", "pulumi", "eks", "random"})
# The AWS provider's own key; every platform stack sets it.
REGION_KEY = "aws:region"
# The keys of a workload stack (same project, another program): a stack file that sets platformStack
# is a workload stack, every other one a platform stack.
WORKLOAD_STACK_KEY = f"{PROJECT}:{PLATFORM_STACK_KEY}"
JOB_KEY = f"{PROJECT}:job"
# A workload stack's Hugging Face Hub token (gated models), set with `pulumi config set --secret hfToken`.
HUB_TOKEN_KEY = f"{PROJECT}:hfToken"
# Its MLflow tracking server's token or password (the job's mlflow.auth), set the same way.
MLFLOW_CREDENTIAL_KEY = f"{PROJECT}:mlflowCredential"
WORKLOAD_KEYS = (WORKLOAD_STACK_KEY, JOB_KEY, HUB_TOKEN_KEY, MLFLOW_CREDENTIAL_KEY)


class StackFileError(ValueError):
    """A stack file that is not YAML or not shaped like a stack file; the message names the file (and
    the line) and what is allowed."""


@functools.lru_cache(maxsize=512)
def _parse(text: str) -> Any:
    """A stack file's text parsed once per process: every tool and test reads the same few files many
    times (which stacks are workload stacks is asked on every load), and parsing dominates reading. Read as
    the Pulumi CLI reads it (go-yaml v3: infra/config/go_yaml.py): a duplicate key is refused, `yes`/`on`
    are text."""
    return go_yaml.load(text)


def read_config(path: Path) -> dict[str, Any]:
    """The `config:` mapping of a stack file (empty when it has none); a copy the caller may change."""
    return copy.deepcopy(_shared_config(path))


def _shared_config(path: Path) -> dict[str, Any]:
    """read_config's mapping, shared with every other reader of the same text: read, not changed."""
    try:
        document = _parse(path.read_text())
    except go_yaml.GoYamlError as err:
        raise StackFileError(
            f"{path.name}: refused as the Pulumi CLI (go-yaml v3) refuses it: {err}; allowed: each key once "
            "per mapping"
        ) from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise StackFileError(
            f"{path.name}: not valid YAML{where}: {problem}; allowed: a mapping with a `config:` mapping"
        ) from None
    config = (document or {}).get("config") if isinstance(document, dict | None) else document
    if not isinstance(config, dict | None):
        kind = type(config).__name__
        raise StackFileError(f"{path.name}: `config` is a {kind}; allowed: a mapping of <namespace>:<key>")
    return config or {}


def stack_file(root: Path, stack: str) -> Path:
    return root / f"Pulumi.{stack}.yaml"


def stack_configs(root: Path) -> dict[str, dict[str, Any] | None]:
    """Every stack file in `root`, in file-name order: stack name -> its `config:` mapping (shared: read,
    not changed), or None when the file cannot be read (reported when that stack itself is used, not for
    every other one)."""
    found: dict[str, dict[str, Any] | None] = {}
    for path in sorted(root.glob("Pulumi.*.yaml")):
        try:
            config: dict[str, Any] | None = _shared_config(path)
        except StackFileError:
            config = None
        found[path.name.removeprefix("Pulumi.").removesuffix(".yaml")] = config
    return found


def is_workload_stack(config: dict[str, Any] | None) -> bool:
    """Whether a stack's config (None: its file cannot be read) makes it a workload stack."""
    return config is not None and WORKLOAD_STACK_KEY in config


def workload_stacks(root: Path) -> list[str]:
    """The stacks whose file sets platformStack (a stack file that cannot be read is none of them)."""
    return [name for name, config in stack_configs(root).items() if is_workload_stack(config)]


def did_you_mean(name: str, names: list[str]) -> str:
    """` (did you mean dev?)` for a mistyped stack name, or ""."""
    close = difflib.get_close_matches(name, names, n=1, cutoff=0.6)
    return f" (did you mean {close[0]}?)" if close else ""


def platform_stacks(root: Path) -> list[str]:
    """Every other stack, an unreadable file included (its own synth reports the problem)."""
    return [name for name, config in stack_configs(root).items() if not is_workload_stack(config)]
