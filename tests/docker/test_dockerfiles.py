"""The three training images, checked statically: hadolint, build context, stages, user, labels, command."""

from __future__ import annotations

import importlib
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from dockerfile_model import FLAVORS, REPO, dockerignore_excludes

from infra.accelerators import CATALOG, CUDA_IMAGE_CUDA
from infra.contract import RUN_AS_UID

HADOLINT = Path(sys.executable).parent / "hadolint"
HADOLINT_CONFIG = REPO / "docker" / ".hadolint.yaml"


def _hadolint(*paths: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(HADOLINT), "--config", str(HADOLINT_CONFIG), "--format", "json", *map(str, paths)],
        capture_output=True,
        text=True,
    )


def test_hadolint_finds_nothing_in_any_dockerfile():
    result = _hadolint(*(REPO / "docker" / f / "Dockerfile" for f in FLAVORS))
    assert result.returncode == 0 and json.loads(result.stdout) == [], result.stdout + result.stderr


def test_hadolint_config_still_fails_a_latest_base_and_a_root_user(tmp_path):
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM ubuntu:latest\nUSER root\nRUN pip install boto3\n")
    codes = {finding["code"] for finding in json.loads(_hadolint(bad).stdout)}
    assert {"DL3007", "DL3002", "DL3013"} <= codes


def test_every_ignored_hadolint_rule_has_a_reason():
    lines = HADOLINT_CONFIG.read_text().splitlines()
    for i, line in enumerate(lines):
        if re.match(r"\s*- DL\d+", line):
            assert lines[i - 1].strip().startswith("#"), f"{line.strip()} has no comment saying why"


# Every base is pinned by digest too (a tag can be re-pushed); the digests were read from public build files.
DIGEST_PINNED = ("cuda", "rocm", "cpu")


@pytest.mark.parametrize("flavor", FLAVORS)
def test_base_images_are_pinned_to_a_version_never_latest(dockerfiles, flavor):
    for image in dockerfiles[flavor].base_images():
        if image == "builder":
            continue
        image, _, digest = image.partition("@")
        name, _, tag = image.rpartition(":")
        assert name and tag and tag != "latest" and re.search(r"\d", tag), (
            f"{flavor}: base {image!r} is not pinned"
        )
        if flavor in DIGEST_PINNED:
            assert re.fullmatch(r"sha256:[0-9a-f]{64}", digest), f"{flavor}: base {image!r} has no digest"
    assert ":latest" not in (REPO / "docker" / flavor / "Dockerfile").read_text()


@pytest.mark.parametrize("flavor", FLAVORS)
def test_every_copied_file_exists_and_is_in_the_build_context(dockerfiles, dockerignore, flavor):
    copies = [i for i in dockerfiles[flavor].instructions if i.keyword == "COPY" and "--from=" not in i.args]
    assert copies
    for ins in copies:
        *sources, _dest = ins.args.split()
        for source in sources:
            path = REPO / source
            assert path.exists(), f"{flavor}: COPY {source} does not exist"
            files = [p for p in path.rglob("*") if p.is_file()] if path.is_dir() else [path]
            for f in files:
                rel = f.relative_to(REPO).as_posix()
                if "__pycache__" not in rel:
                    assert not dockerignore_excludes(dockerignore, rel), (
                        f"{flavor}: .dockerignore drops {rel}"
                    )


def test_dockerignore_keeps_secrets_and_the_environment_out(dockerignore):
    for path in [
        ".venv/bin/python",
        ".git/config",
        "Pulumi.dev.yaml",
        "tests/conftest.py",
        "infra/config/platform.py",
    ]:
        assert dockerignore_excludes(dockerignore, path), path
    assert dockerignore_excludes(dockerignore, "trainer/__pycache__/loop.cpython-311.pyc")
    assert not dockerignore_excludes(dockerignore, "trainer/loop.py")


@pytest.mark.parametrize("flavor", FLAVORS)
def test_dependencies_install_before_the_source_is_copied(dockerfiles, flavor):
    builder = dockerfiles[flavor].stage(0)
    order = [(i.keyword, i.args) for i in builder]
    pyproject = next(n for n, (k, a) in enumerate(order) if k == "COPY" and a.startswith("pyproject.toml"))
    deps = next(n for n, (k, a) in enumerate(order) if k == "RUN" and "install-python-deps.sh" in a)
    source = next(n for n, (k, a) in enumerate(order) if k == "COPY" and a.startswith("trainer/"))
    assert pyproject < deps < source
    # The deps layer must not depend on anything that changes with the source.
    assert all(not a.startswith(("README", "trainer", ".")) for k, a in order[:deps] if k == "COPY")


@pytest.mark.parametrize("flavor", FLAVORS)
def test_final_stage_is_slim_and_runs_as_the_pods_non_root_user(dockerfiles, flavor):
    df = dockerfiles[flavor]
    assert df.stages == 2 and df.base_images()[0] == df.base_images()[1]
    final = df.final_stage()
    assert any(i.keyword == "COPY" and i.args.startswith("--from=builder /opt/mlops-eks ") for i in final)
    users = [n for n, i in enumerate(final) if i.keyword == "USER"]
    runs = [n for n, i in enumerate(final) if i.keyword == "RUN"]
    assert users and runs and users[-1] > runs[-1], f"{flavor}: USER must come after every RUN"
    assert final[users[-1]].args == f"{RUN_AS_UID}:{RUN_AS_UID}"


