"""Every command of the repository answers --help at once and does nothing else: exit 0, its usage on
stdout, under 2 s of CPU, in the environment `make demo` leaves and without torch (so no --help waits for
a heavy import), no file written in the repository, the working directory, $HOME or $TMPDIR. Every entry
point is listed (a test finds them in the tree), and so is every subcommand a usage line names."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from demo_install import demo_env

from trainer import launch

REPO = Path(__file__).resolve().parents[1]
PY = [sys.executable, "-m"]
CPU_SECONDS = 2.0


def _module(module: str, *sub: str) -> tuple[list[str], str]:
    return [*PY, module, *sub, "--help"], f"usage: python -m {' '.join((module, *sub))}"


def _script(path: str, *sub: str, usage: str | None = None) -> tuple[list[str], str]:
    runner = [] if path.endswith(".sh") or path.startswith(".ci/") else [sys.executable]
    return [*runner, str(REPO / path), *sub, "--help"], usage or "usage: "


COMMANDS = {
    "infra": _module("infra"),
    **{f"infra {sub}": _module("infra", sub) for sub in ("synth", "check", "images", "rehearse")},
    "infra.platform.image_primer": _module("infra.platform.image_primer"),
    "workloads": _module("workloads"),
    **{
        f"workloads {sub}": _module("workloads", sub)
        for sub in ("plan", "render", "run-local", "status", "logs")
    },
    "policy": ([*PY, "policy", "--help"], "usage: pulumi preview|up --policy-pack policy"),
    "policy.scan": _module("policy.scan"),
    "sim.contracts": _module("sim.contracts"),
    **{f"sim.contracts {sub}": _module("sim.contracts", sub) for sub in ("crd", "values")},
    "trainer": _module("trainer"),
    "trainer.launch": _module("trainer.launch"),
    "trainer.bench": _module("trainer.bench"),
    "trainer.bench_workers": _module("trainer.bench_workers"),
    **{
        f"trainer.bench_workers {sub}": _module("trainer.bench_workers", sub) for sub in ("bare", "data-prep")
    },
    "trainer.checkpoint_bench": _module("trainer.checkpoint_bench"),
    "trainer.llm.load_bench": _module("trainer.llm.load_bench"),
    "trainer.gpu_check": ([*PY, "trainer.gpu_check", "--help"], "usage: gpu_check.py"),
    "trainer.mpi_launch": _module("trainer.mpi_launch"),
    "trainer.mpi_worker": _module("trainer.mpi_worker"),
    "trainer.ray_train": _module("trainer.ray_train"),
    "tests.policy.bypasses": _module("tests.policy.bypasses"),
    "scripts/build-images.sh": _script("scripts/build-images.sh", usage="scripts/build-images.sh --stack"),
    "scripts/lock_requirements.py": _script("scripts/lock_requirements.py"),
    "scripts/platform_examples.py": _script("scripts/platform_examples.py"),
    "scripts/refresh_upstream.py": _script("scripts/refresh_upstream.py"),
    "scripts/refresh_managed_escalations.py": _script("scripts/refresh_managed_escalations.py"),
    "scripts/vendor_model_sources.py": _script("scripts/vendor_model_sources.py"),
    "scripts/code_layout.py": _script("scripts/code_layout.py"),
    **{
        f"scripts/refresh_upstream.py {sub}": _script("scripts/refresh_upstream.py", sub)
        for sub in ("check", "fetch", "charts")
    },
    "schemas/generate.py": _script("schemas/generate.py"),
    "docker/check_torch.py": _script("docker/check_torch.py"),
    "docker/pyproject_requirements.py": _script("docker/pyproject_requirements.py"),
    "docker/install-python-deps.sh": _script("docker/install-python-deps.sh"),
    "infra/addons/gpu_node_check_script.py": _script("infra/addons/gpu_node_check_script.py"),
    ".ci/run": _script(".ci/run", usage="usage: .ci/run"),
}
# Not commands: the Pulumi program, which only the Pulumi engine runs (`pulumi up`), and the language
# host's shim, which sim/pulumi/engine.py runs as the engine would, and a test's training program.
NOT_COMMANDS = {
    "__main__.py",
    "sim/pulumi/language_python_exec.py",
    "tests/trainer/poisoned_trainer.py",
}
# A usage line's subcommands: `{synth} ...`.
SUBCOMMANDS = re.compile(r"\{([\w,-]+)\} \.\.\.")
# What `git ls-files` shows but a command's --help may not write.
CACHES = ("__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache", ".egg-info")


def _tree() -> dict[str, tuple[int, int]]:
    """(mtime, size) of every file in the working tree but the .venv and caches."""
    listed = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.splitlines()
    found = {}
    for path in listed:
        if not any(c in path for c in CACHES) and (REPO / path).is_file():
            stat = (REPO / path).stat()
            found[path] = (stat.st_mtime_ns, stat.st_size)
    return found


def run_measured(command: list[str], cwd: Path, env: dict[str, str]) -> tuple[int, str, str, float]:
    """(exit status, stdout, stderr, CPU seconds of the command and every process it waited for)."""
    out, err = cwd.parent / "stdout", cwd.parent / "stderr"
    with out.open("w") as stdout, err.open("w") as stderr:
        proc = subprocess.Popen(command, cwd=cwd, env=env, stdout=stdout, stderr=stderr)
    timer = threading.Timer(120, proc.kill)  # a --help that starts work would hang the suite
    timer.start()
    try:
        _, status, usage = os.wait4(proc.pid, 0)
    finally:
        timer.cancel()
    proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here: Popen must not wait again
    return proc.returncode, out.read_text(), err.read_text(), usage.ru_utime + usage.ru_stime


@pytest.mark.parametrize("name", COMMANDS)
def test_help_exits_0_at_once_with_usage_and_no_side_effects(name, tmp_path):
    command, usage = COMMANDS[name]
    cwd, home, tmp = (tmp_path / "run" / d for d in ("cwd", "home", "tmp"))
    for d in (cwd, home, tmp):
        d.mkdir(parents=True)
    env = demo_env(tmp_path, hide=("torch",)) | {
        "HOME": str(home),
        "TMPDIR": str(tmp),
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    before = _tree()
    code, stdout, stderr, cpu = run_measured(command, cwd, env)
    assert code == 0, stderr[-3000:]
    assert usage in stdout
    assert cpu < CPU_SECONDS, (
        f"{name} --help took {cpu:.1f} s of CPU: it did work before parsing its arguments"
    )
    assert [p for d in (cwd, home, tmp) for p in d.rglob("*")] == []
    changed = {p for p, s in _tree().items() ^ before.items()}
    assert not changed, f"{name} --help wrote {sorted(changed)}"
    for group in SUBCOMMANDS.findall(stdout.split("\n\n")[0]):  # the usage lines
        assert all(f"{name} {sub}" in COMMANDS for sub in group.split(",")), f"{name} {group}: list each"


def _entry_points() -> set[str]:
    """Every file that runs as a command: a module or script with a __main__ block, a package's
    __main__.py, a shell script."""
    listed = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.splitlines()
    found = set()
    for path in listed:
        if path.startswith("upstream/") or not (REPO / path).is_file():
            continue
        if path.endswith(".py"):
            text = (REPO / path).read_text()
            if path.endswith("__main__.py") or re.search(r'^if __name__ == "__main__"', text, re.M):
                found.add(path)
        elif path.endswith(".sh") or path.startswith(".ci/"):
            found.add(path)
    return found - NOT_COMMANDS


def _file_of(command: list[str]) -> str:
    if command[:2] == PY:
        base = command[2].replace(".", "/")
        return f"{base}.py" if (REPO / f"{base}.py").exists() else f"{base}/__main__.py"
    path = Path(next(c for c in command if c.startswith(str(REPO)) and c != sys.executable))
    return path.relative_to(REPO).as_posix()


def test_every_entry_point_is_listed():
    assert _entry_points() - {_file_of(cmd) for cmd, _ in COMMANDS.values()} == set()
    assert len(_entry_points()) >= 25


def test_the_launchers_help_is_torchruns_own():
    """`python -m trainer.launch --help` prints torchrun's options from a file, so it needs no torch:
    the file must be what the installed torchrun's parser prints."""
    assert launch.TORCHRUN_HELP.read_text() == launch.torchrun_help(), (
        "torchrun's options changed (a torch upgrade?): regenerate with .venv/bin/python -c "
        "'from trainer import launch; launch.TORCHRUN_HELP.write_text(launch.torchrun_help())'"
    )


