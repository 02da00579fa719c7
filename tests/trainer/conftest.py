"""Fixtures of the trainer tests (helpers live in trainer_runs.py)."""

from __future__ import annotations

import boto3
import pytest
from moto import mock_aws


@pytest.fixture
def s3():
    """A moto S3 client with an empty bucket 'mlops'."""
    with mock_aws():
        client = boto3.client("s3", region_name="us-east-1")
        client.create_bucket(Bucket="mlops")
        yield client
