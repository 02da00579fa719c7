"""Where the model's files come from, once per node: a local directory, an S3 prefix, or the Hub staged
once into `llm.model_cache`.

The cache is an S3 prefix (the job's own, `model-cache/` in the workload stacks), not a volume: a job's
nodes are in several places at once (two p4d nodes cannot share an EBS volume, which attaches to one node
in one zone) and a Spot replacement may come up in another zone, while every pod of the job already
reaches its S3 prefix with its own IAM role. The first start downloads the model from the Hub (rank 0,
with HF_TOKEN when the model is gated) and uploads it, then writes `.complete`; every later start and
restart reads it from S3 in the region, without the Hub or its token. On each node local rank 0 fetches
the files into a directory the node's ranks share; the others wait at a barrier.
"""

from __future__ import annotations

import atexit
import shutil
from pathlib import Path
from typing import Any

from trainer.config import ConfigError, LlmConfig
from trainer.dist import DistEnv, barrier
from trainer.storage import LocalStorage, S3Storage, Storage, open_storage
from trainer.token_store import claim_scratch, node_scratch_dir

COMPLETE = ".complete"  # written last: a cache without it is an interrupted staging, written again


def model_dir(cfg: LlmConfig, env: DistEnv, launch: str, *, s3_client: Any = None, say=print) -> Path | None:
    """Every rank: the local directory holding the model's files (None for `tiny`, built in code)."""
    if cfg.model == "tiny":
        return None
    if not cfg.model.startswith(("hf:", "s3://")):
        return Path(cfg.model)
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
    return local


def _cache_name(repo: str) -> str:
    return repo.replace("/", "--")  # the Hub cache's own spelling: one flat directory per repository


def _complete(store: Storage) -> bool:
    return store.get_bytes(COMPLETE) is not None


def _hub_download(repo: str, into: Path) -> None:
    from huggingface_hub import snapshot_download  # a dependency of transformers (the llm extra)

    # The weights as safetensors, the config and the tokenizer; not the repository's other formats.
    patterns = ["*.json", "*.safetensors", "*.model", "*.txt", "*.jinja", "*.tiktoken"]
    snapshot_download(repo, local_dir=into, allow_patterns=patterns)


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
