"""Where checkpoints and outputs go: a local directory or an S3 prefix, behind one small interface.

Local writes are atomic per file (temp file, fsync, rename). S3 puts are atomic per object by nature;
failed S3 calls are retried with exponential backoff before the error reaches the caller, which maps what
is left to a retryable exit code (trainer/faults.py).
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

log = logging.getLogger("trainer")
T = TypeVar("T")


class Storage:
    """Keys are '/'-separated paths relative to the storage root."""

    uri: str

    def put_file(self, key: str, local_path: Path) -> None:
        raise NotImplementedError

    def put_bytes(self, key: str, data: bytes) -> None:
        raise NotImplementedError

    def get_bytes(self, key: str) -> bytes | None:
        """The object's bytes, or None when it does not exist."""
        raise NotImplementedError

    def get_file(self, key: str, local_path: Path) -> None:
        raise NotImplementedError

    def list_dirs(self) -> list[str]:
        """Names of the top-level 'directories' (common prefixes) under the root."""
        raise NotImplementedError

    def delete_dir(self, name: str) -> None:
        raise NotImplementedError

    def child(self, name: str) -> Storage:
        """The same storage one level down: keys relative to `name` under this root."""
        raise NotImplementedError


class LocalStorage(Storage):
    def __init__(self, root: str | Path):
        self.root = Path(root)
        self.uri = str(self.root)

    def put_file(self, key: str, local_path: Path) -> None:
        target = self.root / key
        target.parent.mkdir(parents=True, exist_ok=True)
        if Path(local_path).resolve().parent == target.resolve().parent:
            tmp = Path(local_path)  # staged beside the target: rename it into place
        else:
            tmp = target.with_name(f".tmp-{target.name}-{os.getpid()}")
            shutil.copyfile(local_path, tmp)
        _fsync(tmp)
        os.replace(tmp, target)

    def put_bytes(self, key: str, data: bytes) -> None:
        target = self.root / key
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".tmp-{target.name}-{os.getpid()}")
        tmp.write_bytes(data)
        _fsync(tmp)
        os.replace(tmp, target)

    def get_bytes(self, key: str) -> bytes | None:
        path = self.root / key
        return path.read_bytes() if path.is_file() else None

    def get_file(self, key: str, local_path: Path) -> None:
        shutil.copyfile(self.root / key, local_path)

    def local_path(self, key: str) -> Path:
        return self.root / key

    def list_dirs(self) -> list[str]:
        return sorted(p.name for p in self.root.iterdir() if p.is_dir()) if self.root.is_dir() else []

    def delete_dir(self, name: str) -> None:
        shutil.rmtree(self.root / name, ignore_errors=True)

    def child(self, name: str) -> LocalStorage:
        return LocalStorage(self.root / name)


def _fsync(path: Path) -> None:
    with open(path, "rb+") as f:
        os.fsync(f.fileno())


def make_s3_client() -> Any:
    """A boto3 S3 client from the usual AWS environment (IRSA/Pod Identity in a pod, AWS_* locally)."""
    import boto3

    return boto3.client("s3")


