"""What every model of the platform stack's config shares: keys spelled as in the stack files, frozen
values, unknown keys refused, YAML booleans only, YAML numbers refused where text is wanted, and one error
type for a value a validator refuses."""

from __future__ import annotations

import re
import types
import typing
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, ValidationError, model_validator
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


def is_text(annotation: Any) -> bool:
    """Whether a field holds text: str, a constrained str, a Literal of strings, or an optional one."""
    origin = typing.get_origin(annotation)
    if origin is Annotated:
        return is_text(typing.get_args(annotation)[0])
    if origin is Literal:
        return all(isinstance(a, str) for a in typing.get_args(annotation))
    if origin in (Union, types.UnionType):
        options = [a for a in typing.get_args(annotation) if a is not type(None)]
        return bool(options) and all(is_text(a) for a in options)
    return annotation is str


def is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def number_for_text(model: type[BaseModel], data: Any) -> tuple[str, Any, str] | None:
    """The first text field of `model` (or text value of a mapping field, such as a tag) that `data` gives
    a number, as (key, number, what is allowed).

    YAML reads `consolidateAfter: 10` and `imageTag: 1.10` as numbers (the latter as 1.1), so the value is
    no longer what was typed; pydantic would only say "Input should be a valid string". What is allowed is
    what the quoted value gets told: the field's values, or what its validator says of the text."""
    if not isinstance(data, dict):
        return None
    for name, field in model.model_fields.items():
        key = field.alias or name
        value = data.get(key, data.get(name))
        if isinstance(value, dict) and _text_values(field.annotation):
            for k, v in value.items():
                if is_number(v):
                    return f"{key}.{k}", v, f'text: "{v}" quoted'
        if not is_number(value) or not is_text(field.annotation):
            continue
        allowed = _allowed_text(model, data, key, str(value), field.annotation)
        return key, value, f"{allowed}, written as quoted text"
    return None


def number_reason(value: Any) -> str:
    """Why a number where text is wanted is refused, not converted."""
    lost = " (YAML drops what a number cannot hold: 1.30 becomes 1.3, 010 becomes 8)"
    return "an unquoted YAML number where text is wanted" + (lost if isinstance(value, float) else "")


def _text_values(annotation: Any) -> bool:
    """dict[str, str] (or an optional one): a mapping whose values are text."""
    options = typing.get_args(annotation) if typing.get_origin(annotation) in (Union, types.UnionType) else ()
    for a in options or (annotation,):
        if typing.get_origin(a) is dict and is_text(typing.get_args(a)[1]):
            return True
    return False


def _allowed_text(model: type[BaseModel], data: dict, key: str, text: str, annotation: Any) -> str:
    options = [a for a in _literals(annotation)]
    if options:
        return ", ".join(f'"{o}"' for o in options)
    try:
        model.model_validate({**data, key: text})
    except ValidationError as err:
        for e in err.errors():
            cause = (e.get("ctx") or {}).get("error")
            if isinstance(cause, Invalid) and cause.field.split(".")[0].split("[")[0] == key:
                return cause.allowed
            if e["type"] == "string_pattern_mismatch" and e["loc"][:1] == (key,):
                # The quoted text is refused too: say what the key takes, not what the next run refuses.
                pattern = (e.get("ctx") or {}).get("pattern", "")
                return getattr(model, "PATTERN_MEANS", {}).get(pattern, f"text matching {pattern}")
    return f'"{text}"'


def _literals(annotation: Any) -> list[str]:
    origin = typing.get_origin(annotation)
    if origin is Literal:
        return list(typing.get_args(annotation))
    if origin in (Union, types.UnionType, Annotated):
        return [v for a in typing.get_args(annotation) for v in _literals(a)]
    return []


