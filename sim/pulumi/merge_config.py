"""The config a Pulumi program receives: the stack file's values with Pulumi.yaml's `config:` merged in, as
the CLI merges them before every preview and update. A port of pulumi/pulumi pkg/workspace/config.go
(`mergeConfig`, `createConfigValue`, `validateStackConfigValues`; commit 1b59498, 2026-08) and of the
stack-file loading it relies on (sdk/go/common/workspace/project.go: a key without a namespace is the
project's; sdk/go/common/resource/config/map.go Get: a key's name is a path into an object value).
Environments (ESC, a stack file's `environment:`) are not ported: this project uses none, and
`merge_config` refuses a stack file that names one instead of ignoring it.

Values come out as the engine hands them to the language host (RunRequest.config, then PULUMI_CONFIG):
strings as written, booleans "true"/"false", numbers as digits, lists and objects as JSON, and secrets
decrypted, their keys listed apart (PULUMI_CONFIG_SECRET_KEYS). Pure: no Pulumi import.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from infra.config.secrets import is_secure


class ProjectConfigError(ValueError):
    """What the CLI would print before running the program (the Go error text)."""


@dataclass(frozen=True)
class ConfigValue:
    """config.Value: the string the engine passes, whether it is JSON (`object`), whether it is secret."""

    value: str
    object: bool = False
    secure: bool = False


@dataclass(frozen=True)
class ProjectConfigType:
    """workspace.ProjectConfigType: one entry of Pulumi.yaml's `config:`."""

    type: str | None = None
    items: Mapping[str, Any] | None = None
    default: Any = None
    has_default: bool = False
    value: Any = None
    has_value: bool = False
    secret: bool = False


@dataclass
class MergedConfig:
    """What the engine hands the program: every key (namespace:name) with its string, and the secret keys."""

    values: dict[str, str] = field(default_factory=dict)
    secret_keys: list[str] = field(default_factory=list)


def parse_key(project: str, key: str) -> str:
    """parseConfigKey: a key without a namespace belongs to the project."""
    return key if ":" in key else f"{project}:{key}"


def _primitive(value: Any) -> bool:
    """isPrimitiveValue (string, int, bool) or isArray: what Pulumi.yaml may write as a bare value."""
    return isinstance(value, str | int | bool | list)


def project_config_types(project: Mapping[str, Any]) -> dict[str, ProjectConfigType]:
    """Pulumi.yaml's `config:`, shorthand rewritten as RewriteShorthandConfigValues rewrites it: a bare
    primitive or array under a project key is that key's default, under another namespace its value. A
    map is a declaration (type, items, default, value, secret); an absent or null default or value is
    none (the Go code tests `!= nil`)."""
    name = str(project["name"])
    types = {}
    for key, decl in (project.get("config") or {}).items():
        if _primitive(decl):
            own = ":" not in key or key.startswith(f"{name}:")
            decl = {"default": decl} if own else {"value": decl}
        decl = decl if isinstance(decl, Mapping) else {}
        types[key] = ProjectConfigType(
            type=decl.get("type"),
            items=decl.get("items"),
            default=decl.get("default"),
            has_default=decl.get("default") is not None,
            value=decl.get("value"),
            has_value=decl.get("value") is not None,
            secret=bool(decl.get("secret")),
        )
    return types


def config_value(raw: Any, decrypt: Callable[[str], str] | None = None) -> ConfigValue:
    """createConfigValue, and how a stack file's YAML value becomes a config.Value: strings, integers and
    booleans as their text (Go's `%v`: true, 20), anything else as JSON; `{secure: ...}` as a secret."""
    if is_secure(raw):
        if decrypt is None:
            raise ProjectConfigError("an encrypted value needs the stack's secrets provider to decrypt it")
        return ConfigValue(decrypt(raw["secure"]), secure=True)
    if isinstance(raw, bool):
        return ConfigValue("true" if raw else "false")
    if isinstance(raw, str | int):
        return ConfigValue(str(raw))
    if isinstance(raw, float):  # object.go MarshalString: a float64 is its JSON text, not an object
        return ConfigValue(go_json_float(raw))
    return ConfigValue(json.dumps(raw, separators=(",", ":"), sort_keys=True), object=True)


