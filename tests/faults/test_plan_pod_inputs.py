"""Jobs `plan` used to call "will run" that could only fail in the pod: a data file on the deployer's
laptop, an LLM reference the trainer refuses, a ReadWriteMany volume on an EBS StorageClass. Each is a
reason the job will not run, naming the key or volume and what is allowed. Recorded in the fault ledger
("bad input: plan")."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from infra.tools.synth import REPO, read_stack_file
from workloads.plan import plan
from workloads.platform import example_outputs_path, load_platform_outputs
from workloads.spec import parse_spec
from workloads.stacks import WorkloadStack

FACTS = load_platform_outputs(example_outputs_path("dev"))
HERE_ONLY = REPO / "workloads" / "examples" / "llm-chat.jsonl"  # a file on this machine, not in the image


def _plan(stack: str, change: Callable[[dict[str, Any]], None]):
    job = copy.deepcopy(read_stack_file(REPO / f"Pulumi.{stack}.yaml")["mlops-eks:job"])
    change(job)
    return plan(WorkloadStack(stack, "dev", parse_spec(job)), FACTS, example_outputs_path("dev"))


def trainer(section: str, **values: Any) -> Callable[[dict[str, Any]], None]:
    return lambda job: job.setdefault("trainerConfig", {}).setdefault(section, {}).update(values)


def llm_hub_name(job: dict[str, Any]) -> None:
    job["trainerConfig"]["llm"] = {"model": "Qwen/Qwen2.5-0.5B-Instruct"}


def shared_gp3(job: dict[str, Any]) -> None:
    job["checkpoint"] = {"pvc": {"size": "50Gi", "storageClass": "gp3"}}


# (case, stack, change, what the problem names, what it says)
CASES = [
    ("data-source-a-laptop-path", "dev-zimdb", trainer("data", source="/Users/alice/imdb/train.jsonl"),
     "trainerConfig.data.source", "the pod cannot see it"),
    ("val-source-in-this-checkout", "dev-zimdb", trainer("data", val_source=str(HERE_ONLY)),
     "trainerConfig.data.val_source", "is a path on this machine"),
    ("llm-model-without-hf-prefix", "dev-llm", llm_hub_name, "trainerConfig.llm.model", "hf:<repo>"),
    ("four-pods-share-a-gp3-volume", "dev-zimdb-multinode", shared_gp3, "ReadWriteMany",
     "StorageClass 'gp3', which EBS cannot give"),
]  # fmt: skip


@pytest.mark.parametrize(("case", "stack", "change", "names", "says"), CASES, ids=[c[0] for c in CASES])
def test_plan_refuses_what_the_pod_would_meet(ledger, case, stack, change, names, says):
    result = _plan(stack, change)
    problem = next((p for p in result.problems if names in p), None)
    entry = ledger("bad input: plan", case, error=problem if not result.runs else None, names=names)
    assert not result.runs and entry.clear and says in (problem or ""), result.text()
    assert "what the pod will meet: 1 refusal(s)" in result.text()


def test_a_file_on_the_jobs_volume_or_in_the_image_is_left_to_the_pod():
    def on_the_volume(job: dict[str, Any]) -> None:
        job["data"] = {"pvc": {"claim": "datasets"}, "path": "imdb/train.jsonl"}

    result = _plan("dev-zimdb", on_the_volume)
    assert result.runs and "its files and volumes are where it looks" in result.text(), result.text()
    in_image = _plan("dev-zimdb", trainer("data", source="/opt/data/train.jsonl"))
    assert in_image.runs and any("must be in the image" in w for w in in_image.warnings), in_image.text()


def test_a_file_under_the_pods_scratch_directory_is_not_on_a_volume_that_holds_it(tmp_path):
    """The pod mounts an emptyDir at /tmp: a deployer's file under /tmp is not there when the pod starts."""
    here = tmp_path / "val.jsonl"
    here.write_text(HERE_ONLY.read_text())
    result = _plan("dev-zimdb", trainer("data", val_source=str(here)))
    assert not result.runs and any("is a path on this machine" in p for p in result.problems), result.text()
