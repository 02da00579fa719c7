import os
import signal

import pytest
import torch

from trainer import faults
from trainer.__main__ import main
from trainer.config import ConfigError
from trainer.dist import _device, _ranks_from_env
from trainer.faults import GpuUnavailable


def test_torchrun_variables_give_rank_world_and_local_rank():
    assert _ranks_from_env({"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1"}) == (3, 4, 1)


def test_kubeflow_one_process_per_pod_variables_are_mapped(monkeypatch):
    # set, then delete: monkeypatch undoes only what it recorded, and _ranks_from_env sets both.
    for name in ("MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)
    env = {
        "PET_NNODES": "4",
        "PET_NODE_RANK": "2",
        "PET_MASTER_ADDR": "job-node-0-0.job",
        "PET_MASTER_PORT": "29400",
    }
    assert _ranks_from_env(env) == (2, 4, 0)
    assert (os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"]) == ("job-node-0-0.job", "29400")


def test_several_processes_per_pod_without_torchrun_is_refused_with_the_command_to_use():
    with pytest.raises(ConfigError, match="python -m trainer.launch -m trainer"):
        _ranks_from_env({"PET_NNODES": "1", "PET_NPROC_PER_NODE": "4"})


def test_no_variables_means_a_single_process():
    assert _ranks_from_env({}) == (0, 1, 0)


def _gpus(monkeypatch, count: int) -> None:
    monkeypatch.setattr(torch.version, "cuda", "12.8")  # a CUDA build (CI's torch is the CPU one)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: count > 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: count)
    monkeypatch.setattr(torch.cuda, "set_device", lambda device: None)


def test_a_gpu_job_without_a_visible_gpu_refuses_to_train_on_cpu(monkeypatch):
    _gpus(monkeypatch, 0)
    with pytest.raises(GpuUnavailable, match=r"train.device='cuda' but this process \(local rank 0\) sees 0"):
        _device("cuda", 0)


def test_a_rank_whose_gpu_is_missing_refuses_even_under_auto(monkeypatch):
    _gpus(monkeypatch, 2)  # a 4-GPU pod where the device plugin exposed only two
    assert _device("auto", 1) == torch.device("cuda", 1)
    with pytest.raises(GpuUnavailable, match="local rank 3"):
        _device("auto", 3)


def test_auto_trains_on_cpu_only_where_there_is_no_gpu_at_all(monkeypatch):
    _gpus(monkeypatch, 0)
    assert _device("auto", 0) == torch.device("cpu")
    _gpus(monkeypatch, 1)
    assert _device("cpu", 0) == torch.device("cpu")
    assert _device("auto", 0) == torch.device("cuda", 0)


def test_missing_gpu_exits_201_retryable(monkeypatch, capsys):
    handler = signal.getsignal(signal.SIGTERM)
    _gpus(monkeypatch, 0)
    try:
        assert main(["--train.device", "cuda"]) == faults.NO_GPU
    finally:
        signal.signal(signal.SIGTERM, handler)
    err = capsys.readouterr().err
    assert "refusing to train on CPU" in err and "exit 201 (retryable" in err


def test_a_gpu_job_on_a_cpu_only_torch_build_is_a_permanent_error(monkeypatch):
    _gpus(monkeypatch, 0)
    monkeypatch.setattr(torch.version, "cuda", None)
    monkeypatch.setattr(torch.version, "hip", None)
    with pytest.raises(ConfigError, match="built without CUDA or ROCm: run the cuda or rocm image"):
        _device("cuda", 0)
