"""The pod templates of every committed workload stack's job: Karpenter must not disrupt a running
training pod, and the pods carry the digest of the ConfigMaps they read at start."""

from __future__ import annotations

import pytest
import yaml

from workloads.__main__ import platform_facts
from workloads.rayjob import pod_templates as ray_job_pod_templates
from workloads.render import render
from workloads.spec import CONFIG_KEY, parse_spec
from workloads.stacks import load_stack, program_text, stack_file, workload_stacks

DO_NOT_DISRUPT = "karpenter.sh/do-not-disrupt"
DIGEST = "mlops-eks.io/config-sha256"


def _render(stack: str, change: dict | None = None) -> list[dict]:
    raw = yaml.safe_load(stack_file(stack).read_text())["config"][CONFIG_KEY]
    spec = parse_spec({**raw, **(change or {})})
    facts, _ = platform_facts(load_stack(stack).platform_stack, None)
    return render(spec, facts, program_text=program_text(spec))


def _pod_templates(objects: list[dict]) -> list[tuple[str, dict]]:
    """(where, pod template) of every pod a job object describes."""
    found = []
    for obj in objects:
        if obj["kind"] in ("PyTorchJob", "MPIJob"):
            key = "pytorchReplicaSpecs" if obj["kind"] == "PyTorchJob" else "mpiReplicaSpecs"
            for role, replica in obj["spec"][key].items():
                found.append((f"{obj['kind']} {role}", replica["template"]))
        elif obj["kind"] == "RayJob":
            found += [(f"RayJob {role}", template) for role, _, template in ray_job_pod_templates(obj)]
        elif obj["kind"] == "TrainingRuntime":
            for job in obj["spec"]["template"]["spec"]["replicatedJobs"]:
                found.append((f"TrainingRuntime {job['name']}", job["template"]["spec"]["template"]))
        elif obj["kind"] == "TrainJob":
            for patch in obj["spec"]["runtimePatches"]:
                for job in patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]:
                    found.append((f"TrainJob patch {job['name']}", job["template"]["spec"]["template"]))
    return found


@pytest.mark.parametrize("stack", workload_stacks())
def test_every_training_pod_template_asks_karpenter_not_to_disrupt_it(stack):
    templates = _pod_templates(_render(stack))
    assert templates
    for where, template in templates:
        assert template.get("metadata", {}).get("annotations", {}).get(DO_NOT_DISRUPT) == "true", where


def _digests(objects: list[dict]) -> set[str]:
    return {
        t["metadata"]["annotations"][DIGEST]
        for _, t in _pod_templates(objects)
        if DIGEST in t["metadata"].get("annotations", {})
    }


@pytest.mark.parametrize("stack", [s for s in workload_stacks() if load_stack(s).spec.program.runs_trainer])
def test_pods_carry_the_digest_of_the_config_they_read(stack):
    same = _digests(_render(stack))
    changed = _digests(_render(stack, {"trainerConfig": {"train": {"seed": 7}}}))
    assert len(same) == 1 and len(changed) == 1 and same != changed
    assert _digests(_render(stack, {"suspend": True})) == same
