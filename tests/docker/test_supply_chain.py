"""What the images download at build time is verified before it runs: the EFA installer's GPG signature
(made by the key AWS publishes the fingerprint of), executed here with real gpg on a signed tarball; and
the Python packages, installed only from the hash-pinned locks that must match pyproject's pins."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

needs_gpg = pytest.mark.skipif(shutil.which("gpg") is None, reason="needs gnupg (gpg)")
EFA_TARBALL = "aws-efa-installer-1.0.0.tar.gz"


def _verification(dockerfiles) -> str:
    """The EFA RUN's commands from the keyring set-up to the signature check, as the build runs them."""
    stage = dockerfiles["cuda"].final_stage()
    run = next(i for i in stage if i.keyword == "RUN" and "efa_installer" in i.args)
    steps = run.args.split(" && ")
    first = next(i for i, s in enumerate(steps) if s.startswith("export GNUPGHOME="))
    last = next(i for i, s in enumerate(steps) if s.startswith("gpg --batch --verify"))
    return " && ".join(steps[first : last + 1])


def _key(home: Path, name: str) -> str:
    """A new signing key in `home`; its fingerprint."""
    home.mkdir(mode=0o700, parents=True)
    gpg = ["gpg", "--batch", "--homedir", str(home)]
    new_key = ["--passphrase", "", "--quick-gen-key", name, "ed25519", "sign", "never"]
    subprocess.run([*gpg, *new_key], check=True)
    out = subprocess.run([*gpg, "--with-colons", "--fingerprint"], check=True, capture_output=True, text=True)
    return next(line.split(":")[9] for line in out.stdout.splitlines() if line.startswith("fpr"))


def _publish(home: Path, workdir: Path, content: bytes) -> None:
    """What efa-installer.amazonaws.com serves: the tarball, its detached signature, the public key."""
    gpg = ["gpg", "--batch", "--homedir", str(home)]
    (workdir / EFA_TARBALL).write_bytes(content)
    sig = str(workdir / f"{EFA_TARBALL}.sig")
    subprocess.run([*gpg, "--yes", "--detach-sign", "-o", sig, EFA_TARBALL], cwd=workdir, check=True)
    key = subprocess.run([*gpg, "--armor", "--export"], check=True, capture_output=True).stdout
    (workdir / "aws-efa-installer.key").write_bytes(key)


