"""Print this project's pinned Python requirements, read from pyproject.toml at image build time.

The images install exactly what this prints (base dependencies plus the named extras), so every pin
lives once, in pyproject.toml; there is no generated requirements file that could drift from it.
Standard library only: it runs in a bare build stage before anything is installed.

    python pyproject_requirements.py pyproject.toml --extra train            # one requirement a line
    python pyproject_requirements.py pyproject.toml --extra train --only torch
    python pyproject_requirements.py pyproject.toml --check-version 0.1.0    # exit 1 unless it matches
    python pyproject_requirements.py pyproject.toml --project-version        # 0.1.0
    python pyproject_requirements.py pyproject.toml --extra train --check-lock requirements.lock
    python pyproject_requirements.py pyproject.toml --extra train --installed torch  # exit 1 unless this
                                                   # Python has the pinned version (any build of it)
"""

from __future__ import annotations

import argparse
import re
import sys
import tomllib
from importlib import metadata
from pathlib import Path

# An image must be reproducible: every requirement it installs is an exact `name==version` pin.
_EXACT_PIN = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?==(?P<version>[^\s,;<>=!~]+)$")


class PyprojectError(ValueError):
    """pyproject.toml cannot give the pinned requirements asked for."""


def load(path: Path) -> dict:
    with path.open("rb") as f:
        return tomllib.load(f)


def project_version(pyproject: dict) -> str:
    return pyproject["project"]["version"]


def requirements(pyproject: dict, extras: list[str]) -> list[str]:
    """Base dependencies followed by each extra's, in file order, checked to be exact pins."""
    project = pyproject["project"]
    optional = project.get("optional-dependencies", {})
    for extra in extras:
        if extra not in optional:
            raise PyprojectError(
                f"extra {extra!r} is not in [project.optional-dependencies]; have {sorted(optional)}"
            )
    reqs = list(project.get("dependencies", []))
    for extra in extras:
        reqs.extend(optional[extra])
    for req in reqs:
        if not _EXACT_PIN.match(req.strip()):
            raise PyprojectError(
                f"requirement {req!r} is not an exact pin (name==version); images need exact pins"
            )
    return [req.strip() for req in reqs]


def canonical_name(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pin_of(reqs: list[str], package: str) -> str:
    """The requirement line for one package, e.g. 'torch==2.13.0'."""
    for req in reqs:
        match = _EXACT_PIN.match(req)
        if match and canonical_name(match["name"]) == canonical_name(package):
            return req
    raise PyprojectError(f"package {package!r} is not among the requirements {reqs}")


# In a lock only when the base image does not provide it: the CUDA and ROCm bases ship it, the CPU image
# takes it from the PyTorch wheel index with its own hash lock (requirements-torch-cpu.lock).
NOT_LOCKED = ("torch",)


def public(version: str) -> str:
    """A version without its local label: 2.13.0+cpu -> 2.13.0."""
    return version.split("+", 1)[0]


def lock_pins(text: str) -> dict[str, str]:
    """Canonical name -> version of each `name==version` line of a hash-pinned requirements file."""
    pins = {}
    for line in text.splitlines():
        match = _EXACT_PIN.match(line.split(" ")[0]) if line and not line[0].isspace() else None
        if match:
            pins[canonical_name(match["name"])] = match["version"]
    return pins


def lock_problems(reqs: list[str], lock_text: str) -> list[str]:
    """pyproject pins the lock does not hold at the same version (the lock is stale)."""
    locked = lock_pins(lock_text)
    problems = []
    for req in reqs:
        match = _EXACT_PIN.match(req)
        name = canonical_name(match["name"])
        if name in NOT_LOCKED and name not in locked:
            continue
        if public(locked.get(name, "absent")) != match["version"]:
            problems.append(f"{req} (lock: {locked.get(name, 'absent')})")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("pyproject", type=Path)
    parser.add_argument(
        "--extra", action="append", default=[], help="an optional-dependencies group; repeatable"
    )
    parser.add_argument("--only", metavar="PACKAGE", help="print only this package's pin")
    parser.add_argument(
        "--check-version", metavar="VERSION", help="fail unless [project].version equals this"
    )
    parser.add_argument("--project-version", action="store_true", help="print [project].version")
    parser.add_argument(
        "--check-lock", metavar="LOCK", type=Path, help="fail unless LOCK holds every pin (torch aside)"
    )
    parser.add_argument(
        "--installed", metavar="PACKAGE", help="exit 1 unless this Python has PACKAGE at its pinned version"
    )
    args = parser.parse_args(argv)
    pyproject = load(args.pyproject)
    try:
        if args.project_version:
            print(project_version(pyproject))
            return 0
        if args.check_version is not None:
            if args.check_version != project_version(pyproject):
                raise PyprojectError(
                    f"build arg VERSION={args.check_version!r} but {args.pyproject} has version "
                    f"{project_version(pyproject)!r}; pass --build-arg VERSION={project_version(pyproject)}"
                )
            return 0
        reqs = requirements(pyproject, args.extra)
        if args.installed is not None:
            wanted = pin_of(reqs, args.installed).split("==", 1)[1]
            try:
                return 0 if public(metadata.version(args.installed)) == wanted else 1
            except metadata.PackageNotFoundError:
                return 1
        if args.check_lock is not None:
            if problems := lock_problems(reqs, args.check_lock.read_text()):
                raise PyprojectError(
                    f"{args.check_lock} is stale: {', '.join(problems)}; regenerate it with "
                    "scripts/lock_requirements.py images"
                )
            return 0
        print(pin_of(reqs, args.only) if args.only else "\n".join(reqs))
    except PyprojectError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
