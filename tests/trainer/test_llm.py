"""The causal-LM task with the real transformers and peft, in one process: LoRA trains only the adapters,
the loss counts only the assistant's tokens, packing, the model staged once into its cache, MFU and the
missing extra."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import boto3
import pytest
import torch
from moto import mock_aws

from trainer import metrics as m
from trainer.__main__ import main
from trainer.config import LlmConfig, build
from trainer.dist import DistEnv
from trainer.llm import data, source, task, tiny
from trainer.loop import _enable_mfu
from trainer.precision import Precision

REPO = Path(__file__).resolve().parents[2]
LLM_SAMPLE = REPO / "workloads" / "examples" / "llm-chat.jsonl"  # what run-local trains the LLM stacks on

CPU = DistEnv(rank=0, world_size=1, local_rank=0, device=torch.device("cpu"))
CHAT = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Spell 'pod' backwards."},
    {"role": "assistant", "content": "dop"},
    {"role": "user", "content": "And 'node'?"},
    {"role": "assistant", "content": "edon"},
]


def _lora(**overrides) -> torch.nn.Module:
    torch.manual_seed(0)
    cfg = LlmConfig(model="tiny", lora_dropout=0.0, **overrides)
    return task.build(cfg, None, tiny.tokenizer(), load_dtype=torch.float32, grad_checkpointing=True)


def _batch(tok, messages=CHAT) -> dict[str, torch.Tensor]:
    ids, labels = data.encode(tok, messages, "test")
    return data.Collate(tok.pad_token_id)([(ids, labels), (ids[:20], labels[:20])])


def test_lora_trains_only_the_adapters_and_keeps_every_base_weight_bit_identical():
    model = _lora()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert trainable and all(".lora_A." in n or ".lora_B." in n for n in trainable)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    batch = _batch(tiny.tokenizer())
    for _ in range(3):
        task.loss(model, batch)[0].backward()
        optimizer.step()
        optimizer.zero_grad()
    after = model.state_dict()
    changed = {k for k in before if not torch.equal(before[k], after[k])}
    assert changed and all("lora_" in k for k in changed), sorted(changed)[:5]
    assert any(".lora_B." in k for k in changed)  # B starts at zero: the update is now non-zero


def test_full_fine_tuning_trains_every_weight():
    model = _lora(method="full")
    assert all(p.requires_grad for p in model.parameters())


def test_the_loss_counts_the_assistant_turns_and_their_end_of_turn_only():
    tok = tiny.tokenizer()
    ids, labels = data.encode(tok, CHAT, "test")
    labelled = tok.decode([t for t in labels if t != data.IGNORE])
    assert labelled == "dop<|im_end|>\nedon<|im_end|>\n"
    assert [t for t, lab in zip(ids, labels, strict=True) if lab != data.IGNORE] == [
        t for t in labels if t != data.IGNORE
    ]
    # The loss of a batch depends on the labelled tokens only: changing what the user said changes the
    # input (and so the logits) but a label-free batch sums to 0, not NaN, over 0 tokens (no skipped step).
    model = _lora()
    unlabelled = _batch(tok)
    unlabelled["labels"].fill_(data.IGNORE)
    total, count = task.loss(model, unlabelled)
    assert (total.item(), count.item()) == (0.0, 0)


def test_an_instruction_record_becomes_a_user_and_an_assistant_turn(tmp_path):
    path = tmp_path / "records.jsonl"
    path.write_text(json.dumps({"prompt": "2+2?", "response": "4", "system": "Math."}) + "\n")
    assert data.read_records(path) == [
        [{"role": "system", "content": "Math."}, {"role": "user", "content": "2+2?"},
         {"role": "assistant", "content": "4"}]
    ]  # fmt: skip
    path.write_text(json.dumps({"messages": [{"role": "user", "content": "hi"}]}) + "\n")
    with pytest.raises(data.DataError, match="line 1: no assistant message"):
        data.read_records(path)


def test_a_chat_template_that_rewrites_earlier_turns_is_refused_naming_the_record():
    tok = tiny.tokenizer()
    # Renders only the last message: the first turns look different once more follow.
    tok.chat_template = "{{ messages[-1]['content'] }}{% if add_generation_prompt %}>{% endif %}"
    with pytest.raises(data.DataError, match="record 7: the chat template renders"):
        data.encode(tok, CHAT, "record 7")


def test_packing_fills_every_sequence_and_keeps_every_token_and_label_in_order():
    tok = tiny.tokenizer()
    examples = [data.encode(tok, CHAT, "a"), data.encode(tok, CHAT[:3], "b")]
    packed = data.pack(examples, 16)
    assert all(len(ids) == 16 for ids, _ in packed[:-1]) and 0 < len(packed[-1][0]) <= 16
    assert [t for ids, _ in packed for t in ids] == examples[0][0] + examples[1][0]
    assert [t for _, lab in packed for t in lab] == examples[0][1] + examples[1][1]
    batch = data.Collate(tok.pad_token_id)(packed[-2:])  # the short last one is padded and masked
    short = len(packed[-1][0])
    assert batch["attention_mask"][1, short:].sum() == 0
    assert (batch["labels"][1, short:] == data.IGNORE).all()
    assert batch["attention_mask"][0].all()


def test_the_llm_task_without_its_extra_exits_2_naming_the_extra(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "peft", None)  # what importlib finds when peft is not installed
    monkeypatch.delenv("RANK", raising=False)
    records = tmp_path / "chat.jsonl"
    records.write_text(json.dumps({"prompt": "a", "response": "b"}) + "\n")
    code = main(["--llm.model", "tiny", "--data.source", str(records), "--output.dir", str(tmp_path / "out"),
                 "--checkpoint.dir", str(tmp_path / "ckpt")])  # fmt: skip
    error = capsys.readouterr().err
    assert code == 2 and len(error.strip().splitlines()) == 1, error
    assert "needs the 'llm' extra (peft not installed): pip install 'mlops-eks[llm]'" in error


def test_mfu_of_a_causal_lm_counts_its_config_shape(tmp_path, monkeypatch):
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA A100-SXM4-80GB")
    env = DistEnv(rank=0, world_size=2, local_rank=0, device=torch.device("cuda", 0))
    model = _lora()
    metrics = m.Metrics(tmp_path / "metrics.jsonl", enabled=True)
    _enable_mfu(metrics, model, env, Precision(torch.bfloat16, "A100", "test"), seq_len=128)
    metrics.record("train", 1, tokens_per_s=1e5)
    row = json.loads((tmp_path / "metrics.jsonl").read_text())
    shape = tiny.SHAPE
    head_dim = shape["hidden_size"] // shape["num_attention_heads"]
    embedding = model.get_input_embeddings().weight.numel()
    params = sum(p.numel() for p in model.parameters()) - embedding
    per_token = 6 * params + 12 * shape["num_hidden_layers"] * shape["num_attention_heads"] * head_dim * 128
    assert row["mfu"] == pytest.approx(1e5 * per_token / (2 * 312e12))


def test_the_metrics_endpoint_serves_the_llm_figures(tmp_path):
    exporter = m.Exporter(tmp_path, local_rank=1, rank=1, port=9)  # not local rank 0: writes, serves nothing
    exporter.publish({"step": 3, "tokens_per_s": 5e4, "mfu": 0.4, "val_loss": 2.0, "val_perplexity": 7.389})
    gauges = {g.name: g.samples[0].value for g in m._SharedFilesCollector(tmp_path).collect()}
    assert gauges["trainer_tokens_per_second"] == 5e4 and gauges["trainer_mfu_ratio"] == 0.4
    assert gauges["trainer_val_loss"] == 2.0 and gauges["trainer_val_perplexity"] == 7.389


def _saved_tiny(into):
    torch.manual_seed(0)
    tok = tiny.tokenizer()
    tiny.model(tok).save_pretrained(into)
    tok.save_pretrained(into)


@mock_aws
def test_a_hub_model_is_staged_once_into_its_cache_and_later_starts_read_the_cache(tmp_path, monkeypatch):
    s3 = boto3.client("s3", region_name="us-east-1")
    s3.create_bucket(Bucket="jobs")
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr("tempfile.tempdir", None)
    downloads = []

    def hub_download(repo, into):  # the network boundary: the Hub itself is out of reach here
        downloads.append(repo)
        _saved_tiny(into)

    monkeypatch.setattr(source, "_hub_download", hub_download)
    cfg = LlmConfig(model="hf:acme/tiny-chat", model_cache="s3://jobs/llm/model-cache")
    first = source.model_dir(cfg, CPU, "launch-1", s3_client=s3, say=lambda _: None)
    keys = {o["Key"] for o in s3.list_objects_v2(Bucket="jobs")["Contents"]}
    assert downloads == ["acme/tiny-chat"]
    assert "llm/model-cache/acme--tiny-chat/.complete" in keys
    assert "llm/model-cache/acme--tiny-chat/model.safetensors" in keys
    second = source.model_dir(cfg, CPU, "launch-2", s3_client=s3, say=lambda _: None)  # a restart
    assert downloads == ["acme/tiny-chat"] and second != first
    model = task.build(cfg, second, task.tokenizer(cfg, second), load_dtype=torch.float32,
                       grad_checkpointing=False)  # fmt: skip
    torch.manual_seed(0)
    reference = tiny.model(tiny.tokenizer())
    base = model.unload().state_dict()  # the base model without the (untrained) adapters
    assert base.keys() == reference.state_dict().keys()
    assert all(torch.equal(v, base[k]) for k, v in reference.state_dict().items())


def test_perplexity_is_the_exponent_of_the_validation_loss_per_labelled_token():
    model = _lora()
    tok = tiny.tokenizer()
    val = data.Sequences([data.encode(tok, CHAT, "a"), data.encode(tok, CHAT[:3], "b")])
    loader = torch.utils.data.DataLoader(val, batch_size=1, collate_fn=data.Collate(tok.pad_token_id))
    result = task.evaluate(model, loader, CPU, None)
    total = sum(task.token_loss(model, data.Collate(tok.pad_token_id)([row]))[0].item() for row in val.rows)
    assert result["val_tokens"] == val.label_tokens()
    assert result["val_loss"] == pytest.approx(total / val.label_tokens())
    assert result["val_perplexity"] == pytest.approx(math.exp(result["val_loss"]))


def test_the_job_config_accepts_the_llm_section_and_the_sample_records(tmp_path):
    cfg = build({
        "llm": {"model": "tiny", "lora_targets": "q_proj, v_proj"},
        "data": {"source": str(LLM_SAMPLE)},
        "checkpoint": {"dir": str(tmp_path / "c")},
        "output": {"dir": str(tmp_path / "o")},
    })  # fmt: skip
    assert cfg.llm.target_modules == ["q_proj", "v_proj"]
    records = data.read_records(LLM_SAMPLE)
    assert len(records) >= 200 and all(any(m["role"] == "assistant" for m in r) for r in records)
