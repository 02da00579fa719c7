"""Bad job specs (`mlops-eks:job`) and workload stack files a user types: vendor mismatches (image,
accelerator, device, precision), names that must exist on the platform (queue, pool, PriorityClass,
platform stack), environment and ports the operators own, paths the pod cannot keep, units and YAML
numbers. Each is refused by parse_spec and place, which the workload program runs before it creates
anything (tests/faults/test_job_spec_faults.py runs that path under mocks, some of these cases included),
with a message naming the key, the value and what is allowed. Recorded in the fault ledger
("bad input: job", "bad input: files")."""

from __future__ import annotations

import copy
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from infra.__main__ import main as infra_main
from infra.tools.synth import REPO, read_stack_file
from workloads.__main__ import main as workloads_main
from workloads.placement import place
from workloads.platform import example_outputs_path, load_platform_outputs
from workloads.spec import SpecError, parse_spec
from workloads.stacks import check_platform_stack, load_stack

JOB = read_stack_file(REPO / "Pulumi.dev-zimdb.yaml")["mlops-eks:job"]
DELETE = object()


def job(**changes: Any) -> Callable[[dict], None]:
    """A change to the dev-zimdb job: top-level keys, or `section__key` inside trainerConfig."""

    def apply(spec: dict) -> None:
        for key, value in changes.items():
            if "__" in key:
                section, field = key.split("__")
                spec.setdefault("trainerConfig", {}).setdefault(section, {})[field] = value
            elif value is DELETE:
                spec.pop(key, None)
            else:
                spec[key] = value

    return apply


