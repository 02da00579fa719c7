"""A team queue can use what it grants: for every accelerator a platform's queue grants GPUs of, as many
default pods of that accelerator as those GPUs fill (each with a whole node's GPUs) fit the queue's CPU and
memory too, as Kueue counts them (the pods as their operators create them, sim/kubernetes/scheduling.py
queue_use). Otherwise the GPUs the queue grants can never all be used: the job that asks for them waits
forever for quota."""

from __future__ import annotations

import pytest

from infra.accelerators import CATALOG
from infra.contract import quantity
from sim.kubernetes.scheduling import queue_use, simulate
from workloads.platform import example_outputs_path, load_platform_outputs
from workloads.render import render
from workloads.spec import parse_spec

PLATFORMS = ["dev", "prod"]


def _grants(platform: str) -> list[tuple[str, str, int]]:
    facts = load_platform_outputs(example_outputs_path(platform))
    return [(platform, name, key) for name in facts.kueue_queues for key in facts.queue(name).gpus]


@pytest.mark.parametrize(("platform", "queue", "accelerator"), [g for p in PLATFORMS for g in _grants(p)])
def test_a_queue_holds_the_default_pods_its_gpus_fill(platform, queue, accelerator):
    facts = load_platform_outputs(example_outputs_path(platform))
    grant = facts.queue(queue).gpus[accelerator]
    (pool,) = [p for p in facts.accelerator_pools.values() if p.accelerator == accelerator]
    per_node = min(grant, max(CATALOG[accelerator].instance(t).gpus for t in pool.instance_types))
    spec = parse_spec(
        {"name": "q", "accelerator": accelerator, "imageTag": "1", "gpusPerNode": per_node, "queue": queue}
    )
    pods = grant // per_node
    usage = {u.resource: u for u in queue_use(simulate(render(spec, facts), facts), facts)}
    for resource in ("cpu", "memory"):
        needed = usage[resource].total * pods
        assert needed <= quantity(usage[resource].nominal), (
            f"{platform} queue {queue}: {pods} default {accelerator} pod(s) of {per_node} GPUs need "
            f"{resource} {needed}, the queue grants {usage[resource].nominal}"
        )
