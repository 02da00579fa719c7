"""Stack files read as the Pulumi CLI reads them (go-yaml v3, infra/config/go_yaml.py), by every offline
command alike: a key given twice and a YAML 1.1 boolean (`yes`, `on`) used to pass `synth` and `check` (the
second value silently winning, `yes` read as true) while the CLI refuses or reads them otherwise. Each is
now refused by `infra synth`, `infra check` and `infra rehearse` with the same reason, and a workload stack's
the same way. An unquoted `kubernetesVersion: 1.35` is a YAML float the CLI hands over as its JSON text
"1.35" (sim/pulumi/merge_config.py go_json_float): every command reads it as the quoted version, and `1.30`
("1.3") is refused by each. Recorded in the fault ledger ("bad input: files")."""

from __future__ import annotations

import shutil

import pytest

from infra.__main__ import main as infra_main
from infra.tools.rehearse import Rehearsal
from infra.tools.synth import REPO, platform_stack_config
from sim.pulumi.language_host import engine_values
from workloads.spec import SpecError
from workloads.stacks import load_stack

DEV = (REPO / "Pulumi.dev.yaml").read_text()
TRICKY = [
    ("duplicate-key", DEV.replace("  mlops-eks:natGateways: single\n",
     "  mlops-eks:natGateways: single\n  mlops-eks:natGateways: perAz\n"),
     'mapping key "mlops-eks:natGateways" already defined'),
    ("yaml-1-1-boolean-yes",
     DEV.replace("mlops-eks:endpointPublicAccess: true", "mlops-eks:endpointPublicAccess: yes"),
     {"synth": "got 'yes'; allowed: true or false", "check": "got 'yes'; allowed: true or false",
      # The CLI's own words (validateStackConfigValue): go-yaml v3 reads `yes` as a string.
      "rehearse": "configuration key 'endpointPublicAccess' must be of type 'boolean'"}),
    ("unquoted-version-shortened",
     DEV.replace('mlops-eks:kubernetesVersion: "1.35"', "mlops-eks:kubernetesVersion: 1.30"),
     "got '1.3'; allowed: \"1.33\", \"1.34\", \"1.35\""),
]  # fmt: skip
QUOTED, UNQUOTED = 'mlops-eks:kubernetesVersion: "1.35"', "mlops-eks:kubernetesVersion: 1.35"


@pytest.mark.parametrize(("case", "text", "says"), TRICKY, ids=[c[0] for c in TRICKY])
def test_synth_check_and_rehearse_give_one_verdict_on_a_tricky_stack_file(
    ledger, tmp_path, capsys, case, text, says
):
    assert text != DEV
    stack_file = tmp_path / "Pulumi.dev.yaml"
    stack_file.write_text(text)
    verdicts = {}
    for command in ("synth", "check", "rehearse"):
        code = infra_main([command, "--stack", "dev", "--file", str(stack_file)])
        verdicts[command] = (code, capsys.readouterr())
    errors = {c: out.err + out.out for c, (_, out) in verdicts.items()}
    entry = ledger("bad input: files", f"platform-{case}", error=errors["synth"] if verdicts["synth"][0] == 2
                   else None, names="mlops-eks:")  # fmt: skip
    assert {c: code for c, (code, _) in verdicts.items()} == {"synth": 2, "check": 2, "rehearse": 2}, errors
    says = says if isinstance(says, dict) else dict.fromkeys(errors, says)
    assert entry.clear and all(says[c] in e for c, e in errors.items()), errors


def test_an_unquoted_version_reads_as_the_quoted_one_in_every_command(tmp_path, capsys):
    """The CLI's reading (rehearse's merge) and synth's hand-over give the program the same "1.35", and
    check finds the unquoted file's config valid, saying nothing of the version."""
    assert QUOTED in DEV
    (tmp_path / "quoted").mkdir()
    (tmp_path / "unquoted").mkdir()
    (tmp_path / "quoted" / "Pulumi.dev.yaml").write_text(DEV)
    (tmp_path / "unquoted" / "Pulumi.dev.yaml").write_text(DEV.replace(QUOTED, UNQUOTED))
    handed = {}
    for form in ("quoted", "unquoted"):
        path = tmp_path / form / "Pulumi.dev.yaml"
        session = Rehearsal()
        merged, _ = session.merged("dev", session.stack_config("dev", path)[0])
        synth_values, _ = engine_values(platform_stack_config("dev", path))
        handed[form] = (merged["mlops-eks:kubernetesVersion"], synth_values["mlops-eks:kubernetesVersion"])
    assert handed == {"quoted": ("1.35", "1.35"), "unquoted": ("1.35", "1.35")}
    infra_main(["check", "--stack", "dev", "--file", str(tmp_path / "unquoted" / "Pulumi.dev.yaml")])
    checked = capsys.readouterr().out
    assert "config: valid" in checked and "kubernetesVersion" not in checked, checked


def test_a_workload_stack_file_with_a_key_twice_is_refused_naming_the_lines(ledger, tmp_path):
    shutil.copy(REPO / "Pulumi.dev.yaml", tmp_path / "Pulumi.dev.yaml")
    text = (
        (REPO / "Pulumi.dev-zimdb.yaml")
        .read_text()
        .replace("    nodes: 1\n", "    nodes: 1\n    nodes: 2\n", 1)
    )
    assert "nodes: 2" in text
    (tmp_path / "Pulumi.dev-zimdb.yaml").write_text(text)
    try:
        load_stack("dev-zimdb", tmp_path)
        error = None
    except SpecError as err:
        error = str(err)
    entry = ledger("bad input: files", "workload-duplicate-key", error=error, names="Pulumi.dev-zimdb.yaml")
    assert entry.clear and 'mapping key "nodes" already defined at line' in (error or ""), error
