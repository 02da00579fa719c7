"""The platform facts `plan` and `render` judge a job by, derived offline from the platform stack file
(infra.exports, no Pulumi program run): equal to what the platform program exports under mocks (the
shipped examples, which scripts/platform_examples.py generates from the program), and following the user's
own stack file, so a pool added there is planned onto before any deploy."""

from __future__ import annotations

import copy
import json

import pytest
import yaml
from stack_variants import without_the_amd_pool

from infra.tools import check as infra_check
from infra.tools.synth import REPO, read_stack_file, stack_config, synth
from workloads.__main__ import main as workloads_main
from workloads.plan import plan
from workloads.platform import (
    derived_facts,
    example_outputs_path,
    load_platform_outputs,
)
from workloads.spec import parse_spec
from workloads.stacks import WorkloadStack

# What only a deployed stack knows; the derived facts name where it comes from instead.
AFTER_DEPLOY = {"bucket_name", "ecr_repository_urls"}


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_derived_facts_are_the_programs_exports(stack):
    derived = derived_facts(REPO / f"Pulumi.{stack}.yaml").model_dump(mode="json")
    exported = load_platform_outputs(example_outputs_path(stack)).model_dump(mode="json")
    assert {k: v for k, v in derived.items() if k not in AFTER_DEPLOY} == {
        k: v for k, v in exported.items() if k not in AFTER_DEPLOY
    }
    assert derived["bucket_name"] == f"mlops-eks-{stack}-known-after-deploy"


def test_without_the_amd_pool_check_deploys_it_and_the_derived_facts_are_the_programs_exports(
    tmp_path, monkeypatch
):
    """Dropping dev's AMD pool is one edit (its queue quota stays in the file): `infra check` has no
    complaint about the config, and what `plan` derives equals what the program exports."""
    path = without_the_amd_pool(tmp_path)
    values = stack_config("dev", path)
    runs = []

    def recording_synth(stack, values):  # one program run serves the check and the exports
        runs.append(synth(stack, values))
        return runs[-1]

    monkeypatch.setattr(infra_check, "synth", recording_synth)
    result = infra_check.check("dev", values)
    assert "config: valid (PlatformConfig)" in result.lines
    assert not [p for p in result.problems if "queues" in p or "gpuPools" in p], result.text()
    assert any("gpus.amd-v520: 1 GPU(s) left out of queue 'ml-team'" in line for line in result.lines)
    ((_, _, exports),) = runs
    (tmp_path / "outputs.json").write_text(json.dumps(exports))
    exported = load_platform_outputs(tmp_path / "outputs.json").model_dump(mode="json")
    derived = derived_facts(path).model_dump(mode="json")
    assert {k: v for k, v in derived.items() if k not in AFTER_DEPLOY} == {
        k: v for k, v in exported.items() if k not in AFTER_DEPLOY
    }
    assert set(derived["accelerator_pools"]) == {"t4"}
    assert derived["queue_quotas"][0]["gpus"] == {"t4": 8}


A10G_POOL = {"name": "a10g", "accelerator": "a10g", "instanceTypes": ["g5.12xlarge"],
             "capacityTypes": ["spot", "on-demand"], "gpuLimit": 4}  # fmt: skip


def test_a_pool_added_to_the_platform_stack_file_is_planned_onto(tmp_path):
    document = yaml.safe_load((REPO / "Pulumi.dev.yaml").read_text())
    document["config"]["mlops-eks:gpuPools"].append(A10G_POOL)
    (tmp_path / "Pulumi.dev.yaml").write_text(yaml.safe_dump(document))
    job = copy.deepcopy(read_stack_file(REPO / "Pulumi.dev-zimdb.yaml")["mlops-eks:job"])
    job |= {"accelerator": "a10g", "gpusPerNode": 4, "queue": None}
    stack = WorkloadStack("dev-zimdb", "dev", parse_spec(job))
    # Derived from the config model alone, no Pulumi program run (plan stays interactive).
    facts = derived_facts(tmp_path / "Pulumi.dev.yaml")
    result = plan(stack, facts, "Pulumi.dev.yaml")
    assert result.runs and "pool a10g" in result.text(), result.text()
    frozen = plan(stack, load_platform_outputs(example_outputs_path("dev")), "example")
    assert not frozen.runs  # the shipped example knows no a10g pool


def test_plan_says_where_its_facts_come_from(capsys, tmp_path, dev_outputs):
    assert workloads_main(["plan", "--stack", "dev-zimdb"]) == 0
    assert "facts from Pulumi.dev.yaml, derived offline" in capsys.readouterr().out
    (tmp_path / "outputs.json").write_text(json.dumps(dev_outputs))
    assert (
        workloads_main(["plan", "--stack", "dev-zimdb", "--platform-outputs", str(tmp_path / "outputs.json")])
        == 0
    )
    assert "a deployed stack's outputs" in capsys.readouterr().out
