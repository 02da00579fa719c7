"""Regenerate the project's locks from pyproject.toml's pins, with pip's own resolver.

    .venv/bin/python scripts/lock_requirements.py images   # docker/requirements*.lock (needs pypi.org and
                                                           # download.pytorch.org)
    .venv/bin/python scripts/lock_requirements.py torch    # docker/requirements-torch-cpu.lock only
    .venv/bin/python scripts/lock_requirements.py dev      # constraints.txt (needs pypi.org)
    .venv/bin/python scripts/lock_requirements.py all

constraints.txt pins the whole development environment, transitive dependencies included (`ray` resolved
with pulumi's protobuf < 7; the images' ray lock, without pulumi, gets protobuf 7). The image locks hold
every sha256 PyPI publishes for the closure of the base, `train`, `ray`, `llm` and `mlflow` pins on each
Python the image bases ship, and the CPU torch build's wheel hashes from the PyTorch index;
docs/development.md "Locks" says how each is resolved.
"""

from __future__ import annotations

import argparse
import email.parser
import json
import re
import subprocess
import sys
import tempfile
import urllib.parse
import urllib.request
import zipfile
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import (
    InvalidSdistFilename,
    InvalidWheelFilename,
    parse_sdist_filename,
    parse_wheel_filename,
)
from packaging.version import Version

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "docker"))
from pyproject_requirements import canonical_name, load, lock_pins, requirements  # noqa: E402

LOCK = REPO / "docker" / "requirements.lock"
RAY_LOCK = REPO / "docker" / "requirements-ray.lock"
LLM_LOCK = REPO / "docker" / "requirements-llm.lock"
MLFLOW_LOCK = REPO / "docker" / "requirements-mlflow.lock"
TORCH_INDEX = "https://download.pytorch.org/whl/cpu"
TORCH_ARCHS = ("x86_64", "aarch64")
DEV_LOCK = REPO / "constraints.txt"
# What `make dev` installs. `ray` too (its local-Ray test runs in `make test`): resolved here with pulumi,
# which takes protobuf < 7, while the images' ray lock, without pulumi, gets protobuf 7.
DEV_EXTRAS = ("infra", "train", "policy", "dev", "hf", "ray", "llm", "mlflow")
# The venv's own installers, pinned like everything else (the Makefile installs them first).
INSTALLERS = ("pip", "setuptools")
PYTHONS = ("3.11", "3.12", "3.13", "3.14")
# Installed from the base image (CUDA, ROCm) or the PyTorch index (CPU), never from this lock.
FROM_BASE = {"torch"}
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64")


def top_level(extras: list[str]) -> list[str]:
    reqs = requirements(load(REPO / "pyproject.toml"), extras)
    return [r for r in reqs if canonical_name(r.split("==")[0].split("[")[0]) not in FROM_BASE]


def resolve(reqs: list[str], python: str, find_links: Path | None = None) -> dict[str, str]:
    """name -> version of the closure pip installs for `reqs` on `python` (nothing is downloaded);
    `find_links`: a directory of wheels besides PyPI."""
    with tempfile.TemporaryDirectory() as target:
        platforms = [arg for p in PLATFORMS for arg in ("--platform", p)]
        report = subprocess.run(
            # --isolated: PyPI only, whatever this machine's pip configuration (mirrors, constraints).
            [
                sys.executable,
                "-m",
                "pip",
                "--isolated",
                "install",
                "--dry-run",
                "--quiet",
                "--report",
                "-",
                "--ignore-installed",
                "--only-binary=:all:",
                *platforms,
                "--python-version",
                python,
                "--implementation",
                "cp",
                "--target",
                target,
                *(["--find-links", str(find_links)] if find_links else []),
                *reqs,
            ],
            check=True,
            capture_output=True,
            text=True,
        )
    return {
        canonical_name(item["metadata"]["name"]): item["metadata"]["version"]
        for item in json.loads(report.stdout)["install"]
    }


