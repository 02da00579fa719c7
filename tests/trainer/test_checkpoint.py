"""Checkpoints of one process against the real DCP writer, a local directory and S3 (moto): runs own their
checkpoints, files are verified against the manifest, a full disk and an unwritable directory are named."""

import errno
import io
import json
import logging
import os
import shutil
import signal
import subprocess
import tempfile
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest
import torch
from trainer_runs import FlakyS3, launch, launch_cmd, python, run_env, trainer_args

from trainer import shards
from trainer.checkpoint import MANIFEST, POINTER, TRAIN_STATE, CheckpointManager, checkpoint_name
from trainer.config import ConfigError, from_args
from trainer.dist import DistEnv
from trainer.loop import run as run_in_process
from trainer.schedule import param_groups
from trainer.storage import LocalStorage, S3Storage

ONE = DistEnv(rank=0, world_size=1, local_rank=0, device=torch.device("cpu"))
SHARD = "__0_0.distcp"


class Trainee:
    """A model and optimizer whose weights say which step they are at."""

    def __init__(self, step: int = 0):
        self.model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 2))
        self.optimizer = torch.optim.AdamW(self.model.parameters())
        self.model(torch.ones(1, 8)).sum().backward()
        self.optimizer.step()
        self.at(step)

    def at(self, step: int) -> "Trainee":
        with torch.no_grad():
            for p in self.model.parameters():
                p.fill_(float(step))
        return self

    def step_of_weights(self) -> float:
        return next(self.model.parameters()).flatten()[0].item()


def save(ckpt: CheckpointManager, step: int, trainee: Trainee | None = None) -> bool:
    trainee = (trainee or Trainee()).at(step)
    return ckpt.save(ONE, step, trainee.model, trainee.optimizer, {"step": step, "tokenizer": "t"})


def resume(ckpt: CheckpointManager) -> tuple[dict | None, Trainee]:
    """What a restarted process does: pick the checkpoint, then load it into a fresh model."""
    trainee = Trainee(-1)
    state = ckpt.begin(ONE, resume=True)
    if state is not None:
        state = ckpt.restore(ONE, state, trainee.model, trainee.optimizer)
    return state, trainee


def fresh(storage, tmp_path, resume_flag=False, keep=2) -> CheckpointManager:
    ckpt = CheckpointManager(storage, keep=keep, workdir=tmp_path)
    assert ckpt.begin(ONE, resume=resume_flag) is None
    return ckpt


@pytest.fixture
def local(tmp_path):
    return fresh(LocalStorage(tmp_path / "ckpt"), tmp_path)


def test_saved_checkpoint_loads_back_with_every_file_in_the_manifest(local, tmp_path):
    trainee = Trainee(10)
    assert save(local, 10, trainee)
    step_dir = local.run_storage.root / checkpoint_name(10)
    manifest = json.loads((step_dir / MANIFEST).read_text())
    assert manifest["complete"] and manifest["run"] == local.run and manifest["world_size"] == 1
    assert set(manifest["files"]) == {SHARD, shards.METADATA, TRAIN_STATE}
    assert all(f["bytes"] == (step_dir / n).stat().st_size for n, f in manifest["files"].items())
    assert (local.storage.root / POINTER).read_text() == f"{local.run}/{checkpoint_name(10)}"
    state, loaded = resume(CheckpointManager(LocalStorage(tmp_path / "ckpt"), workdir=tmp_path))
    assert state["step"] == 10 and loaded.step_of_weights() == 10.0
    optim = loaded.optimizer.state_dict()["state"][0]
    assert torch.equal(optim["exp_avg"], trainee.optimizer.state_dict()["state"][0]["exp_avg"])