def _type_name(type_: str, items: Mapping[str, Any] | None) -> str:
    """InferFullTypeName: `array<string>` for an array of strings."""
    if type_ == "array" and items:
        return f"array<{_type_name(items.get('type', ''), items.get('items'))}>"
    return type_


def go_json_float(number: float) -> str:
    """encoding/json's text of a float64 (encode.go floatEncoder): the shortest digits that read back, in
    fixed notation unless the magnitude is under 1e-6 or from 1e21 up, then `e` with no leading exponent
    zero (1e-07 -> 1e-7). So YAML `1.30` reaches the program as "1.3". NaN and infinities are refused, as
    json.Marshal refuses them (the stack file does not load)."""
    if not math.isfinite(number):
        shown = f"json: unsupported value: {number!r}"
        raise ProjectConfigError(f"{shown} (a YAML .nan or .inf is not a config value)")
    magnitude = abs(number)
    if magnitude != 0 and (magnitude < 1e-6 or magnitude >= 1e21):
        mantissa, exponent = repr(number).replace("E", "e").split("e")
        return f"{mantissa}e{exponent[0]}{exponent[1:].lstrip('0') or '0'}"
    return format(Decimal(repr(number)).normalize(), "f")


def _valid(type_: str, items: Mapping[str, Any] | None, content: Any) -> bool:
    """ValidateConfigValue (sdk/go/common/workspace/project.go): a non-object stack value arrives as its
    text, an object one (and every array item) as decoded JSON."""
    if type_ == "string":
        return isinstance(content, str)
    if type_ == "integer":
        if isinstance(content, bool):
            return False
        if isinstance(content, int) or (isinstance(content, float) and content.is_integer()):
            return True
        return isinstance(content, str) and content.lstrip("+-").isdigit()
    if type_ == "boolean":
        return content in ("true", "false") or isinstance(content, bool)
    if type_ == "object":
        return isinstance(content, dict)
    if not isinstance(content, list) or items is None:
        return False
    return all(_valid(items.get("type", ""), items.get("items"), item) for item in content)


def merge_config(
    stack_name: str,
    project: Mapping[str, Any],
    stack_file: Mapping[str, Any],
    *,
    decrypt: Callable[[str], str] | None = None,
    validate: bool = True,
) -> MergedConfig:
    """mergeConfig: the stack file's `config:` with Pulumi.yaml's values and defaults for every key the
    stack does not set, validated as ValidateStackConfigAndApplyProjectConfig validates (missing required
    keys, declared types, declared secrets). `project` and `stack_file` are the parsed YAML documents."""
    if (stack_file or {}).get("environment"):
        raise ProjectConfigError("stack environments (ESC) are not modelled here; this project uses none")
    name = str(project["name"])
    stack: dict[str, ConfigValue] = {}
    for key, raw in ((stack_file or {}).get("config") or {}).items():
        try:
            stack[parse_key(name, key)] = config_value(raw, decrypt)
        except ProjectConfigError:
            raise
        except Exception as err:  # the secrets provider's own failure, named by key
            raise ProjectConfigError(f"could not decrypt configuration key '{key}': {err}") from err

    types = project_config_types(project)
    missing = []
    for key in sorted(types):
        decl = types[key]
        full = parse_key(name, key)
        if lookup(stack, full) is not None:
            continue
        if not decl.has_value and not decl.has_default:
            if full.split(":", 1)[0] == name:
                missing.append(key)
            continue
        if len(_path(full.split(":", 1)[1])) > 1:
            raise ProjectConfigError(f"a default or value for the nested key '{key}' is not modelled here")
        # A default wins over a value when both are given (the Go code assigns the default last).
        stack[full] = config_value(decl.default if decl.has_default else decl.value)

    if validate and missing:
        noun = "value" if len(missing) == 1 else "values"
        raise ProjectConfigError(
            f"Stack '{stack_name}' is missing configuration {noun} {_format_missing(missing)}"
        )
    if validate:
        for key in sorted(types):
            decl, value = types[key], lookup(stack, parse_key(name, key))
            if value is not None and decl.type is not None:
                validate_value(stack_name, key, decl, value)
    return MergedConfig(
        values={k: v.value for k, v in sorted(stack.items())},
        secret_keys=sorted(k for k, v in stack.items() if v.secure),
    )