@pytest.mark.parametrize("flavor", FLAVORS)
def test_labels_carry_source_and_the_pyproject_version(dockerfiles, flavor):
    df = dockerfiles[flavor]
    labels = " ".join(i.args for i in df.final_stage() if i.keyword == "LABEL")
    assert 'org.opencontainers.image.source="${SOURCE}"' in labels
    assert 'org.opencontainers.image.version="${VERSION}"' in labels
    assert 'org.opencontainers.image.revision="${REVISION}"' in labels
    # The builder refuses a VERSION build arg that differs from pyproject.toml (install-python-deps.sh).
    deps = next(i for i in df.stage(0) if i.keyword == "RUN" and "install-python-deps.sh" in i.args)
    assert 'pyproject.toml "${VERSION}"' in deps.args


@pytest.mark.parametrize("flavor", FLAVORS)
def test_command_runs_the_trainer_under_its_exit_code_preserving_torchrun(dockerfiles, flavor):
    """The same launcher the job pods use (workloads/pod.py), with flags torchrun accepts."""
    from torch.distributed import run as torchrun

    cmd = dockerfiles[flavor].cmd()
    assert cmd[:3] == ["python", "-m", "trainer.launch"]
    args = torchrun.parse_args(cmd[3:])
    assert args.module and args.training_script == "trainer" and args.standalone
    assert args.nproc_per_node == ("1" if flavor == "cpu" else "gpu")
    build = " ".join(i.args for i in dockerfiles[flavor].stage(0) if i.keyword == "RUN")
    # The build fails if either module does not start in the image.
    assert "python -m trainer --help" in build and "python -m trainer.launch --help" in build


def test_the_modules_the_images_run_exist_and_answer_help():
    launch = importlib.import_module("trainer.launch")  # torchrun's wrapper; its flags are torchrun's
    assert callable(launch.main)
    command = [sys.executable, "-m", "trainer", "--help"]
    result = subprocess.run(command, capture_output=True, text=True, cwd=REPO)
    assert result.returncode == 0 and "--config" in result.stdout, result.stderr


def test_cuda_image_requires_kernels_for_every_nvidia_gpu_the_catalog_says_it_runs(dockerfiles):
    archs = set(dockerfiles["cuda"].arg_default("CUDA_ARCHS").split(","))
    covered = {acc.compute_target for acc in CATALOG.values() if acc.runs_on_cuda_image}
    newer = {acc.compute_target for acc in CATALOG.values() if acc.vendor == "nvidia"} - covered
    assert covered <= archs and not newer & archs  # B200's sm_100: refused by the spec check instead
    deps = next(
        i for i in dockerfiles["cuda"].stage(0) if i.keyword == "RUN" and "install-python-deps" in i.args
    )
    major, minor = CUDA_IMAGE_CUDA  # what the catalog and the spec check believe the image is
    assert f'--backend cuda --cuda-version {major}.{minor} --archs "${{CUDA_ARCHS}}"' in deps.args
    index = f"https://download.pytorch.org/whl/cu{major}{minor}"
    assert dockerfiles["cuda"].arg_default("TORCH_INDEX_URL") == index
    assert f"cuda{major}.{minor}" in dockerfiles["cuda"].base_images()[0]


def test_cuda_image_installs_a_pinned_efa_installer_and_registers_the_nccl_plugin(dockerfiles):
    assert re.fullmatch(r"\d+\.\d+\.\d+", dockerfiles["cuda"].arg_default("EFA_INSTALLER_VERSION"))
    efa = next(
        i for i in dockerfiles["cuda"].final_stage() if i.keyword == "RUN" and "efa_installer.sh" in i.args
    )
    assert "--skip-kmod" in efa.args and "libnccl-net" in efa.args and "ldconfig" in efa.args


def test_rocm_image_documents_and_sets_the_gfx_override_for_the_v520(dockerfiles):
    v520 = CATALOG["amd-v520"]
    text = (REPO / "docker" / "rocm" / "Dockerfile").read_text()
    assert v520.compute_target in text  # gfx1011 and why it needs the override
    assert dockerfiles["rocm"].arg_default("HSA_OVERRIDE_GFX_VERSION") == "10.3.0"
    env = " ".join(i.args for i in dockerfiles["rocm"].final_stage() if i.keyword == "ENV")
    assert "HSA_OVERRIDE_GFX_VERSION=${HSA_OVERRIDE_GFX_VERSION}" in env
    assert (
        dockerfiles["rocm"].arg_default("TORCH_INDEX_URL").startswith("https://download.pytorch.org/whl/rocm")
    )


def test_cpu_image_takes_torch_from_the_cpu_wheel_index_and_has_open_mpi(dockerfiles):
    assert dockerfiles["cpu"].arg_default("TORCH_INDEX_URL") == "https://download.pytorch.org/whl/cpu"
    runs = " ".join(i.args for i in dockerfiles["cpu"].final_stage() if i.keyword == "RUN")
    assert "openmpi-bin" in runs