def test_a_checkpoint_of_a_single_parameter_group_loads_into_the_decay_and_no_decay_groups(local, tmp_path):
    """Checkpoints written before biases and norm weights left weight decay have one AdamW group."""
    old = Trainee(10)  # one group
    assert save(local, 10, old)
    grouped = Trainee(-1)
    grouped.model.zero_grad(set_to_none=True)  # as a run resumes: a fresh optimizer, no gradients yet
    grouped.optimizer = torch.optim.AdamW(param_groups(grouped.model, 0.5))
    ckpt = CheckpointManager(LocalStorage(tmp_path / "ckpt"), workdir=tmp_path)
    assert ckpt.restore(ONE, ckpt.begin(ONE, resume=True), grouped.model, grouped.optimizer)["step"] == 10
    assert [g["weight_decay"] for g in grouped.optimizer.param_groups] == [0.5, 0.0]
    assert grouped.step_of_weights() == 10.0
    for before, after in zip(old.model.parameters(), grouped.model.parameters(), strict=True):
        saved, loaded = old.optimizer.state[before], grouped.optimizer.state[after]
        assert torch.equal(saved["exp_avg"], loaded["exp_avg"]) and torch.equal(saved["step"], loaded["step"])


def test_only_the_last_k_complete_checkpoints_of_the_run_are_kept(local):
    for step in (10, 20, 30, 40):
        assert save(local, step)
    assert local.run_storage.list_dirs() == [checkpoint_name(30), checkpoint_name(40)]


def test_fresh_run_in_a_directory_of_an_older_run_keeps_its_own_checkpoint_and_resumes_it(tmp_path):
    """The old failure: pruning kept the highest step numbers across runs, so the new run's step-100 was
    deleted while `latest` named it, and the restart resumed the old run at step 300."""
    storage = LocalStorage(tmp_path / "ckpt")
    old = fresh(storage, tmp_path, resume_flag=True)
    for step in (200, 300):
        assert save(old, step)
    new = fresh(storage, tmp_path, resume_flag=False)  # --checkpoint.resume false, same directory
    assert new.run != old.run
    assert save(new, 100)
    assert (new.run_storage.root / checkpoint_name(100) / MANIFEST).is_file()
    assert old.run_storage.list_dirs() == [checkpoint_name(200), checkpoint_name(300)]  # left untouched
    state, loaded = resume(CheckpointManager(storage, workdir=tmp_path))
    assert state["step"] == 100 and loaded.step_of_weights() == 100.0


def test_fresh_run_says_that_the_other_runs_checkpoints_stay(tmp_path, caplog):
    storage = LocalStorage(tmp_path / "ckpt")
    old = fresh(storage, tmp_path)
    save(old, 10)
    with caplog.at_level(logging.WARNING, logger="trainer"):
        new = fresh(storage, tmp_path)
    assert f"starting run {new.run}" in caplog.text and old.run in caplog.text and "untouched" in caplog.text


def test_the_checkpoint_just_written_is_never_pruned_even_below_later_ones_of_the_run(local):
    for step in (10, 20, 30):
        assert save(local, step)
    # The run went back to step 10 (its step-20 and step-30 were refused) and saves step 11.
    local._saved_step = 10
    assert save(local, 11)
    assert checkpoint_name(11) in local.run_storage.list_dirs()
    assert local.latest_name() == f"{local.run}/{checkpoint_name(11)}"


def test_background_save_keeps_the_state_of_its_step_while_training_goes_on(local, tmp_path):
    trainee = Trainee(10)
    assert local.save(ONE, 10, trainee.model, trainee.optimizer, {"step": 10}, blocking=False) is None
    trainee.at(11)  # the next optimizer step changes the weights in place while the write goes on
    assert local.wait() is True and local.completed() == [10]
    state, loaded = resume(CheckpointManager(local.storage, workdir=tmp_path))
    assert state["step"] == 10 and loaded.step_of_weights() == 10.0


def test_crash_before_the_rename_leaves_the_previous_checkpoint_in_use(local, tmp_path, monkeypatch, caplog):
    save(local, 10)
    real_replace = os.replace

    def crash_on_shard(src, dst):
        if str(dst).endswith(SHARD):
            raise OSError("simulated crash before rename")
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", crash_on_shard)
    with caplog.at_level(logging.WARNING, logger="trainer"):
        assert save(local, 20) is False
    monkeypatch.setattr(os, "replace", real_replace)
    assert "NOT written" in caplog.text
    assert f"latest still points to {local.run}/step-000000010" in caplog.text
    assert resume(CheckpointManager(local.storage, workdir=tmp_path))[0]["step"] == 10