class S3Storage(Storage):
    def __init__(self, uri: str, *, client: Any = None, retries: int = 4, backoff_s: float = 1.0):
        bucket, _, prefix = uri[len("s3://") :].partition("/")
        self.uri = uri.rstrip("/")
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        self.client = client if client is not None else make_s3_client()
        self.retries = retries
        self.backoff_s = backoff_s

    def child(self, name: str) -> S3Storage:
        # Same client and retry settings.
        return S3Storage(
            f"{self.uri}/{name}", client=self.client, retries=self.retries, backoff_s=self.backoff_s
        )

    def _key(self, key: str) -> str:
        return f"{self.prefix}/{key}" if self.prefix else key

    def _retry(self, what: str, call: Callable[[], T]) -> T:
        from boto3.exceptions import S3TransferFailedError, S3UploadFailedError
        from botocore.exceptions import BotoCoreError, ClientError

        # upload_file/download_file go through s3transfer, which wraps the ClientError of a failed part
        # in boto3's own S3UploadFailedError / S3TransferFailedError: retried like the plain calls.
        transient = (BotoCoreError, ClientError, S3UploadFailedError, S3TransferFailedError)
        for attempt in range(1, self.retries + 1):
            try:
                return call()
            except transient as err:
                if _is_not_found(err) or attempt == self.retries:
                    raise
                delay = self.backoff_s * 2 ** (attempt - 1)
                log.warning(
                    "S3 %s failed (attempt %d/%d): %s; retrying in %.1fs",
                    what,
                    attempt,
                    self.retries,
                    err,
                    delay,
                )
                time.sleep(delay)
        raise AssertionError("unreachable")

    def put_file(self, key: str, local_path: Path) -> None:
        k = self._key(key)
        self._retry(
            f"upload s3://{self.bucket}/{k}", lambda: self.client.upload_file(str(local_path), self.bucket, k)
        )

    def put_bytes(self, key: str, data: bytes) -> None:
        k = self._key(key)
        self._retry(
            f"put s3://{self.bucket}/{k}",
            lambda: self.client.put_object(Bucket=self.bucket, Key=k, Body=data),
        )

    def get_bytes(self, key: str) -> bytes | None:
        k = self._key(key)
        try:
            resp = self._retry(
                f"get s3://{self.bucket}/{k}", lambda: self.client.get_object(Bucket=self.bucket, Key=k)
            )
        except Exception as err:
            if _is_not_found(err):
                return None
            raise
        return resp["Body"].read()

    def get_file(self, key: str, local_path: Path) -> None:
        k = self._key(key)
        self._retry(
            f"download s3://{self.bucket}/{k}",
            lambda: self.client.download_file(self.bucket, k, str(local_path)),
        )

    def list_dirs(self) -> list[str]:
        base = f"{self.prefix}/" if self.prefix else ""

        def listing() -> list[str]:
            pages = self.client.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=base, Delimiter="/"
            )
            return [
                p["Prefix"][len(base) :].rstrip("/") for page in pages for p in page.get("CommonPrefixes", [])
            ]

        return sorted(self._retry(f"list s3://{self.bucket}/{base}", listing))

    def delete_dir(self, name: str) -> None:
        base = self._key(name) + "/"

        def delete() -> list[dict]:
            refused = []
            for page in self.client.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=base
            ):
                objects = [{"Key": o["Key"]} for o in page.get("Contents", [])]
                if objects:
                    # Per-key failures (AccessDenied, SlowDown...) come back in `Errors` with HTTP 200.
                    done = self.client.delete_objects(Bucket=self.bucket, Delete={"Objects": objects})
                    refused += done.get("Errors", [])
            return refused

        refused = self._retry(f"delete s3://{self.bucket}/{base}", delete)
        if refused:
            named = ", ".join(f"{e.get('Key')} ({e.get('Code')}: {e.get('Message')})" for e in refused[:5])
            more = f" and {len(refused) - 5} more" if len(refused) > 5 else ""
            where = f"s3://{self.bucket}/{base}"
            raise OSError(f"S3 did not delete {len(refused)} object(s) of {where}: {named}{more}")


def _is_not_found(err: BaseException) -> bool:
    code = getattr(err, "response", {}).get("Error", {}).get("Code", "")
    return code in {"404", "NoSuchKey", "NotFound"}


def open_storage(uri: str, *, client: Any = None, retries: int = 4, backoff_s: float = 1.0) -> Storage:
    if uri.startswith("s3://"):
        return S3Storage(uri, client=client, retries=retries, backoff_s=backoff_s)
    return LocalStorage(uri)


def fetch_to_local(uri: str, workdir: Path, *, client: Any = None) -> Path:
    """A local path for a data file given as a path or s3://bucket/key (downloaded into workdir)."""
    if not uri.startswith("s3://"):
        return Path(uri)
    bucket, _, key = uri[len("s3://") :].partition("/")
    target = Path(tempfile.mkdtemp(dir=workdir)) / Path(key).name
    S3Storage(f"s3://{bucket}", client=client).get_file(key, target)
    return target
