"""Command-line input the `workloads` commands used to answer with a traceback or to take silently: an --out
that names a file, a kubeconfig that is not one, the platform's GPU check run on a CPU, a second trainer
--config after `run-local --`. Each exits 2 before anything runs, naming the flag or file and what is
allowed. Recorded in the fault ledger ("bad input: CLI")."""

from __future__ import annotations

import pytest

from workloads.__main__ import main as workloads_main

KUBECONFIGS = [
    ("kubeconfig-not-yaml", "apiVersion: v1\nclusters: [ {cluster: }\n"),
    ("kubeconfig-clusters-a-number", "apiVersion: v1\nkind: Config\nclusters: 5\n"),
    ("kubeconfig-a-list", "- one\n- two\n"),
]


@pytest.mark.parametrize(("case", "content"), KUBECONFIGS, ids=[c[0] for c in KUBECONFIGS])
def test_a_malformed_kubeconfig_exits_2_naming_the_file(ledger, tmp_path, capsys, case, content):
    pytest.importorskip("kubernetes")
    kubeconfig = tmp_path / "kube.yaml"
    kubeconfig.write_text(content)
    code = workloads_main(["status", "--stack", "dev-zimdb", "--kubeconfig", str(kubeconfig)])
    error = capsys.readouterr().err
    entry = ledger("bad input: CLI", case, error=error if code == 2 else None, names=str(kubeconfig))
    assert code == 2 and entry.clear and "expected a kubeconfig" in error, error


def test_run_local_out_naming_a_file_exits_2(ledger, tmp_path, capsys):
    out = tmp_path / "a-file"
    out.write_text("")
    code = workloads_main(["run-local", "--stack", "dev-zimdb", "--out", str(out)])
    error = capsys.readouterr().err
    entry = ledger(
        "bad input: CLI", "run-local-out-a-file", error=error if code == 2 else None, names="--out"
    )
    assert code == 2 and entry.clear and "allowed: a directory" in error, error
    assert out.read_text() == ""


def test_the_gpu_check_under_run_local_says_how_to_run_it_on_cpu(ledger, tmp_path, capsys):
    code = workloads_main(["run-local", "--stack", "dev-gpu-check", "--out", str(tmp_path)])
    error = capsys.readouterr().err
    entry = ledger(
        "bad input: CLI", "run-local-gpu-check", error=error if code == 2 else None, names="gpu_check.py"
    )
    assert code == 2 and entry.clear and "-- --device cpu --expect-gpus 0" in error, error


def test_run_local_refuses_a_second_trainer_config_that_would_replace_the_jobs(ledger, tmp_path, capsys):
    mine = tmp_path / "mine.yaml"
    mine.write_text("train: {max_steps: 5}\n")
    code = workloads_main(
        ["run-local", "--stack", "dev-zimdb", "--out", str(tmp_path), "--", "--config", str(mine)]
    )
    error = capsys.readouterr().err
    entry = ledger("bad input: CLI", "run-local-second-config", error=error if code == 2 else None,
                   names="--config")  # fmt: skip
    assert code == 2 and entry.clear and "--<section>.<field> VALUE" in error, error
    assert not (tmp_path / "dev-zimdb").exists()  # nothing ran, no run directory


def test_facts_from_an_invalid_platform_stack_file_name_the_file(ledger, tmp_path):
    from workloads.platform import PlatformOutputsError, derived_facts

    stack_file = tmp_path / "Pulumi.dev.yaml"
    stack_file.write_text("config:\n  mlops-eks:natGateways: several\n")
    try:
        derived_facts(stack_file)
        error = None
    except PlatformOutputsError as err:
        error = str(err)
    entry = ledger("bad input: files", "platform-stack-invalid-for-facts", error=error, names=str(stack_file))
    assert entry.clear and "mlops-eks:natGateways" in (error or ""), error


def test_platform_examples_names_an_invalid_stack_file_and_writes_the_others(ledger, monkeypatch, capsys):
    from infra.config.errors import ConfigError
    from scripts import platform_examples

    written = {}

    def exports(stack: str) -> dict:
        if stack == "dev":
            raise ConfigError(["mlops-eks:natGateways: got 'several'; allowed: single or perAz"])
        return {"cluster_name": f"mlops-eks-{stack}"}

    monkeypatch.setattr(platform_examples, "platform_exports", exports)
    monkeypatch.setattr(
        platform_examples.Path, "write_text", lambda self, text: written.update({self.name: text})
    )
    code = platform_examples.main([])
    error = capsys.readouterr().err
    entry = ledger("bad input: files", "platform-examples-invalid-stack", error=error if code == 2 else None,
                   names="Pulumi.dev.yaml")  # fmt: skip
    assert code == 2 and entry.clear and "platform-dev.json not written" in error, error
    assert list(written) == ["platform-prod.json"]
