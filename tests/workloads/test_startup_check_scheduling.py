"""The startup GPU check and scheduling: a pool whose nodes start tainted until their GPUs passed the check
counts as schedulable (the check removes the taint before any training pod can land), and no job tolerates
that taint (it would land on GPUs nobody checked)."""

from __future__ import annotations

import pytest

from infra.addons.gpu_node_check import STARTUP_TAINT
from sim.kubernetes.scheduling import pod_templates, simulate, tolerated, unschedulable
from workloads.platform import example_outputs_path, load_platform_outputs
from workloads.render import render
from workloads.stacks import load_stack, program_text, workload_stacks

STACKS = workload_stacks()


def _rendered(stack: str):
    loaded = load_stack(stack)
    platform = load_platform_outputs(example_outputs_path(loaded.platform_stack))
    return render(loaded.spec, platform, program_text=program_text(loaded.spec)), platform


@pytest.mark.parametrize("platform_stack", ["dev", "prod"])
def test_gpu_pools_export_the_startup_taint_apart_from_their_taints(platform_stack):
    platform = load_platform_outputs(example_outputs_path(platform_stack))
    for name, pool in platform.accelerator_pools.items():
        assert pool.startup_taints == (STARTUP_TAINT,), name
        assert STARTUP_TAINT not in pool.taints


@pytest.mark.parametrize("stack", STACKS)
def test_no_training_pod_tolerates_the_startup_taint(stack):
    objects, platform = _rendered(stack)
    templates = pod_templates(objects, platform)
    assert templates
    for t in templates:
        assert not tolerated(t.tolerations, STARTUP_TAINT), t.job


def test_a_job_that_tolerates_every_taint_is_refused_for_landing_on_unchecked_gpus():
    objects, platform = _rendered("dev-zimdb")
    for obj in objects:
        if obj["kind"] == "TrainJob":
            patch = obj["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]
            pod = patch["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
            pod["tolerations"] = [*pod["tolerations"], {"operator": "Exists"}]
    problems = unschedulable(simulate(objects, platform))
    assert any(STARTUP_TAINT.key in p and "unchecked" in p for p in problems), problems


@pytest.mark.parametrize("stack", ["dev-zimdb", "dev-amd"])
def test_the_simulation_places_jobs_on_a_pool_whose_nodes_start_tainted(stack):
    objects, platform = _rendered(stack)
    verdicts = simulate(objects, platform)
    assert verdicts and unschedulable(verdicts) == []
    assert all(platform.accelerator_pools[v.source].startup_taints for v in verdicts)
