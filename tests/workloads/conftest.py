"""Fixtures of the workload tests: the example platform outputs and Pulumi mocks for workloads.program."""

from __future__ import annotations

import json

import pytest
from recording_mocks import RecordingMocks

from workloads.platform import example_outputs_path, load_platform_outputs


@pytest.fixture
def dev_outputs() -> dict:
    return json.loads(example_outputs_path("dev").read_text())


@pytest.fixture
def dev_platform():
    return load_platform_outputs(example_outputs_path("dev"))


@pytest.fixture
def prod_platform():
    return load_platform_outputs(example_outputs_path("prod"))


@pytest.fixture
def workload_mocks(dev_outputs, pulumi_mocks):
    """install(job, platform_outputs=None, stack="dev-test") -> RecordingMocks: Pulumi mocks and the config
    of a workload stack whose platform exports `platform_outputs` (dev's example outputs by default)."""

    def install(job: dict, platform_outputs: dict | None = None, stack: str = "dev-test") -> RecordingMocks:
        outputs = {**(platform_outputs or dev_outputs), "kubeconfig": '{"apiVersion": "v1"}'}
        config = {"mlops-eks:platformStack": "organization/mlops-eks/dev", "mlops-eks:job": job}
        return pulumi_mocks(RecordingMocks(outputs), stack=stack, config=config)

    return install
