"""A job that sends its run to MLflow: the tracking URI and experiment in the trainer's config, the credential
from a Pulumi secret through a Kubernetes Secret (never a plain value, in a file or in Pulumi's state), and
one egress rule to the server, evaluated with Kubernetes' NetworkPolicy semantics; nothing of it without
MLflow."""

from __future__ import annotations

import kubernetes_validate
import pulumi
import pytest
import yaml
from pulumi.runtime.rpc import _special_secret_sig, _special_sig_key

from infra.config.cluster_rules import DEFAULT_KUBERNETES_VERSION
from infra.contract import JOB_LABEL
from sim.kubernetes.netpol import Endpoint, allowed
from workloads.local import local_trainer_config
from workloads.render import MLFLOW_CREDENTIAL_PLACEHOLDER, render
from workloads.spec import SpecError, parse_spec
from workloads.stacks import WorkloadStack, load_stack

JOB = {"name": "ft", "accelerator": "t4", "gpusPerNode": 4, "imageTag": "0.1.0"}
SERVER = {"trackingUri": "http://10.0.12.7:5000", "auth": "token", "egress": {"cidr": "10.0.12.0/24"}}
NAMESPACES = {ns: {"kubernetes.io/metadata.name": ns} for ns in ("ft", "mlflow", "other")}
CREDENTIAL = {"secretKeyRef": {"name": "ft-mlflow", "key": "credential"}}


def _objects(dev_platform, **job) -> list[dict]:
    return render(parse_spec({**JOB, **job}), dev_platform)


def _kind(objects: list[dict], kind: str) -> list[dict]:
    return [o for o in objects if o["kind"] == kind]


def _trainer_config(objects: list[dict]) -> dict:
    (config,) = [o for o in _kind(objects, "ConfigMap") if o["metadata"]["name"] == "ft-trainer-config"]
    return yaml.safe_load(config["data"]["config.yaml"])


def _env(objects: list[dict]) -> list[dict]:
    return _kind(objects, "TrainJob")[0]["spec"]["trainer"]["env"]


def _egress(objects: list[dict]) -> list[dict]:
    (job,) = [p for p in _kind(objects, "NetworkPolicy") if p["metadata"]["name"] == "ft-training"]
    return job["spec"]["egress"]


RANK = Endpoint("ft-rank0", "10.0.40.5", "ft", {JOB_LABEL: "ft"})


def _reaches(objects: list[dict], dst: Endpoint, port: int) -> bool:
    policies = _kind(objects, "NetworkPolicy")
    return allowed(policies, RANK, dst, port, NAMESPACES)


def test_the_run_goes_to_the_server_with_its_credential_from_a_secret_and_one_egress_rule(dev_platform):
    objects = _objects(dev_platform, mlflow=SERVER)
    plain = _objects(dev_platform)
    assert _trainer_config(objects)["mlflow"] == {"tracking_uri": "http://10.0.12.7:5000", "experiment": "ft"}
    (secret,) = _kind(objects, "Secret")
    assert secret["metadata"]["name"] == "ft-mlflow" and secret["metadata"]["namespace"] == "ft"
    assert secret["stringData"] == {"credential": MLFLOW_CREDENTIAL_PLACEHOLDER}  # the engine fills it in
    assert [e for e in _env(objects) if e["name"].startswith("MLFLOW")] == [
        {"name": "MLFLOW_TRACKING_TOKEN", "valueFrom": CREDENTIAL}
    ]
    # Exactly one rule more than every job has: TCP 5000 to the server's range.
    rule = {"to": [{"ipBlock": {"cidr": "10.0.12.0/24"}}], "ports": [{"protocol": "TCP", "port": 5000}]}
    assert _egress(objects) == [*_egress(plain), rule]
    server = Endpoint("mlflow", "10.0.12.7")
    assert _reaches(objects, server, 5000) and not _reaches(plain, server, 5000)
    assert not _reaches(objects, server, 5001) and not _reaches(objects, Endpoint("db", "10.0.13.7"), 5000)
    version = f"{DEFAULT_KUBERNETES_VERSION}.0"
    for obj in [secret, *_kind(objects, "NetworkPolicy")]:
        kubernetes_validate.validate(obj, version, strict=True)


def test_without_mlflow_a_job_gets_no_secret_no_variable_no_egress_and_no_config_of_it(dev_platform):
    objects = _objects(dev_platform)
    assert not _kind(objects, "Secret") and "mlflow" not in _trainer_config(objects)
    assert not [e for e in _env(objects) if e["name"].startswith("MLFLOW")]
    assert len(_egress(objects)) == 4  # DNS, the job's peers, Pod Identity, HTTPS to public addresses