def pypi_hashes(name: str, version: str) -> list[str]:
    """sha256 of every file of `name` `version` on PyPI (simple API, PEP 691 JSON)."""
    request = urllib.request.Request(
        f"https://pypi.org/simple/{name}/", headers={"Accept": "application/vnd.pypi.simple.v1+json"}
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        files = json.load(response)["files"]
    wanted = Version(version)
    hashes = set()
    for f in files:
        filename = f["filename"]
        try:
            if filename.endswith(".whl"):
                _, file_version, _, _ = parse_wheel_filename(filename)
            elif filename.endswith(".tar.gz"):
                _, file_version = parse_sdist_filename(filename)
            else:
                continue
        except (InvalidSdistFilename, InvalidWheelFilename):
            continue
        if file_version == wanted and not f.get("yanked"):
            hashes.add(f["hashes"]["sha256"])
    if not hashes:
        sys.exit(f"{name}=={version}: no files on PyPI")
    return sorted(hashes)


def closure(reqs: list[str], find_links: Path | None = None) -> dict[str, str]:
    """name -> version of `reqs`' closure, the same on every Python in PYTHONS."""
    versions: dict[str, str] = {}
    for python in PYTHONS:
        for name, version in resolve(reqs, python, find_links).items():
            if versions.setdefault(name, version) != version:
                sys.exit(f"{name}: {versions[name]} on one Python, {version} on Python {python}; pin it")
    return versions


def lock_text(versions: dict[str, str]) -> str:
    lines = [
        "# Generated by scripts/lock_requirements.py images from pyproject.toml; do not edit.",
        "# Installed with pip --require-hashes --no-deps by docker/install-python-deps.sh.",
    ]
    for name in sorted(versions):
        if name in FROM_BASE:
            continue
        hashes = " \\\n    ".join(f"--hash=sha256:{h}" for h in pypi_hashes(name, versions[name]))
        lines.append(f"{name}=={versions[name]} \\\n    {hashes}")
    return "\n".join(lines) + "\n"


def lock_texts() -> tuple[str, str]:
    """The train lock and the ray lock: the ray extra's closure less what the train lock holds."""
    train = closure(top_level(["train"]))
    both = closure(top_level(["train", "ray"]))
    if moved := {name for name, version in train.items() if both.get(name) != version}:
        sys.exit(f"the ray extra changes the train closure ({sorted(moved)}); pin those in pyproject.toml")
    return lock_text(train), lock_text({n: v for n, v in both.items() if n not in train})


def llm_lock_text() -> str:
    """What the llm extra adds to the train and ray locks as committed (the cuda image installs the three)."""
    return _lock_around([LOCK, RAY_LOCK], "llm")


def mlflow_lock_text() -> str:
    """What the mlflow extra adds to the train, ray and llm locks as committed (the cuda image's four)."""
    return _lock_around([LOCK, RAY_LOCK, LLM_LOCK], "mlflow")


def _lock_around(locks: list[Path], extra: str) -> str:
    """The closure of `extra` resolved with the committed `locks`, less what they hold. peft (llm) requires
    torch, which (with its own requirements: CUDA libraries, sympy, networkx, ...) comes from the cuda
    image's base, not from a lock: resolved against a stand-in torch wheel that requires nothing, so only
    what the extra itself needs is locked."""
    committed = {name: version for lock in locks for name, version in lock_pins(lock.read_text()).items()}
    reqs = [f"{name}=={version}" for name, version in committed.items()] + top_level([extra])
    with tempfile.TemporaryDirectory() as wheels:
        _base_torch_wheel(Path(wheels))
        every = closure(reqs, find_links=Path(wheels))
    return lock_text({n: v for n, v in every.items() if n not in committed})


def _base_torch_wheel(into: Path) -> Path:
    """A wheel named torch==<pin>+base with no requirements (a local label sorts above the plain version,
    so pip takes it over PyPI's), standing for the base image's torch in a resolve."""
    pin = next(r for r in requirements(load(REPO / "pyproject.toml"), ["train"]) if r.startswith("torch=="))
    version = pin.split("==")[1] + "+base"
    wheel = into / f"torch-{version}-py3-none-any.whl"
    info = f"torch-{version}.dist-info"
    metadata = f"Metadata-Version: 2.1\nName: torch\nVersion: {version}\n"
    tags = "Wheel-Version: 1.0\nGenerator: lock_requirements\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr(f"{info}/METADATA", metadata)
        z.writestr(f"{info}/WHEEL", tags)
        z.writestr(f"{info}/RECORD", "")
    return wheel


def torch_lock(index: str) -> Path:
    """The hash lock of the torch builds an index serves: requirements-torch-cpu.lock for .../whl/cpu
    (docker/install-python-deps.sh looks it up by the same name)."""
    return LOCK.with_name(f"requirements-torch-{index.rstrip('/').rsplit('/', 1)[-1]}.lock")


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=60) as response:
        return response.read().decode()


def wheel_links(page_url: str, html: str) -> dict[str, tuple[str, str]]:
    """file name -> (URL, sha256) of every link with a #sha256= fragment on a PEP 503 project page."""
    found = {}
    for href in re.findall(r'href="([^"]+)"', html):
        url, _, fragment = urllib.parse.urljoin(page_url, href.replace("&amp;", "&")).partition("#")
        if fragment.startswith("sha256="):
            found[urllib.parse.unquote(url.rsplit("/", 1)[-1])] = (url, fragment.removeprefix("sha256="))
    return found


def torch_wheels(links: dict[str, tuple[str, str]], version: str) -> dict[str, tuple[str, str]]:
    """The Linux wheels of torch `version` for every Python in PYTHONS and arch in TORCH_ARCHS, one local
    label (`+cpu`) for all of them; exits naming what is missing."""
    chosen, missing = {}, []
    for python in PYTHONS:
        tag = "cp" + python.replace(".", "")
        for arch in TORCH_ARCHS:
            wheel = rf"torch-{re.escape(version)}\+[\w.]+-{tag}-{tag}-manylinux_\d+_\d+_{arch}\.whl"
            pattern = re.compile(wheel)
            matches = sorted(name for name in links if pattern.fullmatch(name))
            if matches:
                chosen[matches[-1]] = links[matches[-1]]  # the newest manylinux tag
            else:
                missing.append(f"{tag} {arch}")
    if missing:
        sys.exit(f"torch {version}: no Linux wheel for {', '.join(missing)} on the index")
    labels = {name.split("-")[1] for name in chosen}
    if len(labels) != 1:
        sys.exit(f"torch {version}: wheels of several builds {sorted(labels)}; expected one")
    return chosen


