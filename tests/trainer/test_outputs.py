"""The end of a run: the outputs written whole or not at all, and the replicas' digest in any dtype."""

from __future__ import annotations

import errno
import json

import pytest
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from trainer import faults, outputs
from trainer.config import build
from trainer.dist import DistEnv
from trainer.llm import task, tiny
from trainer.metrics import Metrics
from trainer.storage import LocalStorage

CPU = DistEnv(rank=0, world_size=1, local_rank=0, device=torch.device("cpu"))


@pytest.fixture
def one_rank_group():
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def test_lora_under_ddp_with_bf16_base_weights_writes_its_outputs(tmp_path, one_rank_group):
    """What a bf16 GPU pool runs by default: the base model loaded from its directory in bf16 (LoRA
    without FSDP loads in the compute dtype), DDP, then the end of the run: the export and the replicas'
    digest, which used to read the weights through numpy (no bf16 there) and exit 1 after training."""
    torch.manual_seed(0)
    tok = tiny.tokenizer()
    saved = tmp_path / "base"
    tiny.model(tok).to(torch.bfloat16).save_pretrained(saved)
    tok.save_pretrained(saved)
    records = tmp_path / "records.jsonl"  # the config needs one; nothing trains here
    records.write_text("{}\n")
    cfg = build({"llm": {"model": str(saved)}, "data": {"source": str(records)}})
    model = task.build(cfg.llm, saved, tok, load_dtype=torch.bfloat16, grad_checkpointing=False)
    assert {p.dtype for p in model.parameters() if not p.requires_grad} == {torch.bfloat16}
    out = tmp_path / "out"
    summary = {"steps": 1, "checkpoint": None}
    metrics = Metrics(out / "metrics.jsonl", enabled=True)
    outputs.write_outputs(
        cfg, CPU, DistributedDataParallel(model), LocalStorage(out), out, "", metrics, summary, tok
    )
    written = json.loads((out / "summary.json").read_text())
    assert written["ranks_identical"] is True and written["model"] == f"{out}/adapter"
    assert (out / "adapter" / "adapter_model.safetensors").is_file()


def test_the_digest_tells_bf16_replicas_apart_by_their_bytes():
    a = torch.nn.Linear(4, 4).to(torch.bfloat16)
    b = torch.nn.Linear(4, 4).to(torch.bfloat16)
    b.load_state_dict(a.state_dict())
    assert outputs.digest(a) == outputs.digest(b)
    with torch.no_grad():
        b.bias.view(torch.int16)[0] += 1  # one bf16 ulp
    assert outputs.digest(a) != outputs.digest(b)


def test_a_directory_is_moved_into_place_whole_or_not_at_all(tmp_path):
    previous = tmp_path / "adapter"
    previous.mkdir()
    (previous / "weights").write_text("from the attempt before")

    def full_half_way(into):
        (into / "adapter").mkdir()
        (into / "adapter" / "config.json").write_text("{}")
        raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(faults.Retryable, match="disk full: writing .* the restart only writes the outputs"):
        outputs.write_directory(tmp_path, full_half_way, writer=True, checkpoint="ckpt/step-2")
    assert [p.name for p in tmp_path.iterdir()] == ["adapter"]  # no temporary directory left behind
    assert (previous / "weights").read_text() == "from the attempt before"

    def complete(into):
        (into / "adapter").mkdir()
        (into / "adapter" / "weights").write_text("new")
        return "adapter"

    assert outputs.write_directory(tmp_path, complete, writer=True, checkpoint=None) == "adapter"
    assert [p.name for p in tmp_path.iterdir()] == ["adapter"]
    assert (previous / "weights").read_text() == "new"


def test_other_errors_of_a_library_writer_are_not_called_a_full_disk(tmp_path):
    def broken(into):
        raise ValueError("not a disk problem")

    with pytest.raises(ValueError, match="not a disk problem"):
        outputs.write_directory(tmp_path, broken, writer=True, checkpoint=None)
    assert list(tmp_path.iterdir()) == []