def _flip_middle_byte(raw: bytes) -> bytes:
    i = len(raw) // 2
    return raw[:i] + bytes([raw[i] ^ 0xFF]) + raw[i + 1 :]


@pytest.mark.parametrize(
    ("file", "damage", "message"),
    [
        (SHARD, lambda p: p.write_bytes(p.read_bytes()[:100]), "(truncated?)"),
        (SHARD, lambda p: p.write_bytes(_flip_middle_byte(p.read_bytes())), "does not match the manifest's"),
        (TRAIN_STATE, lambda p: p.unlink(), "train_state.pt is missing"),
        (MANIFEST, lambda p: p.unlink(), "incomplete: no manifest.json"),
    ],
    ids=["shard-truncated", "shard-corrupt", "train-state-missing", "manifest-missing"],
)
def test_damaged_latest_checkpoint_is_refused_loudly_and_the_previous_one_used(
    local, tmp_path, caplog, file, damage, message
):
    save(local, 10)
    save(local, 20)
    damage(local.run_storage.root / checkpoint_name(20) / file)
    with caplog.at_level(logging.ERROR, logger="trainer"):
        state, loaded = resume(CheckpointManager(local.storage, workdir=tmp_path))
    assert state["step"] == 10 and loaded.step_of_weights() == 10.0
    assert f"refusing checkpoint {local.run_storage.uri}/step-000000020" in caplog.text
    assert message in caplog.text


def test_a_manifest_whose_files_are_not_a_map_is_refused_naming_why(local, tmp_path, caplog):
    save(local, 10)
    save(local, 20)
    path = local.run_storage.root / checkpoint_name(20) / MANIFEST
    path.write_text(json.dumps({**json.loads(path.read_text()), "files": ["__0_0.distcp"]}))
    with caplog.at_level(logging.ERROR, logger="trainer"):
        state, _ = resume(CheckpointManager(local.storage, workdir=tmp_path))
    assert state["step"] == 10
    assert "unreadable manifest.json (files is a list, not a map)" in caplog.text


def test_a_model_that_does_not_match_the_checkpoint_is_a_config_error(local, tmp_path):
    save(local, 10)
    bigger = Trainee()
    bigger.model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Linear(16, 2))
    bigger.optimizer = torch.optim.AdamW(bigger.model.parameters())
    ckpt = CheckpointManager(local.storage, workdir=tmp_path)
    state = ckpt.begin(ONE, resume=True)
    with pytest.raises(ConfigError, match=r"different model.*Size mismatch between saved torch.Size"):
        ckpt.restore(ONE, state, bigger.model, bigger.optimizer)


def test_an_unexpected_error_planning_the_load_is_not_called_a_model_mismatch(local, tmp_path, monkeypatch):
    save(local, 10)

    def broken(*args):
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(shards, "files_needed", broken)
    ckpt = CheckpointManager(local.storage, workdir=tmp_path)
    trainee = Trainee(-1)
    with pytest.raises(OSError, match="Input/output error"):
        ckpt.restore(ONE, ckpt.begin(ONE, resume=True), trainee.model, trainee.optimizer)


def test_no_good_checkpoint_means_a_new_run_from_step_0(local, tmp_path):
    save(local, 10)
    (local.run_storage.root / checkpoint_name(10) / SHARD).write_bytes(b"garbage")
    ckpt = CheckpointManager(local.storage, workdir=tmp_path)
    state, loaded = resume(ckpt)
    assert state is None and loaded.step_of_weights() == -1.0
    assert ckpt.run != local.run  # the broken run's checkpoints are not pruned by the new one