def test_basic_auth_passes_the_user_as_a_value_and_the_password_from_the_secret(dev_platform):
    objects = _objects(dev_platform, mlflow={**SERVER, "auth": "basic", "username": "trainer"})
    assert [e for e in _env(objects) if e["name"].startswith("MLFLOW")] == [
        {"name": "MLFLOW_TRACKING_USERNAME", "value": "trainer"},
        {"name": "MLFLOW_TRACKING_PASSWORD", "valueFrom": CREDENTIAL},
    ]


def test_an_in_cluster_server_is_reached_on_its_pods_port_in_its_namespace_only(dev_platform):
    egress = {"namespace": "mlflow", "podLabels": {"app": "mlflow"}, "port": 5000}
    server = {"trackingUri": "http://mlflow.mlflow.svc", "experiment": "llm", "egress": egress}
    objects = _objects(dev_platform, mlflow=server)
    peer = {
        "namespaceSelector": {"matchLabels": NAMESPACES["mlflow"]},
        "podSelector": {"matchLabels": {"app": "mlflow"}},
    }
    assert _egress(objects)[-1] == {"to": [peer], "ports": [{"protocol": "TCP", "port": 5000}]}
    assert _trainer_config(objects)["mlflow"]["experiment"] == "llm"
    mlflow_pod = Endpoint("mlflow-0", "10.0.41.9", "mlflow", {"app": "mlflow"})
    assert _reaches(objects, mlflow_pod, 5000)  # the Service's port 80 is DNATed to the pod's 5000
    assert not _reaches(objects, Endpoint("db-0", "10.0.41.10", "mlflow", {"app": "postgres"}), 5000)
    assert not _reaches(objects, Endpoint("x-0", "10.0.41.11", "other", {"app": "mlflow"}), 5000)
    assert not _kind(objects, "Secret")  # auth none


def test_a_public_https_server_needs_no_rule_of_its_own(dev_platform):
    objects = _objects(dev_platform, mlflow={"trackingUri": "https://mlflow.example.com"})
    assert len(_egress(objects)) == 4
    assert _reaches(objects, Endpoint("mlflow.example.com", "52.1.2.3"), 443)


@pytest.mark.parametrize(
    ("job", "says"),
    [
        ({"mlflow": {"trackingUri": "http://10.0.12.7:5000"}}, "mlflow.egress: the job's NetworkPolicy"),
        (
            {"mlflow": {"trackingUri": "https://me:pw@mlflow.example.com"}},
            "mlflow.trackingUri: a user or password in the URL",
        ),
        ({"mlflow": {"trackingUri": "file:/mnt/mlruns"}}, "mlflow.trackingUri: not a tracking server's URL"),
        ({"mlflow": {**SERVER, "username": "me"}}, "mlflow.username: goes with `auth: basic`"),
        ({"mlflow": {**SERVER, "auth": "basic"}}, "got username None and auth 'basic'"),
        (
            {"mlflow": {**SERVER, "egress": {"cidr": "10.0.12.7/24"}}},
            "mlflow.egress.cidr: not an IPv4 network",
        ),
        (
            {"mlflow": {**SERVER, "egress": {"cidr": "0.0.0.0/0"}}},
            "mlflow.egress.cidr: would open every address",
        ),
        (
            {"mlflow": {**SERVER, "egress": {"cidr": "10.0.12.0/24", "port": 80}}},
            "mlflow.egress.port: not http://10.0.12.7:5000's port 5000",
        ),
        (
            {"mlflow": {**SERVER, "egress": {"cidr": "10.0.12.0/24", "namespace": "mlflow"}}},
            "mlflow.egress.cidr: set exactly one of cidr and namespace",
        ),
        (
            {"mlflow": {**SERVER, "egress": {"cidr": "10.0.12.0/24", "podLabels": {"a": "b"}}}},
            "mlflow.egress.podLabels: they narrow",
        ),
        (
            {"trainerConfig": {"mlflow": {"tracking_uri": "http://x:5000"}}},
            "trainerConfig.mlflow.tracking_uri",
        ),
        ({"mlflow": SERVER, "accelerator": "amd-v520"}, "the rocm image has no MLflow client"),
        ({"mlflow": SERVER, "operator": "mpijob"}, "the cpu image has no MLflow client"),
        (
            {"mlflow": SERVER, "program": {"delivery": "configmap", "file": "x.py"}},
            "only the image's `trainer`",
        ),
        (
            {"env": {"MLFLOW_TRACKING_TOKEN": "t0k"}},
            "env.MLFLOW_TRACKING_TOKEN: a credential in a stack file",
        ),
    ],
)
def test_a_job_that_could_not_reach_its_server_or_would_leak_its_credential_is_refused(job, says):
    with pytest.raises(SpecError) as refused:
        parse_spec({**JOB, **job})
    assert says in str(refused.value), str(refused.value)
    assert "t0k" not in str(refused.value) and "pw@" not in str(refused.value)  # nor repeated in a log


