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
    assert labelled == "dop<|im_end|>edon<|im_end|>"  # ChatML's newline after <|im_end|> is markup
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


def _conversation(n: int) -> list[dict[str, str]]:
    return [{"role": "user", "content": f"question {n} " + "x" * (n % 7)},
            {"role": "assistant", "content": f"answer {n} " + "y" * (n % 5)}]  # fmt: skip


def test_packing_keeps_each_conversation_whole_in_one_sequence_best_fit():
    tok = tiny.tokenizer()
    examples = [data.encode(tok, _conversation(n), "a") for n in range(40)]
    seq_len = 96
    rows = data.pack(examples, seq_len)
    assert all(len(row.ids) == sum(row.lengths) <= seq_len for row in rows)
    # Every conversation is a contiguous run of one row, with its labels: none is cut from its reply.
    found = sorted(
        (tuple(row.ids[start : start + n]), tuple(row.labels[start : start + n]))
        for row in rows
        for start, n in zip([sum(row.lengths[:k]) for k in range(len(row.lengths))], row.lengths, strict=True)
    )
    assert found == sorted((tuple(ids), tuple(labels)) for ids, labels in examples)
    # Best fit: no more rows than the tokens need, but for one partly filled row at most.
    assert len(rows) <= -(-sum(map(len, (e[0] for e in examples))) // seq_len) + 1
    # A conversation longer than seq_len becomes one truncated row, as without packing.
    long = data.pack([examples[0], (list(range(200)), [5] * 200)], seq_len)
    assert [r.lengths for r in long] == [[seq_len], [len(examples[0][0])]]


def test_a_packed_conversation_sees_only_itself_its_logits_equal_its_own_alone():
    tok = tiny.tokenizer()
    first, second = data.encode(tok, CHAT, "a"), data.encode(tok, CHAT[:3], "b")
    rows = data.pack([first, second], 256)
    assert len(rows) == 1 and rows[0].lengths == [len(first[0]), len(second[0])]
    batch = data.Collate(tok.pad_token_id)(rows)
    mask, positions = batch["document_mask"][0, 0], batch["position_ids"][0]
    a, b = rows[0].lengths
    assert not mask[a : a + b, :a].any()  # the second conversation never attends to the first
    assert positions[a : a + b].tolist() == list(range(b))  # and counts its positions from its own start
    assert mask[a + b :, : a + b].sum() == 0 and mask[a + b :, a + b :].diagonal().all()  # padding: alone
    task.register_attention()
    torch.manual_seed(0)
    model = tiny.model(tok, attention=task.ATTENTION).eval()  # as the trainer loads it
    torch.manual_seed(0)
    reference = tiny.model(tok, attention="sdpa").eval()  # transformers' own SDPA and mask creation
    reference.config.use_cache = False  # transformers detects packing only without a KV cache
    with torch.no_grad():
        packed = model(**data.forward_inputs(batch)).logits[0]
        alone = [model(input_ids=torch.tensor([ids])).logits[0] for ids, _ in (first, second)]
        # transformers' padding-free packing (position ids, no mask: transformers builds it): the same
        by_positions = reference(input_ids=batch["input_ids"], position_ids=batch["position_ids"]).logits[0]
    assert torch.allclose(packed[:a], alone[0], atol=1e-5)
    assert torch.allclose(packed[a : a + b], alone[1], atol=1e-5)
    assert torch.allclose(packed[: a + b], by_positions[: a + b], atol=1e-5)


def _host_reads(monkeypatch) -> list[str]:
    """The names of the tensor methods that make the host wait for the device, as they are called."""
    reads: list[str] = []
    for name in ("item", "tolist", "__bool__"):
        original = getattr(torch.Tensor, name)
        monkeypatch.setattr(
            torch.Tensor, name, lambda t, *a, _o=original, _n=name: reads.append(_n) or _o(t, *a)
        )
    return reads


def test_the_forward_gets_no_attention_mask_unless_a_row_is_packed_and_never_reads_the_device(monkeypatch):
    tok = tiny.tokenizer()
    model = _lora().eval()
    seen = []

    def record(_module, _args, kwargs):
        seen.append(kwargs.get("attention_mask"))

    model.get_base_model().model.register_forward_pre_hook(record, with_kwargs=True)
    padded = _batch(tok)  # two rows, the second right-padded
    packed = data.Collate(tok.pad_token_id)(data.pack([data.encode(tok, CHAT, "a")] * 2, 256))
    reads = _host_reads(monkeypatch)
    with torch.no_grad():
        logits = model(**data.forward_inputs(padded)).logits
        model(**data.forward_inputs(packed))
    assert reads == []  # transformers' "sdpa" reads the mask (or the position ids) on the host each forward
    monkeypatch.undo()
    length = packed["input_ids"].shape[1]
    assert seen[0] is None and seen[1].shape[1:] == (1, length, length)
    # Right padding under causal attention: every real token's logits are what a padding mask gives.
    with torch.no_grad():
        masked = model(input_ids=padded["input_ids"], attention_mask=padded["attention_mask"]).logits
    real = padded["attention_mask"].bool()
    assert torch.allclose(logits[real], masked[real], atol=1e-5)


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


def _trained_lora(**overrides) -> torch.nn.Module:
    """The tiny LoRA model with non-zero adapters (as after training), eval mode."""
    model = _lora(**overrides)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.normal_(std=0.05)
    return model.eval()


def test_a_merged_export_is_a_plain_model_whose_logits_are_the_base_with_the_adapter(tmp_path):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    tok = tiny.tokenizer()
    model = _trained_lora()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    assert task.export(LlmConfig(model="tiny"), model, tok, CPU, tmp_path / "a") == "adapter"
    assert task.export(LlmConfig(model="tiny", export="merged"), model, tok, CPU, tmp_path / "m") == "model"
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())  # training model as it was
    merged = AutoModelForCausalLM.from_pretrained(tmp_path / "m" / "model").eval()
    torch.manual_seed(0)
    with_adapter = PeftModel.from_pretrained(tiny.model(tok), tmp_path / "a" / "adapter").eval()
    ids = _batch(tok)["input_ids"]
    with torch.no_grad():
        expected, got = with_adapter(input_ids=ids).logits, merged(input_ids=ids).logits
        with with_adapter.disable_adapter():
            base = with_adapter(input_ids=ids).logits
    assert torch.allclose(got, expected, atol=1e-5) and not torch.allclose(got, base, atol=1e-3)
    assert not any("lora" in k for k in merged.state_dict()) and merged.config.use_cache
    assert model.peft_config["default"].r == 8 and any("lora_B" in n for n, _ in model.named_parameters())


