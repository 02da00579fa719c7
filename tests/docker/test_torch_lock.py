"""The CPU image's torch is hash-checked like every other package: docker/requirements-torch-cpu.lock holds
the pinned CPU build with the sha256 of each Linux wheel the PyTorch index serves, and what that wheel
requires beyond the train lock; the build installs from it, or stops when the base image lacks the pinned
torch and its index has no lock."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from importlib import metadata

import pytest
from dockerfile_model import REPO
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

sys.path.insert(0, str(REPO / "scripts"))
import lock_requirements  # noqa: E402
from pyproject_requirements import load, lock_pins, requirements  # noqa: E402

INSTALL = REPO / "docker" / "install-python-deps.sh"
TORCH_LOCK = REPO / "docker" / "requirements-torch-cpu.lock"
CPU_INDEX = "https://download.pytorch.org/whl/cpu"


def _entries(text: str) -> dict[str, tuple[str, list[str]]]:
    """name -> (version, hashes) of a hash lock."""
    found = {}
    for entry in re.split(r"\n(?=\S)", text.strip()):
        if entry.startswith("#"):
            entry = "\n".join(line for line in entry.splitlines() if not line.startswith("#"))
        if entry:
            name, version = entry.split()[0].split("==")
            found[canonicalize_name(name)] = (version, re.findall(r"--hash=sha256:([0-9a-f]{64})", entry))
    return found


def test_the_lock_pins_the_cpu_build_of_the_pinned_torch_with_a_hash_per_python_and_arch():
    pin = next(r for r in requirements(load(REPO / "pyproject.toml"), ["train"]) if r.startswith("torch=="))
    version, hashes = _entries(TORCH_LOCK.read_text())["torch"]
    assert version == pin.removeprefix("torch==") + "+cpu"
    assert len(set(hashes)) == len(lock_requirements.PYTHONS) * len(lock_requirements.TORCH_ARCHS)
    listed = re.findall(r"^#   ([0-9a-f]{64})  (torch-\S+\.whl)$", TORCH_LOCK.read_text(), re.M)
    assert {h for h, _ in listed} == set(hashes)
    for python in lock_requirements.PYTHONS:
        tag = "cp" + python.replace(".", "")
        for arch in lock_requirements.TORCH_ARCHS:
            assert any(f"-{tag}-{tag}-manylinux_2_28_{arch}.whl" in name for _, name in listed), (tag, arch)


def test_the_wheel_this_venv_installed_is_one_the_lock_accepts():
    """This machine's torch is the cp311 x86_64 CPU wheel; its RECORD cannot give the wheel's hash, but its
    version and requirements are the locked build's: everything it requires is in the image's locks."""
    locked = _entries(TORCH_LOCK.read_text())
    assert metadata.version("torch") == locked["torch"][0]
    train = lock_pins((REPO / "docker" / "requirements.lock").read_text())
    assert not set(train) & (set(locked) - {"torch"}), "the torch lock repeats the train lock"
    available = {**train, **{n: v for n, (v, _) in locked.items()}}
    for text in metadata.requires("torch") or []:
        req = Requirement(text)
        if req.marker and "extra" in str(req.marker):
            continue
        name = canonicalize_name(req.name)
        assert name in available and req.specifier.contains(available[name]), f"{text}: {available.get(name)}"
    assert all(hashes for _, hashes in locked.values())


PAGE = """<!DOCTYPE html><html><body>
<a href="/whl/cpu/torch-2.13.0%2Bcpu-cp311-cp311-manylinux_2_28_x86_64.whl#sha256={a}">x</a><br/>
<a href="/whl/cpu/torch-2.13.0%2Bcpu-cp311-cp311-manylinux_2_28_aarch64.whl#sha256={b}">x</a><br/>
<a href="/whl/cpu/torch-2.13.0%2Bcpu-cp311-cp311-win_amd64.whl#sha256={c}">x</a><br/>
<a href="/whl/cpu/torch-2.12.0%2Bcpu-cp311-cp311-manylinux_2_28_x86_64.whl#sha256={c}">x</a><br/>
<a href="/whl/cpu/torch-2.13.0-cp311-none-macosx_14_0_arm64.whl">no hash</a><br/>
</body></html>"""


def test_the_lock_script_reads_each_wheels_hash_from_the_index_page(monkeypatch):
    a, b, c = ("a" * 64, "b" * 64, "c" * 64)
    links = lock_requirements.wheel_links(f"{CPU_INDEX}/torch/", PAGE.format(a=a, b=b, c=c))
    assert links["torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl"] == (
        "https://download.pytorch.org/whl/cpu/torch-2.13.0%2Bcpu-cp311-cp311-manylinux_2_28_x86_64.whl",
        a,
    )
    assert len(links) == 4  # the link without a hash is no candidate
    monkeypatch.setattr(lock_requirements, "PYTHONS", ("3.11",))
    wheels = lock_requirements.torch_wheels(links, "2.13.0")
    assert {name: h for name, (_, h) in wheels.items()} == {
        "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl": a,
        "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_aarch64.whl": b,
    }
    monkeypatch.setattr(lock_requirements, "PYTHONS", ("3.11", "3.12"))
    with pytest.raises(SystemExit, match="no Linux wheel for cp312 x86_64, cp312 aarch64"):
        lock_requirements.torch_wheels(links, "2.13.0")


def test_the_lock_script_takes_the_wheels_own_requirements_without_extras(monkeypatch):
    metadata_file = (
        "Metadata-Version: 2.4\nName: torch\nRequires-Dist: sympy>=1.13.3\n"
        'Requires-Dist: setuptools>=77.0.3\nRequires-Dist: optree>=0.13.0; extra == "optree"\n'
    )
    urls = []
    monkeypatch.setattr(lock_requirements, "_get", lambda url: urls.append(url) or metadata_file)
    assert lock_requirements.wheel_requirements(f"{CPU_INDEX}/t.whl") == [
        "sympy>=1.13.3",
        "setuptools>=77.0.3",
    ]
    assert urls == [f"{CPU_INDEX}/t.whl.metadata"]  # PEP 658: the metadata file beside the wheel


# A `python3` first on PATH that runs the real one except where the test needs otherwise: it answers
# "no torch in this base" to the install script's probe, and records every pip install (arguments and
# the requirements file) instead of running it.
_BASE_WITHOUT_TORCH = """#!/bin/sh
case " $* " in
  *" --installed torch "*) exit 1 ;;
  *" -m pip "*" install "*)
    echo "$*" >>"$SPY_DIR/pip-calls"
    while [ $# -gt 0 ]; do [ "$1" = --requirement ] && cp "$2" "$SPY_DIR/locked.txt"; shift; done
    exit 0 ;;
esac
exec {python} "$@"
"""


def _install_on_a_base_without_torch(tmp_path, torch_index: str) -> subprocess.CompletedProcess:
    spy = tmp_path / "bin"
    spy.mkdir()
    (spy / "python3").write_text(_BASE_WITHOUT_TORCH.format(python=sys.executable))
    (spy / "python3").chmod(0o755)
    env = dict(
        os.environ, VENV=str(tmp_path / "venv"), SPY_DIR=str(tmp_path), PATH=f"{spy}:{os.environ['PATH']}"
    )
    env.pop("IMAGE_EXTRAS", None)
    args = [REPO / "pyproject.toml", "0.1.0", torch_index, "--", "--backend", "cpu"]
    return subprocess.run(["bash", INSTALL, *map(str, args)], capture_output=True, text=True, env=env)


def test_a_base_without_torch_gets_the_cpu_build_only_from_its_hash_lock(tmp_path):
    deps = _install_on_a_base_without_torch(tmp_path, CPU_INDEX + "/")
    assert deps.returncode == 0, deps.stdout + deps.stderr
    (call,) = (tmp_path / "pip-calls").read_text().splitlines()  # one pip install, of everything
    assert f"--extra-index-url {CPU_INDEX} --require-hashes --no-deps" in call
    locks = ("requirements.lock", "requirements-ray.lock", "requirements-torch-cpu.lock")
    assert (tmp_path / "locked.txt").read_text() == "".join((REPO / "docker" / n).read_text() for n in locks)
    assert "checked against requirements-torch-cpu.lock" in deps.stdout


def test_a_base_without_torch_and_an_index_without_a_lock_stops_the_build(tmp_path):
    deps = _install_on_a_base_without_torch(tmp_path, "https://download.pytorch.org/whl/cu126")
    assert deps.returncode == 1
    assert "has no hash lock" in deps.stderr and "requirements-torch-cu126.lock" in deps.stderr
    assert "lock_requirements.py torch --torch-index https://download.pytorch.org/whl/cu126" in deps.stderr
    assert not (tmp_path / "pip-calls").exists() and not (tmp_path / "venv").exists()


def test_every_pip_install_of_the_images_checks_hashes():
    install = INSTALL.read_text()
    calls = [line for line in install.splitlines() if '"${pip[@]}"' in line]
    assert calls and all("--require-hashes" in line for line in calls), calls
    assert "--index-url" not in install.replace("--extra-index-url", "")
