"""constraints.txt pins the whole development environment, and every install goes through it."""

from __future__ import annotations

import re
import sys
from importlib import metadata
from pathlib import Path

from packaging.version import Version

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "docker"))
sys.path.insert(0, str(REPO / "scripts"))
from lock_requirements import DEV_EXTRAS, DEV_LOCK, INSTALLERS, LOCK  # noqa: E402
from pyproject_requirements import canonical_name, load, lock_pins, requirements  # noqa: E402

PIN = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>[0-9][^\s;+]*)$")


def _lock() -> dict[str, str]:
    pins = {}
    for line in DEV_LOCK.read_text().splitlines():
        if line.startswith("#"):
            continue
        match = PIN.match(line)
        assert match, f"constraints.txt: {line!r} is not a name==version pin"
        name = canonical_name(match["name"])
        assert name not in pins, f"constraints.txt pins {name} twice"
        pins[name] = match["version"]
    return pins


def test_the_lock_holds_every_pyproject_pin_of_the_dev_environment_at_its_version():
    locked = _lock()
    for req in requirements(load(REPO / "pyproject.toml"), list(DEV_EXTRAS)):
        name, version = req.split("==")
        name = canonical_name(name.split("[")[0])
        assert locked.get(name) == version, (
            f"pyproject pins {req}, constraints.txt has {locked.get(name, 'nothing')}: "
            "run .venv/bin/python scripts/lock_requirements.py dev"
        )
    assert set(INSTALLERS) <= set(locked), "pip and setuptools are pinned too"


def test_the_lock_and_the_image_lock_agree_on_every_package_they_share():
    locked, image = _lock(), lock_pins(LOCK.read_text())
    differ = {n: (locked[n], image[n]) for n in locked.keys() & image.keys() if locked[n] != image[n]}
    assert not differ, f"constraints.txt vs docker/requirements.lock: {differ}"
    assert len(locked.keys() & image.keys()) >= 20


def test_every_pip_install_of_the_makefile_goes_through_the_lock():
    makefile = (REPO / "Makefile").read_text()
    assert re.search(r"^LOCK := constraints\.txt$", makefile, re.M)
    logical = makefile.replace("\\\n", " ")
    installs = [line for line in logical.splitlines() if "pip install" in line or "$(PIP_INSTALL)" in line]
    assert len(installs) >= 3
    for line in installs:
        assert "$(PIP_INSTALL)" in line or "--constraint $(LOCK)" in line, line


def test_this_environment_was_installed_from_the_lock():
    """What `make dev` installed: every locked package present here has the locked version."""
    locked = _lock()
    differ = {}
    for dist in metadata.distributions():
        name = canonical_name(dist.metadata["Name"])
        if name in locked and Version(dist.version).public != locked[name]:
            differ[name] = (dist.version, locked[name])
    assert not differ, f"installed vs constraints.txt: {differ}; reinstall with `make clean dev`"


def test_this_environment_has_the_bytecode_of_what_every_trainer_process_imports():
    """`make dev` compiles what `make demo`'s install left as sources (torch, sympy): without .pyc files, or
    with PYTHONDONTWRITEBYTECODE set, every test process that imports torch would compile them again."""
    import importlib.util

    for module in ("torch", "torch.distributed.checkpoint", "sympy", "numpy"):
        source = importlib.util.find_spec(module).origin
        assert Path(importlib.util.cache_from_source(source)).is_file(), f"{module}: no bytecode; `make dev`"