def test_the_export_writes_only_into_its_directory_and_a_full_disk_raises_enospc(tmp_path, monkeypatch):
    import errno

    import peft.peft_model
    import transformers.modeling_utils

    from trainer.shards import is_disk_full

    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    model, tok = _trained_lora(), tiny.tokenizer()
    for export in ("adapter", "merged"):
        task.export(LlmConfig(model="tiny", export=export), model, tok, CPU, tmp_path / export)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["adapter", "merged"]  # no cache, nothing else
    assert [p.name for p in (tmp_path / "merged").iterdir()] == ["model"]

    def full(tensors, filename, metadata=None):
        Path(filename).write_bytes(b"partial")
        raise OSError(errno.ENOSPC, "No space left on device", filename)

    monkeypatch.setattr(peft.peft_model, "safe_save_file", full)
    monkeypatch.setattr(transformers.modeling_utils, "safe_save_file", full)
    for export in ("adapter", "merged"):
        with pytest.raises(OSError) as raised:
            task.export(LlmConfig(model="tiny", export=export), model, tok, CPU, tmp_path / "full" / export)
        assert is_disk_full(raised.value)  # what the loop's full-disk handling recognises: exit 200
    assert sorted(p.name for p in tmp_path.iterdir()) == ["adapter", "full", "merged"]
    assert sorted(p.name for p in (tmp_path / "full").iterdir()) == ["adapter", "merged"]


