"""The LLM workload stacks: the model staged once into the job's prefix, the Hub token from a Pulumi secret
through a Kubernetes Secret (never a plain value), and run-local's offline substitutions."""

from __future__ import annotations

import pulumi
import pytest
import yaml
from pulumi.runtime.rpc import _special_secret_sig, _special_sig_key

from workloads.local import LLM_SAMPLE, local_trainer_config
from workloads.render import HUB_TOKEN_PLACEHOLDER, render
from workloads.spec import SpecError, parse_spec
from workloads.stacks import load_stack

LLM_JOB = {
    "name": "llm",
    "accelerator": "t4",
    "gpusPerNode": 4,
    "imageTag": "0.1.0",
    "data": {"s3": "data/chat.jsonl"},
    "trainerConfig": {"llm": {"model": "hf:meta-llama/Llama-3.2-1B-Instruct"}},
}


def _trainer_config(objects: list[dict]) -> dict:
    (config,) = [o for o in objects if o["kind"] == "ConfigMap" and o["metadata"]["name"].endswith("-config")]
    return yaml.safe_load(config["data"]["config.yaml"])


def _env(objects: list[dict]) -> list[dict]:
    job = next(o for o in objects if o["kind"] == "TrainJob")
    return job["spec"]["trainer"]["env"]


@pytest.mark.parametrize(("stack", "job"), [("dev-llm", "llm-lora"), ("prod-llm", "llm-a100")])
def test_a_hub_model_is_staged_once_into_the_jobs_own_prefix(stack, job, dev_platform, prod_platform):
    platform = dev_platform if stack.startswith("dev") else prod_platform
    config = _trainer_config(render(load_stack(stack).spec, platform))
    prefix = f"s3://{platform.bucket_name}/jobs/{job}"
    assert config["llm"]["model_cache"] == f"{prefix}/model-cache"
    assert config["data"]["source"] == f"{prefix}/data/chat.jsonl"


def test_the_prod_stack_shards_a_7b_model_with_fsdp_across_both_nodes(prod_platform):
    spec = load_stack("prod-llm").spec
    assert spec.nodes == 2 and spec.gpus_per_node == 8
    config = _trainer_config(render(spec, prod_platform))
    assert config["train"]["parallelism"] == "fsdp" and config["train"]["precision"] == "bf16"
    assert "7B" in config["llm"]["model"] and config["llm"]["method"] == "lora"


def test_the_hub_token_reaches_the_pod_from_a_secret_never_as_a_value(dev_platform):
    objects = render(parse_spec({**LLM_JOB, "hubToken": True}), dev_platform)
    (secret,) = [o for o in objects if o["kind"] == "Secret"]
    assert secret["metadata"] == {
        "name": "llm-hf-token",
        "namespace": "llm",
        "labels": secret["metadata"]["labels"],
    }
    assert secret["stringData"] == {"token": HUB_TOKEN_PLACEHOLDER}  # the engine fills in the secret
    token = [e for e in _env(objects) if e["name"] == "HF_TOKEN"]
    assert token == [
        {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "llm-hf-token", "key": "token"}}}
    ]
    plain = render(parse_spec(LLM_JOB), dev_platform)
    assert not [o for o in plain if o["kind"] == "Secret"]
    assert "HF_TOKEN" not in {e["name"] for e in _env(plain)}


def test_a_token_in_the_jobs_env_is_refused(dev_platform):
    with pytest.raises(SpecError, match="env.HF_TOKEN.*hubToken: true"):
        parse_spec({**LLM_JOB, "env": {"HF_TOKEN": "hf_abc"}})


def _stack_file(tmp_path, **config) -> str:
    text = yaml.safe_dump({"config": {"mlops-eks:platformStack": "dev", **config}})
    (tmp_path / "Pulumi.dev-mine.yaml").write_text(text)
    return "dev-mine"


def test_the_stack_file_holds_the_token_only_encrypted_and_when_the_job_asks_for_it(tmp_path):
    job = {"mlops-eks:job": {**LLM_JOB, "hubToken": True}}
    with pytest.raises(SpecError, match="mlops-eks:hfToken: a plaintext token in the stack file"):
        load_stack(_stack_file(tmp_path, **job, **{"mlops-eks:hfToken": "hf_abc"}), tmp_path)
    with pytest.raises(SpecError, match="hubToken is true but mlops-eks:hfToken is unset"):
        load_stack(_stack_file(tmp_path, **job), tmp_path)
    secure = {"mlops-eks:hfToken": {"secure": "v1:abcdef"}}
    assert load_stack(_stack_file(tmp_path, **job, **secure), tmp_path).spec.hub_token


def _deploy(workload_mocks, job: dict, token: str | None):
    mocks = workload_mocks(job)
    if token is not None:
        pulumi.runtime.set_config("mlops-eks:hfToken", token)

    @pulumi.runtime.test
    def run():
        from workloads.program import program

        program()

    run()
    return mocks


def test_the_program_makes_the_secret_from_the_secret_config(workload_mocks):
    mocks = _deploy(workload_mocks, {**LLM_JOB, "hubToken": True}, "hf_abc")
    (secret,) = mocks.of_type("kubernetes:core/v1:Secret")
    # Sent to the engine as a secret (encrypted in the state, shown as [secret]), never as a plain value.
    secret_token = {_special_sig_key: _special_secret_sig, "value": {"token": "hf_abc"}}
    assert secret.inputs["stringData"] == secret_token
    assert secret.inputs["metadata"]["name"] == "llm-hf-token"
    (job,) = mocks.of_type("kubernetes:trainer.kubeflow.org/v1alpha1:TrainJob")
    assert {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "llm-hf-token", "key": "token"}}} in (
        job.inputs["spec"]["trainer"]["env"]
    )


def test_a_job_asking_for_the_token_without_it_creates_nothing(workload_mocks):
    with pytest.raises(
        Exception, match="hubToken is true but the secret config mlops-eks:hfToken is not set"
    ):
        _deploy(workload_mocks, {**LLM_JOB, "hubToken": True}, None)


def test_run_local_trains_the_tiny_model_on_the_sample_records_unless_told_otherwise(tmp_path, capsys):
    stack = load_stack("dev-llm")
    config = local_trainer_config(stack, tmp_path, [])
    assert config["llm"]["model"] == "tiny" and "model_cache" not in config["llm"]
    assert config["data"]["source"] == str(LLM_SAMPLE)
    assert config["train"] == {**stack.spec.trainer_config["train"], "device": "cuda"}  # the job's own
    out = capsys.readouterr().out
    assert "llm.model hf:Qwen/Qwen2.5-0.5B-Instruct -> tiny" in out and "llm-chat.jsonl" in out
    kept = local_trainer_config(stack, tmp_path, ["--llm.model", "/models/mine", "--data.source", "x.jsonl"])
    assert kept["llm"]["model"].startswith("hf:") and kept["data"]["source"].startswith("s3://local/")
