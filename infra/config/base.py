"""What every model of the platform stack's config shares: keys spelled as in the stack files, frozen
values, unknown keys refused, YAML booleans only, and one error type for a value a validator refuses."""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel, ConfigDict, model_validator
from pydantic.alias_generators import to_camel

# A name that becomes part of Kubernetes and AWS resource names (a GPU pool, a team queue).
SHORT_NAME = re.compile(r"^[a-z][a-z0-9-]{0,30}$")


class Invalid(ValueError):
    """Raised by validators. `field` is the offending key relative to the model that raised it; the
    error formatting (infra/config/errors.py) adds the path above it and the `mlops-eks:` prefix."""

    def __init__(self, field: str, value: Any, allowed: str, reason: str = ""):
        self.field, self.value, self.allowed, self.reason = field, value, allowed, reason
        super().__init__(f"{reason + '; ' if reason else ''}got {value!r}; allowed: {allowed}")


def config_alias(name: str) -> str:
    """camelCase, with binary units spelled as everywhere else in the project: diskSizeGiB, rootVolumeGiB."""
    return re.sub(r"Gib(?=[A-Z]|$)", "GiB", to_camel(name))


def refuse_lax_bools(model: type[BaseModel], data: Any) -> None:
    """Pydantic's lax mode reads "yes", "on", "1" and "true" as True; in a stack file only a YAML boolean
    is one, so `endpointPublicAccess: "yes"` is refused instead of opening the endpoint."""
    if not isinstance(data, dict):
        return
    for name, field in model.model_fields.items():
        if field.annotation not in (bool, bool | None):
            continue
        key = field.alias or name
        value = data.get(key, data.get(name))
        if value is not None and not isinstance(value, bool):
            raise Invalid(key, value, "true or false (a YAML boolean, unquoted)")


class ConfigModel(BaseModel):
    """Frozen, unknown keys rejected, keys spelled in camelCase as in the stack files."""

    model_config = ConfigDict(
        frozen=True, extra="forbid", alias_generator=config_alias, populate_by_name=True
    )

    @model_validator(mode="before")
    @classmethod
    def _bools(cls, data: Any) -> Any:
        refuse_lax_bools(cls, data)
        return data
