"""Infrastructure faults end in a retryable exit code (>= 128), configuration errors in 2, through the
real code paths: boto3 against a closed port, without credentials, or against moto with injected S3
errors; torchrun rendezvous that never completes; a 2-process gloo run whose peer hangs. The codes are
trainer/faults.py's table; PyTorchJob `restartPolicy: ExitCode` and the TrainJob runtime retry 128+."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import boto3
import pytest
from botocore.exceptions import ClientError
from moto import mock_aws
from ports import reserved_port

from tests.trainer.trainer_runs import cold_workers
from tests.trainer.warm_torch import python, warm_env
from trainer import faults, storage
from trainer.__main__ import main
from trainer.config import build
from trainer.storage import S3Storage
from workloads.render import trainer_config
from workloads.stacks import load_stack

REPO = Path(__file__).resolve().parents[2]
TINY = [
    "--data.synthetic_train_size",
    "256",
    "--data.synthetic_val_size",
    "32",
    "--data.max_len",
    "16",
    "--model.dim",
    "16",
    "--model.layers",
    "1",
    "--model.heads",
    "2",
    "--model.ffn_dim",
    "32",
    "--train.batch_size",
    "8",
    "--train.max_steps",
    "12",
    "--train.warmup_steps",
    "2",
    "--train.log_every",
    "1",
    "--train.eval_every",
    "1000",
    "--checkpoint.upload_retries",
    "2",
    "--checkpoint.retry_backoff_s",
    "0",
    "--output.metrics_port",
    "0",
]
S3_DIRS = ["--output.dir", "s3://mlops/runs/zimdb", "--checkpoint.dir", "s3://mlops/ckpt/zimdb"]


def _env(**extra: str) -> dict[str, str]:
    """The test's environment without AWS credentials or settings of the machine it runs on."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    return {
        **{k: v for k, v in env.items() if k not in {"RANK", "WORLD_SIZE", "LOCAL_RANK"}},
        "PYTHONPATH": str(REPO),
        "OMP_NUM_THREADS": "1",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent",
        "AWS_CONFIG_FILE": "/nonexistent",
        "AWS_EC2_METADATA_DISABLED": "true",
        "AWS_MAX_ATTEMPTS": "1",  # botocore's own retries; the trainer's are set by flags
        **extra,
    }


def _said(text: str, code: int) -> str | None:
    """The line where the trainer or its launcher gives its reason for exiting `code`, if any."""
    return next((line for line in text.splitlines() if f"exit {code} (" in line), None)


def _record(ledger, case: str, text: str, code: int) -> None:
    entry = ledger("infra fault -> exit code", case, error=_said(text, code), names=f"exit {code}")
    assert entry.rejected and entry.clear, text[-2000:]


