"""The platform stack's secret keys: encrypted in the stack file (`{secure: v1:...}`, written by
`pulumi config set --secret`), decrypted only by the Pulumi engine. Pure (no Pulumi import)."""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

from infra.config.stack_files import PROJECT

SECRET_KEYS = ("grafanaAdminPassword", "alertReceiverSecret")
# What an offline run (synth, tests) uses for a secret it cannot decrypt.
SECRET_PLACEHOLDER = "offline-placeholder-for-an-encrypted-secret"


def is_secure(value: Any) -> bool:
    """Whether `value` is an encrypted value as a stack file holds it: `{secure: <ciphertext>}`."""
    return isinstance(value, Mapping) and set(value) == {"secure"} and isinstance(value["secure"], str)


def is_unset_secret(value: Any) -> bool:
    """Pulumi.yaml declares `default: ""` for each secret (a key without a default is required in every
    stack), so "" is how an unset secret arrives from the CLI; it means "not set" (a generated password,
    no receiver), never a plaintext secret."""
    return value is None or value == ""


def secret_problems(values: Mapping[str, Any], *, decrypted: bool) -> list[str]:
    """A secret written in plaintext into a stack file ends up in git; Pulumi writes `{secure: ...}`."""
    problems = []
    for name in SECRET_KEYS:
        value = values.get(f"{PROJECT}:{name}")
        if is_unset_secret(value) or decrypted or is_secure(value):
            continue
        problems.append(
            f"{PROJECT}:{name}: a plaintext secret in the stack file (got {'*' * 8}); allowed: an "
            f"encrypted value, set with `pulumi config set --secret {name} <value>` (the file then holds "
            "{secure: ...})"
        )
    return problems


def offline_secrets(values: Mapping[str, Any]) -> dict[str, Any]:
    """`{secure: v1:...}` can only be decrypted by the Pulumi engine: offline (synth, tests) the secret
    becomes a placeholder, with a warning, so the rest of the stack is still checked and synthesized."""
    out = dict(values)
    for name in SECRET_KEYS:
        key = f"{PROJECT}:{name}"
        if is_secure(out.get(key)):
            message = f"{key}: encrypted; offline runs use a placeholder (pulumi up decrypts it)"
            warnings.warn(message, stacklevel=3)
            out[key] = SECRET_PLACEHOLDER
    return out
