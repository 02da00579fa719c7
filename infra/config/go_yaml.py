"""Stack files read as the Pulumi CLI reads them: with go-yaml v3 (gopkg.in/yaml.v3), not PyYAML's YAML 1.1.

What differs, each decided as go-yaml v3 decides it (go-yaml/yaml v3 resolve.go `resolve` and
`parseTimestamp`; decode.go's unique-key check, `mapping key "k" already defined at line N`):
- a key given twice in one mapping is refused (PyYAML keeps the second value without a word);
- booleans are true/True/TRUE and false/False/FALSE only: `yes`, `on`, `y`, `no`, `off` stay text;
- integers: decimal, 0x, 0o, 0b and a leading-0 octal (`010` is 8), `_` ignored; then YAML 1.2 floats,
  `.inf`/`.nan`; `1:30` (a YAML 1.1 base-60 number) stays text;
- null is ``, `~`, null/Null/NULL; an unquoted date or date-time is a timestamp.
Pure (PyYAML only): every reader of stack files uses it, the policy pack's offline reader included.
"""

from __future__ import annotations

import datetime as dt
import math
import re
from typing import Any

import yaml
from yaml.composer import Composer
from yaml.constructor import ConstructorError, SafeConstructor
from yaml.nodes import MappingNode, ScalarNode
from yaml.parser import Parser
from yaml.reader import Reader
from yaml.resolver import BaseResolver
from yaml.scanner import Scanner

PLAIN = "tag:go-yaml:plain"  # an unquoted scalar, resolved by `resolve` below
MERGE = "tag:yaml.org,2002:merge"
_TAG = "tag:yaml.org,2002:"

_MAP: dict[str, Any] = {
    **dict.fromkeys(("true", "True", "TRUE"), True),
    **dict.fromkeys(("false", "False", "FALSE"), False),
    **dict.fromkeys(("", "~", "null", "Null", "NULL"), None),
    **dict.fromkeys((".nan", ".NaN", ".NAN"), math.nan),
    **dict.fromkeys((".inf", ".Inf", ".INF", "+.inf", "+.Inf", "+.INF"), math.inf),
    **dict.fromkeys(("-.inf", "-.Inf", "-.INF"), -math.inf),
}
# resolve.go's resolveTable: the first character that makes a scalar worth resolving.
_HINT = {**dict.fromkeys("+-", "S"), **dict.fromkeys("0123456789", "D"), **dict.fromkeys("yYnNtTfFoO~", "M")}
_HINT["."] = "."
_YAML_FLOAT = re.compile(r"^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$")
# parseTimestamp's formats: "2006-1-2T15:4:5.999999999Z07:00" (also with a lower-case t),
# "2006-1-2 15:4:5.999999999" and "2006-1-2".
_TIMESTAMP = re.compile(
    r"^(\d{4})-(\d{1,2})-(\d{1,2})"
    r"(?:(?:[Tt](\d{1,2}):(\d{1,2}):(\d{1,2})(\.\d{1,9})?(Z|[+-]\d{2}:\d{2}))"
    r"|(?: (\d{1,2}):(\d{1,2}):(\d{1,2})(\.\d{1,9})?))?$"
)
_INT64 = (-(2**63), 2**63 - 1)
_UINT64_MAX = 2**64 - 1


class GoYamlError(ValueError):
    """What go-yaml v3 refuses; `line` is 1-based."""

    def __init__(self, message: str, line: int):
        super().__init__(message)
        self.line = line


def _timestamp(text: str) -> dt.datetime | dt.date | None:
    m = _TIMESTAMP.match(text)
    if not m:
        return None
    year, month, day = (int(g) for g in m.group(1, 2, 3))
    clock = m.group(4, 5, 6, 7, 8) if m.group(4) else m.group(9, 10, 11, 12) + (None,)
    try:
        if clock[0] is None:
            return dt.datetime(year, month, day, tzinfo=dt.UTC)
        hour, minute, second = (int(g) for g in clock[:3])
        micro = int((clock[3] or ".0")[1:].ljust(6, "0")[:6])
        zone = clock[4]
        tz = (
            dt.UTC
            if zone in (None, "Z")
            else dt.timezone(
                (1 if zone[0] == "+" else -1) * dt.timedelta(hours=int(zone[1:3]), minutes=int(zone[4:]))
            )
        )
        return dt.datetime(year, month, day, hour, minute, second, micro, tzinfo=tz)
    except ValueError:  # 2015-02-30: not a date, so text
        return None


