"""Helpers for the tests that run upstream projects' own test tables on the models in sim/: where the
vendored tables are, and the case names a vendored table holds, so a test can check that every case is
either transcribed or listed as skipped with a reason."""

from __future__ import annotations

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
