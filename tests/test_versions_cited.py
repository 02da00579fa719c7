"""A version of an upstream release cited anywhere in the repository (docs, comments, docstrings, the models'
manifest) is the version pinned for it: infra/pins.py for charts and upstream releases, pyproject.toml for
Python packages. An upgrade changes the pin, and this test lists every citation left behind.

A citation names the project and a version (`Kueue 0.19.2`, `kuberay-operator-1.7.0`, `KubeRay v1.7`); a
major.minor citation must match the pin's major.minor. Mentions of other versions on purpose (what an upstream
project is built against, a version the platform refuses) are listed in OTHER_VERSIONS with the reason.
"""

from __future__ import annotations

import functools
import re
import subprocess
import tomllib
from pathlib import Path

import pytest

from infra import pins

REPO = Path(__file__).resolve().parents[1]
NOT_OURS = (
    "upstream/",
    "sim/vendored/",
    "tests/fixtures/",
    "tests/test_versions_cited.py",
)  # the last: its own examples
TEXT = (".py", ".md", ".yaml", ".yml", ".toml", ".txt", ".sh", "Dockerfile", "Makefile")
# A space, @, / or - (a chart archive's name), or == (a pip pin), then the version; not ":" (an image tag
# is the image's version, not the chart's).
VERSION = r"(?: |@|/|-|==)v?(\d+\.\d+(?:\.\d+)?)\b"


def _package(name: str) -> str:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    every = [
        *project["dependencies"],
        *(d for extra in project["optional-dependencies"].values() for d in extra),
    ]
    return next(d.split("==")[1] for d in every if d.split("==")[0].lower() == name)


# (what is cited, as a pattern before the version; a word every match of the pattern holds, lower case (the
# files without it are not searched); the pinned version)
CITED = [
    (r"\b[Kk]ueue", "kueue", pins.CHARTS["kueue"].version),
    (r"\b[Kk]ube[Rr]ay(?:-operator)?", "kuberay", pins.CHARTS["kuberay-operator"].version),
    (r"\bTraining Operator(?: v1)?", "training operator", pins.TRAINING_OPERATOR_V1_VERSION),
    (r"\b[Jj]ob[Ss]et", "jobset", pins.JOBSET_VERSION),
    (r"\b[Kk]arpenter", "karpenter", pins.CHARTS["karpenter"].version),
    (r"\b(?:Kubeflow )?Trainer|kubeflow-trainer", "trainer", pins.CHARTS["kubeflow-trainer"].version),
    (r"\b[Vv]olcano", "volcano", pins.CHARTS["volcano"].version),
    (r"\bkube-prometheus-stack", "kube-prometheus-stack", pins.CHARTS["kube-prometheus-stack"].version),
    (r"\bdcgm-exporter", "dcgm-exporter", pins.CHARTS["dcgm-exporter"].version),
    (r"\bnvidia-device-plugin", "nvidia-device-plugin", pins.CHARTS["nvidia-device-plugin"].version),
    (r"\bmetrics-server", "metrics-server", pins.CHARTS["metrics-server"].version),
    (
        r"\baws-efa-k8s-device-plugin",
        "aws-efa-k8s-device-plugin",
        pins.CHARTS["aws-efa-k8s-device-plugin"].version,
    ),
    (r"\bpulumi-eks", "pulumi-eks", _package("pulumi-eks")),
    (r"\btorch(?:==)?", "torch", _package("torch")),
]

KUEUES_TRAINER = "the Trainer version Kueue 0.19.2 is built against (its go.mod), whose types it writes"
# (file, the citation as written, why it names another version)
OTHER_VERSIONS = [
    ("infra/config/cluster_rules.py", "Karpenter 1.9", "the first release that supports Kubernetes 1.35"),
    ("tests/sim/test_helm_render.py", "kube-prometheus-stack-0.0.1", "a chart version that is not vendored"),
    ("tests/docker/test_python_deps.py", "torch==2.12.0", "a lock that disagrees with the pin, to be caught"),
    ("tests/docker/test_python_deps.py", "torch==0.1.0", "a lock that disagrees with the pin, to be caught"),
    ("tests/docker/test_torch_lock.py", "torch-2.12.0", "a wheel of another version, to be refused"),
    ("sim/admission/kueue_webhooks.py", "Trainer v2.2.1", KUEUES_TRAINER),
    ("tests/sim/test_kueue_webhooks.py", "Trainer v2.2.1", KUEUES_TRAINER),
    ("tests/workloads/test_render.py", "Trainer v2.2.1", KUEUES_TRAINER),
    ("workloads/jobs.py", "Trainer v2.2.1", KUEUES_TRAINER),
    ("docs/workloads.md", "Trainer v2.2.1", KUEUES_TRAINER),
]


@functools.cache
def _texts() -> dict[str, str]:
    files = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout
    return {
        f: (REPO / f).read_text(errors="replace")
        for f in files.split()
        if f.endswith(TEXT)
        and not f.startswith(NOT_OURS)
        and (REPO / f).is_file()
        and not f.endswith(".lock")
    }


def stale_citations(texts: dict[str, str]) -> list[str]:
    allowed = {(f, c) for f, c, _ in OTHER_VERSIONS}
    found = []
    lowered = {path: text.lower() for path, text in texts.items()}
    for what, word, version in CITED:
        pattern = re.compile(f"(?:{what}){VERSION}")
        for path, text in texts.items():
            if word not in lowered[path]:
                continue
            for match in pattern.finditer(text):
                cited = match.group(1)
                if version == cited or version.startswith(f"{cited}."):
                    continue
                if (path, match.group(0).strip()) not in allowed:
                    line = text.count("\n", 0, match.start()) + 1
                    found.append(f"{path}:{line}: {match.group(0).strip()!r} but the pin is {version}")
    return found


def test_every_citation_of_an_upstream_version_is_the_pinned_one():
    assert stale_citations(_texts()) == []


def test_every_accepted_other_version_is_still_there():
    texts = _texts()
    assert [(f, c) for f, c, _ in OTHER_VERSIONS if c not in texts.get(f, "")] == []


@pytest.mark.parametrize(
    ("text", "stale"),
    [
        ("KubeRay 1.7.0 builds", False),
        ("KubeRay 1.6.2 builds", True),
        ("Kueue v0.19", False),
        ("kueue-0.18.1", True),
    ],
)
def test_a_stale_citation_is_found(text, stale):
    assert bool(stale_citations({"x.md": text})) is stale
