"""Module docstrings say what a reader needs to use or change the module, not its history: at most
MAX_LINES lines. The long story (why, what upstream does, what was tried) belongs in docs/ or the commit
log."""

from __future__ import annotations

import ast
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MAX_LINES = 25
VENDORED = {"sim/pulumi/language_python_exec.py"}  # pulumi/pulumi's own file, unchanged


def docstring_lines(source: str) -> int:
    doc = ast.get_docstring(ast.parse(source), clean=False)
    return len(doc.splitlines()) if doc else 0


def long_docstrings(files: dict[str, str], limit: int = MAX_LINES) -> list[str]:
    return [
        f"{name}: module docstring of {n} lines (at most {limit})"
        for name, source in sorted(files.items())
        if (n := docstring_lines(source)) > limit
    ]


def test_no_module_docstring_is_an_essay():
    listed = subprocess.run(["git", "ls-files", "*.py"], cwd=REPO, capture_output=True, text=True, check=True)
    files = {
        name: (REPO / name).read_text()
        for name in listed.stdout.split()
        if name not in VENDORED and not name.startswith("upstream/")
    }
    assert len(files) > 100  # the whole tree, not an empty listing
    assert long_docstrings(files) == []


def test_a_long_docstring_is_found():
    essay = '"""' + "a line\n" * (MAX_LINES + 1) + '"""\n'
    found = long_docstrings({"x.py": essay})
    assert found == [f"x.py: module docstring of {MAX_LINES + 1} lines (at most {MAX_LINES})"]
    assert long_docstrings({"x.py": '"""' + "a line\n" * (MAX_LINES - 1) + '"""\n'}) == []
