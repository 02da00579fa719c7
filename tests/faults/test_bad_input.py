"""Bad input a user types into stack files, platform-output files, job specs and trainer flags: each is
refused before anything is created (or, for a resumed trainer, before it trains) with a message that
names the key, the value and what is allowed. No traceback, no silent default.

Each case is recorded in the fault ledger (category "bad input"); the figures print at the end of the run.
"""

from __future__ import annotations

import copy
import json
import shutil
import subprocess
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from infra.__main__ import main as infra_main
from infra.config.platform import ConfigError, PlatformConfig
from infra.config.secrets import SECRET_PLACEHOLDER
from infra.tools import synth as infra_synth
from tests.trainer.trainer_runs import trainer_args
from workloads.__main__ import main as workloads_main
from workloads.placement import place
from workloads.platform import example_outputs_path, load_platform_outputs
from workloads.spec import SpecError, parse_spec
from workloads.stacks import load_stack, workload_stacks

REPO = Path(__file__).resolve().parents[2]
DEV = infra_synth.stack_config("dev")
JOB = infra_synth.read_stack_file(REPO / "Pulumi.dev-zimdb.yaml")["mlops-eks:job"]


def _set(config: dict, path: tuple, value: Any) -> dict:
    config = copy.deepcopy(config)
    node = config
    for part in path[:-1]:
        node = node[part]
    node[path[-1]] = value
    return config


def _platform_error(config: dict) -> str | None:
    try:
        PlatformConfig.from_mapping(config)
    except ConfigError as err:
        return str(err)
    return None


