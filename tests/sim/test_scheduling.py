"""The scheduling simulation: every committed workload stack gets nodes on the platform it targets.

Each stack is rendered against its platform's example outputs, which are the platform program's real
exports under Pulumi mocks (checked here), then every pod template is matched against the pools, device
plugins and queues those exports describe. The platform shapes that used to strand jobs (a managed GPU
group at minSize 0 that nothing scales, no EFA device plugin, a queue that neither covers EFA nor holds
the gang) are rebuilt from the same exports and must fail with the reason.
"""

from __future__ import annotations

import json

import pytest

from infra.contract import AcceleratorPool, PoolTaint, Toleration
from sim.kubernetes.scheduling import matches_expression, simulate, tolerated, unschedulable
from workloads.placement import place
from workloads.platform import PlatformFacts, example_outputs_path, load_platform_outputs
from workloads.render import render
from workloads.spec import SpecError
from workloads.stacks import load_stack, program_text, workload_stacks

STACKS = workload_stacks()


def rendered(stack: str) -> tuple[list[dict], PlatformFacts]:
    loaded = load_stack(stack)
    platform = load_platform_outputs(example_outputs_path(loaded.platform_stack))
    return render(loaded.spec, platform, program_text=program_text(loaded.spec)), platform


def with_changes(platform: PlatformFacts, **changes) -> PlatformFacts:
    return platform.model_copy(update=changes)


def test_the_committed_stacks_include_the_demo_and_every_platform():
    # `make demo` runs dev-zimdb; both platform stacks have jobs.
    assert "dev-zimdb" in STACKS and {"dev-amd", "prod-a100"} <= set(STACKS)


@pytest.mark.parametrize("stack", STACKS)
def test_every_pod_of_every_committed_workload_stack_finds_a_node_source(stack):
    objects, platform = rendered(stack)
    verdicts = simulate(objects, platform)
    assert verdicts, f"{stack}: no pod templates found"
    assert unschedulable(verdicts) == []
    spec = load_stack(stack).spec
    # An MPIJob's mpirun pod or a RayJob's submitter, beside the gang.
    launcher = 1 if spec.operator in ("mpijob", "rayjob") else 0
    assert sum(v.template.count for v in verdicts) == spec.max_nodes + launcher


@pytest.mark.parametrize("platform_stack", ["dev", "prod"])
def test_example_platform_outputs_are_the_platform_programs_exports(platform_stack, request):
    """Regenerate with `.venv/bin/python scripts/platform_examples.py` when the platform changes."""
    exports = request.getfixturevalue(platform_stack).exports
    assert json.loads(example_outputs_path(platform_stack).read_text()) == json.loads(json.dumps(exports))


def test_dev_amd_fails_on_a_managed_group_at_min_size_zero_that_nothing_scales():
    objects, platform = rendered("dev-amd")
    amd = platform.accelerator_pools["amd"]
    stranded = amd.model_copy(update={"source": "managed", "gpu_limit": None, "size": 0})
    (line,) = unschedulable(simulate(objects, with_changes(platform, accelerator_pools={"amd": stranded})))
    assert line.startswith("TrainJob/zimdb-amd/node (1 pods): pool amd: needs 1 nodes")
    assert "the managed pool scales to 0" in line


def test_prod_a100_fails_without_the_efa_device_plugin():
    objects, platform = rendered("prod-a100")
    plugins = tuple(p for p in platform.device_plugins if p.resource != "vpc.amazonaws.com/efa")
    (line,) = unschedulable(simulate(objects, with_changes(platform, device_plugins=plugins)))
    assert "pool a100: no device plugin serves vpc.amazonaws.com/efa on p4d.24xlarge" in line


def test_prod_a100_fails_on_a_queue_without_efa_and_with_1024gi():
    objects, platform = rendered("prod-a100")
    research = platform.queue("research")
    old_nominal = {k: v for k, v in research.nominal.items() if k != "vpc.amazonaws.com/efa"}
    old = research.model_copy(update={"nominal": {**old_nominal, "memory": "1024Gi"}})
    others = tuple(q for q in platform.queue_quotas if q.name != "research")
    (line,) = unschedulable(simulate(objects, with_changes(platform, queue_quotas=(old, *others))))
    assert "resource vpc.amazonaws.com/efa unavailable in kueue queue research" in line
    assert "memory 1720Gi for the gang > queue research's nominal quota 1024Gi" in line


def test_placement_refuses_a_job_its_queue_can_never_admit_with_the_numbers():
    loaded = load_stack("prod-a100")
    platform = load_platform_outputs(example_outputs_path("prod"))
    research = platform.queue("research")
    small = research.model_copy(update={"nominal": {**research.nominal, "memory": "1024Gi"}})
    with pytest.raises(SpecError) as e:
        place(loaded.spec, with_changes(platform, queue_quotas=(small,)))
    assert str(e.value).startswith(
        "mlops-eks:job.queue: 'research' would never admit this job: memory 2 x 860Gi = 1720Gi > "
        "nominal quota 1024Gi; allowed: a job within the queue's quota"
    )


