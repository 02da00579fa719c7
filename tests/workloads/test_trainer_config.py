"""`trainerConfig` is checked with the trainer's own config model when the spec is read and again as
rendered for the pod, so a bad config fails `render`/`pulumi preview`, not a pod on a fresh GPU node."""

from __future__ import annotations

import subprocess
import sys

import pulumi
import pytest

from trainer.config import ConfigError, build
from workloads.render import render
from workloads.spec import SpecError, parse_spec

JOB = {"name": "zimdb", "accelerator": "t4", "gpusPerNode": 4, "imageTag": "0.1.0"}


def _trainer_says(config: dict) -> str:
    with pytest.raises(ConfigError) as err:
        build(config)
    return str(err.value)


@pytest.mark.parametrize(
    ("config", "names"),
    [
        ({"train": {"max_step": 300}}, "train.max_step"),  # a typo
        ({"train": {"batch_size": "big"}}, "train.batch_size='big'"),  # a wrong type
        ({"train": {"max_steps": -1}}, "train.max_steps=-1"),  # out of range
        ({"train": 5}, "'train'"),  # not a section: crashed render with a TypeError before
        ({"data": 5}, "'data'"),
        ({"trian": {"max_steps": 3}}, "'trian'"),
    ],
)
def test_bad_trainer_config_fails_the_spec_with_the_trainers_own_message(config, names):
    with pytest.raises(SpecError) as err:
        parse_spec(JOB | {"trainerConfig": config})
    message = str(err.value)
    assert message == f"mlops-eks:job.trainerConfig: {_trainer_says(config)}"
    assert names in message


def test_render_checks_the_config_as_the_pod_gets_it(dev_platform):
    # The data location is filled in by render: only the rendered file shows the unreadable format.
    spec = parse_spec(JOB | {"data": {"s3": "data/train.txt"}})
    with pytest.raises(SpecError, match=r"data\.source='s3://[^']+/jobs/zimdb/data/train\.txt' is invalid"):
        render(spec, dev_platform)


def test_files_and_packages_of_the_pod_are_left_to_the_pod(dev_platform):
    # A file on the job's volume or in the image does not exist on the deploying machine, and `hf:`
    # needs a package of the image: only the checks that do not depend on them run here.
    on_volume = JOB | {"data": {"pvc": {"claim": "corpus"}, "path": "train.jsonl"}}
    assert render(parse_spec(on_volume), dev_platform)
    in_image = JOB | {"data": None, "trainerConfig": {"data": {"source": "/opt/data/train.jsonl"}}}
    assert render(parse_spec(in_image), dev_platform)
    hub = JOB | {"data": None, "trainerConfig": {"data": {"source": "hf:imdb"}, "model": {"name": "hf:bert"}}}
    assert render(parse_spec(hub), dev_platform)
    bad_format = JOB | {"data": {"pvc": {"claim": "corpus"}, "path": "train.txt"}}
    with pytest.raises(SpecError, match=r"data\.source='/mnt/data/train\.txt' is invalid: allowed a file"):
        render(parse_spec(bad_format), dev_platform)
    with pytest.raises(SpecError, match=r"data\.source='hf:' is invalid"):
        parse_spec(JOB | {"data": None, "trainerConfig": {"data": {"source": "hf:"}}})


def test_a_bad_trainer_config_stops_the_program_before_any_resource(workload_mocks):
    from workloads.program import program

    mocks = workload_mocks(JOB | {"trainerConfig": {"train": {"max_step": 300}}})
    with pytest.raises(Exception, match=r"mlops-eks:job\.trainerConfig: unknown key train\.max_step"):
        pulumi.runtime.test(program)()
    assert mocks.resources == []  # not even the StackReference


def test_reading_the_spec_imports_neither_torch_nor_pulumi():
    code = (
        "import sys, workloads.spec, trainer.config\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'pulumi', 'numpy'}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