def _go_int(text: str) -> int | None:
    """strconv.ParseInt(text, 0, 64), else ParseUint(text, 0, 64): a sign (ParseInt only), then 0x, 0o,
    0b or a leading 0 (octal) for the base."""
    sign, digits = (text[0], text[1:]) if text[:1] in "+-" else ("", text)
    base = 10
    for prefix, b in (("0x", 16), ("0X", 16), ("0o", 8), ("0O", 8), ("0b", 2), ("0B", 2)):
        if digits.startswith(prefix):
            base, digits = b, digits[2:]
            break
    else:
        if len(digits) > 1 and digits.startswith("0"):
            base, digits = 8, digits[1:]
    if not digits or not all(c in "0123456789abcdefABCDEF"[: base if base <= 10 else 22] for c in digits):
        return None
    value = int(digits, base) * (-1 if sign == "-" else 1)
    if _INT64[0] <= value <= _INT64[1] or (sign != "-" and 0 <= value <= _UINT64_MAX):
        return value
    return None


def resolve(text: str) -> Any:
    """An unquoted scalar's value, as resolve.go's `resolve("", text)` gives it to an interface{}."""
    hint = _HINT.get(text[:1], "N" if not text else None)
    if hint is None:
        return text
    if text in _MAP:
        return _MAP[text]
    if hint == ".":
        try:
            return float(text) if _YAML_FLOAT.match(text) else text
        except ValueError:
            return text
    if hint in "DS":
        if (stamp := _timestamp(text)) is not None:
            return stamp
        plain = text.replace("_", "")
        if (number := _go_int(plain)) is not None:
            return number
        if _YAML_FLOAT.match(plain):
            return float(plain)
    return text


class _Resolver(BaseResolver):
    """Tags only what go-yaml tags before resolving: an unquoted scalar is PLAIN (or a merge key)."""

    def resolve(self, kind: Any, value: Any, implicit: Any) -> str:
        if kind is ScalarNode and implicit[0]:
            return MERGE if value == "<<" else PLAIN
        return super().resolve(kind, value, implicit)


class _Constructor(SafeConstructor):
    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[str, ScalarNode] = {}
        for key, _ in node.value:
            if not isinstance(key, ScalarNode) or key.tag == MERGE:
                continue
            if key.value in seen:  # decode.go compares the keys' text, as written
                first = seen[key.value].start_mark.line + 1
                line = key.start_mark.line + 1
                raise GoYamlError(
                    f'line {line}: mapping key "{key.value}" already defined at line {first}', line
                )
            seen[key.value] = key
        return super().construct_mapping(node, deep=deep)

    def construct_plain(self, node: ScalarNode) -> Any:
        return resolve(node.value)

    def construct_explicit(self, node: ScalarNode) -> Any:
        """`!!int '1'`, `!!float 0`, `!!null ''`, `!!timestamp "2015-01-01"`: resolved as that type."""
        tag = node.tag.removeprefix(_TAG)
        value: Any = resolve(node.value)
        kinds: dict[str, type | tuple[type, ...]] = {
            "int": int,
            "float": (float, int),
            "bool": bool,
            "null": type(None),
            "timestamp": dt.datetime,
        }
        fits = isinstance(value, kinds[tag]) and not (tag == "int" and isinstance(value, bool))
        if not fits:
            line = node.start_mark.line + 1
            raise GoYamlError(f"line {line}: cannot decode `{node.value}` as a !!{tag}", line)
        return float(value) if tag == "float" else value  # !!float 0 is 0.0


_Constructor.add_constructor(PLAIN, _Constructor.construct_plain)
for _tag in ("int", "float", "bool", "null", "timestamp"):
    _Constructor.add_constructor(_TAG + _tag, _Constructor.construct_explicit)


class GoYamlLoader(Reader, Scanner, Parser, Composer, _Constructor, _Resolver):
    def __init__(self, stream: str) -> None:
        Reader.__init__(self, stream)
        Scanner.__init__(self)
        Parser.__init__(self)
        Composer.__init__(self)
        _Constructor.__init__(self)
        _Resolver.__init__(self)


def load(text: str) -> Any:
    """One YAML document as go-yaml v3 decodes it into interface{}; GoYamlError or yaml.YAMLError."""
    try:
        return yaml.load(text, Loader=GoYamlLoader)  # noqa: S506 (a safe constructor: no Python objects)
    except ConstructorError as err:
        line = err.problem_mark.line + 1 if err.problem_mark else 0
        raise GoYamlError(f"line {line}: {err.problem}", line) from None