def _trainer(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    """The trainer as a process of its own, forked from the warm torch server (its start-up faults come
    after the imports a fork skips)."""
    run = warm_env(_env(**env))
    return subprocess.run(
        [*python(run), "-m", "trainer", *TINY, *args],
        cwd=tmp_path,
        env=run,
        capture_output=True,
        text=True,
        timeout=180,
    )


def test_s3_unreachable_at_start_up_exits_200(tmp_path, ledger):
    proc = _trainer(
        tmp_path,
        *S3_DIRS,
        AWS_ENDPOINT_URL_S3=f"http://127.0.0.1:{reserved_port()}",  # nothing listens there
        AWS_ACCESS_KEY_ID="testing",
        AWS_SECRET_ACCESS_KEY="testing",
    )
    assert proc.returncode == faults.STORAGE_UNAVAILABLE, proc.stderr
    assert "S3 failed after the retries (EndpointConnectionError" in proc.stderr
    assert "exit 200 (retryable" in proc.stderr
    _record(ledger, "S3 unreachable at start-up", proc.stderr, 200)


def test_no_credentials_yet_at_start_up_exits_200(tmp_path, ledger):
    proc = _trainer(tmp_path, *S3_DIRS)
    assert proc.returncode == faults.STORAGE_UNAVAILABLE, proc.stderr
    assert "cannot find AWS credentials (yet)" in proc.stderr
    _record(ledger, "no AWS credentials yet", proc.stderr, 200)


def _fail_puts(client, should_fail) -> list[str]:
    """Make the moto client's PutObject fail (503 SlowDown) for keys where should_fail(key, attempt)."""
    attempts: list[str] = []

    def handler(params, **_):
        attempts.append(params["Key"])
        if should_fail(params["Key"], attempts.count(params["Key"])):
            raise ClientError({"Error": {"Code": "SlowDown", "Message": "Please reduce"}}, "PutObject")

    client.meta.events.register("before-parameter-build.s3.PutObject", handler)
    return attempts


@pytest.fixture
def s3():
    with mock_aws():
        client = boto3.client("s3", region_name="us-east-1")
        client.create_bucket(Bucket="mlops")
        yield client


@pytest.fixture
def sigterm_handler_kept():
    handler = signal.getsignal(signal.SIGTERM)
    yield
    signal.signal(signal.SIGTERM, handler)


def test_upload_file_failures_are_retried(s3, tmp_path):
    # upload_file raises boto3's S3UploadFailedError (not a botocore error) when its PutObject fails.
    attempts = _fail_puts(s3, lambda key, n: n == 1)
    payload = tmp_path / "state.pt"
    payload.write_bytes(b"x" * 1024)
    S3Storage("s3://mlops/ckpt", client=s3, retries=3, backoff_s=0).put_file("step-1/state.pt", payload)
    assert attempts == ["ckpt/step-1/state.pt"] * 2
    assert s3.get_object(Bucket="mlops", Key="ckpt/step-1/state.pt")["Body"].read() == b"x" * 1024


def test_s3_failing_while_writing_the_final_outputs_exits_200(
    s3, tmp_path, monkeypatch, capsys, sigterm_handler_kept, ledger
):
    attempts = _fail_puts(s3, lambda key, n: key == "runs/zimdb/model.pt")
    monkeypatch.setattr(storage, "make_s3_client", lambda: s3)
    monkeypatch.chdir(tmp_path)
    assert main([*TINY, *S3_DIRS]) == faults.STORAGE_UNAVAILABLE
    assert attempts.count("runs/zimdb/model.pt") == 2  # checkpoint.upload_retries
    err = capsys.readouterr().err
    assert "S3 failed after the retries (S3UploadFailedError" in err and "SlowDown" in err
    keys = {o["Key"] for o in s3.list_objects_v2(Bucket="mlops")["Contents"]}
    assert "runs/zimdb/summary.json" not in keys  # nothing claims the run finished
    _record(ledger, "S3 failing while writing outputs", err, 200)


def test_a_bucket_that_does_not_exist_is_a_permanent_error(
    s3, tmp_path, monkeypatch, capsys, sigterm_handler_kept, ledger
):
    monkeypatch.setattr(storage, "make_s3_client", lambda: s3)
    monkeypatch.chdir(tmp_path)
    code = main([*TINY, "--output.dir", "s3://no-such-bucket/runs", "--checkpoint.dir", str(tmp_path)])
    assert code == faults.INVALID
    err = capsys.readouterr().err
    assert "S3 request failed for good (NoSuchBucket)" in err and "exit 2 (permanent)" in err
    _record(ledger, "S3 bucket does not exist", err, 2)


def _launch(tmp_path: Path, *torchrun_args: str, timeout: int = 120) -> subprocess.CompletedProcess:
    run = warm_env(_env())
    launcher = [*python(run), "-m", "trainer.launch"]
    return subprocess.run(
        [*launcher, *torchrun_args, "--nproc-per-node", "1", "-m", "trainer"],
        cwd=tmp_path,
        env=run,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.mark.parametrize(
    "rendezvous",
    [
        # Kubeflow's PET_* variables: static rendezvous on the master pod's address.
        ["--master-addr=127.0.0.1", "--node-rank=0", "--rdzv-conf=timeout=1"],
        # Elastic PyTorchJob: the c10d rendezvous backend.
        ["--rdzv-backend=c10d", "--rdzv-conf=join_timeout=1"],
    ],
    ids=["static", "c10d"],
)
def test_a_rendezvous_that_never_completes_exits_203(tmp_path, rendezvous, ledger):
    port = str(reserved_port())
    static = "--node-rank=0" in rendezvous
    where = ["--master-port", port] if static else [f"--rdzv-endpoint=127.0.0.1:{port}"]
    proc = _launch(tmp_path, "--nnodes=2", *rendezvous, *where)  # the second node never comes
    assert proc.returncode == faults.RENDEZVOUS_TIMEOUT, proc.stderr[-2000:]
    assert "trainer.launch: rendezvous failed" in proc.stderr and "exit 203 (retryable" in proc.stderr
    _record(ledger, f"rendezvous timeout ({rendezvous[0]})", proc.stderr, 203)


def test_a_hung_peer_makes_the_other_rank_exit_202_in_seconds_not_minutes(tmp_path, ledger):
    """SIGSTOP freezes one rank mid-run (a stuck kernel, a frozen node). The other one waits in its next
    collective, which gives up only after train.dist_timeout_s (600 s by default; torchrun then waits 30 s
    more for the frozen one: ~10.5 min). The step watchdog ends it after train.step_timeout_s instead.
    The ranks are cold interpreters, children of their launcher; the launcher, which the test only watches,
    starts from the warm torch server."""
    out = tmp_path / "out"
    args = [*TINY, "--train.max_steps", "400", "--train.step_timeout_s", "3"]  # dist_timeout_s stays 600
    args += ["--output.dir", str(out), "--checkpoint.dir", str(out / "ckpt")]
    warm = warm_env(_env())
    env = {k: v for k, v in warm.items() if k != "PYTHON_EXEC"}  # torchrun's workers: sys.executable
    launcher = [*python(warm), "-m", "trainer.launch", "--standalone", "--nproc-per-node", "2"]
    cmd = [*launcher, "-m", "trainer", *args]
    proc = subprocess.Popen(
        cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        deadline = time.monotonic() + 120
        metrics = out / "metrics.jsonl"
        while time.monotonic() < deadline and not (metrics.exists() and '"train"' in metrics.read_text()):
            time.sleep(0.05)
        workers = cold_workers(out)
        assert len(workers) == 2
        hung, survivor = workers[1], workers[0]
        os.kill(hung, signal.SIGSTOP)
        frozen = time.monotonic()
        while time.monotonic() < deadline and Path(f"/proc/{survivor}").exists():
            time.sleep(0.1)
        noticed = time.monotonic() - frozen
        os.kill(hung, signal.SIGKILL)  # as the kubelet would when the pod goes; the survivor failed first
        log = proc.communicate(timeout=60)[0]
    finally:
        proc.kill()
    assert proc.returncode == faults.PEER_LOST, log[-3000:]
    assert noticed < 60, f"the surviving rank took {noticed:.0f} s"
    assert "no training step finished in" in log and "a peer rank hung or was lost; exit 202" in log
    _record(ledger, "hung peer (step watchdog)", log, 202)


def test_gloos_timeout_in_a_collective_is_a_lost_peer_too():
    # What a rank sees when its peer stops answering (gloo/transport/tcp/unbound_buffer.cc).
    timed_out = RuntimeError("[unbound_buffer.cc:81] Timed out waiting 600000ms for recv operation")
    assert faults.verdict(timed_out)[0] == faults.PEER_LOST


def test_rendered_gpu_jobs_ask_the_trainer_for_cuda():
    """A pod that lost its GPUs must exit 201 (retryable), not train on CPU as `device: auto` would."""
    config = trainer_config(load_stack("dev-zimdb").spec, bucket="mlops")
    assert config["train"]["device"] == "cuda"
    assert build(config).train.device == "cuda"  # what the pod's trainer reads from the ConfigMap