def validate_value(stack_name: str, key: str, decl: ProjectConfigType, value: ConfigValue) -> None:
    """validateStackConfigValue: a declared secret must be encrypted, and the value of the declared type
    (an object value is judged as the JSON it holds)."""
    if decl.secret and not value.secure:
        raise ProjectConfigError(
            f"Stack '{stack_name}' with configuration key '{key}' must be encrypted as it's secret"
        )
    try:
        content: Any = json.loads(value.value) if value.object else value.value
    except json.JSONDecodeError as err:
        raise ProjectConfigError(
            f"Stack '{stack_name}' with configuration key '{key}' holds invalid JSON: {err}"
        ) from err
    if decl.type is not None and not _valid(decl.type, decl.items, content):
        shown = _type_name(decl.type, decl.items)
        raise ProjectConfigError(
            f"Stack '{stack_name}' with configuration key '{key}' must be of type '{shown}'"
        )


# A config key's name is a property path (sdk/go/common/resource/properties_path.go ParsePropertyPathStrict):
# `a.b`, `a[0]`, `a["b.c"]`.
_SEGMENT = re.compile(r'\["((?:[^"\\]|\\.)*)"\]|\[([0-9]+)\]|\.?([^.\[\]]+)')


def _path(name: str) -> list[str | int]:
    segments: list[str | int] = []
    for quoted, index, plain in _SEGMENT.findall(name):
        segments.append(int(index) if index else quoted or plain)
    return segments


def _go_text(value: Any) -> ConfigValue:
    """object.marshalValue: a string as is, a number or boolean as its JSON text, anything else as JSON."""
    if isinstance(value, str):
        return ConfigValue(value)
    if isinstance(value, bool) or value is None:
        return ConfigValue(json.dumps(value))
    if isinstance(value, float) and value.is_integer():
        return ConfigValue(str(int(value)))  # Go's encoding/json writes 1.0 as 1
    if isinstance(value, int | float):
        return ConfigValue(json.dumps(value))
    return ConfigValue(json.dumps(value, separators=(",", ":"), sort_keys=True), object=True)


def lookup(stack: Mapping[str, ConfigValue], key: str) -> ConfigValue | None:
    """config.Map.Get(key, path=true): the key's name is a path into its first segment's object value."""
    namespace, _, name = key.partition(":")
    path = _path(name)
    root = stack.get(f"{namespace}:{path[0]}") if path else None
    if root is None or len(path) == 1:
        return root
    node: Any = json.loads(root.value) if root.object else root.value
    for segment in path[1:]:
        in_list = isinstance(segment, int) and isinstance(node, list) and segment < len(node)
        in_map = isinstance(segment, str) and isinstance(node, dict) and segment in node
        if not (in_list or in_map):
            return None
        node = node[segment]
    return _go_text(node)


def _format_missing(keys: list[str]) -> str:
    """formatMissingKeys: 'a', 'b' and 'c'."""
    keys = sorted(keys)
    if len(keys) == 1:
        return f"'{keys[0]}'"
    return ", ".join(f"'{k}'" for k in keys[:-1]) + f" and '{keys[-1]}'"
