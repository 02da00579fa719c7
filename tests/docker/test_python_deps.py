"""The images' Python dependencies are pyproject.toml's pins, and the torch in place is the right build."""

from __future__ import annotations

import ast
import contextlib
import os
import shutil
import subprocess
import sys
import tomllib
from importlib import metadata
from pathlib import Path

import pytest
import torch
from dockerfile_model import REPO
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

SCRIPT = REPO / "docker" / "pyproject_requirements.py"
INSTALL = REPO / "docker" / "install-python-deps.sh"
CHECK = REPO / "docker" / "check_torch.py"

sys.path.insert(0, str(REPO / "docker"))
from check_torch import CheckFailed, _check_gfx_override, arch_covered, check_build, check_devices, gfx_target  # noqa: E402
from check_torch import main as check_torch_main  # noqa: E402


def _run(*args: str | Path, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([*map(str, args)], capture_output=True, text=True, env=env)


def test_printed_requirements_are_the_base_and_train_pins_of_pyproject():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    result = _run(sys.executable, SCRIPT, REPO / "pyproject.toml", "--extra", "train")
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == project["dependencies"] + project["optional-dependencies"]["train"]
    torch_pin = _run(sys.executable, SCRIPT, REPO / "pyproject.toml", "--extra", "train", "--only", "torch")
    assert torch_pin.stdout.strip() in project["optional-dependencies"]["train"]
    assert torch_pin.stdout.strip() == f"torch=={torch.__version__.split('+')[0]}"  # what this venv runs


def test_a_requirement_that_is_not_an_exact_pin_fails_the_build(tmp_path):
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text(
        '[project]\nname = "x"\nversion = "1.0"\ndependencies = ["pyyaml==6.0.3"]\n'
        '[project.optional-dependencies]\ntrain = ["boto3>=1.40"]\n'
    )
    result = _run(sys.executable, SCRIPT, pyproject, "--extra", "train")
    assert result.returncode == 1 and "'boto3>=1.40' is not an exact pin" in result.stderr
    unknown = _run(sys.executable, SCRIPT, pyproject, "--extra", "gpu")
    assert unknown.returncode == 1 and "extra 'gpu'" in unknown.stderr and "['train']" in unknown.stderr


def test_a_version_build_arg_other_than_pyprojects_fails_the_build():
    result = _run(sys.executable, SCRIPT, REPO / "pyproject.toml", "--check-version", "9.9.9")
    assert result.returncode == 1 and "VERSION='9.9.9'" in result.stderr


@pytest.mark.parametrize(
    ("target", "compiled", "covered"),
    [
        ("sm_75", ["sm_50", "sm_75", "sm_80"], True),
        ("sm_89", ["sm_75", "sm_80", "sm_86", "sm_90"], True),  # sm_86 cubins run on sm_89
        ("sm_75", ["sm_80", "sm_86", "sm_90"], False),  # no Turing kernels: T4 cannot run it
        ("sm_90", ["sm_75", "sm_80", "compute_80"], True),  # PTX JIT-compiles forward
        ("sm_120", ["sm_90", "sm_100"], False),
    ],
)
def test_arch_coverage_follows_cuda_binary_compatibility(target, compiled, covered):
    assert arch_covered(target, compiled) is covered


def test_the_gfx_override_must_select_a_target_the_rocm_build_has():
    assert gfx_target("10.3.0") == "gfx1030" and gfx_target("9.0.10") == "gfx90a"
    assert "runs gfx1030 kernels" in _check_gfx_override("10.3.0", ["gfx942", "gfx1030", "gfx1100"])
    with pytest.raises(CheckFailed, match="selects gfx1030, but this torch has kernels for"):
        _check_gfx_override("10.3.0", ["gfx90a:sramecc+:xnack-", "gfx942", "gfx1100"])


def test_check_torch_accepts_this_cpu_build_and_rejects_gpu_expectations():
    assert "matches backend 'cpu'" in check_build("torch==2.13.0", "cpu", None, [])[0]
    with pytest.raises(CheckFailed, match="not a CUDA build"):
        check_build("torch==2.13.0", "cuda", "12.6", ["sm_75"])
    with pytest.raises(CheckFailed, match="not a ROCm build"):
        check_build(None, "rocm", None, [])
    with pytest.raises(CheckFailed, match="pins torch==2.12.0"):
        check_build("torch==2.12.0", "cpu", None, [])


def test_a_cuda_build_must_be_the_expected_cuda_and_have_kernels_for_every_target(monkeypatch):
    """check_build's CUDA branch, on this CPU torch dressed up as a CUDA 12.6 build."""
    monkeypatch.setattr(torch.version, "cuda", "12.6")
    flags = "sm_50 sm_60 sm_70 sm_75 sm_80 sm_86 sm_90"
    monkeypatch.setattr(torch._C, "_cuda_getArchFlags", lambda: flags, raising=False)
    catalog = ["sm_75", "sm_80", "sm_86", "sm_89", "sm_90"]
    lines = check_build("torch==2.13.0", "cuda", "12.6", catalog)
    assert "kernels for sm_50 sm_60 sm_70 sm_75 sm_80 sm_86 sm_90" in lines[1]
    with pytest.raises(CheckFailed, match="built for CUDA 12.6; expected CUDA 13.0"):
        check_build("torch==2.13.0", "cuda", "13.0", catalog)
    monkeypatch.setattr(torch._C, "_cuda_getArchFlags", lambda: "sm_80 sm_86 sm_90", raising=False)
    with pytest.raises(CheckFailed, match=r"none usable on \['sm_75'\]"):
        check_build("torch==2.13.0", "cuda", "12.6", catalog)


def test_check_torch_on_device_compares_with_the_cpu_and_exits_1_on_failure(capsys):
    assert "agree with the CPU" in check_devices("cpu")[-1]
    assert check_torch_main(["--backend", "cpu", "--pin", "torch==0.1.0"]) == 1
    assert "FAILED: torch 2.13.0" in capsys.readouterr().err


def test_builder_stage_steps_give_a_venv_that_runs_the_trainer(tmp_path, dockerfiles):
    """The builder stage's two steps, with this venv's Python as the 'base image' and no network.

    Everything pyproject pins is already in that base (as torch is in the CUDA and ROCm bases), so pip
    must take it from there: the torch index given is unreachable, and the run still succeeds. Then the
    package is installed from a copy of exactly what the Dockerfile COPYs, and runs outside the repo.
    Without Ray (IMAGE_EXTRAS=train): this environment does not have it (the next test covers it).
    """
    venv = tmp_path / "venv"
    path = f"{Path(sys.executable).parent}:{os.environ['PATH']}"
    env = dict(os.environ, VENV=str(venv), PATH=path, IMAGE_EXTRAS="train")
    unreachable = "http://127.0.0.1:9/simple"
    deps = _run(
        "bash", INSTALL, REPO / "pyproject.toml", "0.1.0", unreachable, "--", "--backend", "cpu", env=env
    )
    assert deps.returncode == 0, deps.stdout + deps.stderr
    assert "check_torch: torch 2.13.0" in deps.stdout
    torchrun = (venv / "bin" / "torchrun").read_text()
    assert torchrun.startswith(f"#!{venv / 'bin' / 'python'}\n") and "torch.distributed.run" in torchrun

    context = tmp_path / "context"  # the builder's WORKDIR, filled as its COPY instructions fill it
    for ins in dockerfiles["cpu"].stage(0):
        if ins.keyword == "COPY":
            *sources, dest = ins.args.split()
            for source in sources:
                if (REPO / source).is_dir():
                    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")  # as .dockerignore does
                    shutil.copytree(REPO / source, context / dest, ignore=ignore)
                else:
                    target = context / dest / Path(source).name if dest.endswith("/") else context / dest
                    target.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(REPO / source, target)
    install = [sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "--no-deps"]
    assert _run(*install, "--no-build-isolation", "-q", context).returncode == 0
    # torch: the install script's check_torch.py imported it from this venv above (seconds to import again).
    probe = "import yaml, boto3, tokenizers, pyarrow, pydantic, trainer; print(trainer.__file__)"
    imported = subprocess.run(
        [venv / "bin" / "python", "-c", probe], capture_output=True, text=True, cwd=tmp_path
    )
    assert imported.returncode == 0 and imported.stdout.startswith(str(venv)), imported.stderr
    helped = subprocess.run(
        [venv / "bin" / "python", "-m", "trainer", "--help"], capture_output=True, cwd=tmp_path
    )
    assert helped.returncode == 0


# A `python3` first on PATH that runs the real one, except for the hash-locked pip step: that one it
# records (the requirements file pip was given) instead of running, so what the step installs is read
# from the script's own command, whatever this machine's environment holds. The venv it creates gets a
# `bin/python` that records the closing check_torch.py call (its arguments) instead of importing torch
# again (seconds each); the builder test above runs that check for real. Every other call runs the venv's
# own interpreter (bin/python3.11), so the venv stays what the script made.
_PIP_SPY = """#!/bin/sh
case " $* " in
  *" --require-hashes "*)
    while [ $# -gt 0 ]; do [ "$1" = --requirement ] && cp "$2" "$SPY_DIR/locked.txt"; shift; done
    exit 0 ;;
  *" -m venv "*)
    {python} "$@" || exit
    for venv; do :; done
    rm "$venv/bin/python"
    cp "$SPY_DIR/venv_python" "$venv/bin/python"
    exit 0 ;;
esac
exec {python} "$@"
"""
_VENV_PYTHON_SPY = """#!/bin/sh
case "$1" in
  */check_torch.py) shift; echo "$*" > "$SPY_DIR/check_torch.txt"; exit 0 ;;
esac
exec "$(dirname "$0")/python{major}.{minor}" "$@"
"""


@pytest.mark.parametrize(
    ("image_extras", "locks"),
    [
        (None, ["requirements.lock", "requirements-ray.lock"]),
        ("train", ["requirements.lock"]),
        ("train ray llm", ["requirements.lock", "requirements-ray.lock", "requirements-llm.lock"]),
        (
            "train ray llm mlflow",
            ["requirements.lock", "requirements-ray.lock", "requirements-llm.lock"]
            + ["requirements-mlflow.lock"],
        ),
    ],
)
def test_images_install_ray_from_its_lock_unless_left_out(tmp_path, image_extras, locks):
    spy = tmp_path / "bin"
    spy.mkdir()
    (spy / "python3").write_text(_PIP_SPY.format(python=sys.executable))
    (spy / "python3").chmod(0o755)
    major, minor = sys.version_info[:2]
    (tmp_path / "venv_python").write_text(_VENV_PYTHON_SPY.format(major=major, minor=minor))
    (tmp_path / "venv_python").chmod(0o755)
    path = f"{spy}:{os.environ['PATH']}"
    env = dict(os.environ, VENV=str(tmp_path / "venv"), SPY_DIR=str(tmp_path), PATH=path)
    env.pop("IMAGE_EXTRAS", None)
    if image_extras:
        env["IMAGE_EXTRAS"] = image_extras
    args = ("0.1.0", "http://127.0.0.1:9/simple", "--", "--backend", "cpu")
    deps = _run("bash", INSTALL, REPO / "pyproject.toml", *args, env=env)
    assert deps.returncode == 0, deps.stdout + deps.stderr
    assert ("ray[train]==2.60.0" in deps.stdout) is ("requirements-ray.lock" in locks)
    installed = (tmp_path / "locked.txt").read_text()
    assert installed == "".join((REPO / "docker" / lock).read_text() for lock in locks)
    pin = f"torch=={torch.__version__.split('+')[0]}"  # pyproject's pin, which this environment installs
    assert (tmp_path / "check_torch.txt").read_text().split() == ["--pin", pin, "--backend", "cpu"]


def test_only_the_cuda_image_installs_the_llm_and_mlflow_extras():
    installs = {
        flavor: [
            line
            for line in (REPO / "docker" / flavor / "Dockerfile").read_text().splitlines()
            if "install-python-deps.sh pyproject.toml" in line
        ]
        for flavor in ("cuda", "cpu", "rocm")
    }
    assert all(len(lines) == 1 for lines in installs.values()), installs
    assert installs["cuda"][0].startswith('RUN IMAGE_EXTRAS="train ray llm mlflow" bash ')
    assert "IMAGE_EXTRAS" not in installs["cpu"][0] + installs["rocm"][0]


def test_the_llm_lock_without_the_ray_lock_it_completes_stops_the_build(tmp_path):
    env = dict(os.environ, VENV=str(tmp_path / "venv"), IMAGE_EXTRAS="train llm")
    result = _run("bash", INSTALL, REPO / "pyproject.toml", "0.1.0", "http://127.0.0.1:9/", "--", env=env)
    assert result.returncode == 2 and "the llm lock completes the train and ray locks" in result.stderr
    assert not (tmp_path / "venv").exists()


def test_the_mlflow_lock_without_the_locks_it_completes_stops_the_build(tmp_path):
    env = dict(os.environ, VENV=str(tmp_path / "venv"), IMAGE_EXTRAS="train ray mlflow")
    result = _run("bash", INSTALL, REPO / "pyproject.toml", "0.1.0", "http://127.0.0.1:9/", "--", env=env)
    assert result.returncode == 2
    assert "the mlflow lock completes the train, ray and llm locks" in result.stderr
    assert not (tmp_path / "venv").exists()


def test_install_script_stops_at_the_first_failing_step(tmp_path):
    env = dict(os.environ, VENV=str(tmp_path / "venv"))
    result = _run("bash", INSTALL, REPO / "pyproject.toml", "0.0.9", "http://127.0.0.1:9/", "--", env=env)
    assert result.returncode != 0 and "VERSION='0.0.9'" in result.stderr
    assert not (tmp_path / "venv").exists()


# Packages the trainer imports only for an option it validates first (config.py: "needs the datasets
# package"); the images leave them out, so such a job fails at config validation, naming the package.
OPTIONAL_IN_TRAINER = {"datasets", "transformers", "tensorboard"}


def _closure(requirements: list[str]) -> set[str]:
    """Canonical names of the distributions the pins pull in, transitively (extras not requested)."""
    seen: set[str] = set()
    todo = [Requirement(r) for r in requirements]
    while todo:
        req = todo.pop()
        name = canonicalize_name(req.name)
        if name in seen or (req.marker and not req.marker.evaluate({"extra": ""})):
            continue
        seen.add(name)
        # Not in this environment (ray): its own name still counts; its dependencies are in its lock.
        with contextlib.suppress(metadata.PackageNotFoundError):
            todo.extend(Requirement(r) for r in metadata.requires(req.name) or [])
    return seen


def test_every_module_the_trainer_imports_comes_with_the_pins_the_images_install():
    extras = ["--extra", "train", "--extra", "ray", "--extra", "llm", "--extra", "mlflow"]  # the cuda image's
    reqs = _run(sys.executable, SCRIPT, REPO / "pyproject.toml", *extras).stdout.split()
    installed = _closure(reqs)
    provided = {
        module
        for module, dists in metadata.packages_distributions().items()
        if any(canonicalize_name(d) in installed for d in dists)
    } | {name.replace("-", "_") for name in installed}
    imported = set()
    for path in (REPO / "trainer").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                imported |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                imported.add(node.module.split(".")[0])
    third_party = imported - set(sys.stdlib_module_names) - {"trainer", "__future__"}
    assert not third_party & {"infra", "workloads", "policy"}, "the images hold only trainer/"
    missing = third_party - provided - OPTIONAL_IN_TRAINER
    assert not missing, f"trainer imports {sorted(missing)}, which the images' extras do not install"