@pytest.fixture
def one_process_group(tmp_path):
    """A gloo process group of one rank (FSDP over a world of one): what fully_shard and DCP need."""
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/store", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def test_sharded_loading_builds_nothing_whole_then_fills_every_weight_as_a_whole_load(
    tmp_path, one_process_group
):
    from torch.distributed.fsdp import fully_shard

    from trainer.llm import load, load_bench
    from trainer.model import transformer_blocks

    directory = tmp_path / "model"  # bf16 on disk, fp32 in training, the embedding tied to the head
    params = load_bench.save_model(directory, width=128, layers=2, vocab=300, tied=True)
    cfg = LlmConfig(model=str(directory), lora_dropout=0.0)
    torch.manual_seed(0)
    model, deferred = task.build_sharded(cfg, directory, load_dtype=torch.float32, grad_checkpointing=False)
    assert all(p.is_meta for p in model.parameters())  # no weight exists before fully_shard
    assert sum(t.numel() for t in deferred.kept.values()) < 0.1 * params  # adapters and buffers only
    for block in reversed(transformer_blocks(model)):
        fully_shard(block)
    fully_shard(model)
    mine, whole = load.materialize(model, deferred, torch.device("cpu"))
    assert mine == whole > params * 4  # one rank holds it all (and the adapters)
    torch.manual_seed(0)
    reference = task.build(cfg, directory, None, load_dtype=torch.float32, grad_checkpointing=False)
    expected = dict(reference.named_parameters())
    assert expected.keys() == dict(model.named_parameters()).keys()
    different = [n for n, p in model.named_parameters() if not torch.equal(p.full_tensor(), expected[n])]
    assert different == []  # base weights from the files, adapters initialised as in a whole load
    inner = model.get_base_model()
    assert inner.lm_head.weight is inner.model.embed_tokens.weight  # still tied
    rotary = dict(reference.named_buffers())
    assert all(torch.equal(b, rotary[n]) for n, b in model.named_buffers())


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
    val = data.Sequences([data.Row(ids, labels, [len(ids)]) for ids, labels in
                          (data.encode(tok, CHAT, "a"), data.encode(tok, CHAT[:3], "b"))])  # fmt: skip
    loader = torch.utils.data.DataLoader(val, batch_size=1, collate_fn=data.Collate(tok.pad_token_id))
    result = task.evaluate(model, loader, CPU, None)
    total = sum(task.token_loss(model, data.Collate(tok.pad_token_id)([row]))[0].item() for row in val.rows)
    assert result["val_tokens"] == val.label_tokens()
    assert result["val_loss"] == pytest.approx(total / val.label_tokens())
    assert result["val_perplexity"] == pytest.approx(math.exp(result["val_loss"]))


def test_evaluation_reads_the_device_once_however_many_batches(monkeypatch):
    model = _lora()
    tok = tiny.tokenizer()
    ids, labels = data.encode(tok, CHAT, "a")
    loader = [data.Collate(tok.pad_token_id)([(ids, labels)])] * 3  # batches made: the model's reads only
    reads = []
    for name in ("item", "tolist", "__bool__"):  # what makes the host wait for the device
        original = getattr(torch.Tensor, name)
        monkeypatch.setattr(
            torch.Tensor, name, lambda t, *a, _o=original, _n=name: reads.append(_n) or _o(t, *a)
        )
    result = task.evaluate(model, loader, CPU, None)
    monkeypatch.undo()
    assert reads == ["tolist"] and result["val_tokens"] == 3 * sum(t != data.IGNORE for t in labels)


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
