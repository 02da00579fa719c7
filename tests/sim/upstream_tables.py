"""Helpers for the tests that run upstream projects' own test tables on the models in sim/: where the
vendored tables are, and the case names a vendored table holds, so a test can check that every case is
either transcribed or listed as skipped with a reason."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from pathlib import Path

VENDORED = Path(__file__).resolve().parents[2] / "sim" / "vendored"


def case_names(relative: str, field: str = "name") -> list[str]:
    """The string values of `field:` in a vendored test file (Go struct literals, `field: "..."`,
    a string concatenated over two lines included), in file order."""
    text = (VENDORED / relative).read_text()
    pattern = rf'\b{field}:\s*"((?:[^"\\]|\\.)*)"(?:\s*\+\s*"((?:[^"\\]|\\.)*)")?'
    return [a + (b or "") for a, b in re.findall(pattern, text)]


def assert_covered(upstream: Iterable[str], transcribed: Iterable[str], skipped: Mapping[str, str]) -> None:
    """Every upstream case is transcribed or skipped (with a reason), and nothing else is named."""
    upstream, transcribed = list(upstream), list(transcribed)
    assert upstream, "no upstream cases found: the vendored file or the pattern changed"
    assert all(skipped.values()), "every skipped case needs its reason"
    assert not set(transcribed) & set(skipped), "a case is both transcribed and skipped"
    named, cases = set(transcribed) | set(skipped), set(upstream)
    assert named == cases, f"not run: {sorted(cases - named)}; not upstream's: {sorted(named - cases)}"


def ginkgo_cases(relative: str) -> list[str]:
    """The descriptions of a vendored Ginkgo suite's `It("...")` specs, in file order."""
    return re.findall(r'\bIt\(\s*"((?:[^"\\]|\\.)*)"', (VENDORED / relative).read_text())


def jest_cases(relative: str) -> list[str]:
    """The names of a vendored Jest file's `it("...")`, `test("...")` and `test.each(...)("...")` cases."""
    text = (VENDORED / relative).read_text()
    return re.findall(r'(?:\bit|\btest|\btest\.each\(\w+\))\(\s*"((?:[^"\\]|\\.)*)"', text)


_GO_STRING = r'"((?:[^"\\]|\\.)*)"'
_GO_TOKEN = re.compile(rf"{_GO_STRING}|strings\.Repeat\({_GO_STRING},\s*(\d+)\)|(\+)|(,)|//[^\n]*|\s+")


def _go_strings(literal: str) -> list[str]:
    """The values of a Go `[]string{...}` body whose elements are string literals, strings.Repeat calls
    and their concatenations (anything else fails, so a table that grows a new form is not misread)."""
    values: list[str] = []
    current: str | None = None
    position = 0
    while position < len(literal):
        token = _GO_TOKEN.match(literal, position)
        assert token, f"cannot read {literal[position : position + 40]!r}"
        position = token.end()
        quoted, repeated, times, _join, comma = token.groups()  # a `+` joins the pieces either side
        if quoted is not None:
            current = (current or "") + json.loads(f'"{quoted}"')
        elif repeated is not None:
            current = (current or "") + json.loads(f'"{repeated}"') * int(times)
        elif comma is not None:
            assert current is not None, "an empty element"
            values.append(current)
            current = None
    assert current is None, "the last element has no trailing comma"
    return values


def go_string_tables(relative: str) -> dict[str, dict[str, list[str]]]:
    """Each `func TestX` of a vendored Go file and its `name := []string{...}` lists, by variable name
    (e.g. TestIsDNS1123Label: goodValues, badValues)."""
    text = (VENDORED / relative).read_text()
    tables: dict[str, dict[str, list[str]]] = {}
    for test, body in re.findall(r"^func (Test\w+)\(t \*testing\.T\) \{\n(.*?)^\}$", text, re.M | re.S):
        lists = re.findall(r"^\t(\w+) := \[\]string\{\n(.*?)^\t\}$", body, re.M | re.S)
        tables[test] = {name: _go_strings(literal) for name, literal in lists}
    return tables