@pytest.mark.parametrize(
    ("argv", "asks"),
    [
        (["--help"], True),
        (["--nproc-per-node=2", "-h"], True),
        (["--standalone", "-m", "trainer", "--help"], False),  # the trainer's own --help
        (["train.py", "--help"], False),
        (["--nproc-per-node", "2", "--help"], False),  # a value first: torchrun's parser decides
    ],
)
def test_the_launcher_answers_only_its_own_help(argv, asks):
    assert launch.asks_for_help(argv) is asks


DESCRIBED_SUBCOMMANDS = {
    "infra": ("synth", "check", "images", "rehearse"),
    "workloads": ("plan", "render", "run-local", "status", "logs"),
}


@pytest.mark.parametrize(
    ("cli", "sub"), [(cli, sub) for cli, subs in DESCRIBED_SUBCOMMANDS.items() for sub in subs], ids=" ".join
)
def test_every_subcommand_help_describes_it_and_its_exit_codes(cli, sub, capsys):
    main = __import__(f"{cli}.__main__", fromlist=["main"]).main
    with pytest.raises(SystemExit) as done:
        main([sub, "--help"])
    out = capsys.readouterr().out
    description = out.split("\n\n")[1]  # usage, then the description, then the options
    assert done.value.code == 0 and not description.startswith(("options:", "-h")), out
    assert re.search(r"[Ee]xit (codes?:? )?\d|[Ee]xit codes", description), description
