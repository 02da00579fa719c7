"""scripts/build-images.sh, run against stand-ins for pulumi, aws and docker that record their calls."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from dockerfile_model import REPO

SCRIPT = REPO / "scripts" / "build-images.sh"
URLS = {
    "cuda": "111122223333.dkr.ecr.us-west-2.amazonaws.com/mlops-eks-dev-cuda",
    "rocm": "111122223333.dkr.ecr.us-west-2.amazonaws.com/mlops-eks-dev-rocm",
    "cpu": "111122223333.dkr.ecr.us-west-2.amazonaws.com/mlops-eks-dev-cpu",
}
STUB = """#!/usr/bin/env bash
echo "{name} $*" >>"$CALLS"
{body}
"""


def _git(repo: Path, *args: str) -> str:
    command = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.com", *args]
    return subprocess.run(command, check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture
def checkout(tmp_path) -> Path:
    """A committed copy of what the script reads: itself, pyproject.toml and the version reader."""
    repo = tmp_path / "repo"
    for rel in ["scripts/build-images.sh", "pyproject.toml", "docker/pyproject_requirements.py"]:
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / rel, repo / rel)
    _git(repo.parent, "init", "-q", str(repo))
    _git(repo, "add", ".")
    _git(repo, "commit", "-q", "-m", "images")
    return repo


def _run(checkout: Path, tmp_path: Path, *args: str, urls: dict = URLS, **env: str):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    outputs = {"ecr_repository_urls": json.dumps(urls), "region": "us-west-2"}
    bodies = {
        "pulumi": f"case $3 in ecr_repository_urls) echo '{outputs['ecr_repository_urls']}';; "
        f"region) echo {outputs['region']};; esac",
        # describe-images succeeds only for tags listed in $EXISTING (what ECR already holds).
        "aws": "case $2 in get-login-password) echo not-a-real-password;; "
        'describe-images) [[ " ${EXISTING:-} " == *" ${6#*/}:${8#imageTag=} "* ]];; esac',
        "docker": 'if [ "$1" = login ]; then read -r pw; echo "docker stdin $pw" >>"$CALLS"; fi',
    }
    for name, body in bodies.items():
        (bin_dir / name).write_text(STUB.format(name=name, body=body))
        (bin_dir / name).chmod(0o755)
    calls = tmp_path / "calls.log"
    full_env = {
        **os.environ,
        "PATH": f"{bin_dir}:{Path(sys.executable).parent}:{os.environ['PATH']}",
        "CALLS": str(calls),
        **env,
    }
    result = subprocess.run(
        ["bash", str(checkout / "scripts/build-images.sh"), *args],
        capture_output=True,
        text=True,
        env=full_env,
    )
    return result, calls.read_text().splitlines() if calls.exists() else []


def test_script_passes_bash_n_and_shellcheck():
    assert subprocess.run(["bash", "-n", str(SCRIPT)]).returncode == 0
    shellcheck = Path(sys.executable).parent / "shellcheck"
    scripts = [SCRIPT, REPO / "docker" / "install-python-deps.sh"]
    result = subprocess.run([str(shellcheck), *map(str, scripts)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout


def test_builds_each_image_for_amd64_pushes_it_tagged_with_the_commit(checkout, tmp_path):
    result, calls = _run(checkout, tmp_path, "--stack", "dev", SOURCE_URL="git@github.com:acme/mlops-eks.git")
    assert result.returncode == 0, result.stderr
    commit = _git(checkout, "rev-parse", "HEAD")
    assert "pulumi stack output ecr_repository_urls --json --stack dev" in calls
    # The password goes from aws to docker login through a pipe, never through the command line.
    assert "aws ecr get-login-password --region us-west-2" in calls
    assert (
        "docker login --username AWS --password-stdin 111122223333.dkr.ecr.us-west-2.amazonaws.com" in calls
    )
    assert "docker stdin not-a-real-password" in calls
    builds = [c for c in calls if c.startswith("docker buildx build")]
    assert len(builds) == 3 and all(
        calls.index(b) > calls.index("docker stdin not-a-real-password") for b in builds
    )
    for flavor, build in zip(["cuda", "rocm", "cpu"], builds, strict=True):
        assert f"--platform linux/amd64 --file docker/{flavor}/Dockerfile" in build
        assert "--build-arg VERSION=0.1.0" in build and f"--build-arg REVISION={commit}" in build
        assert "--build-arg SOURCE=https://github.com/acme/mlops-eks " in build
        assert build.endswith(f"--tag {URLS[flavor]}:{commit[:12]} --push .")
        assert f"{URLS[flavor]}:{commit[:12]}" in result.stdout  # the reference a workload stack takes
    assert f"imageTag: {commit[:12]}" in result.stdout


def test_only_and_dry_run_build_nothing_but_print_the_commands(checkout, tmp_path):
    result, calls = _run(checkout, tmp_path, "--stack", "dev", "--only", "cpu", "--dry-run", SOURCE_URL="x")
    assert result.returncode == 0, result.stderr
    # Only read-only queries (stack outputs, does ECR hold the tag) run.
    assert not [c for c in calls if c.startswith("docker") or "get-login-password" in c]
    assert "+ docker buildx build --platform linux/amd64 --file docker/cpu/Dockerfile" in result.stdout
    assert "docker/cuda" not in result.stdout


def test_a_stack_without_the_repository_fails_naming_it_and_builds_nothing(checkout, tmp_path):
    urls = {k: v for k, v in URLS.items() if k != "rocm"}
    result, calls = _run(checkout, tmp_path, "--stack", "dev", urls=urls, SOURCE_URL="x")
    assert result.returncode == 1
    assert "no 'rocm'" in result.stderr and "['cpu', 'cuda']" in result.stderr
    assert not [c for c in calls if c.startswith("docker")]


def test_uncommitted_changes_are_refused_unless_allowed(checkout, tmp_path):
    (checkout / "pyproject.toml").write_text((checkout / "pyproject.toml").read_text() + "\n")
    refused, calls = _run(checkout, tmp_path, "--stack", "dev", SOURCE_URL="x")
    assert refused.returncode == 1 and "uncommitted changes" in refused.stderr and not calls
    allowed, calls = _run(
        checkout, tmp_path, "--stack", "dev", "--only", "cpu", SOURCE_URL="x", ALLOW_DIRTY="1"
    )
    assert allowed.returncode == 0 and re.search(r"-dirty-\d{14} --push \.$", calls[-1])


def test_an_image_already_in_ecr_is_not_built_again(checkout, tmp_path):
    tag = _git(checkout, "rev-parse", "HEAD")[:12]
    result, calls = _run(
        checkout, tmp_path, "--stack", "dev", SOURCE_URL="x", EXISTING=f"mlops-eks-dev-rocm:{tag}"
    )
    assert result.returncode == 0, result.stderr
    builds = [c for c in calls if c.startswith("docker buildx build")]
    assert len(builds) == 2 and not [b for b in builds if "docker/rocm/" in b]
    assert f"mlops-eks-dev-rocm:{tag} is already in ECR" in result.stdout


def test_bad_arguments_name_what_is_allowed(checkout, tmp_path):
    no_stack, _ = _run(checkout, tmp_path)
    assert no_stack.returncode == 1 and "--stack is required" in no_stack.stderr
    no_value, _ = _run(checkout, tmp_path, "--stack")
    assert no_value.returncode == 1 and "--stack needs a value" in no_value.stderr
    bad_only, _ = _run(checkout, tmp_path, "--stack", "dev", "--only", "gpu")
    assert bad_only.returncode == 1 and "'gpu' is not an image; allowed: cuda rocm cpu" in bad_only.stderr