def test_gpus_count_against_the_flavor_of_the_accelerator_not_the_queue_total():
    objects, platform = rendered("prod-a100")
    research = platform.queue("research")
    few = research.model_copy(update={"gpus": {"t4": 24, "a100": 8}})
    (line,) = unschedulable(simulate(objects, with_changes(platform, queue_quotas=(few,))))
    assert "nvidia.com/gpu 16 for the gang > queue research's nominal quota 8" in line


def test_a_device_plugin_that_does_not_tolerate_the_gpu_taint_serves_no_gpu_node():
    objects, platform = rendered("dev-zimdb")
    nvidia = next(p for p in platform.device_plugins if p.resource == "nvidia.com/gpu")
    blind = nvidia.model_copy(update={"tolerations": ()})
    others = tuple(p for p in platform.device_plugins if p is not nvidia)
    (line,) = unschedulable(simulate(objects, with_changes(platform, device_plugins=(blind, *others))))
    assert "no device plugin serves nvidia.com/gpu on g4dn.12xlarge" in line


def test_a_pod_without_the_toleration_or_with_a_foreign_selector_finds_no_pool():
    objects, platform = rendered("dev-zimdb")
    runtime = next(o for o in objects if o["kind"] == "TrainJob")
    patch = runtime["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]
    pod = patch["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    pod["tolerations"] = []
    pod["nodeSelector"] = {"mlops-eks.io/accelerator": "a100"}
    (line,) = unschedulable(simulate(objects, platform))
    assert "taint nvidia.com/gpu=true:NoSchedule not tolerated" in line
    assert "nodeSelector {'mlops-eks.io/accelerator': 'a100'} not on its nodes" in line


def test_pods_of_one_job_share_the_pools_nodes():
    objects, platform = rendered("dev-zimdb-multinode")  # Master + 3 Workers, 1 T4 each: one node
    t4 = platform.accelerator_pools["t4"].model_copy(update={"gpu_limit": 2})  # floor(2 / 4) = 0 nodes
    lines = unschedulable(simulate(objects, with_changes(platform, accelerator_pools={"t4": t4})))
    assert len(lines) == 2 and all("scales to 0" in line for line in lines)


def test_a_karpenter_pool_holds_its_gpu_limit_divided_by_the_gpus_per_node():
    pool = AcceleratorPool(
        source="karpenter",
        accelerator="a100",
        instance_types=("p4d.24xlarge",),
        gpus_per_node=8,
        resource_name="nvidia.com/gpu",
        node_labels={},
        taints=(),
        capacity_types=("on-demand",),
        gpu_limit=20,
    )
    assert pool.max_nodes == 2
    assert pool.model_copy(update={"source": "managed", "size": 0}).max_nodes == 0


GPU_TAINT = PoolTaint(key="nvidia.com/gpu", value="true", effect="NoSchedule")


@pytest.mark.parametrize(
    ("toleration", "expected"),
    [
        (Toleration(key="nvidia.com/gpu", operator="Exists", effect="NoSchedule"), True),
        (Toleration(key="nvidia.com/gpu", operator="Equal", value="true"), True),  # empty effect: all
        (Toleration(key="nvidia.com/gpu", operator="Equal", value="false", effect="NoSchedule"), False),
        (Toleration(key="nvidia.com/gpu", operator="Exists", effect="NoExecute"), False),
        (Toleration(operator="Exists"), True),  # empty key with Exists tolerates everything
        (Toleration(key="amd.com/gpu", operator="Exists"), False),
    ],
)
def test_tolerations_match_taints_as_kubernetes_does(toleration, expected):
    assert tolerated([toleration], GPU_TAINT) is expected


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ({"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["p4d.24xlarge"]}, True),
        ({"key": "node.kubernetes.io/instance-type", "operator": "NotIn", "values": ["p4d.24xlarge"]}, False),
        ({"key": "karpenter.sh/capacity-type", "operator": "Exists"}, True),
        ({"key": "missing", "operator": "DoesNotExist"}, True),
        ({"key": "gpus", "operator": "Gt", "values": ["4"]}, True),
        ({"key": "gpus", "operator": "Lt", "values": ["4"]}, False),
    ],
)
def test_node_affinity_operators(expression, expected):
    labels = {
        "node.kubernetes.io/instance-type": "p4d.24xlarge",
        "karpenter.sh/capacity-type": "on-demand",
        "gpus": "8",
    }
    assert matches_expression(labels, expression) is expected
