"""Stack files read as the Pulumi CLI reads them (go-yaml v3, infra/config/go_yaml.py), by every offline
command alike: a key given twice and a YAML 1.1 boolean (`yes`, `on`) used to pass `synth` and `check` (the
second value silently winning, `yes` read as true) while the CLI refuses or reads them otherwise. Each is
now refused by `infra synth` and `infra check` with the same reason, and a workload stack's the same way.
Recorded in the fault ledger ("bad input: files")."""

from __future__ import annotations

import shutil

import pytest

from infra.__main__ import main as infra_main
from infra.tools.synth import REPO
from workloads.spec import SpecError
from workloads.stacks import load_stack

DEV = (REPO / "Pulumi.dev.yaml").read_text()
TRICKY = [
    ("duplicate-key", DEV.replace("  mlops-eks:natGateways: single\n",
     "  mlops-eks:natGateways: single\n  mlops-eks:natGateways: perAz\n"),
     'mapping key "mlops-eks:natGateways" already defined'),
    ("yaml-1-1-boolean-yes",
     DEV.replace("mlops-eks:endpointPublicAccess: true", "mlops-eks:endpointPublicAccess: yes"),
     "got 'yes'; allowed: true or false"),
]  # fmt: skip


@pytest.mark.parametrize(("case", "text", "says"), TRICKY, ids=[c[0] for c in TRICKY])
def test_synth_and_check_give_one_verdict_on_a_tricky_stack_file(ledger, tmp_path, capsys, case, text, says):
    assert text != DEV
    stack_file = tmp_path / "Pulumi.dev.yaml"
    stack_file.write_text(text)
    verdicts = {}
    for command in ("synth", "check"):
        code = infra_main([command, "--stack", "dev", "--file", str(stack_file)])
        verdicts[command] = (code, capsys.readouterr())
    errors = {c: out.err + out.out for c, (_, out) in verdicts.items()}
    entry = ledger("bad input: files", f"platform-{case}", error=errors["synth"] if verdicts["synth"][0] == 2
                   else None, names="mlops-eks:")  # fmt: skip
    assert {c: code for c, (code, _) in verdicts.items()} == {"synth": 2, "check": 2}, errors
    assert entry.clear and all(says in e for e in errors.values()), errors


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
