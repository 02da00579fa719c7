"""sim/models.yaml stays true: every model in sim/ is listed once, with upstream versions that are the
ones the platform pins, source paths the model cites, tests and vendored files that exist, and, for every
port, the upstream test tables a test module runs on it (or why upstream has none)."""

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


def test_a_version_that_drifts_from_its_pin_is_caught():
    """The check can fail: a ref one patch release off the pin."""
    drifted = {"project": "kubernetes-sigs/kueue", "pin": "chart:kueue", "ref": "v0.19.1", "mirrors": []}
    with pytest.raises(AssertionError, match="v0.19.1 but chart:kueue is 0.19.2"):
        test_a_model_names_its_upstream_at_the_pinned_version(
            {"kind": "port", "what": "x", "refresh": "x", "upstream": [drifted]}
        )


# Ports whose upstream test tables are being added by another change; each leaves this set when its
# `upstream_tests` lands (test_every_port_names_its_upstream_tests then fails until it does).
UPSTREAM_TESTS_PENDING: set[str] = set()
UPSTREAM_TEST_FILE = re.compile(r"(_test\.go|\.test\.ts)$")


def ports_without_upstream_tests(models: list[dict]) -> set[str]:
    return {m["name"] for m in models if m["kind"] == "port" and "upstream_tests" not in m}


def test_every_port_names_its_upstream_tests():
    assert ports_without_upstream_tests(MODELS) == UPSTREAM_TESTS_PENDING


@pytest.mark.parametrize("model", [m for m in MODELS if "upstream_tests" in m], ids=lambda m: m["name"])
def test_a_models_upstream_tests_exist_and_are_run(model):
    tables = model["upstream_tests"]
    if "none" in tables:
        assert tables["none"] and set(tables) == {"none"}, "say why upstream has no table, and only that"
        return
    module = REPO / tables["module"]
    assert module.is_file() and module.name.startswith("test_"), tables["module"]
    text = module.read_text()
    files, transcribed = tables.get("files") or [], tables.get("not_vendored") or []
    assert files or transcribed, "name the vendored tables, or the transcribed ones and why"
    provenance = (SIM / "vendored" / "PROVENANCE.txt").read_text()
    for file in files:
        assert (SIM / "vendored" / file).is_file(), file
        assert Path(file).name in text, f"{tables['module']} does not read {file}"
        owner, repo, ref, path = file.split("/", 3)
        url = f"https://github.com/{owner}/{repo}/blob/{ref}/{path}"
        assert url in provenance, f"{url}: not in sim/vendored/PROVENANCE.txt"
    for entry in transcribed:
        assert entry["source"] and entry["why"], entry


def test_every_vendored_test_table_belongs_to_a_model():
    vendored = {
        str(p.relative_to(SIM / "vendored"))
        for p in (SIM / "vendored").rglob("*")
        if p.is_file() and UPSTREAM_TEST_FILE.search(p.name)
    }
    listed = {f for m in MODELS for f in (m.get("upstream_tests") or {}).get("files") or []}
    assert vendored == listed


def test_a_port_without_its_tables_is_caught():
    """The checks can fail: a new port without upstream_tests, and a module that runs no vendored table."""
    assert ports_without_upstream_tests(
        [*MODELS, {"name": "new", "kind": "port"}]
    ) - UPSTREAM_TESTS_PENDING == {"new"}
    unread = {
        "module": "tests/sim/test_scheduling.py",
        "files": ["pulumi/pulumi/1b59498/pkg/workspace/config_test.go"],
    }
    with pytest.raises(AssertionError, match="does not read"):
        test_a_models_upstream_tests_exist_and_are_run({"upstream_tests": unread})
