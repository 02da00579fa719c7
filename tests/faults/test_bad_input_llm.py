"""Bad LLM inputs that only the run itself can judge (the model's layers, the files of a model directory,
a chat template, what the Hub answers): each is refused with exit 2 and a message naming the key, the
value and what is allowed, before any training step; a Hub that cannot be reached is an outage, exit 200
(retryable), not a traceback. Recorded in the fault ledger ("bad input: LLM", "infra fault -> exit code").
No network: the Hub's answers are its own exception types, and the outage is huggingface_hub's offline mode
(every request refused, as when the Hub is down)."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import httpx2
import pytest
import torch
from huggingface_hub import errors as hub_errors

from trainer.config import ConfigError, LlmConfig, build
from trainer.dist import DistEnv
from trainer.llm import source, task, tiny

CPU = DistEnv(rank=0, world_size=1, local_rank=0, device=torch.device("cpu"))


def _error(call) -> str | None:
    try:
        call()
    except ConfigError as err:
        return str(err)
    return None


def _record(ledger, case: str, error: str | None, names: str, says: str) -> None:
    entry = ledger("bad input: LLM", case, error=error, names=names)
    assert error is not None, f"{case}: accepted"
    assert entry.clear and says in error, error


def test_lora_targets_naming_no_layer_of_the_model_lists_the_layers_it_has(ledger):
    cfg = LlmConfig(model="tiny", lora_targets="q_proj,qkv_proj")
    error = _error(lambda: task.build(cfg, None, tiny.tokenizer(), load_dtype=torch.float32,
                                      grad_checkpointing=False))  # fmt: skip
    _record(ledger, "lora_targets naming no layer", error, "llm.lora_targets='q_proj,qkv_proj'",
            "qkv_proj is no linear layer")  # fmt: skip
    assert "allowed: 'all-linear' or names among down_proj, gate_proj, k_proj, lm_head, o_proj" in error


@pytest.mark.parametrize(
    ("case", "files", "says"),
    [
        (
            "model directory without a model",
            ["README.md"],
            "config.json, weights (*.safetensors), a tokenizer",
        ),
        (
            "model directory without weights",
            ["config.json", "tokenizer.json"],
            "weights (*.safetensors) missing",
        ),
    ],
)
def test_a_model_directory_without_a_model_names_the_path_and_what_is_missing(ledger, tmp_path, case, files,
                                                                             says):  # fmt: skip
    for name in files:
        (tmp_path / name).write_text("{}")
    error = _error(lambda: source.model_dir(LlmConfig(model=str(tmp_path)), CPU, "launch"))
    _record(ledger, case, error, f"llm.model='{tmp_path}'", says)
    assert "expected a directory as save_pretrained writes it" in error


def test_an_invalid_chat_template_names_the_key_the_line_and_the_jinja_error(ledger):
    template = "{% for message in messages %}{{ message['content'] }\n{% endfor %}"
    error = _error(lambda: task.tokenizer(LlmConfig(model="tiny", chat_template=template), None))
    _record(ledger, "chat template with a syntax error", error, "llm.chat_template=", "TemplateSyntaxError")
    assert "(line 1)" in error and "allowed: a template that renders `messages`" in error


@pytest.mark.parametrize(
    ("case", "llm", "says"),
    [
        ("chat template file that does not exist", {"chat_template": "chat.jinja"}, "(no such file)"),
        (
            "merged export of a full fine-tune",
            {"method": "full", "export": "merged"},
            "exports the whole model",
        ),
        ("export kind unknown", {"export": "gguf"}, "adapter | merged"),
    ],
)
def test_llm_export_and_template_settings_are_refused_at_configuration(ledger, tmp_path, case, llm, says):
    (tmp_path / "chat.jsonl").write_text(json.dumps({"prompt": "a", "response": "b"}) + "\n")
    values = {
        "llm": {"model": "tiny", **llm},
        "data": {"source": str(tmp_path / "chat.jsonl")},
        "checkpoint": {"dir": str(tmp_path / "c")},
        "output": {"dir": str(tmp_path / "o")},
    }
    key = "llm.chat_template" if "chat_template" in llm else "llm.export"
    _record(ledger, case, _error(lambda: build(values)), f"{key}=", says)


def _hub_error(kind: type, status: int) -> Exception:
    request = httpx2.Request("GET", "https://huggingface.co/api/models/acme/tiny-chat")
    return kind(f"{status} for {request.url}", response=httpx2.Response(status, request=request))


@pytest.mark.parametrize(
    ("case", "kind", "status", "says"),
    [
        ("hub repository that does not exist", hub_errors.RepositoryNotFoundError, 404, "no such repository"),
        ("gated hub model without access", hub_errors.GatedRepoError, 401, "is gated"),
    ],
)
def test_a_hub_model_the_job_cannot_read_is_a_permanent_error(ledger, monkeypatch, tmp_path, case, kind,
                                                              status, says):  # fmt: skip
    import huggingface_hub

    def refuse(*args, **kwargs):
        raise _hub_error(kind, status)

    monkeypatch.setattr(huggingface_hub, "snapshot_download", refuse)
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    error = _error(lambda: source.model_dir(LlmConfig(model="hf:acme/tiny-chat"), CPU, "launch"))
    _record(ledger, case, error, "llm.model='hf:acme/tiny-chat'", says)


@pytest.fixture
def sigterm_handler_kept():
    handler = signal.getsignal(signal.SIGTERM)
    yield
    signal.signal(signal.SIGTERM, handler)


@pytest.mark.parametrize("outage", ["offline", "503"])
def test_a_hub_that_cannot_be_reached_exits_200_retryable(
    ledger, monkeypatch, tmp_path, capsys, sigterm_handler_kept, outage
):
    import huggingface_hub
    from huggingface_hub import constants

    from trainer.__main__ import main

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub-cache"))
    if outage == "offline":  # every request refused before it leaves, as with no route to the Hub
        monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    else:  # the Hub answers 503 while the files are listed

        def unavailable(*args, **kwargs):
            raise _hub_error(hub_errors.HfHubHTTPError, 503)

        monkeypatch.setattr(huggingface_hub.HfApi, "repo_info", unavailable)
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    records = tmp_path / "chat.jsonl"
    records.write_text(json.dumps({"prompt": "a", "response": "b"}) + "\n")
    code = main(["--llm.model", "hf:acme/tiny-chat", "--data.source", str(records), "--train.device", "cpu",
                 "--output.dir", str(tmp_path / "out"), "--checkpoint.dir", str(tmp_path / "ckpt"),
                 "--output.metrics_port", "0"])  # fmt: skip
    error = capsys.readouterr().err
    said = next((line for line in error.splitlines() if "exit 200 (" in line), None)
    entry = ledger("infra fault -> exit code", f"hub unreachable ({outage})", error=said, names="exit 200")
    assert code == 200 and entry.clear, error
    assert "the Hub cannot be reached for hf:acme/tiny-chat" in said
    assert not Path(tmp_path / "out" / "summary.json").exists()
