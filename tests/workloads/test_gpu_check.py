"""trainer/gpu_check.py, the gpu-check job's program: the same sweep over gloo on CPU, 2 ranks."""

from __future__ import annotations

import subprocess

import pytest

from tests.trainer.trainer_runs import python, run_env
from workloads.stacks import REPO

GPU_CHECK = REPO / "trainer" / "gpu_check.py"
from trainer import gpu_check  # noqa: E402  (the script itself, imported for its pure parts)


def torchrun_check(*args: str) -> subprocess.CompletedProcess:
    """The launcher and its ranks forked from the warm torch server (tests/trainer/warm_torch.py)."""
    env = run_env(cold=False)
    cmd = [
        *python(env),
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node=2",
        str(GPU_CHECK),
    ]
    common = [
        "--device",
        "cpu",
        "--expect-gpus",
        "0",
        "--sizes",
        "4KiB,1MiB",
        "--warmup",
        "1",
        "--iters",
        "3",
    ]
    return subprocess.run([*cmd, *common, *args], env=env, capture_output=True, text=True, timeout=120)


def test_all_reduce_sweep_prints_bandwidth_per_size_and_passes_above_the_floor():
    passed = torchrun_check("--min-busbw-gbps", "0.000001")
    assert passed.returncode == 0, passed.stderr
    lines = passed.stdout.splitlines()
    header = lines.index(next(line for line in lines if "busbw_GB/s" in line))
    sizes = [int(line.split()[0]) for line in lines[header + 1 : header + 3]]
    assert sizes == [4096, 1 << 20]
    # Each size timed; the bandwidth has 3 decimals, which a 4 KiB all-reduce on a busy CPU rounds to 0.
    assert all(float(line.split()[1]) > 0 for line in lines[header + 1 : header + 3])
    assert float(lines[header + 2].split()[3]) > 0
    assert "gpu-check passed: 2 ranks, gloo" in passed.stdout


def test_bandwidth_below_the_floor_fails():
    with pytest.raises(
        gpu_check.CheckFailed, match=r"0\.500 GB/s is below the floor 2\.0 GB/s \(1MiB, nccl, 8 ranks\)"
    ):
        gpu_check.check_floor(0.5, 2.0, 8, "1MiB, nccl")
    with pytest.raises(gpu_check.CheckFailed, match="needs >= 2 ranks"):
        gpu_check.check_floor(0.0, 1.0, 1, "1MiB, nccl")
    gpu_check.check_floor(3.0, 2.0, 8, "1MiB, nccl")


def test_missing_gpus_fail_the_node_check(monkeypatch):
    monkeypatch.setattr(gpu_check.torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(gpu_check.torch.cuda, "device_count", lambda: 3)
    with pytest.raises(gpu_check.CheckFailed, match="3 GPUs visible, the pod requested 4"):
        gpu_check.check_visible_gpus(4, "cuda", local_world=4)
    monkeypatch.setattr(gpu_check.torch.cuda, "is_available", lambda: False)
    with pytest.raises(gpu_check.CheckFailed, match="CUDA is not available"):
        gpu_check.check_visible_gpus(4, "cuda", local_world=4)


def test_sizes_parse_with_units_and_bad_arguments_exit_2():
    assert gpu_check.parse_size("64KiB") == 65536 and gpu_check.parse_size("1GiB") == 1 << 30
    with pytest.raises(SystemExit) as info:
        gpu_check.parse_args(["--expect-gpus", "4", "--device", "cpu"])
    assert info.value.code == 2
