"""Fixtures of the trainer tests (helpers live in trainer_runs.py)."""

from __future__ import annotations

import boto3
import pytest
from moto import mock_aws
from trainer_runs import launch


@pytest.fixture
def s3():
    """A moto S3 client with an empty bucket 'mlops'."""
    with mock_aws():
        client = boto3.client("s3", region_name="us-east-1")
        client.create_bucket(Bucket="mlops")
        yield client


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    """One complete 2-process run, shared by the tests that compare against it."""
    out = tmp_path_factory.mktemp("uninterrupted") / "out"
    proc = launch(out)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return out, proc
