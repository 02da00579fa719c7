"""`{s3: <path>}` for the trainerConfig keys the job reads from S3 (a validation file, an LLM's model):
resolved under the job's prefix in the bucket the platform exports, offline from the platform stack file,
from a deployed stack's outputs, and at deploy from the StackReference, and followed to the file the
trainer reads in the pod."""

from __future__ import annotations

import copy
import json
import posixpath
from pathlib import Path

import pulumi
import pytest
import yaml

from infra.tools.synth import REPO, read_stack_file
from sim.operators.pods import operator_pods
from workloads.__main__ import platform_facts
from workloads.identity import aws_resources
from workloads.local import local_trainer_config
from workloads.plan import plan
from workloads.platform import PlatformFacts
from workloads.render import render
from workloads.spec import SpecError, parse_spec
from workloads.stacks import WorkloadStack

ZIMDB = read_stack_file(REPO / "Pulumi.dev-zimdb.yaml")["mlops-eks:job"]
LLM = read_stack_file(REPO / "Pulumi.dev-llm.yaml")["mlops-eks:job"]


def _with(job: dict, section: str, key: str, value: object) -> dict:
    changed = copy.deepcopy(job)
    changed.setdefault("trainerConfig", {}).setdefault(section, {})[key] = value
    return changed


def trainer_configs_in_pods(objects: list[dict], facts: PlatformFacts) -> list[dict]:
    """The config each trainer container reads: its `--config` file, through the pod's volume mount, in the
    ConfigMap that volume names; one per pod, as the operators create the pods."""
    maps = {o["metadata"]["name"]: o["data"] for o in objects if o["kind"] == "ConfigMap"}
    configs = []
    for pod in operator_pods(objects, facts):
        volumes = {v["name"]: v for v in pod.spec["volumes"]}
        for container in pod.spec["containers"]:
            argv = [*container.get("command", []), *container.get("args", [])]
            if "--config" not in argv:
                continue
            path = argv[argv.index("--config") + 1]
            (mount,) = [m for m in container["volumeMounts"] if m["mountPath"] == posixpath.dirname(path)]
            config_map = volumes[mount["name"]]["configMap"]["name"]
            configs.append(yaml.safe_load(maps[config_map][posixpath.basename(path)]))
    return configs


@pytest.fixture
def deployed_outputs(tmp_path, dev_outputs) -> str:
    """`pulumi stack output --json` of a deployed dev platform, with its random bucket name."""
    path = tmp_path / "outputs.json"
    path.write_text(json.dumps({**dev_outputs, "bucket_name": "mlops-eks-dev-3f9a1c2"}))
    return str(path)


@pytest.mark.parametrize(
    ("outputs", "bucket"),
    [(None, "mlops-eks-dev-known-after-deploy"), ("deployed", "mlops-eks-dev-3f9a1c2")],
    ids=["derived-offline", "platform-outputs"],
)
def test_a_validation_file_under_the_jobs_prefix_reaches_every_pod_as_a_url_in_the_platform_bucket(
    outputs, bucket, deployed_outputs
):
    facts, _ = platform_facts("dev", Path(deployed_outputs) if outputs else None)
    spec = parse_spec(_with(ZIMDB | {"data": {"s3": "data/train.jsonl"}}, "data", "val_source",
                            {"s3": "data/val.jsonl"}))  # fmt: skip
    configs = trainer_configs_in_pods(render(spec, facts), facts)
    assert len(configs) == spec.nodes and configs
    for config in configs:
        assert config["data"]["source"] == f"s3://{bucket}/jobs/zimdb/data/train.jsonl"
        assert config["data"]["val_source"] == f"s3://{bucket}/jobs/zimdb/data/val.jsonl"
    stack = WorkloadStack("dev-zimdb", "dev", spec)
    result = plan(stack, facts, "test")
    assert result.runs, result.text()


def test_an_llm_model_directory_under_the_jobs_prefix_resolves_and_gets_the_job_its_role():
    facts, _ = platform_facts("dev", None)
    # Everything else on volumes: the model directory alone is in S3, and the role must still exist.
    pvc = {"pvc": {"claim": "team-files"}}
    job = _with(LLM | {"data": {**pvc, "path": "chat.jsonl"}, "checkpoint": pvc, "output": pvc},
                "llm", "model", {"s3": "models/qwen-base/"})  # fmt: skip
    spec = parse_spec(job)
    (config, *_) = trainer_configs_in_pods(render(spec, facts), facts)
    assert config["llm"]["model"] == f"s3://{facts.bucket_name}/jobs/llm-lora/models/qwen-base"
    (role_policy,) = [
        r for r in aws_resources(spec, facts) if r["awsResource"] == "aws:iam/rolePolicy:RolePolicy"
    ]
    assert f"arn:aws:s3:::{facts.bucket_name}/jobs/llm-lora/*" in json.dumps(role_policy)


def test_the_deployed_job_reads_the_bucket_its_platform_stack_exports(workload_mocks, dev_outputs):
    job = _with(ZIMDB | {"data": {"s3": "data/train.jsonl"}}, "data", "val_source", {"s3": "data/val.jsonl"})
    mocks = workload_mocks(job, {**dev_outputs, "bucket_name": "mlops-eks-dev-3f9a1c2"})

    @pulumi.runtime.test
    def run():
        from workloads.program import program

        program()

    run()
    (config_map,) = [
        r for r in mocks.of_type("kubernetes:core/v1:ConfigMap") if r.name == "zimdb-trainer-config-configmap"
    ]
    config = yaml.safe_load(config_map.inputs["data"]["config.yaml"])
    assert config["data"]["val_source"] == "s3://mlops-eks-dev-3f9a1c2/jobs/zimdb/data/val.jsonl"


def test_run_local_asks_for_a_local_validation_file_or_leaves_it_out_beside_the_llm_sample(tmp_path, capsys):
    job = _with(ZIMDB, "data", "val_source", {"s3": "data/val.jsonl"})
    stack = WorkloadStack("dev-zimdb", "dev", parse_spec(job))
    refused = r"val_source: s3://local/jobs/zimdb/data/val.jsonl is not readable from this machine; allowed: "
    with pytest.raises(SpecError, match=refused + "`-- --data.val_source FILE`"):
        local_trainer_config(stack, tmp_path, [])
    # Not refused with the flag: the trainer applies it over the config's URL.
    local_trainer_config(stack, tmp_path, ["--data.val_source", "val.jsonl"])
    llm = WorkloadStack("dev-llm", "dev", parse_spec(_with(LLM, "data", "val_source", {"s3": "val.jsonl"})))
    assert "val_source" not in local_trainer_config(llm, tmp_path, [])["data"]
    assert "data.val_source s3://local/jobs/llm-lora/val.jsonl -> none" in capsys.readouterr().out
