"""Where the model's files come from, once per node: a local directory, an S3 prefix, or the Hub staged
once into `llm.model_cache`.

The cache is an S3 prefix (the job's own, `model-cache/` in the workload stacks), not a volume: a job's
nodes are in several places at once (two p4d nodes cannot share an EBS volume, which attaches to one node
in one zone) and a Spot replacement may come up in another zone, while every pod of the job already
reaches its S3 prefix with its own IAM role. The first start downloads the model from the Hub (rank 0,
with HF_TOKEN when the model is gated) and uploads it, then writes `.complete`; every later start and
restart reads it from S3 in the region, without the Hub or its token. On each node local rank 0 fetches
the files into a directory the node's ranks share; the others wait at a barrier.

A Hub that cannot be reached (no connection, a timeout, HTTP 429 or 5xx) is an outage: retryable, exit
200 (trainer/faults.py), as S3's are. A repository that does not exist, is gated or private without a
token, or a revision that does not, is the job's error: exit 2. Whatever the source, a directory without
a model's files (config.json, weights, a tokenizer) is refused with exit 2 naming what is missing.
"""

from __future__ import annotations

import atexit
import shutil
from pathlib import Path
from typing import Any

from trainer.config import ConfigError, LlmConfig
from trainer.dist import DistEnv, barrier
from trainer.faults import Retryable
from trainer.storage import LocalStorage, S3Storage, Storage, open_storage
from trainer.token_store import claim_scratch, node_scratch_dir

COMPLETE = ".complete"  # written last: a cache without it is an interrupted staging, written again


def model_dir(cfg: LlmConfig, env: DistEnv, launch: str, *, s3_client: Any = None, say=print) -> Path | None:
    """Every rank: the local directory holding the model's files (None for `tiny`, built in code)."""
    if cfg.model == "tiny":
        return None
    if not cfg.model.startswith(("hf:", "s3://")):
        return check_model_files(Path(cfg.model), cfg.model)
    repo = cfg.model.removeprefix("hf:")
    cache = (
        open_storage(cfg.model_cache, client=s3_client).child(_cache_name(repo)) if cfg.model_cache else None
    )
    local = node_scratch_dir("model", launch)
    if env.is_main and cache is not None and not _complete(cache):
        say(f"staging {cfg.model} from the Hub into {cache.uri} (once; later starts read it from there)")
        _hub_download(repo, local)
        _upload(local, cache)
        cache.put_bytes(COMPLETE, b"")
    barrier(env)
    if env.local_rank == 0 and not (local / COMPLETE).is_file():
        claim_scratch(local)
        atexit.register(shutil.rmtree, local, ignore_errors=True)
        source = cache or (
            open_storage(cfg.model, client=s3_client) if cfg.model.startswith("s3://") else None
        )
        if source is None:
            _hub_download(repo, local)
        else:
            say(f"model files from {source.uri}")
            _download(source, local)
        (local / COMPLETE).write_bytes(b"")
    barrier(env)
    return check_model_files(local, cfg.model)


# What save_pretrained writes, by what it is for (any one of each group will do).
MODEL_FILES = {
    "config.json": ("config.json",),
    "weights (*.safetensors)": ("*.safetensors", "pytorch_model*.bin"),
    "a tokenizer (tokenizer.json or tokenizer_config.json)": (
        "tokenizer.json",
        "tokenizer_config.json",
        "tokenizer.model",
    ),
}


def check_model_files(local: Path, model: str) -> Path:
    """`local`, or a config error (exit 2) naming llm.model, the directory and the files it lacks."""
    missing = [what for what, globs in MODEL_FILES.items() if not any(any(local.glob(g)) for g in globs)]
    if missing:
        found = sorted(p.name for p in local.iterdir())[:6] if local.is_dir() else []
        raise ConfigError(
            f"llm.model={model!r}: {local} holds no model: {', '.join(missing)} missing (found: "
            f"{', '.join(found) or 'nothing'}); expected a directory as save_pretrained writes it, with "
            "the tokenizer's files (AutoTokenizer.save_pretrained)"
        )
    return local


def _cache_name(repo: str) -> str:
    return repo.replace("/", "--")  # the Hub cache's own spelling: one flat directory per repository


def _complete(store: Storage) -> bool:
    return store.get_bytes(COMPLETE) is not None


def _hub_download(repo: str, into: Path) -> None:
    from huggingface_hub import snapshot_download  # a dependency of transformers (the llm extra)

    # The weights as safetensors, the config and the tokenizer; not the repository's other formats.
    patterns = ["*.json", "*.safetensors", "*.model", "*.txt", "*.jinja", "*.tiktoken"]
    try:
        snapshot_download(repo, local_dir=into, allow_patterns=patterns)
    except Exception as err:
        failure = _hub_failure(repo, err)
        if failure is err:
            raise
        raise failure from err


def _hub_failure(repo: str, err: Exception) -> Exception:
    """What a failed Hub download means: the job's error (ConfigError, exit 2), an outage (Retryable,
    exit 200), or the error itself (a bug)."""
    import httpx2  # huggingface_hub 2's HTTP client
    from huggingface_hub.errors import (
        GatedRepoError,
        HfHubHTTPError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    first = str(err).strip().splitlines()[0][:200] if str(err).strip() else ""
    if isinstance(err, GatedRepoError):
        return ConfigError(
            f"llm.model='hf:{repo}' is gated and the Hub refused this job's token (or it has none); "
            "allowed: a model the job can read: accept its licence on the Hub and set hubToken (docs/llm.md)"
        )
    if isinstance(err, (RepositoryNotFoundError, RevisionNotFoundError)):
        return ConfigError(
            f"llm.model='hf:{repo}': the Hub has no such repository (or it is private and the token cannot "
            f"read it): {type(err).__name__}; allowed: hf:<org>/<name> of a model, e.g. hf:Qwen/Qwen2.5-0.5B"
        )
    status = err.response.status_code if isinstance(err, HfHubHTTPError) and err.response is not None else 0
    if isinstance(err, (LocalEntryNotFoundError, httpx2.TransportError)) or status == 429 or status >= 500:
        # snapshot_download reports a connection that fails, or a Hub answering 5xx, as "no local copy".
        return Retryable(f"the Hub cannot be reached for hf:{repo} ({type(err).__name__}: {first})")
    return err


def _files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file() and ".cache" not in p.relative_to(root).parts)


def _upload(local: Path, store: Storage) -> None:
    for path in _files(local):
        if path.name != COMPLETE:
            store.put_file(path.relative_to(local).as_posix(), path)


def _download(store: Storage, into: Path) -> None:
    into.mkdir(parents=True, exist_ok=True)
    if isinstance(store, LocalStorage):
        shutil.copytree(store.root, into, dirs_exist_ok=True)
        return
    assert isinstance(store, S3Storage)
    base = f"{store.prefix}/" if store.prefix else ""
    pages = store.client.get_paginator("list_objects_v2").paginate(Bucket=store.bucket, Prefix=base)
    keys = [o["Key"][len(base) :] for page in pages for o in page.get("Contents", [])]
    if not keys:
        raise ConfigError(f"llm.model={store.uri!r} holds no files; allowed: a prefix a model was saved to")
    for key in keys:
        target = into / key
        target.parent.mkdir(parents=True, exist_ok=True)
        store.get_file(key, target)
