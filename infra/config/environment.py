"""Which stacks are prod: the one rule the platform program, the policy pack and the CLIs share.

A stack's environment is its config key `mlops-eks:environment`, nothing else: not the stack's name
(a stack named `production` or `staging` is not told apart from `dev` by its name) and not a stack
tag (the program never sees tags, so a tag could make the pack and the program disagree). A stack
without the key is prod, so forgetting it applies the strict rules instead of skipping them. Only the
exact value `dev` selects dev; `infra.config.platform` refuses any other value, and the policy pack, which
must decide whatever it is given, treats it as prod. Pure (no Pulumi import).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from infra.config.stack_files import PROJECT

ENVIRONMENT_KEY = f"{PROJECT}:environment"
Environment = Literal["dev", "prod"]
DEFAULT_ENVIRONMENT: Environment = "prod"


def environment_of(config: Mapping[str, Any]) -> Environment:
    """The environment of a stack from its config mapping (`mlops-eks:<key>` keys, as in a stack file
    or in the PULUMI_CONFIG the engine hands the program and the policy pack)."""
    return "dev" if config.get(ENVIRONMENT_KEY) == "dev" else DEFAULT_ENVIRONMENT


def is_prod(config: Mapping[str, Any]) -> bool:
    return environment_of(config) == "prod"