AMD = {"accelerator": "amd-v520", "gpusPerNode": 1}
# (case, change, platform, key the message names, what it shows of the value, what else it says)
CASES = [
    ("image-repository-rocm-on-nvidia", job(imageRepository="rocm"), "dev", "imageRepository", "'rocm'",
     "allowed: cuda"),
    ("image-repository-cuda-on-amd", job(**AMD, imageRepository="cuda"), "dev", "imageRepository", "'cuda'",
     "allowed: rocm"),
    ("image-repository-cpu-on-gpus", job(imageRepository="cpu"), "dev", "imageRepository", "'cpu'",
     "would sit idle"),
    ("trainer-device-cpu-on-gpus", job(train__device="cpu"), "dev", "trainerConfig.train.device", "'cpu'",
     "allowed: auto or cuda"),
    ("trainer-bf16-on-t4", job(train__precision="bf16"), "dev", "trainerConfig.train.precision", "'bf16'",
     "NVIDIA T4 (sm_75) has no bf16"),
    ("trainer-bf16-on-v520", job(**AMD, train__precision="bf16"), "dev", "trainerConfig.train.precision",
     "'bf16'", "(gfx1011) has no bf16"),
    ("priority-on-a-platform-without-any", job(priority="high"), "dev", "priority", "'high'",
     "none defined"),
    ("priority-typo", job(accelerator="a100", gpusPerNode=8, spotTolerant=False, queue="research",
                          priority="training-hihg"), "prod", "priority", "'training-hihg'",
     "allowed: training-high"),
    ("priority-system-class", job(priority="system-node-critical"), "dev", "priority",
     "'system-node-critical'", "not a PriorityClass of mlops-eks-dev"),
    ("accelerator-case", job(accelerator="T4"), "dev", "accelerator", "'T4'", "did you mean 't4'?"),
    ("queue-typo", job(queue="ml-tem"), "dev", "queue", "'ml-tem'", "allowed: ml-team"),
    ("pool-typo", job(pool="t-4"), "dev", "pool", "'t-4'", "allowed: t4"),
    ("namespace-upper-case", job(namespace="Team-A"), "dev", "namespace", "'Team-A'", "lowercase letters"),
    ("name-underscore", job(name="zimdb_v2"), "dev", "name", "'zimdb_v2'", "lowercase letters"),
    ("name-too-long", job(name="z" * 41), "dev", "name", "zzzz", "at most 40 characters"),
    ("gpus-fraction", job(gpusPerNode=2.5), "dev", "gpusPerNode", "2.5", "a whole number"),
    ("cpu-in-millicores", job(cpuPerNode="8000m"), "dev", "cpuPerNode", "'8000m'", "allowed: 8 (vCPUs"),
    ("cpu-in-words", job(cpuPerNode="8 cores"), "dev", "cpuPerNode", "'8 cores'", "in vCPUs"),
    ("memory-with-unit", job(memoryGiBPerNode="64Gi"), "dev", "memoryGiBPerNode", "'64Gi'", "in GiB"),
    ("shm-with-unit", job(shmGiB="8Gi"), "dev", "shmGiB", "'8Gi'", "in GiB"),
    ("max-runtime-in-days", job(maxRuntimeHours="3d"), "dev", "maxRuntimeHours", "'3d'", "in hours"),
    ("ttl-in-hours", job(ttlSecondsAfterFinished="1h"), "dev", "ttlSecondsAfterFinished", "'1h'",
     "in seconds"),
    ("max-runtime-zero", job(maxRuntimeHours=0), "dev", "maxRuntimeHours", "0", "a number > 0"),
    ("operator-case", job(operator="PyTorchJob"), "dev", "operator", "'PyTorchJob'",
     "did you mean 'pytorchjob'?"),
    ("operator-unknown", job(operator="deepspeed"), "dev", "operator", "'deepspeed'", "'trainjob'"),
    ("checkpoint-s3-url", job(checkpoint={"s3": "s3://bucket/x"}), "dev", "checkpoint.s3", "'s3://bucket/x'",
     "not an s3:// URL"),
    ("checkpoint-size-in-gb", job(checkpoint={"pvc": {"size": "50GB"}}), "dev", "checkpoint.pvc.size",
     "'50GB'", "e.g. 50Gi"),
    ("storage-class-with-space", job(checkpoint={"pvc": {"size": "50Gi", "storageClass": "EFS SC"}}), "dev",
     "checkpoint.pvc.storageClass", "'EFS SC'", "a StorageClass name"),
    ("claim-upper-case", job(checkpoint={"pvc": {"claim": "MyClaim"}}), "dev", "checkpoint.pvc.claim",
     "'MyClaim'", "lowercase letters"),
    ("env-unquoted-number", job(env={"NCCL_DEBUG": 1}), "dev", "env.NCCL_DEBUG", "1", '"1" quoted'),
    ("env-a-list", job(env=["A=1"]), "dev", "env", "['A=1']", "a mapping"),
    ("env-name-with-equals", job(env={"A=B": "1"}), "dev", "env.A=B", "'A=B'", "without '='"),
    ("env-rank", job(env={"RANK": "0"}), "dev", "env.RANK", "RANK='0'", "torchrun and the operator"),
    ("env-master-addr", job(env={"MASTER_ADDR": "10.0.0.1"}), "dev", "env.MASTER_ADDR", "'10.0.0.1'",
     "allowed: any other name"),
    ("env-kubeflow-setting", job(env={"PET_NNODES": "3"}), "dev", "env.PET_NNODES", "'3'",
     "Kubeflow's torchrun settings"),
    # A credential is named, never echoed.
    ("env-aws-secret-key", job(env={"AWS_SECRET_ACCESS_KEY": "abc"}), "dev", "env.AWS_SECRET_ACCESS_KEY",
     "AWS_SECRET_ACCESS_KEY=<redacted>", "through Pod Identity"),
    ("env-home", job(env={"HOME": "/root"}), "dev", "env.HOME", "'/root'", "read-only"),
    ("image-tag-unquoted-float", job(imageTag=1.1), "dev", "imageTag", "1.1", "1.30 becomes 1.3"),
    ("image-tag-unquoted-int", job(imageTag=1), "dev", "imageTag", "1", "written as quoted text"),
    ("image-digest-malformed", job(imageTag=DELETE, image="repo/x@sha256:abc"), "dev", "image",
     "'repo/x@sha256:abc'", "64 lowercase hex digits"),
    ("image-repository-upper-case", job(imageTag=DELETE, image="MyRepo/trainer:1"), "dev", "image",
     "'MyRepo/trainer:1'", "lowercase path components"),
    ("metrics-port-on-the-rendezvous", job(output__metrics_port=29500, output=DELETE), "dev",
     "trainerConfig.output.metrics_port", "29500", "e.g. 9464"),
    ("metrics-port-on-the-pytorchjob-master", job(operator="pytorchjob", nodes=2, gpusPerNode=1,
                                                  output__metrics_port=23456, output=DELETE), "dev",
     "trainerConfig.output.metrics_port", "23456", "PyTorchJob master port"),
    ("metrics-port-on-ray-dashboard", job(operator="rayjob", gpusPerNode=2, output__metrics_port=8265,
                                          output=DELETE), "dev",
     "trainerConfig.output.metrics_port", "8265", "Ray's dashboard"),
    ("checkpoint-dir-on-read-only-root", job(checkpoint=None, checkpoint__dir="/ckpt"), "dev",
     "trainerConfig.checkpoint.dir", "'/ckpt'", "read-only root filesystem"),
    ("output-dir-in-pod-tmp", job(output=None, output__dir="/tmp/out"), "dev", "trainerConfig.output.dir",
     "'/tmp/out'", "go with the pod"),
    ("program-args-a-string", job(program={"args": "--x 1"}), "dev", "program.args", "'--x 1'", "a list"),
    ("elastic-on-a-trainjob", job(elastic={"minNodes": 1, "maxNodes": 2}), "dev", "elastic",
     "elastic", "operator: pytorchjob"),
    ("data-on-a-new-empty-volume", job(data={"pvc": {"size": "10Gi"}}), "dev", "data", "size",
     "`pvc: {claim: <existing>}`"),
    ("trainer-section-unknown", job(optim__lr=1), "dev", "trainerConfig", "'optim'",
     "allowed data, model, train"),
    ("trainer-model-without-hf-prefix", job(model__name="bert-base-uncased"), "dev", "trainerConfig",
     "'bert-base-uncased'", "'hf:<model>'"),
    ("trainer-source-other-scheme", job(data__source="gs://bucket/x.jsonl"), "dev", "trainerConfig",
     "'gs://bucket/x.jsonl'", "no other URL scheme"),
    ("restart-budget-with-suffix", job(restartBudget="3x"), "dev", "restartBudget", "'3x'", "no 'x'"),
    ("procs-zero", job(procsPerNode=0), "dev", "procsPerNode", "0", "a number >= 1"),
    ("queue-on-a-rayjob", job(operator="rayjob", gpusPerNode=2, queue="ml-team"), "dev", "queue",
     "'ml-team'", "leave queue unset"),
    ("kueue-queue-on-an-mpijob", job(operator="mpijob", gpusPerNode=1, queue="ml-team"), "dev", "queue",
     "'ml-team'", "leave queue unset"),
    # the advice is what the next run accepts: a unit, not the bare number quoted
    ("pvc-size-unquoted-number", job(checkpoint={"pvc": {"size": 10}}), "dev", "checkpoint.pvc.size", "10",
     "a size with a binary unit, e.g. 50Gi"),
    # a leading '/' was dropped when the key was joined under the job's prefix
    ("output-s3-absolute-path", job(output={"s3": "/abs"}), "dev", "output.s3", "'/abs'",
     "without a leading '/'"),
    # the advice named a job key `llm: {s3: ...}` that does not exist
    ("llm-model-outside-the-prefix",
     job(llm__model="s3://other/x", data__source="s3://b/jobs/zimdb/x.jsonl"), "dev",
     "trainerConfig.llm.model", "'s3://other/x'", "allowed: `trainerConfig.llm.model: {s3: <path under "
     "jobs/zimdb/>}`"),
    # a validation file was advised to move under the job key `data`, which sets data.source
    ("val-source-in-another-bucket", job(data__val_source="s3://other/jobs/zimdb/val.jsonl"), "dev",
     "trainerConfig.data.val_source", "'s3://other/jobs/zimdb/val.jsonl'",
     "allowed: `trainerConfig.data.val_source: {s3: <path under jobs/zimdb/>}`"),
    # the relative form of a key the pod reads from the platform bucket: refused as `output: {s3: ...}` is
    ("val-source-relative-absolute-path", job(data__val_source={"s3": "/data/val.jsonl"}), "dev",
     "trainerConfig.data.val_source.s3", "'/data/val.jsonl'", "leading '/'"),
    ("val-source-relative-climbs-out", job(data__val_source={"s3": "../other/val.jsonl"}), "dev",
     "trainerConfig.data.val_source.s3", "'../other/val.jsonl'", "climbs out"),
    ("val-source-relative-a-url", job(data__val_source={"s3": "s3://b/jobs/zimdb/val.jsonl"}), "dev",
     "trainerConfig.data.val_source.s3", "'s3://b/jobs/zimdb/val.jsonl'", "known only after its deploy"),
    ("val-source-relative-extra-key", job(data__val_source={"s3": "val.jsonl", "bucket": "b"}), "dev",
     "trainerConfig.data.val_source", "'bucket': 'b'", "takes `s3` alone"),
    ("val-source-relative-not-a-file", job(data__val_source={"s3": "data/val.txt"}), "dev",
     "trainerConfig", "s3://<platform bucket>/jobs/zimdb/data/val.txt", "a file ending in .jsonl"),
    ("llm-model-relative-climbs-out", job(llm__model={"s3": "models/../../x"}), "dev",
     "trainerConfig.llm.model.s3", "'models/../../x'", "climbs out"),
    ("data-source-relative-in-trainer-config", job(data__source={"s3": "train.jsonl"}), "dev",
     "trainerConfig.data.source", "{'s3': 'train.jsonl'}", "`data: {s3: <path under jobs/zimdb/>}`"),
]  # fmt: skip


