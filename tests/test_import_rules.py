"""DESIGN.md's import rules, checked on the source: `trainer` imports nothing of ours (it runs alone in
the job's image), `infra` never imports `workloads` or `trainer`, and `workloads` runs without the Pulumi
SDKs except for its Pulumi program (`workloads/program.py`)."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
OURS = ("infra", "policy", "schemas", "scripts", "tests", "trainer", "workloads")


def _imported(package: str) -> dict[str, set[str]]:
    """Each module of `package` -> the top-level names it imports (relative imports as the package)."""
    found: dict[str, set[str]] = {}
    for path in sorted((REPO / package).rglob("*.py")):
        names: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Import):
                names.update(a.name.split(".")[0] for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                names.add(package if node.level else (node.module or "").split(".")[0])
        found[str(path.relative_to(REPO))] = names
    assert found, f"no modules under {package}/"
    return found


def test_trainer_imports_nothing_of_ours():
    wrong = {m: sorted(n & set(OURS) - {"trainer"}) for m, n in _imported("trainer").items()}
    assert {m: n for m, n in wrong.items() if n} == {}


def test_infra_never_imports_workloads_or_trainer():
    wrong = {m: sorted(n & {"workloads", "trainer"}) for m, n in _imported("infra").items()}
    assert {m: n for m, n in wrong.items() if n} == {}


def _infra_modules(path: Path) -> set[str]:
    """The `infra` modules a file imports, dotted (`from infra.config import x` -> infra.config.x when x is
    a module, else infra.config)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "infra":
            for a in node.names:
                sub = f"{node.module}.{a.name}"
                found.add(sub if _module_file(sub) else node.module)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("infra."))
    return found


def _module_file(module: str) -> Path | None:
    base = REPO.joinpath(*module.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.exists():
            return candidate
    return None


def _executed_files(module: str) -> list[Path]:
    """Importing a.b.c runs a/__init__.py, a/b/__init__.py and a/b/c.py."""
    parts = module.split(".")
    return [f for i in range(1, len(parts) + 1) if (f := _module_file(".".join(parts[:i])))]


def test_workloads_use_only_infra_modules_that_never_import_pulumi():
    # Even a function-level `import pulumi` (as in a reader of Pulumi config) makes a module a
    # Pulumi module: the workload tools must not depend on it.
    used = set().union(*(_infra_modules(p) for p in (REPO / "workloads").glob("*.py") if p.stem != "program"))
    assert {"infra.accelerators", "infra.contract", "infra.config.stack_files"} <= used
    impure = {
        m for m in used
        for f in _executed_files(m)
        if any(n == "pulumi" or n.startswith("pulumi_") for n in _imported_names(f))
    }  # fmt: skip
    assert impure == set()


def _imported_names(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level:
            names.add((node.module or "").split(".")[0])
    return names


BLOCKER = """
import sys

class _NoPulumi:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "pulumi" or name.startswith("pulumi_"):
            raise ModuleNotFoundError(f"No module named {name!r} (blocked)", name=name)
        return None

sys.meta_path.insert(0, _NoPulumi())
"""
WORKLOAD_MODULES = sorted(
    f"workloads.{p.stem}" for p in (REPO / "workloads").glob("*.py") if p.stem not in ("program", "__init__")
)


def test_the_workload_modules_are_found():
    assert {"workloads.placement", "workloads.scheduling", "workloads.stacks"} <= set(WORKLOAD_MODULES)


@pytest.mark.parametrize("module", WORKLOAD_MODULES)
def test_workloads_module_imports_without_pulumi(module, tmp_path):
    (tmp_path / "sitecustomize.py").write_text(BLOCKER)
    env = os.environ | {"PYTHONPATH": os.pathsep.join([str(tmp_path), str(REPO)])}
    code = f"import importlib, sys\nimportlib.import_module({module!r})\nassert 'pulumi' not in sys.modules"
    probe = subprocess.run(
        [sys.executable, "-c", "import pulumi"], env=env, capture_output=True, text=True, check=False
    )
    assert "(blocked)" in probe.stderr  # the blocker is active in the child interpreter
    run = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, cwd=tmp_path, check=False
    )
    assert run.returncode == 0, run.stderr[-3000:]
