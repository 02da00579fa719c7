import torch

from trainer.config import ModelConfig
from trainer.model import build_model

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
