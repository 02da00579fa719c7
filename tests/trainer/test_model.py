import pytest
import torch
import torch.distributed as dist
from torch.distributed.fsdp import FSDPModule

from trainer.config import ModelConfig, TrainConfig
from trainer.dist import DistEnv
from trainer.loop import _wrap
from trainer.model import build_model, transformer_blocks
from trainer.precision import Precision

CFG = ModelConfig(dim=16, layers=2, heads=2, ffn_dim=32)


def _batch():
    ids = torch.randint(1, 50, (3, 8))
    mask = torch.ones(3, 8, dtype=torch.bool)
    mask[0, 5:] = False
    return ids.masked_fill(~mask, 0), mask


def test_forward_gives_one_logit_per_class_per_example():
    model = build_model(CFG, vocab_size=50, max_positions=8)
    ids, mask = _batch()
    assert model(ids, mask).shape == (3, 2)


def test_padding_does_not_change_the_prediction():
    torch.manual_seed(0)
    model = build_model(CFG, vocab_size=50, max_positions=16).eval()
    ids, mask = _batch()
    longer_ids = torch.cat([ids, torch.zeros(3, 8, dtype=torch.long)], 1)
    longer_mask = torch.cat([mask, torch.zeros(3, 8, dtype=torch.bool)], 1)
    torch.testing.assert_close(model(ids, mask), model(longer_ids, longer_mask), atol=1e-5, rtol=1e-5)


def test_gradient_checkpointing_gives_the_same_gradients():
    torch.manual_seed(0)
    model = build_model(CFG, vocab_size=50, max_positions=8)
    ids, mask = _batch()
    grads = []
    for checkpointing in (False, True):
        model.zero_grad()
        model.grad_checkpointing = checkpointing
        model(ids, mask).sum().backward()
        grads.append([p.grad.clone() for p in model.parameters()])
    for a, b in zip(*grads, strict=True):
        torch.testing.assert_close(a, b)


class BertLayer(torch.nn.Module):
    """Shaped like a Hugging Face encoder block: the class name its model lists in _no_split_modules."""

    def __init__(self):
        super().__init__()
        self.dense = torch.nn.Linear(16, 16)

    def forward(self, x):
        return torch.relu(self.dense(x))


class HfLikeModel(torch.nn.Module):
    """The contract of a transformers PreTrainedModel that FSDP wrapping relies on (Accelerate's
    fsdp2_prepare_auto_wrap_policy reads the same attribute): `_no_split_modules` names the block class,
    and the blocks sit deep inside (bert.encoder.layer[i])."""

    _no_split_modules = ["BertLayer"]

    def __init__(self):
        super().__init__()
        self.embeddings = torch.nn.Embedding(50, 16)
        self.encoder = torch.nn.Module()
        self.encoder.layer = torch.nn.ModuleList(BertLayer() for _ in range(3))
        self.classifier = torch.nn.Linear(16, 2)

    def forward(self, input_ids, attention_mask):
        x = self.embeddings(input_ids)
        for block in self.encoder.layer:
            x = block(x)
        return self.classifier(x.mean(1))


class Wrapper(torch.nn.Module):
    """Like trainer.model.HuggingFaceClassifier: the pretrained model is `.inner`."""

    def __init__(self):
        super().__init__()
        self.inner = HfLikeModel()

    def forward(self, input_ids, attention_mask):
        return self.inner(input_ids, attention_mask)


def test_blocks_of_a_hugging_face_model_come_from_its_no_split_modules():
    model = Wrapper()
    assert transformer_blocks(model) == list(model.inner.encoder.layer)


def test_blocks_of_the_built_in_encoder_are_its_layers():
    model = build_model(CFG, vocab_size=50, max_positions=8)
    assert transformer_blocks(model) == list(model.layers)


@pytest.fixture
def one_rank_group(tmp_path):
    """A real (gloo, one rank) process group: fully_shard needs one."""
    dist.init_process_group("gloo", store=dist.FileStore(str(tmp_path / "store"), 1), rank=0, world_size=1)
    yield DistEnv(rank=0, world_size=2, local_rank=0, device=torch.device("cpu"))  # "distributed": wrap
    dist.destroy_process_group()


def test_fsdp_shards_each_hugging_face_block_and_computes_in_the_chosen_precision(one_rank_group):
    model = Wrapper()
    seen = []
    for block in model.inner.encoder.layer:
        block.dense.register_forward_pre_hook(lambda module, args: seen.append(module.weight.dtype))
    bf16 = Precision(torch.bfloat16, "cpu", "requested")
    wrapped = _wrap(model, TrainConfig(parallelism="fsdp"), one_rank_group, bf16)
    assert all(isinstance(block, FSDPModule) for block in model.inner.encoder.layer)
    assert isinstance(wrapped, FSDPModule)
    ids, mask = _batch()
    wrapped(ids, mask).float().sum().backward()
    assert seen == [torch.bfloat16] * 3  # parameters were all-gathered in bf16 (the policy)
    assert all(p.grad.dtype == torch.float32 for p in wrapped.parameters())  # sharded fp32 master copy


def _buffer_broadcasts_per_forward(model: torch.nn.Module, env: DistEnv) -> int:
    wrapped = _wrap(model, TrainConfig(parallelism="ddp"), env, Precision(None, "cpu", "test"))
    sent = []
    broadcast = wrapped._distributed_broadcast_coalesced
    wrapped._distributed_broadcast_coalesced = lambda *a, **k: sent.append(a) or broadcast(*a, **k)
    ids, mask = _batch()
    wrapped(ids, mask)
    return len(sent)


class WithBatchNorm(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = torch.nn.BatchNorm1d(8)

    def forward(self, ids, mask):
        return self.norm(ids.float())  # its running statistics change in every training forward


def test_ddp_resends_buffers_before_a_forward_only_where_a_forward_changes_them(one_rank_group):
    """The built-in classifier's only buffer is its constant position table: DDP broadcasts it when it
    wraps the model, not again before each forward; batch norm's running statistics still are."""
    classifier = build_model(CFG, vocab_size=50, max_positions=8)
    assert _buffer_broadcasts_per_forward(classifier, one_rank_group) == 0
    assert _buffer_broadcasts_per_forward(WithBatchNorm(), one_rank_group) == 1
