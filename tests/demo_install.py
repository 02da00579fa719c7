"""The environment `make demo` leaves: only the base dependencies and the `train` extra are installed.

`demo_env(tmp_path)` returns the environment variables for a child process in which every package of this
.venv outside that closure (docker/requirements.lock, torch and its dependencies, this project) fails to
import, as in a .venv that never installed it: a sitecustomize on PYTHONPATH puts the blocker in every
Python process the command starts. `hide` removes more (e.g. torch, to show a command never loads it).
"""

from __future__ import annotations

import functools
import os
import re
from importlib import metadata
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# Installed with torch from its wheel index, not from docker/requirements.lock (torch's own requirements).
TORCH_CLOSURE = {
    "torch",
    "sympy",
    "mpmath",
    "networkx",
    "jinja2",
    "markupsafe",
    "filelock",
    "fsspec",
    "typing-extensions",
    "setuptools",
}
INSTALLERS = {"pip", "mlops-eks"}

BLOCKER = """
import sys

class _NotInstalled:
    BLOCKED = frozenset({blocked!r})

    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in self.BLOCKED:
            raise ModuleNotFoundError(f"No module named {{name!r}} (not installed by make demo)", name=name)
        return None

sys.meta_path.insert(0, _NotInstalled())
"""


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def demo_packages() -> set[str]:
    lock = (REPO / "docker" / "requirements.lock").read_text()
    locked = {_canonical(m) for m in re.findall(r"^([A-Za-z0-9][\w.-]*)==", lock, re.M)}
    return locked | TORCH_CLOSURE | INSTALLERS


@functools.cache
def blocked_modules(hide: tuple[str, ...] = ()) -> frozenset[str]:
    """Top-level import names that only packages outside the demo install provide, and `hide`."""
    kept = demo_packages()
    blocked = set(hide)
    for module, dists in metadata.packages_distributions().items():
        if not any(_canonical(d) in kept for d in dists):
            blocked.add(module)
    return frozenset(blocked)


def demo_env(tmp_path: Path, hide: tuple[str, ...] = ()) -> dict[str, str]:
    site = tmp_path / "demo-site"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(BLOCKER.format(blocked=sorted(blocked_modules(hide))))
    path = [str(site), str(REPO), os.environ.get("PYTHONPATH", "")]
    return os.environ | {"PYTHONPATH": os.pathsep.join(p for p in path if p)}