def test_garbage_latest_pointer_is_ignored_and_the_newest_run_resumed(local, tmp_path, caplog):
    save(local, 10)
    save(local, 20)
    (local.storage.root / POINTER).write_bytes(b"\xff\xfe\x00garbage")
    with caplog.at_level(logging.ERROR, logger="trainer"):
        assert resume(CheckpointManager(local.storage, workdir=tmp_path))[0]["step"] == 20
    assert "unreadable pointer" in caplog.text


def test_unwritable_checkpoint_directory_is_a_config_error_naming_it(tmp_path, monkeypatch):
    target = tmp_path / "ro" / "ckpt"
    real_write = Path.write_bytes

    def denied(self, data):  # what a volume without the pod's fsGroup does (root would bypass chmod)
        if self.parent == target:
            raise PermissionError(13, "Permission denied", str(self))
        return real_write(self, data)

    monkeypatch.setattr(Path, "write_bytes", denied)
    with pytest.raises(ConfigError, match=r"checkpoint.dir='.*/ro/ckpt' is not writable: Permission denied"):
        CheckpointManager(LocalStorage(target), workdir=tmp_path).check_writable()


def test_write_probes_of_pods_sharing_a_volume_never_collide(tmp_path, monkeypatch):
    """Every pod of a job is pid 1: a probe named by pid was removed by one pod while another still
    held it, and that pod exited 2 (permanent) at random."""
    monkeypatch.setattr(os, "getpid", lambda: 1)
    root = tmp_path / "shared-volume"
    pods = [CheckpointManager(LocalStorage(root), workdir=tmp_path) for _ in range(2)]
    real_write, interleaved = Path.write_bytes, []

    def the_other_pod_probes_meanwhile(self, data):
        written = real_write(self, data)
        if self.parent == root and not interleaved:
            interleaved.append(self.name)
            pods[1].check_writable()  # between this pod's write and its unlink
        return written

    monkeypatch.setattr(Path, "write_bytes", the_other_pod_probes_meanwhile)
    pods[0].check_writable()
    assert interleaved and list(root.iterdir()) == []


def test_a_full_checkpoint_volume_at_start_up_is_said_not_a_permanent_error(tmp_path, monkeypatch, caplog):
    def full(self, data):
        raise OSError(errno.ENOSPC, "No space left on device", str(self))

    monkeypatch.setattr(Path, "write_bytes", full)
    with caplog.at_level(logging.ERROR, logger="trainer"):
        CheckpointManager(LocalStorage(tmp_path / "ckpt"), workdir=tmp_path).check_writable()
    assert "is full: checkpoints are skipped until space is freed" in caplog.text


NOBODY = 65534