def _error(spec: object, platform: str) -> str | None:
    try:
        place(parse_spec(spec), load_platform_outputs(example_outputs_path(platform)))
    except SpecError as err:
        return str(err)
    return None


@pytest.mark.parametrize(
    ("case", "change", "platform", "key", "shows", "says"), CASES, ids=[c[0] for c in CASES]
)
def test_bad_job_spec_is_refused_naming_key_value_and_what_is_allowed(
    ledger, case, change, platform, key, shows, says
):
    spec = copy.deepcopy(JOB)
    change(spec)
    error = _error(spec, platform)
    name = f"mlops-eks:job.{key}:"
    entry = ledger("bad input: job", case, error=error, names=name)
    assert error is not None, f"{case}: accepted"
    line = next((p for p in error.splitlines() if p.startswith(name)), "")
    assert entry.clear and shows in line and "allowed" in line and says in line, error


def test_a_priority_the_platform_defines_is_accepted():
    spec = copy.deepcopy(JOB)
    a100 = {"accelerator": "a100", "gpusPerNode": 8, "spotTolerant": False, "queue": "research"}
    job(**a100, priority="training-high")(spec)
    assert _error(spec, "prod") is None


@pytest.fixture
def stacks(tmp_path) -> Path:
    """The repository's stack files in a directory of their own, to add a broken one beside them."""
    for f in REPO.glob("Pulumi.*.yaml"):
        shutil.copy(f, tmp_path / f.name)
    return tmp_path