def _build_step(script: str, workdir: Path, fingerprint: str) -> subprocess.CompletedProcess:
    env = {"PATH": "/usr/bin:/bin", "EFA_INSTALLER_KEY_FINGERPRINT": fingerprint}
    # The Dockerfile's paths are the image's: the build works in /tmp/efa.
    script = script.replace("/tmp/efa/", f"{workdir}/")
    return subprocess.run(
        ["bash", "-o", "pipefail", "-c", f'tarball="{EFA_TARBALL}" && {script}'],
        cwd=workdir,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.fixture
def aws_signed(tmp_path):
    home, workdir = tmp_path / "aws", tmp_path / "build"
    workdir.mkdir()
    fingerprint = _key(home, "AWS EFA test key")
    _publish(home, workdir, b"installer")
    return home, workdir, fingerprint


@needs_gpg
def test_efa_tarball_signed_by_the_pinned_key_passes(dockerfiles, aws_signed):
    _, workdir, fingerprint = aws_signed
    result = _build_step(_verification(dockerfiles), workdir, fingerprint)
    assert result.returncode == 0, result.stderr


@needs_gpg
def test_only_the_primary_keys_fingerprint_is_compared_not_its_subkeys(dockerfiles, tmp_path):
    # A signing subkey adds an `fpr` record of its own after the `sub` record (gpg --with-colons).
    home, workdir = tmp_path / "aws", tmp_path / "build"
    workdir.mkdir()
    fingerprint = _key(home, "AWS EFA test key")
    subkey = ["--passphrase", "", "--quick-add-key", fingerprint, "ed25519", "sign", "never"]
    subprocess.run(["gpg", "--batch", "--homedir", str(home), *subkey], check=True)
    _publish(home, workdir, b"installer")
    result = _build_step(_verification(dockerfiles), workdir, fingerprint)
    assert result.returncode == 0, result.stderr
    # The subkey's fingerprint pinned instead is refused: the pin names the primary key.
    listing = subprocess.run(
        ["gpg", "--batch", "--homedir", str(home), "--with-colons", "--fingerprint"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.splitlines()
    fprs = [line.split(":")[9] for line in listing if line.startswith("fpr")]
    assert len(fprs) == 2 and fprs[0] == fingerprint
    result = _build_step(_verification(dockerfiles), workdir, fprs[1])
    assert result.returncode != 0 and f"expected {fprs[1]}" in result.stderr


@needs_gpg
def test_a_tampered_efa_tarball_fails_the_build(dockerfiles, aws_signed):
    _, workdir, fingerprint = aws_signed
    (workdir / EFA_TARBALL).write_bytes(b"installer with a backdoor")
    result = _build_step(_verification(dockerfiles), workdir, fingerprint)
    assert result.returncode != 0 and "BAD signature" in result.stderr


@needs_gpg
def test_a_tarball_signed_by_another_key_fails_even_with_that_key_served(dockerfiles, aws_signed, tmp_path):
    # An attacker who controls the download serves their own key with their own signature.
    _, workdir, pinned = aws_signed
    _key(tmp_path / "attacker", "Attacker")
    _publish(tmp_path / "attacker", workdir, b"installer")
    result = _build_step(_verification(dockerfiles), workdir, pinned)
    assert result.returncode != 0 and f"expected {pinned}" in result.stderr


def test_the_pinned_fingerprint_is_the_one_aws_publishes(dockerfiles):
    # EC2 User Guide, EFA: "4E90 91BC BB97 A96B 26B1 5E59 A054 80B1 DD2D 3CCC".
    published = "4E90 91BC BB97 A96B 26B1 5E59 A054 80B1 DD2D 3CCC".replace(" ", "")
    assert dockerfiles["cuda"].arg_default("EFA_INSTALLER_KEY_FINGERPRINT") == published


LOCK = Path(__file__).resolve().parents[2] / "docker" / "requirements.lock"
RAY_LOCK = LOCK.parent / "requirements-ray.lock"
LLM_LOCK = LOCK.parent / "requirements-llm.lock"
MLFLOW_LOCK = LOCK.parent / "requirements-mlflow.lock"
SCRIPT = LOCK.parent / "pyproject_requirements.py"
PYPROJECT = LOCK.parents[1] / "pyproject.toml"


def _pins(lock: Path) -> list[str]:
    logical = lock.read_text().replace("\\\n", " ").splitlines()
    return [line for line in logical if line and not line.startswith("#")]


@pytest.mark.parametrize(
    ("extras", "locks"),
    [
        (["train"], [LOCK]),
        (["train", "ray"], [LOCK, RAY_LOCK]),
        (["train", "ray", "llm"], [LOCK, RAY_LOCK, LLM_LOCK]),
        (["train", "ray", "llm", "mlflow"], [LOCK, RAY_LOCK, LLM_LOCK, MLFLOW_LOCK]),
    ],
)
def test_the_locks_hold_every_image_pin_each_with_hashes(tmp_path, extras, locks):
    together = tmp_path / "requirements.lock"  # what install-python-deps.sh checks and installs
    together.write_text("".join(lock.read_text() for lock in locks))
    extra_args = [arg for extra in extras for arg in ("--extra", extra)]
    checked = subprocess.run(
        [sys.executable, SCRIPT, PYPROJECT, *extra_args, "--check-lock", together],
        capture_output=True,
        text=True,
    )
    assert checked.returncode == 0, checked.stderr
    pins = _pins(together)
    assert pins and all(re.search(r"--hash=sha256:[0-9a-f]{64}", line) for line in pins), pins
    assert not [p for p in pins if p.startswith("torch==")], "torch comes from the base image or its index"


def test_the_ray_lock_adds_ray_and_repeats_nothing_of_the_train_lock():
    names = [[pin.split("==")[0] for pin in _pins(lock)] for lock in (LOCK, RAY_LOCK)]
    assert "ray" in names[1] and not set(names[0]) & set(names[1])


def test_the_llm_lock_adds_transformers_and_peft_and_repeats_nothing_nor_torch():
    train, ray, llm = ({pin.split("==")[0] for pin in _pins(lock)} for lock in (LOCK, RAY_LOCK, LLM_LOCK))
    assert {"transformers", "peft", "accelerate", "safetensors"} <= llm
    assert not llm & (train | ray)
    # torch and what it requires come from the cuda image's base (the lock resolves around a stand-in)
    assert not llm & {"torch", "sympy", "networkx", "triton"}
    assert not any(n.startswith("nvidia-") for n in llm)


def test_the_mlflow_lock_adds_the_client_only_and_repeats_nothing_of_the_other_locks():
    others = {pin.split("==")[0] for lock in (LOCK, RAY_LOCK, LLM_LOCK) for pin in _pins(lock)}
    mlflow = {pin.split("==")[0] for pin in _pins(MLFLOW_LOCK)}
    assert "mlflow-skinny" in mlflow and not mlflow & others
    # the client: no tracking server's SQL store, no full mlflow (its UI, its server)
    assert not mlflow & {"mlflow", "sqlalchemy", "alembic", "torch", "flask"}


def test_a_stale_lock_fails_the_build(tmp_path):
    stale = tmp_path / "pyproject.toml"
    stale.write_text(PYPROJECT.read_text().replace('"boto3==1.44.5"', '"boto3==1.44.4"'))
    assert stale.read_text() != PYPROJECT.read_text()
    checked = subprocess.run(
        [sys.executable, SCRIPT, stale, "--extra", "train", "--check-lock", LOCK],
        capture_output=True,
        text=True,
    )
    assert checked.returncode == 1 and "boto3==1.44.4 (lock: 1.44.5)" in checked.stderr


def test_images_install_only_hash_checked_artifacts():
    install = (LOCK.parent / "install-python-deps.sh").read_text()
    assert '--require-hashes --no-deps --requirement "$locked"' in install
    assert "--check-lock" in install
