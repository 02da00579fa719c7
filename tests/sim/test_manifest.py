"""sim/models.yaml stays true: every model in sim/ is listed once, with upstream versions that are the
ones the platform pins, source paths the model cites, and tests and vendored files that exist."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
import yaml

from infra import pins
from infra.config.cluster_rules import DEFAULT_KUBERNETES_VERSION

REPO = Path(__file__).resolve().parents[2]
SIM = REPO / "sim"
MODELS = yaml.safe_load((SIM / "models.yaml").read_text())["models"]
TAG = re.compile(r"^v?\d+\.\d+\.\d+$")


def pinned(pin: str) -> str:
    """The version a pin name stands for, read where it is pinned."""
    kind, _, name = pin.partition(":")
    if kind == "chart":
        return pins.CHARTS[name].version
    if kind == "package":
        deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
        every = [
            *deps["dependencies"],
            *(d for extra in deps["optional-dependencies"].values() for d in extra),
        ]
        found = {d.split("==")[0].lower(): d.split("==")[1] for d in every if "==" in d}
        return found[name.lower()]
    return {
        "training-operator-v1": pins.TRAINING_OPERATOR_V1_VERSION,
        "jobset": pins.JOBSET_VERSION,
        "kubernetes": DEFAULT_KUBERNETES_VERSION,
    }[pin]


def test_every_module_under_sim_is_a_listed_model_once():
    listed = [m["module"] for m in MODELS]
    modules = sorted(
        str(p.relative_to(REPO))
        for p in SIM.rglob("*.py")
        if p.name != "__init__.py" and "vendored" not in p.parts
    )
    assert sorted(listed) == modules
    assert len({m["name"] for m in MODELS}) == len(MODELS)


@pytest.mark.parametrize("model", MODELS, ids=[m["name"] for m in MODELS])
def test_a_model_names_its_upstream_at_the_pinned_version(model):
    assert model["kind"] in ("port", "upstream-code") and model["what"] and model["refresh"]
    assert model["upstream"], "a model mirrors at least one upstream project"
    for source in model["upstream"]:
        if source["pin"] == "eks-managed":  # a component EKS installs at a version of its choosing
            assert source.get("note"), f"{source['project']}: say which version EKS runs and why"
            continue
        version = pinned(source["pin"])
        ref = str(source["ref"])
        if TAG.match(ref):
            assert ref.removeprefix("v") == version, (
                f"{source['project']}@{ref} but {source['pin']} is {version}"
            )
        else:  # a branch or commit stands for the pinned release only with a reason
            assert source.get("note"), f"{source['project']}@{ref}: say why it stands for {version}"


@pytest.mark.parametrize("model", MODELS, ids=[m["name"] for m in MODELS])
def test_a_model_cites_every_source_it_mirrors(model):
    text = (REPO / model["module"]).read_text()
    for source in model["upstream"]:
        for path in source["mirrors"]:
            assert Path(path).name in text, f"{model['module']} does not cite {path}"


@pytest.mark.parametrize("model", MODELS, ids=[m["name"] for m in MODELS])
def test_a_models_tests_and_vendored_sources_exist(model):
    for test in model["tests"]:
        assert (REPO / test).is_file(), test
    for tree in model.get("vendored", []):
        assert (SIM / "vendored" / tree).is_dir(), tree


@pytest.mark.parametrize("model", [m for m in MODELS if "upstream_tests" in m], ids=lambda m: m["name"])
def test_an_upstream_test_table_is_vendored_or_says_why_not_and_runs_on_the_model(model):
    for table in model["upstream_tests"]:
        assert table["table"] and (REPO / table["test"]).is_file(), table
        if table["vendored"] is None:
            assert table.get("note"), f"{table['table']}: say why the table is not vendored"
            continue
        vendored = SIM / "vendored" / table["vendored"]
        assert vendored.is_file(), vendored
        owner, repo, tag, path = table["vendored"].split("/", 3)
        url = f"https://github.com/{owner}/{repo}/blob/{tag}/{path}"
        assert url in (SIM / "vendored" / "PROVENANCE.txt").read_text(), f"{url}: not in PROVENANCE.txt"
        assert Path(path).name in (REPO / table["test"]).read_text(), f"{table['test']} does not read it"