@pytest.mark.parametrize(
    ("case", "platform_stack", "says"),
    [
        ("platform-stack-typo", "dve", "'dve' is no stack file here (did you mean dev?)"),
        ("platform-stack-is-a-workload-stack", "dev-zimdb", "'dev-zimdb' is a workload stack"),
    ],
)
def test_a_platform_stack_that_is_not_one_of_the_projects_is_refused(
    ledger, stacks, case, platform_stack, says
):
    text = (REPO / "Pulumi.dev-zimdb.yaml").read_text()
    text = text.replace("platformStack: dev", f"platformStack: {platform_stack}")
    (stacks / "Pulumi.bad.yaml").write_text(text)
    try:
        check_platform_stack(load_stack("bad", stacks), stacks)
        error = None
    except SpecError as err:
        error = str(err)
    entry = ledger("bad input: files", case, error=error, names="mlops-eks:platformStack")
    assert entry.clear and says in error and "allowed: a platform stack of this project (dev, prod)" in error


@pytest.mark.parametrize(
    ("case", "command", "says"),
    [
        ("workload-stack-typo", ["workloads", "render", "--stack", "dev-zimbd"],
         "(did you mean dev-zimdb?)"),
        ("workload-command-on-a-platform-stack", ["workloads", "render", "--stack", "dev"],
         "'dev' is a platform stack"),
        ("plan-stack-typo", ["workloads", "plan", "--stack", "prod-a10"], "(did you mean prod-a100?)"),
        ("plan-spot-prices-missing",
         ["workloads", "plan", "--stack", "dev-zimdb", "--spot-prices", "nope.json"],
         "--spot-prices nope.json: not the output of describe-spot-price-history"),
        ("platform-stack-name-typo", ["infra", "synth", "--stack", "prd"], "(did you mean prod?)"),
        ("platform-command-on-a-workload-stack", ["infra", "synth", "--stack", "dev-zimdb"],
         "'dev-zimdb' is a workload stack"),
    ],
)  # fmt: skip
def test_a_mistyped_or_misplaced_stack_name_exits_2_with_the_stacks_there_are(
    ledger, capsys, case, command, says
):
    main = workloads_main if command[0] == "workloads" else infra_main
    code = main(command[1:])
    error = capsys.readouterr().err
    entry = ledger("bad input: files", case, error=error if code == 2 else None, names=command[-1])
    assert code == 2 and entry.clear and says in error and "allowed" in error, error
