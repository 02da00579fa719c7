"""Reading the running stack's config: what `pulumi up` (the engine) or `infra synth` (Pulumi mocks)
hands the program, turned into PlatformConfig.

Values are read through the public `pulumi.Config`. What the SDK has no public API for is read from its
runtime modules instead: the keys that are set (unknown keys are refused, so every key must be seen, not
only the ones the model asks for), whether a key was encrypted in the stack file, and whether the program
runs under mocks.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import UnionType
from typing import Any, Union, get_args, get_origin

import pulumi
from pulumi.runtime import config as runtime_config
from pulumi.runtime import settings
from pulumi.runtime.mocks import MockMonitor
from pydantic import BaseModel

from infra.config.errors import ConfigError
from infra.config.placeholders import placeholder_problems
from infra.config.platform import PlatformConfig
from infra.config.secrets import SECRET_KEYS, is_secure, is_unset_secret, secret_problems
from infra.config.stack_files import PROJECT


def read_platform_config() -> PlatformConfig:
    """PlatformConfig from the running stack's config; ConfigError (every problem) if it is invalid."""
    offline = under_mocks()
    values = {key: _read(key, offline) for key in _keys_set()}
    if not offline:
        for name in SECRET_KEYS:
            key = f"{PROJECT}:{name}"
            if runtime_config.is_config_secret(key):
                continue
            # Pulumi.yaml's `default: ""` arrives as a plain "" for every stack that does not set the key
            # (the CLI merges project defaults in: infra/config/project_config.py): not set, not a leak.
            if is_unset_secret(values.get(key)):
                values.pop(key, None)
            # The engine decrypts only what the stack file encrypts: a plaintext secret is in git.
            elif isinstance(values.get(key), str):
                raise ConfigError(secret_problems({key: values[key]}, decrypted=False))
    config = PlatformConfig.from_mapping(values, decrypted=not offline)
    check_placeholders(values, offline=offline)
    return config


def _keys_set() -> list[str]:
    """Every key set in the stack. pulumi.Config reads a key by name but cannot list them, so they are
    listed from where it reads: PULUMI_CONFIG (what the language host hands the program's process) and
    the runtime's config map (set_all_config: mocks, tests)."""
    return list(dict.fromkeys([*runtime_config.get_config_env(), *runtime_config.CONFIG.get()]))


def _read(key: str, offline: bool) -> Any:
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
        if namespace == PROJECT and name in SECRET_KEYS and offline:
            # synth hands the file's {secure: ...} over as JSON; it stays encrypted
            value = config.get_object(name)
            return value if is_secure(value) else config.get(name)
    except pulumi.ConfigTypeError:
        pass
    return config.get(name)


def under_mocks() -> bool:
    """Whether the program runs against Pulumi mocks (`infra synth`, tests) rather than an engine."""
    return isinstance(settings.get_monitor(), MockMonitor)


def check_placeholders(values: Mapping[str, Any], offline: bool) -> None:
    """Refuse the committed files' documentation placeholders in a real preview or update; offline
    (mocks) only warn, so the example stacks still synthesize."""
    problems = placeholder_problems({k: v for k, v in values.items() if k.startswith(f"{PROJECT}:")})
    if problems and not offline:
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
