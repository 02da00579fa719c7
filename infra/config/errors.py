"""ConfigError and its messages: one line per problem, `mlops-eks:<key path>: <what is wrong>; got
<value>; allowed: <what>`, the key written as in `Pulumi.<stack>.yaml` and a secret's value masked."""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel

from infra.config.base import Invalid, allowed_for
from infra.config.secrets import SECRET_KEYS
from infra.config.stack_files import PROJECT, REGION_KEY, WORKLOAD_KEYS


class ConfigError(Exception):
    """Invalid stack configuration. `str()` lists one problem per line."""

    def __init__(self, problems: list[str]):
        self.problems = problems
        super().__init__("invalid configuration:\n  " + "\n  ".join(problems))


def describe(err: Mapping[str, Any], root: type[BaseModel]) -> str:
    """One pydantic error of the `root` model as one line: `mlops-eks:<key path>: <what is wrong>`."""
    path = list(err["loc"])
    cause = (err.get("ctx") or {}).get("error")
    if isinstance(cause, Invalid):
        path.append(cause.field)
        message = str(cause)
    elif err["type"] == "extra_forbidden":
        allowed = allowed_keys(root, path[:-1])
        # At the top, a workload key's typo (platfromStack) makes the stack a platform stack: name it.
        workload_names = sorted(k.split(":", 1)[1] for k in WORKLOAD_KEYS)
        candidates = allowed + ([] if path[:-1] else workload_names)
        close = difflib.get_close_matches(str(path[-1]), candidates, n=1, cutoff=0.6)
        hint = f"did you mean {close[0]}? " if close else ""
        secret = bool(close) and close[0] in SECRET_KEYS
        message = f"unknown key (got {_shown(err, path, secret)}); {hint}allowed keys: {', '.join(allowed)}"
    elif err["type"] == "missing":
        message = "required but not set"
    else:
        message = f"{err['msg']} (got {_shown(err, path)}){allowed_for(err)}"
    key = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path).lstrip(".")
    return f"{key if key.startswith('aws:') else f'{PROJECT}:{key}'}: {message}"


def _shown(err: Mapping[str, Any], path: list[Any], secret: bool = False) -> str:
    """The offending value, masked under a secret key (or a key that looks like a misspelt one): error
    messages reach terminals and CI logs."""
    if secret or any(p in SECRET_KEYS for p in path):
        return "*" * 8
    return repr(err["input"])


def allowed_keys(root: type[BaseModel], path: list[str | int]) -> list[str]:
    """The keys the model at `path` under `root` accepts (for 'unknown key' messages)."""
    model = root
    for part in path:
        if isinstance(part, int):
            continue
        field = next(f for n, f in model.model_fields.items() if part in (n, f.alias))
        annotation = field.annotation
        inner = [
            a for a in getattr(annotation, "__args__", ()) if isinstance(a, type) and issubclass(a, BaseModel)
        ]
        model = inner[0] if inner else annotation  # type: ignore[assignment]
    return [f.alias or n for n, f in model.model_fields.items() if f.alias != REGION_KEY]
