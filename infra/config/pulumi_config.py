"""Reading the running stack's config into PlatformConfig, as the language host hands it to the program.

The language host puts every key the stack sets into the program's environment (PULUMI_CONFIG: values as
strings, lists and objects as JSON, secrets decrypted) and lists the secret ones apart
(PULUMI_CONFIG_SECRET_KEYS): the keys are read from there (unknown keys are refused, so every key must be
seen, not only the ones the model asks for), each value through the public `pulumi.Config`. Offline commands
hand the config over the same way (sim/pulumi/language_host.py); one thing differs and they say so: the
documentation placeholders of the committed stack files are warned about instead of refused.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from types import UnionType
from typing import Any, Literal, Union, get_args, get_origin

import pulumi
from pydantic import BaseModel

from infra.config.errors import ConfigError
from infra.config.placeholders import placeholder_problems
from infra.config.platform import PlatformConfig
from infra.config.secrets import SECRET_KEYS, is_unset_secret, secret_problems
from infra.config.stack_files import PROJECT

Placeholders = Literal["refuse", "warn"]


def read_platform_config(placeholders: Placeholders = "refuse") -> PlatformConfig:
    """PlatformConfig from the running stack's config; ConfigError (every problem) if it is invalid.
    `placeholders`: what the committed files' documentation values get: refused (a deploy), or only a
    warning (the offline commands, so the example stacks still synthesize)."""
    keys, secret_keys = handed_over_keys()
    values = {key: _read(key) for key in keys}
    for name in SECRET_KEYS:
        key = f"{PROJECT}:{name}"
        if key in secret_keys:
            continue
        # Pulumi.yaml's `default: ""` arrives as a plain "" for every stack that does not set the key
        # (the CLI merges project defaults in: sim/pulumi/merge_config.py): not set, not a leak.
        if is_unset_secret(values.get(key)):
            values.pop(key, None)
        # The engine decrypts only what the stack file encrypts: a plaintext secret is in git.
        elif isinstance(values.get(key), str):
            raise ConfigError(secret_problems({key: values[key]}, decrypted=False))
    config = PlatformConfig.from_mapping(values, decrypted=True)
    check_placeholders(values, placeholders)
    return config


def handed_over_keys() -> tuple[list[str], set[str]]:
    """Every key the stack sets and the secret ones, from the environment the language host gives the
    program (pulumi.Config reads a key by name but cannot list them)."""
    config = json.loads(os.environ.get("PULUMI_CONFIG") or "{}")
    secret_keys = json.loads(os.environ.get("PULUMI_CONFIG_SECRET_KEYS") or "[]")
    return list(config), set(secret_keys)


def _read(key: str) -> Any:
    """One value. The engine passes every value as a string: lists and objects as JSON, booleans as
    "true"/"false". A value that does not parse as its field's type is kept as written, so validation
    names the key and the type it wants instead of a JSON decoder position."""
    namespace, _, name = key.partition(":")
    if not name:  # no namespace, so no pulumi.Config reads it: refused by from_mapping, whatever its value
        return None
    config = pulumi.Config(namespace)
    try:
        if namespace == PROJECT and _is_structured(name):
            return config.get_object(name)
        if namespace == PROJECT and _is_bool(name):
            return config.get_bool(name)
    except pulumi.ConfigTypeError:
        pass
    return config.get(name)


def check_placeholders(values: Mapping[str, Any], placeholders: Placeholders) -> None:
    """Refuse the committed files' documentation placeholders, or only warn where the caller says so."""
    problems = placeholder_problems({k: v for k, v in values.items() if k.startswith(f"{PROJECT}:")})
    if problems and placeholders == "refuse":
        raise ConfigError([f"{p}; allowed: a real value (this one is an example)" for p in problems])
    for problem in problems:
        pulumi.log.warn(f"{problem} (accepted offline only: a real preview or update refuses it)")


def _field(alias: str) -> Any:
    return next((f.annotation for n, f in PlatformConfig.model_fields.items() if alias in (n, f.alias)), None)


def _is_bool(alias: str) -> bool:
    return _field(alias) is bool


def _is_structured(alias: str) -> bool:
    """Whether the key holds a list or an object (which Pulumi passes to the program as JSON)."""
    annotation = _field(alias)
    options = get_args(annotation) if get_origin(annotation) in (Union, UnionType) else (annotation,)
    return any(
        get_origin(a) in (list, dict) or (isinstance(a, type) and issubclass(a, BaseModel)) for a in options
    )