# (case, path into the dev stack's config mapping, bad value, what the message must name, and say)
PLATFORM_CASES = [
    ("namespace-typo", ("mlopseks:natGateways",), "single", "mlopseks:natGateways",
     "did you mean mlops-eks:natGateways?"),
    ("namespace-underscore", ("mlops_eks:environment",), "dev", "mlops_eks:environment",
     "did you mean mlops-eks:environment?"),
    ("workload-key-typo", ("mlops-eks:platfromStack",), "dev", "mlops-eks:platfromStack",
     "did you mean platformStack?"),
    ("system-max-size-unbounded", ("mlops-eks:systemNodes", "maxSize"), 500,
     "mlops-eks:systemNodes.maxSize", "allowed: <= 10"),
    ("tag-key-aws-prefix", ("mlops-eks:tags", "aws:team"), "ml", "mlops-eks:tags.aws:team",
     "AWS reserves the aws: prefix"),
    ("tag-key-too-long", ("mlops-eks:tags", "k" * 129), "v", "mlops-eks:tags.kkk", "1-128 characters"),
    ("tag-value-bad-characters", ("mlops-eks:tags", "team"), "ml{platform}", "mlops-eks:tags.team",
     "0-256 characters"),
    ("endpoint-public-yes", ("mlops-eks:endpointPublicAccess",), "yes", "mlops-eks:endpointPublicAccess",
     "got 'yes'; allowed: true or false"),
    ("addon-bool-on", ("mlops-eks:addons", "gpu", "dcgmExporter"), "on",
     "mlops-eks:addons.gpu.dcgmExporter", "allowed: true or false"),
    ("grafana-password-plaintext", ("mlops-eks:grafanaAdminPassword",), "hunter2",
     "mlops-eks:grafanaAdminPassword", "pulumi config set --secret grafanaAdminPassword"),
    ("old-spelling-prometheus-storage-gib", ("mlops-eks:addons", "observability", "prometheusStorageGib"),
     20, "mlops-eks:addons.observability.prometheusStorageGib", "did you mean prometheusStorageGiB?"),
    ("old-spelling-disk-size-gib", ("mlops-eks:systemNodes", "diskSizeGib"), 60,
     "mlops-eks:systemNodes.diskSizeGib", "did you mean diskSizeGiB?"),
    ("kubernetes-version-unsupported", ("mlops-eks:kubernetesVersion",), "1.99",
     "mlops-eks:kubernetesVersion", '"1.35"'),
    ("gpu-limit-below-one-node", ("mlops-eks:gpuPools", 0, "gpuLimit"), 2, "mlops-eks:gpuPools[0].gpuLimit",
     ">= 4"),
    ("gpu-pool-without-device-plugin", ("mlops-eks:addons", "gpu", "nvidiaDevicePlugin"), False,
     "mlops-eks:addons.gpu.nvidiaDevicePlugin", "gpuPools[0] (t4) needs it"),
    ("capacity-type-eks-spelling", ("mlops-eks:gpuPools", 0, "capacityTypes"), ["SPOT"],
     "mlops-eks:gpuPools[0].capacityTypes[0]", "on-demand"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("case", "path", "value", "names", "says"), PLATFORM_CASES, ids=[c[0] for c in PLATFORM_CASES]
)
def test_bad_platform_config_is_refused_naming_key_value_and_what_is_allowed(
    ledger, case, path, value, names, says
):
    error = _platform_error(_set(DEV, path, value))
    entry = ledger("bad input: platform", case, error=error, names=names)
    assert error is not None, f"{case}: accepted"
    assert entry.clear and says in error, error


def test_the_gib_spelling_is_one_everywhere_and_the_stack_files_use_it():
    config = PlatformConfig.from_mapping(DEV)
    assert config.addons.observability.prometheus_storage_gib == 20
    fields = PlatformConfig.model_json_schema(by_alias=True)
    text = json.dumps(fields) + "".join(p.read_text() for p in REPO.glob("Pulumi*.yaml"))
    assert "Gib" not in text.replace("GiB", "")


def test_an_encrypted_grafana_password_synthesizes_offline_as_a_placeholder_with_a_warning():
    """`pulumi config set --secret` writes {secure: v1:...}; only the engine can decrypt it."""
    values = {**DEV, "mlops-eks:grafanaAdminPassword": {"secure": "v1:AAAAbm90LWEtcmVhbC1jaXBoZXJ0ZXh0"}}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        config = PlatformConfig.from_mapping(values)
        _, resources, exports = infra_synth.synth("dev", values)
    assert config.grafana_admin_password.get_secret_value() == SECRET_PLACEHOLDER
    assert any("grafanaAdminPassword: encrypted" in str(w.message) for w in caught)
    secret = [r for r in resources if r.type == "kubernetes:core/v1:Secret" and "grafana" in r.name]
    assert secret and secret[0].inputs["stringData"] == "[secret]"
    assert exports["grafana_admin_password"] == "[secret]"


ENGINE = """
import json, sys
from infra.config.platform import ConfigError, PlatformConfig
from sim.pulumi.language_host import handed_over
values = {"aws:region": "us-east-1", "mlops-eks:environment": "dev",
          "mlops-eks:endpointPublicAccess": "true", "mlops-eks:publicAccessCidrs": json.dumps(["8.8.8.0/24"]),
          "mlops-eks:grafanaAdminPassword": "12345"}
handing_over = handed_over(values, secret_keys=sys.argv[1:])
handing_over.__enter__()  # kept referenced: the hand-over lasts while the generator lives
try:
    config = PlatformConfig.from_pulumi()
    print("accepted", config.endpoint_public_access, repr(config.grafana_admin_password.get_secret_value()))
except ConfigError as err:
    print(err)
"""


@pytest.mark.parametrize("secret", [True, False])
def test_under_the_engine_a_secret_must_have_been_encrypted(ledger, secret):
    """A fresh process with no mocks runs from_pulumi as under `pulumi up`: every scalar arrives as a
    string, and the engine says which keys the stack file held encrypted."""
    key = "mlops-eks:grafanaAdminPassword"
    argv = [sys.executable, "-c", ENGINE, *([key] if secret else [])]
    out = subprocess.run(argv, capture_output=True, text=True, cwd=REPO, timeout=120, check=True).stdout
    if secret:  # decrypted by the engine: the password as typed, "true" read as Pulumi's get_bool reads it
        assert out.strip() == "accepted True '12345'"
    else:
        entry = ledger("bad input: platform", "grafana-password-plaintext-under-engine", error=out, names=key)
        assert entry.clear and "pulumi config set --secret grafanaAdminPassword" in out, out


@pytest.fixture
def stacks_dir(tmp_path, monkeypatch) -> Path:
    """A copy of the stack files with one broken platform stack file beside them."""
    for f in REPO.glob("Pulumi*.yaml"):
        shutil.copy(f, tmp_path / f.name)
    (tmp_path / "Pulumi.broken.yaml").write_text("config:\n  aws:region: [us-east-1\n")
    monkeypatch.setattr(infra_synth, "REPO", tmp_path)
    return tmp_path


def test_one_broken_stack_file_breaks_only_its_own_synth(ledger, stacks_dir, capsys):
    assert infra_main(["synth", "--stack", "dev", "--json"]) == 0
    capsys.readouterr()
    assert infra_main(["synth", "--stack", "broken"]) == 2
    error = capsys.readouterr().err
    case = "platform-stack-file-malformed-yaml"
    entry = ledger("bad input: files", case, error=error, names="Pulumi.broken.yaml")
    assert entry.clear and "not valid YAML at line 3" in error, error


def _workload_error(tmp_path: Path, text: str, name: str = "bad") -> str | None:
    for f in REPO.glob("Pulumi.dev-zimdb.yaml"):
        shutil.copy(f, tmp_path / f.name)
    (tmp_path / f"Pulumi.{name}.yaml").write_text(text)
    assert "dev-zimdb" in workload_stacks(tmp_path)  # a broken file hides no other stack
    try:
        load_stack(name, tmp_path)
    except SpecError as err:
        return str(err)
    return None


def test_malformed_workload_stack_file_names_the_file_and_line(ledger, tmp_path):
    error = _workload_error(tmp_path, "config:\n  mlops-eks:job: {name: x\n")
    case = "workload-stack-file-malformed-yaml"
    entry = ledger("bad input: files", case, error=error, names="Pulumi.bad.yaml")
    assert entry.clear and "line" in error, error


def test_a_workload_stack_key_in_a_misspelled_namespace_is_refused_with_the_right_key(ledger, tmp_path):
    text = (REPO / "Pulumi.dev-zimdb.yaml").read_text().replace("mlops-eks:job:", "mlopseks:job:")
    error = _workload_error(tmp_path, text)
    entry = ledger("bad input: files", "workload-namespace-typo", error=error, names="mlopseks:job")
    assert entry.clear and "did you mean mlops-eks:job?" in error, error


@pytest.mark.parametrize(
    ("case", "content", "says"),
    [
        ("platform-outputs-malformed-json", '{"cluster_name": "x",', "not valid JSON"),
        ("platform-outputs-not-an-object", "[1, 2]", "got a JSON list"),
        ("platform-outputs-missing-exports", '{"cluster_name": "x"}', "bucket_name: Field required"),
    ],
)
def test_a_bad_platform_outputs_file_exits_2_naming_the_file(ledger, tmp_path, capsys, case, content, says):
    path = tmp_path / "outputs.json"
    path.write_text(content)
    code = workloads_main(["render", "--stack", "dev-zimdb", "--platform-outputs", str(path)])
    error = capsys.readouterr().err
    entry = ledger("bad input: files", case, error=error if code == 2 else None, names=str(path))
    assert code == 2 and entry.clear and says in error, error


def _spec_error(job: dict) -> str | None:
    try:
        spec = parse_spec(job)
        place(spec, load_platform_outputs(example_outputs_path("dev")))
    except SpecError as err:
        return str(err)
    return None


OTHER_BUCKET_URL = "s3://someone-elses-bucket/jobs/zimdb/data.jsonl"
JOB_CASES: list[tuple[str, Callable[[dict], None], str, str]] = [
    ("job-unknown-key", lambda j: j.update(gpuPerNode=2), "mlops-eks:job.gpuPerNode",
     "did you mean gpusPerNode? allowed keys: name,"),
    ("job-old-memory-spelling", lambda j: j.update(memoryGibPerNode=64), "mlops-eks:job.memoryGibPerNode",
     "did you mean memoryGiBPerNode?"),
    ("job-unknown-nested-key", lambda j: j["checkpoint"].update(bucket="x"),
     "mlops-eks:job.checkpoint.bucket", "allowed keys: s3, pvc, path"),
    ("image-tag-grammar", lambda j: j.update(imageTag="bad tag!"), "mlops-eks:job.imageTag",
     "not a valid OCI tag"),
    ("image-tag-too-long", lambda j: j.update(imageTag="v" * 129), "mlops-eks:job.imageTag", "at most 128"),
    ("s3-path-dotdot", lambda j: j["checkpoint"].update(s3="../other-job/checkpoints"),
     "mlops-eks:job.checkpoint", "no '..'"),
    ("data-source-outside-prefix",
     lambda j: j["trainerConfig"].update(data={"source": "s3://bucket/jobs/other/data.jsonl"}),
     "mlops-eks:job.trainerConfig.data.source", "reads only s3://<platform bucket>/jobs/zimdb/"),
    ("data-source-other-bucket", lambda j: j["trainerConfig"].update(data={"source": OTHER_BUCKET_URL}),
     "mlops-eks:job.trainerConfig.data.source", "is in bucket 'someone-elses-bucket'"),
]  # fmt: skip


@pytest.mark.parametrize(("case", "change", "names", "says"), JOB_CASES, ids=[c[0] for c in JOB_CASES])
def test_bad_job_spec_is_refused_naming_key_value_and_what_is_allowed(ledger, case, change, names, says):
    job = copy.deepcopy(JOB)
    change(job)
    error = _spec_error(job)
    entry = ledger("bad input: job", case, error=error, names=names)
    assert error is not None and entry.clear and says in error, error


def test_the_committed_job_passes_the_same_checks():
    assert _spec_error(copy.deepcopy(JOB)) is None


@pytest.fixture
def trained(tmp_path, monkeypatch) -> Callable[..., tuple[int, str]]:
    """Run the trainer in this process (single rank) on the tiny model; (exit code, stderr)."""
    from trainer.__main__ import main

    monkeypatch.delenv("RANK", raising=False)

    def train(capsys, **overrides) -> tuple[int, str]:
        code = main([str(a) for a in trainer_args(tmp_path / "out", **overrides)])
        return code, capsys.readouterr().err

    return train


FIRST = {"train.max_steps": 10, "train.warmup_steps": 2, "checkpoint.every_steps": 10}


def test_resuming_with_max_steps_below_the_checkpoint_exits_2_instead_of_presenting_the_old_model(
    ledger, trained, capsys, tmp_path
):
    assert trained(capsys, **FIRST)[0] == 0
    model = tmp_path / "out" / "model.pt"
    before = model.stat().st_mtime_ns
    code, error = trained(capsys, **{**FIRST, "train.max_steps": 5})
    case = "resume-max-steps-below-checkpoint"
    entry = ledger("bad input: trainer", case, error=error if code == 2 else None, names="train.max_steps")
    assert code == 2 and entry.clear and "below the step of the checkpoint" in error and "step 10" in error
    assert model.stat().st_mtime_ns == before  # no result written as if it were this run's


def test_resuming_with_another_model_size_exits_2_naming_the_parameter_shapes(ledger, trained, capsys):
    assert trained(capsys, **FIRST)[0] == 0
    code, error = trained(capsys, **{**FIRST, "train.max_steps": 20, "model.dim": 32, "model.ffn_dim": 64})
    case = "resume-other-model-size"
    ledger("bad input: trainer", case, error=error if code == 2 else None, names="weight")
    assert code == 2 and "different model" in error and "--checkpoint.resume false" in error, error
    assert "torch.Size([" in error and "weight" in error  # the parameter and both shapes
