"""`python -m workloads render`: the YAML a user reviews is the objects the program creates."""

from __future__ import annotations

import json

import yaml

from workloads.__main__ import main


def test_render_prints_every_object_as_yaml(capsys):
    assert main(["render", "--stack", "dev-zimdb"]) == 0
    out = capsys.readouterr()
    docs = [d for d in yaml.safe_load_all(out.out) if d and "awsResource" not in d]  # AWS: test_render_aws
    assert [d["kind"] for d in docs] == [
        "Namespace",
        "ResourceQuota",
        "ServiceAccount",
        "NetworkPolicy",
        "NetworkPolicy",
        "ConfigMap",
        "TrainingRuntime",
        "TrainJob",
    ]
    assert "facts from Pulumi.dev.yaml, derived offline" in out.err  # says where the facts came from


def test_render_reads_platform_outputs_from_a_file(capsys, tmp_path, dev_outputs):
    outputs = {**dev_outputs, "bucket_name": "my-real-bucket"}
    (tmp_path / "outputs.json").write_text(json.dumps(outputs))
    assert main(["render", "--stack", "dev-zimdb", "--platform-outputs", str(tmp_path / "outputs.json")]) == 0
    assert "s3://my-real-bucket/jobs/zimdb/checkpoints" in capsys.readouterr().out


def test_render_of_an_unknown_stack_lists_the_workload_stacks(capsys):
    assert main(["render", "--stack", "nope"]) == 2
    err = capsys.readouterr().err
    assert "no Pulumi.nope.yaml" in err and "dev-zimdb" in err