def wheel_requirements(wheel_url: str) -> list[str]:
    """A wheel's Requires-Dist, from the index's PEP 658 metadata file, without those of extras."""
    metadata = email.parser.Parser().parsestr(_get(wheel_url + ".metadata"))
    reqs = [Requirement(r) for r in metadata.get_all("Requires-Dist") or []]
    return [str(r) for r in reqs if not (r.marker and "extra" in str(r.marker))]


def torch_lock_text(index: str) -> str:
    """`torch==<pin>+<label>` with every wheel's hash, then what it requires beyond the train lock."""
    pin = next(r for r in requirements(load(REPO / "pyproject.toml"), ["train"]) if r.startswith("torch=="))
    version = pin.split("==")[1]
    page = f"{index.rstrip('/')}/torch/"
    wheels = torch_wheels(wheel_links(page, _get(page)), version)
    label = next(iter(wheels)).split("-")[1]
    needs = wheel_requirements(next(iter(wheels.values()))[0])
    train = lock_pins(LOCK.read_text())  # as committed: torch's requirements resolve around it
    # What the oldest Python resolves (a newer release may drop it), checked to install on every other.
    oldest = resolve([f"{name}=={v}" for name, v in train.items()] + needs, PYTHONS[0])
    both = closure([f"{name}=={v}" for name, v in oldest.items()])
    listing = [f"#   {sha256}  {name}" for name, (_, sha256) in sorted(wheels.items())]
    hashes = " \\\n    ".join(f"--hash=sha256:{h}" for h in sorted(h for _, h in wheels.values()))
    lines = [
        f"# Generated by scripts/lock_requirements.py torch from pyproject.toml and {index}; do not edit.",
        "# torch's build from that index, one hash per Linux wheel:",
        *listing,
        "# then what that wheel requires beyond docker/requirements.lock, with PyPI's hashes.",
        "# docker/install-python-deps.sh installs it with pip --require-hashes --no-deps.",
        f"torch=={label} \\\n    {hashes}",
    ]
    rest = {n: v for n, v in both.items() if n not in train}
    return "\n".join(lines) + "\n" + lock_text(rest).split("\n", 2)[2]


def dev_lock_text() -> str:
    """constraints.txt: the closure of every DEV_EXTRAS pin on this host's Python, agreeing with the
    image lock wherever the two share a package."""
    with tempfile.TemporaryDirectory() as tmp:
        image_pins = Path(tmp) / "image-pins.txt"
        image_pins.write_text("".join(f"{n}=={v}\n" for n, v in lock_pins(LOCK.read_text()).items()))
        reqs = [*requirements(load(REPO / "pyproject.toml"), list(DEV_EXTRAS)), *INSTALLERS]
        report = subprocess.run(
            # Not --isolated: the host's pip configuration may name where its torch build comes from.
            [
                sys.executable,
                "-m",
                "pip",
                "install",
                "--dry-run",
                "--quiet",
                "--report",
                "-",
                "--ignore-installed",
                "--constraint",
                str(image_pins),
                *reqs,
            ],
            check=True,
            capture_output=True,
            text=True,
        )
    pins = {
        canonical_name(item["metadata"]["name"]): Version(item["metadata"]["version"]).public
        for item in json.loads(report.stdout)["install"]
    }
    lines = [
        "# Generated by scripts/lock_requirements.py dev from pyproject.toml; do not edit.",
        f"# The whole development environment ({', '.join(DEV_EXTRAS)} extras, pip and setuptools),",
        f"# resolved on Python {sys.version_info.major}.{sys.version_info.minor}; every Makefile target "
        "installs with -c constraints.txt.",
        *(f"{name}=={pins[name]}" for name in sorted(pins)),
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("what", choices=("dev", "images", "torch", "all"), help="which locks to regenerate")
    parser.add_argument(
        "--torch-index", default=TORCH_INDEX, help=f"the PyTorch wheel index to lock (default {TORCH_INDEX})"
    )
    args = parser.parse_args(argv)
    if args.what in ("images", "all"):
        train_lock, ray_lock = lock_texts()
        LOCK.write_text(train_lock)
        RAY_LOCK.write_text(ray_lock)
        LLM_LOCK.write_text(llm_lock_text())  # around the two just written
        MLFLOW_LOCK.write_text(mlflow_lock_text())  # around the three
        for path in (LOCK, RAY_LOCK, LLM_LOCK, MLFLOW_LOCK):
            print(f"wrote {path.relative_to(REPO)}")
    if args.what in ("images", "torch", "all"):
        text = torch_lock_text(args.torch_index)
        torch_lock(args.torch_index).write_text(text)
        print(f"wrote {torch_lock(args.torch_index).relative_to(REPO)}")
    if args.what in ("dev", "all"):
        DEV_LOCK.write_text(dev_lock_text())
        print(f"wrote {DEV_LOCK.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