def _check_writable_as_a_user(root: Path, workdir: Path) -> str | None:
    """check_writable() of a checkpoint directory as a process without root's right to write anywhere:
    this one, or (when tests run as root, as in CI containers) a forked child that becomes uid 65534.
    Returns the refusal or None."""
    manager = CheckpointManager(LocalStorage(root), workdir=workdir)
    if os.getuid() != 0:
        try:
            manager.check_writable()
        except ConfigError as err:
            return str(err)
        return None
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: file operations only, then _exit (no pytest teardown in it)
        os.close(read)
        try:
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            manager.check_writable()
            answer = "writable"
        except ConfigError as err:
            answer = str(err)
        except BaseException as err:  # noqa: BLE001 (reported to the parent, which fails the test)
            answer = f"unexpected {type(err).__name__}: {err}"
        os.write(write, answer.encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        answer = pipe.read().decode()
    assert os.waitpid(pid, 0)[1] == 0
    return None if answer == "writable" else answer


def test_read_only_checkpoint_directory_is_refused_before_training():
    base = Path(tempfile.mkdtemp())  # not tmp_path: its parents let only their owner through
    try:
        for path, mode in ((base, 0o711), (base / "ro", 0o555), (base / "rw", 0o777)):
            path.mkdir(exist_ok=True)
            path.chmod(mode)  # not mkdir's mode, which the umask narrows
        refused = _check_writable_as_a_user(base / "ro" / "ckpt", base)
        assert refused and "is not writable: Permission denied" in refused, refused
        assert _check_writable_as_a_user(base / "rw" / "ckpt", base) is None  # the same user writes here
    finally:
        shutil.rmtree(base)


def test_disk_full_while_writing_shards_says_disk_full_and_keeps_the_last_checkpoint(
    local, tmp_path, monkeypatch, caplog
):
    save(local, 10)
    real_write = shards.write

    def onto_a_full_disk(env, model, optimizer, stage):
        stage.mkdir(parents=True, exist_ok=True)
        (stage / SHARD).symlink_to("/dev/full")  # every write to it fails with ENOSPC, as a full disk does
        real_write(env, model, optimizer, stage)

    monkeypatch.setattr(shards, "write", onto_a_full_disk)
    with caplog.at_level(logging.ERROR, logger="trainer"):
        assert save(local, 20) is False
    assert "disk full: writing failed, no space left on the file system of" in caplog.text
    assert f"latest still points to {local.run}/step-000000010" in caplog.text
    assert not any(n.startswith(".stage-") for n in local.run_storage.list_dirs())


def test_torch_save_short_write_is_reported_as_disk_full(local, monkeypatch, caplog):
    real_save = torch.save
    # torch.save's zip writer on a full disk: "[enforce fail at inline_container.cc:…] . unexpected pos".
    monkeypatch.setattr(
        torch, "save", lambda obj, f: real_save(obj, "/dev/full" if isinstance(f, os.PathLike) else f)
    )
    with caplog.at_level(logging.ERROR, logger="trainer"):
        assert save(local, 10) is False
    assert "disk full" in caplog.text and "NOT written" in caplog.text


def _s3_manager(client, tmp_path, retries=3):
    storage = S3Storage("s3://mlops/runs/zimdb", client=client, retries=retries, backoff_s=0)
    return CheckpointManager(storage, keep=2, workdir=tmp_path)


def test_s3_round_trip_under_the_run_prefix_with_keep_last_k(s3, tmp_path):
    ckpt = _s3_manager(s3, tmp_path)
    ckpt.begin(ONE, resume=True)
    for step in (1, 2, 3):
        assert save(ckpt, step)
    keys = sorted(o["Key"] for o in s3.list_objects_v2(Bucket="mlops")["Contents"])
    files = sorted([MANIFEST, SHARD, shards.METADATA, TRAIN_STATE])
    run = f"runs/zimdb/{ckpt.run}"
    assert keys == ["runs/zimdb/latest"] + [f"{run}/{checkpoint_name(s)}/{f}" for s in (2, 3) for f in files]
    state, loaded = resume(_s3_manager(s3, tmp_path))
    assert state["step"] == 3 and loaded.step_of_weights() == 3.0


class _RefusesOneDelete:
    """S3 answering delete_objects with a per-key error (HTTP 200, `Errors`) for the keys holding `part`."""

    def __init__(self, client, part):
        self._client, self.part = client, part

    def delete_objects(self, Bucket, Delete):
        keep = [o for o in Delete["Objects"] if self.part in o["Key"]]
        rest = [o for o in Delete["Objects"] if o not in keep]
        done = self._client.delete_objects(Bucket=Bucket, Delete={"Objects": rest}) if rest else {}
        errors = [{"Key": o["Key"], "Code": "AccessDenied", "Message": "Access Denied"} for o in keep]
        return {**done, "Errors": errors}

    def __getattr__(self, name):
        return getattr(self._client, name)


def test_s3_objects_that_pruning_could_not_delete_are_named_in_a_warning(s3, tmp_path, caplog):
    ckpt = _s3_manager(_RefusesOneDelete(s3, f"{checkpoint_name(1)}/{SHARD}"), tmp_path)
    ckpt.begin(ONE, resume=True)
    with caplog.at_level(logging.WARNING, logger="trainer"):
        for step in (1, 2, 3):
            assert save(ckpt, step)  # a failed prune never fails the checkpoint
    left = f"runs/zimdb/{ckpt.run}/{checkpoint_name(1)}/{SHARD}"
    assert f"could not prune old checkpoints in s3://mlops/runs/zimdb/{ckpt.run}" in caplog.text
    assert f"S3 did not delete 1 object(s) of s3://mlops/runs/zimdb/{ckpt.run}/step-000000001/" in caplog.text
    assert f"{left} (AccessDenied: Access Denied)" in caplog.text
    assert left in {o["Key"] for o in s3.list_objects_v2(Bucket="mlops")["Contents"]}


def test_s3_transient_failure_is_retried_and_the_checkpoint_completes(s3, tmp_path, caplog):
    flaky = _s3_manager(FlakyS3(s3, failures=2), tmp_path, retries=3)
    flaky.begin(ONE, resume=True)
    with caplog.at_level(logging.WARNING, logger="trainer"):
        assert save(flaky, 5)
    assert caplog.text.count("retrying") == 2
    assert resume(_s3_manager(s3, tmp_path))[0]["step"] == 5


def test_s3_outage_skips_the_checkpoint_and_latest_keeps_the_last_good_one(s3, tmp_path, caplog):
    good = _s3_manager(s3, tmp_path)
    good.begin(ONE, resume=True)
    assert save(good, 5)
    down = _s3_manager(FlakyS3(s3, failures=100), tmp_path, retries=3)
    down.begin(ONE, resume=True)
    with caplog.at_level(logging.WARNING, logger="trainer"):
        assert save(down, 6) is False
    assert "NOT written" in caplog.text and f"latest still points to {good.run}/step-000000005" in caplog.text
    assert resume(_s3_manager(s3, tmp_path))[0]["step"] == 5


def _one_process(out: Path, capsys, caplog, **overrides) -> str:
    """A 1-process run in this process (under torchrun one process makes no process group either,
    trainer.dist.setup, so only the start-up differs): what it printed and logged."""
    caplog.clear()
    code = run_in_process(from_args(trainer_args(out, **overrides)))
    captured = capsys.readouterr()
    said = captured.out + captured.err + caplog.text
    assert code == 0, said
    return said


@pytest.fixture(scope="module")
def s3_server():
    """A moto S3 server the torchrun workers reach over HTTP (AWS_ENDPOINT_URL), with a bucket 'mlops'."""
    import boto3
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0)
    server.start()
    host, port = server.get_host_and_port()
    env = {
        "AWS_ENDPOINT_URL": f"http://{host}:{port}",
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    client = boto3.client(
        "s3",
        endpoint_url=env["AWS_ENDPOINT_URL"],
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    client.create_bucket(Bucket="mlops")
    yield client, env
    server.stop()


FSDP_ON_S3 = {"train.parallelism": "fsdp", "checkpoint.dir": "s3://mlops/ckpt", "checkpoint.every_steps": 10}


@pytest.fixture(scope="module")
def written_by_two_ranks(tmp_path_factory, s3_server):
    """A real 2-process torchrun FSDP run (gloo) of 20 steps that checkpoints to S3 at steps 10 and 20, then
    one process (in this process) that resumes its step 20: the run both tests below judge, made once.
    Returns the directory of both runs' outputs, what the bucket held after the first run (latest, its
    objects and manifests) and what the resuming process printed and logged."""
    client, aws = s3_server
    tmp = tmp_path_factory.mktemp("fsdp-on-s3")
    (tmp / "first").mkdir()
    env = {**run_env(cold=False), **aws}
    first = subprocess.run(
        launch_cmd(tmp / "first", nproc=2, interpreter=python(env), **FSDP_ON_S3, **{"train.max_steps": 20}),
        cwd=tmp,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert first.returncode == 0, first.stdout + first.stderr
    latest = client.get_object(Bucket="mlops", Key="ckpt/latest")["Body"].read().decode()
    listed = client.list_objects_v2(Bucket="mlops", Prefix=f"ckpt/{latest}/")["Contents"]
    run_dir = latest.split("/")[0]
    manifests = {
        step: json.loads(client.get_object(Bucket="mlops", Key=f"ckpt/{name}/{MANIFEST}")["Body"].read())
        for step, name in ((10, f"{run_dir}/{checkpoint_name(10)}"), (20, latest))
    }
    said = io.StringIO()
    handler = logging.StreamHandler(said)
    logger, sigterm = logging.getLogger("trainer"), signal.getsignal(signal.SIGTERM)
    logger.addHandler(handler)
    try:
        with pytest.MonkeyPatch.context() as patch, redirect_stdout(said), redirect_stderr(said):
            for key, value in aws.items():
                patch.setenv(key, value)
            args = trainer_args(tmp / "second", **FSDP_ON_S3, **{"train.max_steps": 20})
            code = run_in_process(from_args(args))
    finally:
        logger.removeHandler(handler)
        signal.signal(signal.SIGTERM, sigterm)  # the trainer sets its own
    assert code == 0, said.getvalue()
    return {
        "dir": tmp,
        "latest": latest,
        "keys": {o["Key"] for o in listed},
        "manifests": manifests,
        "resumed": said.getvalue(),
    }


def test_sharded_fsdp_checkpoint_resumes_at_another_world_size(
    written_by_two_ranks, s3_server, monkeypatch, keep_sigterm_handler, capsys, caplog
):
    """DCP reshards the model and optimizer on load, 2 ranks to 1, then 1 to 2. The 2-process runs are real
    torchrun runs (gloo); the 1-process ones run in this process. The checkpoints are in S3: each rank
    fetches the shards it reads, which after resharding another rank wrote."""
    client, aws = s3_server
    tmp_path = written_by_two_ranks["dir"]
    for key, value in aws.items():
        monkeypatch.setenv(key, value)

    def pointer() -> str:
        return client.get_object(Bucket="mlops", Key="ckpt/latest")["Body"].read().decode()

    def run(name: str, nproc: int, steps: int) -> str:
        if nproc == 1:
            return _one_process(tmp_path / name, capsys, caplog, **FSDP_ON_S3, **{"train.max_steps": steps})
        done = launch(tmp_path / name, env=aws, nproc=nproc, **FSDP_ON_S3, **{"train.max_steps": steps})
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout + done.stderr

    def weights(name: str) -> dict[str, torch.Tensor]:
        return torch.load(tmp_path / name / "model.pt", weights_only=True)["model"]

    manifest = written_by_two_ranks["manifests"][20]
    assert manifest["world_size"] == 2
    assert {"__0_0.distcp", "__1_0.distcp"} <= set(manifest["files"])  # one shard per rank
    interval = written_by_two_ranks["manifests"][10]
    assert interval["step"] == 10 and interval["world_size"] == 2  # written in the background

    # At the last step a resumed run only evaluates and writes the weights it loaded.
    outs = {"second": written_by_two_ranks["resumed"]}
    assert f"resuming from s3://mlops/ckpt/{written_by_two_ranks['latest']}" in outs["second"]
    assert "written by 2 ranks, this run has 1: resharded" in outs["second"]
    for name, nproc, steps, writers in (("third", 1, 24, 2), ("fourth", 2, 24, 1)):
        before = pointer()
        outs[name] = run(name, nproc, steps)
        assert f"resuming from s3://mlops/ckpt/{before}" in outs[name]
        assert f"written by {writers} ranks, this run has {nproc}: resharded" in outs[name]
    assert "steps 20..24" in outs["third"]  # the optimizer state, resharded too, trains on
    for written, loaded in (("first", "second"), ("third", "fourth")):
        a, b = weights(written), weights(loaded)
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), (written, loaded)


def test_every_rank_uploads_its_shard_to_s3_and_a_single_process_resumes_it(written_by_two_ranks):
    """A real 2-process torchrun run writes; one process (in this process) resumes."""
    latest, tmp_path = written_by_two_ranks["latest"], written_by_two_ranks["dir"]
    files = {MANIFEST, TRAIN_STATE, shards.METADATA, "__0_0.distcp", "__1_0.distcp"}
    keys = written_by_two_ranks["keys"]
    assert keys == {f"ckpt/{latest}/{f}" for f in files}  # rank 1's shard came from rank 1
    manifest = written_by_two_ranks["manifests"][20]
    assert set(manifest["files"]) == files - {MANIFEST} and manifest["world_size"] == 2
    assert f"resuming from s3://mlops/ckpt/{latest} (step 20)" in written_by_two_ranks["resumed"]
    written = torch.load(tmp_path / "first" / "model.pt", weights_only=True)["model"]
    loaded = torch.load(tmp_path / "second" / "model.pt", weights_only=True)["model"]
    assert all(torch.equal(written[k], loaded[k]) for k in written)


def test_resume_from_a_chosen_checkpoint_goes_on_in_a_new_run_that_a_restart_resumes(
    tmp_path, keep_sigterm_handler, capsys, caplog
):
    """--checkpoint.resume_from run-<id>/step-10 of a finished 20-step run: steps 10..20 again in a new run
    (the first run's checkpoints untouched), to the same weights (same data order and RNG streams). Its
    restart with the same flags resumes the new run, not step 10 again."""
    ckpt = tmp_path / "ckpt"
    steps = {"checkpoint.dir": ckpt, "checkpoint.every_steps": 10, "train.max_steps": 20}
    _one_process(tmp_path / "first", capsys, caplog, **steps)
    first = (ckpt / POINTER).read_text()
    chosen = f"{first.split('/')[0]}/{checkpoint_name(10)}"
    before = sorted(p.name for p in (ckpt / chosen).parent.iterdir())
    again = {**steps, "checkpoint.resume_from": f"{ckpt}/{chosen}"}  # the location, as logs print it
    said = _one_process(tmp_path / "again", capsys, caplog, **again)
    assert f"resuming from {ckpt}/{chosen} (step 10)" in said
    latest = (ckpt / POINTER).read_text()
    assert latest.endswith(checkpoint_name(20)) and latest.split("/")[0] != first.split("/")[0]
    assert sorted(p.name for p in (ckpt / chosen).parent.iterdir()) == before
    weights = [torch.load(tmp_path / n / "model.pt", weights_only=True)["model"] for n in ("first", "again")]
    assert all(torch.equal(weights[0][k], weights[1][k]) for k in weights[0])
    restarted = _one_process(tmp_path / "again", capsys, caplog, **again)
    assert f"resuming from {ckpt}/{latest} (step 20)" in restarted and (ckpt / POINTER).read_text() == latest


def test_resume_from_a_checkpoint_that_does_not_exist_exits_2_naming_what_does(
    tmp_path, capsys, keep_sigterm_handler
):
    from trainer.__main__ import main

    ckpt = tmp_path / "ckpt"
    run_dir = ckpt / "run-20261128T000000Z-abc123"
    (run_dir / checkpoint_name(10)).mkdir(parents=True)  # no manifest: an interrupted write
    args = trainer_args(tmp_path / "out", **{"checkpoint.dir": ckpt, "train.max_steps": 20})
    for chosen, says in (
        (f"{run_dir.name}/{checkpoint_name(15)}", "no such checkpoint in"),
        (f"{run_dir.name}/{checkpoint_name(10)}", "refusing checkpoint"),
        ("latest", "allowed run-<id>/step-<N>"),
    ):
        assert main([*args, "--checkpoint.resume_from", chosen]) == 2, chosen
        err = capsys.readouterr().err
        assert f"checkpoint.resume_from={chosen!r}" in err and says in err, err
        if "15" in chosen:
            assert f"its checkpoints: {checkpoint_name(10)}" in err
    assert not (tmp_path / "out" / "model.pt").exists()
    chosen = f"{run_dir.name}/{checkpoint_name(10)}"
    assert main([*args, "--checkpoint.resume_from", chosen, "--checkpoint.resume", "false"]) == 2
    assert "allowed true when checkpoint.resume_from is set" in capsys.readouterr().err
