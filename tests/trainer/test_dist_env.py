import os

import pytest

from trainer.config import ConfigError
from trainer.dist import _ranks_from_env


def test_torchrun_variables_give_rank_world_and_local_rank():
    assert _ranks_from_env({"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1"}) == (3, 4, 1)


def test_kubeflow_one_process_per_pod_variables_are_mapped(monkeypatch):
    monkeypatch.delenv("MASTER_ADDR", raising=False)
    monkeypatch.delenv("MASTER_PORT", raising=False)
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
