"""The facts workloads/spec_rules.py judges a job by are the ones the rest of the project acts on: the
catalog's native precision is the trainer's choice, the ports and environment it reserves are what the
operators' pods (sim/operators/pods.py) really use, and a PriorityClass the platform stack defines is
created and exported for jobs to name."""

from __future__ import annotations

import re
from typing import Any

import pytest

from infra.accelerators import CATALOG
from sim.operators import pods as operator_pods
from sim.operators.pods import operator_pods as pods_of
from trainer import mpi_env, precision
from workloads import rayjob
from workloads.platform import example_outputs_path, load_platform_outputs
from workloads.render import render
from workloads.spec_rules import OPERATOR_PORTS, RESERVED_ENV, RESERVED_ENV_PREFIXES
from workloads.stacks import load_stack, program_text, workload_stacks


@pytest.mark.parametrize("key", list(CATALOG))
def test_the_catalogs_native_precision_is_what_the_trainer_picks_on_that_gpu(key):
    """trainer/precision.py gpu_arch's table, applied to the catalog's compute target."""
    acc = CATALOG[key]
    target = acc.compute_target
    if acc.vendor == "nvidia":
        major = int(re.fullmatch(r"sm_(\d+)\d", target)[1])  # type: ignore[index]
        picked = "bf16" if major >= 8 else "fp16" if major == 7 else "fp32"
    else:
        picked = "bf16" if target.startswith(precision._AMD_BF16) else "fp16"
        assert picked == "bf16" or target.startswith(precision._AMD_FP16)
    assert acc.native_precision == picked


def test_the_reserved_ports_are_the_ports_the_operators_pods_use():
    assert OPERATOR_PORTS["trainjob"].keys() == {operator_pods.TRAINER_PORT}
    assert OPERATOR_PORTS["pytorchjob"].keys() == {operator_pods.PYTORCH_PORT}
    assert OPERATOR_PORTS["mpijob"].keys() == {int(mpi_env.DEFAULT_MASTER_PORT)}
    ray = {*rayjob.HEAD_PORTS.values(), operator_pods.RAY_METRICS_PORT[1]}
    assert OPERATOR_PORTS["rayjob"].keys() == ray


def _env_names(container: dict[str, Any]) -> set[str]:
    return {e["name"] for e in container.get("env") or []}


@pytest.mark.parametrize("stack", workload_stacks())
def test_every_variable_an_operator_sets_beside_the_jobs_env_is_reserved(stack):
    """In the containers that carry the job's `env`, as the operators create them, each variable the
    operator (or the Job controller, or KubeRay) adds is one a user's `env` may not set."""
    loaded = load_stack(stack)
    platform = load_platform_outputs(example_outputs_path(loaded.platform_stack))
    objects = render(loaded.spec, platform, program_text=program_text(loaded.spec))
    rendered: set[str] = set()

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if isinstance(node.get("env"), list):
                rendered.update(_env_names(node))
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(objects)
    added = set()
    for pod in pods_of(objects, platform):
        for container in pod.spec["containers"]:
            names = _env_names(container)
            if "AWS_REGION" in names:  # the job's training container: it carries the job's env
                added |= names - rendered
    prefixes = tuple(RESERVED_ENV_PREFIXES)
    assert {n for n in added if n not in RESERVED_ENV and not n.startswith(prefixes)} == set()


def test_a_priority_class_of_the_platform_stack_is_created_and_exported(prod):
    classes = [r for r in prod.resources if r.type == "kubernetes:scheduling.k8s.io/v1:PriorityClass"]
    found = [(c.inputs["metadata"]["name"], c.inputs["value"], c.inputs["preemptionPolicy"]) for c in classes]
    assert found == [("training-high", 1000, "PreemptLowerPriority")]
    assert prod.exports["priority_classes"] == ["training-high"]
    assert load_platform_outputs(example_outputs_path("prod")).priority_classes == ("training-high",)
