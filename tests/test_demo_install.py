"""After `make demo` (the trainer's packages only), a command that needs `make dev` says so in one line and
exits 2, instead of ending in a ModuleNotFoundError traceback."""

from __future__ import annotations

import subprocess
import sys

import pytest
from demo_install import REPO, demo_env

from infra.extras import needs_dev_install

PY = [sys.executable, "-m"]
NEEDS_DEV = {
    "python -m infra synth": ([*PY, "infra", "synth", "--stack", "dev"], "pulumi"),
    "python -m workloads status": ([*PY, "workloads", "status", "--stack", "dev-zimdb"], "kubernetes"),
    "python -m workloads logs": ([*PY, "workloads", "logs", "--stack", "dev-zimdb"], "kubernetes"),
    "python -m policy.scan": ([*PY, "policy.scan"], "pulumi"),
    "the policy pack (pulumi preview --policy-pack policy)": ([*PY, "policy"], "pulumi_policy"),
    "scripts/platform_examples.py": (
        [sys.executable, str(REPO / "scripts" / "platform_examples.py")],
        "pulumi",
    ),
}


@pytest.mark.parametrize("name", NEEDS_DEV)
def test_a_command_that_needs_make_dev_says_so_after_make_demo(name, tmp_path):
    command, package = NEEDS_DEV[name]
    proc = subprocess.run(
        command, env=demo_env(tmp_path), cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert proc.stderr == (
        f"error: {name} needs the Python package {package!r}, which is not installed here "
        "(`make demo` installs only the trainer's packages): run `make dev`\n"
    )


def test_the_demo_environment_has_the_trainer_and_nothing_of_make_dev(tmp_path):
    probe = "import torch, boto3, pydantic, trainer\ntry: import pulumi\nexcept ImportError: print('ok')"
    proc = subprocess.run(
        [sys.executable, "-c", probe], env=demo_env(tmp_path), capture_output=True, text=True
    )
    assert proc.stdout == "ok\n", proc.stderr


def test_a_missing_module_of_this_project_is_a_bug_not_an_install_step():
    with pytest.raises(ModuleNotFoundError), needs_dev_install("python -m infra synth"):
        import infra.no_such_module  # noqa: F401
    with pytest.raises(SystemExit) as exit_info, needs_dev_install("python -m infra synth"):
        import no_such_package  # noqa: F401
    assert exit_info.value.code == 2
