"""DESIGN.md's import rules, checked on the source: `trainer` imports nothing of ours (it runs alone in
the job's image), `infra` never imports `workloads` or `trainer`, `workloads` runs without the Pulumi
SDKs except for its Pulumi program (`workloads/program.py`), and what is deployed (the Pulumi program, the
policy pack, the job image) never imports the models of upstream behaviour (`sim/`): their import closures,
every import statement of every module they reach (function-level ones included), are computed here."""

from __future__ import annotations

import ast
import functools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
OURS = ("infra", "policy", "schemas", "scripts", "sim", "tests", "trainer", "workloads")


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
        m
        for m in used
        for f in _executed_files(m)
        if any(n == "pulumi" or n.startswith("pulumi_") for n in _imported_names(f))
    }
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
    assert {"workloads.placement", "workloads.plan", "workloads.stacks"} <= set(WORKLOAD_MODULES)


# Each module imported in turn in one child, with pulumi blocked: a module whose import reaches pulumi fails
# to import, whether another module imported it first or not (a failed import leaves nothing in sys.modules,
# so the next import of it runs it again). One interpreter instead of two per module (~0.5 s each).
IMPORT_EACH = """
import importlib, json, sys, traceback
try:
    import pulumi
except ModuleNotFoundError as err:
    blocked = "(blocked)" in str(err)
else:
    blocked = False
found = {}
for module in sys.argv[1:]:
    try:
        importlib.import_module(module)
    except BaseException:
        found[module] = traceback.format_exc()[-3000:]
    else:
        found[module] = "pulumi is in sys.modules" if "pulumi" in sys.modules else ""
print(json.dumps({"blocked": blocked, "found": found}))
"""


@pytest.fixture(scope="module")
def imported_without_pulumi(tmp_path_factory) -> dict[str, str]:
    """Each workload module -> "" when it imports with pulumi blocked, else what went wrong."""
    site = tmp_path_factory.mktemp("no-pulumi")
    (site / "sitecustomize.py").write_text(BLOCKER)
    env = os.environ | {"PYTHONPATH": os.pathsep.join([str(site), str(REPO)])}
    run = subprocess.run(
        [sys.executable, "-c", IMPORT_EACH, *WORKLOAD_MODULES],
        env=env,
        capture_output=True,
        text=True,
        cwd=site,
        check=False,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads(run.stdout)
    assert result["blocked"]  # the blocker is active in the child interpreter
    return result["found"]


@pytest.mark.parametrize("module", WORKLOAD_MODULES)
def test_workloads_module_imports_without_pulumi(module, imported_without_pulumi):
    assert imported_without_pulumi[module] == ""


def _module_of(path: Path) -> str:
    parts = list(
        (path.relative_to(REPO) if path.is_relative_to(REPO) else Path(path.name)).with_suffix("").parts
    )
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@functools.cache  # each closure walks many of the same files
def _our_imports(path: Path) -> frozenset[str]:
    """The modules of ours a file imports anywhere in it: `from a.b import c` is a.b.c when that is a module,
    else a.b; a relative import is resolved against the file's package."""
    package = _module_of(path).split(".") if path.name == "__init__.py" else _module_of(path).split(".")[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.split(".")[0] in OURS)
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            if module.split(".")[0] not in OURS:
                continue
            for a in node.names:
                sub = f"{module}.{a.name}"
                found.add(sub if _module_file(sub) else module)
    return frozenset(found)


def closure(*files: Path) -> set[str]:
    """Every module of ours that running `files` can import (packages' __init__ included)."""
    seen: set[str] = set()
    todo = [f for f in files]
    while todo:
        for module in _our_imports(todo.pop()):
            for executed in _executed_files(module):
                name = _module_of(executed)
                if name not in seen:
                    seen.add(name)
                    todo.append(executed)
    return seen


DEPLOYED = {
    "the Pulumi program (what `pulumi up` runs)": [REPO / "__main__.py"],
    "the policy pack (what the engine loads)": [REPO / "policy" / "__main__.py"],
    "the job image (it copies trainer/)": sorted((REPO / "trainer").rglob("*.py")),
}


def test_the_closures_reach_what_each_entry_point_runs():
    program, pack, image = (closure(*files) for files in DEPLOYED.values())
    assert {"infra.program", "workloads.program", "infra.addons.install", "infra.platform.cluster"} <= program
    assert {"policy.pack", "policy.iam", "policy.k8s"} <= pack
    assert {"trainer.loop", "trainer.checkpoint"} <= image
    # function-level imports count too: from_pulumi imports the config reader inside the method
    assert "infra.config.pulumi_config" in program


@pytest.mark.parametrize("what", DEPLOYED)
def test_what_is_deployed_never_imports_a_model(what):
    reached = closure(*DEPLOYED[what])
    assert sorted(m for m in reached if m.split(".")[0] == "sim") == []


def test_the_job_image_imports_only_the_trainer():
    assert {m.split(".")[0] for m in closure(*DEPLOYED["the job image (it copies trainer/)"])} == {"trainer"}


def test_the_program_and_the_pack_import_of_the_trainer_only_its_config_schema():
    """A workload stack checks its job's `trainerConfig` with the trainer's own parser (workloads/spec.py),
    so a spec `pulumi up` accepts is one the trainer accepts; nothing else of the trainer is imported by
    what runs outside the job image (the start-up helper is infra/startup.py)."""
    program = closure(*DEPLOYED["the Pulumi program (what `pulumi up` runs)"])
    pack = closure(*DEPLOYED["the policy pack (what the engine loads)"])
    assert sorted(m for m in program if m.split(".")[0] == "trainer") == ["trainer", "trainer.config"]
    assert sorted(m for m in pack if m.split(".")[0] == "trainer") == []


def test_the_closure_follows_a_function_level_import_into_sim(tmp_path):
    """The check can fail: a module that imports sim inside a function puts sim in the closure."""
    probe = tmp_path / "probe.py"
    probe.write_text("def f():\n    from infra.tools import check\n")
    assert {"infra.tools.check", "sim.pulumi.eks_rules"} <= closure(probe)
