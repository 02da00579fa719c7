"""Reading `Pulumi.<stack>.yaml`: one reader for the platform tools (`infra synth`) and the workload
tools (`workloads render/run-local/status`). Pure: no Pulumi import, so `workloads` may use it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

PROJECT = "mlops-eks"
# Namespaces a stack file may hold besides the project's: the providers' and Pulumi's own settings. A key
# in any other namespace (`mlopseks:natGateways`) would be read by nothing, so it is refused, not dropped.
PROVIDER_NAMESPACES = frozenset({"aws", "kubernetes", "pulumi", "eks", "random"})


class StackFileError(ValueError):
    """A stack file that is not YAML or not shaped like a stack file; the message names the file (and
    the line) and what is allowed."""


def read_config(path: Path) -> dict[str, Any]:
    """The `config:` mapping of a stack file (empty when it has none)."""
    try:
        document = yaml.safe_load(path.read_text())
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
