"""The images' Python dependencies are pyproject.toml's pins, and the torch in place is the right build."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import torch
from dockerfile_model import REPO

SCRIPT = REPO / "docker" / "pyproject_requirements.py"
INSTALL = REPO / "docker" / "install-python-deps.sh"
CHECK = REPO / "docker" / "check_torch.py"

sys.path.insert(0, str(REPO / "docker"))
from check_torch import CheckFailed, arch_covered, check_build  # noqa: E402


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


def test_check_torch_accepts_this_cpu_build_and_rejects_gpu_expectations():
    assert "matches backend 'cpu'" in check_build("torch==2.13.0", "cpu", None, [])[0]
    with pytest.raises(CheckFailed, match="not a CUDA build"):
        check_build("torch==2.13.0", "cuda", "12.6", ["sm_75"])
    with pytest.raises(CheckFailed, match="not a ROCm build"):
        check_build(None, "rocm", None, [])
    with pytest.raises(CheckFailed, match="pins torch==2.12.0"):
        check_build("torch==2.12.0", "cpu", None, [])


def test_check_torch_on_device_compares_with_the_cpu_and_exits_1_on_failure():
    ok = _run(sys.executable, CHECK, "--backend", "cpu", "--on-device")
    assert ok.returncode == 0 and "agree with the CPU" in ok.stdout, ok.stderr
    gpu = _run(sys.executable, CHECK, "--backend", "cpu", "--pin", "torch==0.1.0")
    assert gpu.returncode == 1 and "FAILED" in gpu.stderr


def test_install_script_builds_the_venv_on_the_base_pythons_torch(tmp_path):
    """install-python-deps.sh as a build stage runs it, with this venv's Python as the 'base image'.

    Everything pyproject pins is already in that base (as torch is in the CUDA and ROCm bases), so pip
    must take it from there: the torch index given is unreachable, and the run still succeeds.
    """
    env = dict(
        os.environ, VENV=str(tmp_path / "venv"), PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}"
    )
    unreachable = "http://127.0.0.1:9/simple"
    result = _run(
        "bash", INSTALL, REPO / "pyproject.toml", "0.1.0", unreachable, "--", "--backend", "cpu", env=env
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "check_torch: torch 2.13.0" in result.stdout
    probe = "import torch, yaml, boto3, tokenizers, pyarrow, pydantic; print(torch.__version__)"
    imported = _run(tmp_path / "venv" / "bin" / "python", "-c", probe)
    assert imported.returncode == 0 and imported.stdout.startswith("2.13.0"), imported.stderr


def test_install_script_stops_at_the_first_failing_step(tmp_path):
    env = dict(os.environ, VENV=str(tmp_path / "venv"))
    result = _run("bash", INSTALL, REPO / "pyproject.toml", "0.0.9", "http://127.0.0.1:9/", "--", env=env)
    assert result.returncode != 0 and "VERSION='0.0.9'" in result.stderr
    assert not (tmp_path / "venv").exists()