def test_a_custom_image_may_bring_its_own_client(dev_platform):
    image = "123456789012.dkr.ecr.us-east-1.amazonaws.com/mine:1.0"
    spec = parse_spec({**{k: v for k, v in JOB.items() if k != "imageTag"}, "image": image, "mlflow": SERVER})
    assert spec.mlflow is not None


def _stack_file(tmp_path, **config) -> str:
    text = yaml.safe_dump({"config": {"mlops-eks:platformStack": "dev", **config}})
    (tmp_path / "Pulumi.dev-mine.yaml").write_text(text)
    return "dev-mine"


def test_the_stack_file_holds_the_credential_only_encrypted_and_when_the_job_needs_it(tmp_path):
    job = {"mlops-eks:job": {**JOB, "mlflow": SERVER}}
    with pytest.raises(SpecError, match="mlops-eks:mlflowCredential: a plaintext credential"):
        load_stack(_stack_file(tmp_path, **job, **{"mlops-eks:mlflowCredential": "t0k"}), tmp_path)
    with pytest.raises(SpecError, match="mlflow.auth is token but mlops-eks:mlflowCredential is unset"):
        load_stack(_stack_file(tmp_path, **job), tmp_path)
    secure = {"mlops-eks:mlflowCredential": {"secure": "v1:abcdef"}}
    assert load_stack(_stack_file(tmp_path, **job, **secure), tmp_path).spec.mlflow.auth == "token"


def _deploy(workload_mocks, job: dict, credential: str | None):
    mocks = workload_mocks(job)
    if credential is not None:
        pulumi.runtime.set_config("mlops-eks:mlflowCredential", credential)

    @pulumi.runtime.test
    def run():
        from workloads.program import program

        program()

    run()
    return mocks


def test_the_program_makes_the_secret_from_the_secret_config_and_keeps_it_secret(workload_mocks):
    mocks = _deploy(workload_mocks, {**JOB, "mlflow": SERVER}, "t0k")
    (secret,) = mocks.of_type("kubernetes:core/v1:Secret")
    # Sent to the engine as a secret (encrypted in the state, shown as [secret]), never as a plain value.
    assert secret.inputs["stringData"] == {
        _special_sig_key: _special_secret_sig,
        "value": {"credential": "t0k"},
    }
    assert secret.inputs["metadata"]["name"] == "ft-mlflow"
    (job,) = mocks.of_type("kubernetes:trainer.kubeflow.org/v1alpha1:TrainJob")
    assert {"name": "MLFLOW_TRACKING_TOKEN", "valueFrom": CREDENTIAL} in job.inputs["spec"]["trainer"]["env"]
    (policy,) = [
        p
        for p in mocks.of_type("kubernetes:networking.k8s.io/v1:NetworkPolicy")
        if p.name == "ft-training-networkpolicy"
    ]
    assert policy.inputs["spec"]["egress"][-1]["to"] == [{"ipBlock": {"cidr": "10.0.12.0/24"}}]


def test_a_job_whose_server_needs_a_credential_without_it_creates_nothing(workload_mocks):
    with pytest.raises(
        Exception, match="mlflow.auth is token but the secret config mlops-eks:mlflowCredential"
    ):
        _deploy(workload_mocks, {**JOB, "mlflow": SERVER}, None)


def test_run_local_sends_the_run_to_a_file_store_beside_its_other_files(tmp_path, capsys):
    stack = WorkloadStack("dev-mine", "dev", parse_spec({**JOB, "mlflow": SERVER}))
    config = local_trainer_config(stack, tmp_path, [])
    assert config["mlflow"] == {"tracking_uri": f"file:{tmp_path / 'mlruns'}", "experiment": "ft"}
    assert (
        f"mlflow.tracking_uri http://10.0.12.7:5000 -> file:{tmp_path / 'mlruns'}" in capsys.readouterr().out
    )
    kept = local_trainer_config(stack, tmp_path, ["--mlflow.tracking_uri", "http://localhost:5000"])
    assert kept["mlflow"]["tracking_uri"] == "http://10.0.12.7:5000"  # the flag, after it, wins
