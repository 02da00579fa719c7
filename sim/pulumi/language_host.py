"""How pulumi-language-python hands a stack's config to the program, for runs that have no language host
(`infra synth`, the tests under Pulumi mocks).

The language host puts the config in the program's environment (pulumi/pulumi sdk/python/cmd/
pulumi-language-python main.go: PULUMI_CONFIG, every value a string, lists and objects as JSON, secrets
decrypted; PULUMI_CONFIG_SECRET_KEYS, the keys that were secret), and the exec shim it starts copies both
into the SDK's runtime before the program runs (language_python_exec.py: `set_all_config`). `handed_over`
does the same in this process, so the program reads its config one way, whoever runs it.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import pulumi.runtime

from infra.config.secrets import SECRET_PLACEHOLDER, is_secure

ENV_CONFIG = "PULUMI_CONFIG"
ENV_SECRET_KEYS = "PULUMI_CONFIG_SECRET_KEYS"


def engine_values(values: Mapping[str, Any]) -> tuple[dict[str, str], list[str]]:
    """A stack file's `config:` mapping as the engine hands it over: strings as written, everything else as
    JSON (booleans "true"/"false", numbers as digits), and the keys the file held encrypted listed as secret.
    Only the engine can decrypt `{secure: ...}`: offline the value is a placeholder, still a secret."""
    config: dict[str, str] = {}
    secret_keys = []
    for key, value in values.items():
        if is_secure(value):
            config[key] = SECRET_PLACEHOLDER
            secret_keys.append(key)
        else:
            config[key] = value if isinstance(value, str) else json.dumps(value)
    return config, secret_keys


@contextlib.contextmanager
def handed_over(config: Mapping[str, str], secret_keys: Iterable[str] = ()) -> Iterator[None]:
    """Within the block, the program finds `config` as under the language host; afterwards nothing."""
    saved = {k: os.environ.get(k) for k in (ENV_CONFIG, ENV_SECRET_KEYS)}
    os.environ[ENV_CONFIG] = json.dumps(dict(config))
    os.environ[ENV_SECRET_KEYS] = json.dumps(sorted(secret_keys))
    pulumi.runtime.set_all_config(
        pulumi.runtime.get_config_env(), pulumi.runtime.get_config_secret_keys_env()
    )
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        pulumi.runtime.set_all_config({}, [])