# A number with a unit where the key already names one (`diskSizeGiB: 50Gi`, `cpuPerNode: 8000m`).
_NUMBER_WITH_UNIT = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([A-Za-z][A-Za-z ]*)$")
# The unit a key's name states.
_KEY_UNITS = (
    ("GiB", "GiB"),
    ("Days", "days"),
    ("Hours", "hours"),
    ("Seconds", "seconds"),
    ("cpu", "vCPUs"),
    ("gpu", "GPUs"),
)


def unit_hint(key: str, value: Any) -> str | None:
    """For a number written with a unit in a numeric field (`diskSizeGiB: 50Gi`): what to write instead.
    Millicores convert exactly; any other unit is the user's to convert into the key's."""
    match = _NUMBER_WITH_UNIT.match(value) if isinstance(value, str) else None
    if not match:
        return None
    number, unit = match.groups()
    name = key.rsplit(".", 1)[-1]
    if unit == "m" and "cpu" in name.lower():
        vcpus = float(number) / 1000
        return f"{vcpus:g} (vCPUs as a plain number; {value} is Kubernetes' millicore spelling)"
    named = next((u for marker, u in _KEY_UNITS if marker in name or name.startswith(marker)), None)
    unit_of_key = f", in {named} as the key {name} says" if named else ""
    return f"a plain number{unit_of_key} (no {unit.strip()!r})"


def allowed_for(err: Any, patterns: dict[str, str] | None = None) -> str:
    """`; allowed: <what>` for one of pydantic's own errors, whose message says what is wrong but, for most
    types, not in the words a stack file is written in; with the plain number for a value with a unit
    and the allowed value a value differs from only in case."""
    kind, ctx, value = err["type"], err.get("ctx") or {}, err.get("input")
    key = str(err["loc"][-1]) if err.get("loc") else ""
    numeric = kind in ("int_parsing", "float_parsing", "int_type", "float_type")
    if numeric and (plain := unit_hint(key, value)):
        return f"; allowed: {plain}"
    if kind == "literal_error":
        expected = str(ctx.get("expected", ""))
        return f"; allowed: {expected}" + case_hint(value, re.findall(r"'([^']*)'", expected))
    if kind == "string_pattern_mismatch":
        pattern = str(ctx.get("pattern"))
        return "; allowed: " + (patterns or {}).get(pattern, f"text matching {pattern}")
    bounds = {"greater_than_equal": ">=", "greater_than": ">", "less_than_equal": "<=", "less_than": "<"}
    if kind in bounds:
        bound = next(v for k, v in ctx.items() if k in ("ge", "gt", "le", "lt"))
        return f"; allowed: a number {bounds[kind]} {bound}"
    words = {
        "list_type": "a list: [a, b] or one `- item` line each",
        "tuple_type": "a list: [a, b] or one `- item` line each",
        "dict_type": "a mapping: `key: value` lines or {key: value}",
        "model_type": "a mapping: `key: value` lines or {key: value}",
        "int_type": "a whole number",
        "int_parsing": "a whole number",
        "int_from_float": "a whole number",
        "float_type": "a number",
        "float_parsing": "a number",
        "string_type": "text",
        "bool_type": "true or false",
        "bool_parsing": "true or false",
        "string_too_long": f"at most {ctx.get('max_length')} characters",
    }
    return f"; allowed: {words[kind]}" if kind in words else ""


def case_hint(value: Any, options: list[str]) -> str:
    """` (did you mean 'dev'?)` for a value that differs from an allowed one only in case."""
    close = [o for o in options if isinstance(value, str) and o.lower() == value.lower()]
    return f" (did you mean {close[0]!r}?)" if close else ""


class ConfigModel(BaseModel):
    """Frozen, unknown keys rejected, keys spelled in camelCase as in the stack files."""

    model_config = ConfigDict(
        frozen=True, extra="forbid", alias_generator=config_alias, populate_by_name=True
    )

    @model_validator(mode="before")
    @classmethod
    def _bools(cls, data: Any) -> Any:
        refuse_lax_bools(cls, data)
        if found := number_for_text(cls, data):
            key, value, allowed = found
            raise Invalid(key, value, allowed, number_reason(value))
        return data
