"""Check a job spec against its platform and work out where and how big its pods are.

The platform's `accelerator_pools` export says which pools exist and how far they grow, `queue_quotas`
what each queue admits; the accelerator catalog (infra.accelerators, pure data) says what each instance
type has. The result,
`Placement`, carries every fact the renderers need, so they never look anything up themselves.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

from infra.accelerators import Accelerator, InstanceType, accelerator
from infra.config.base import case_hint
from infra.contract import EFA_RESOURCE, AcceleratorPool, job_prefix, quantity
from workloads.platform import PlatformFacts
from workloads.s3_keys import TRAINER_S3_KEYS, relative_form
from workloads.spec import CONFIG_KEY, SpecError, TrainingJobSpec
from workloads.spec_rules import VENDOR_REPOSITORY

# Share of an instance's vCPUs and memory a job's pods ask for by default (split by their share of the
# GPUs): the rest is the kubelet's reservation and the daemonsets (CNI, device plugin, DCGM exporter,
# Pod Identity agent, log shipper).
DEFAULT_SHARE = 0.75


@dataclass(frozen=True)
class Placement:
    pool_name: str
    pool: AcceleratorPool
    accelerator: Accelerator
    instance_types: tuple[InstanceType, ...]  # the pool's types with at least gpus_per_node GPUs
    image: str
    cpu: float
    memory_gib: int
    shm_gib: int
    efa_interfaces: int  # vpc.amazonaws.com/efa per pod; 0 off EFA pools


def _key(field: str) -> str:
    return f"{CONFIG_KEY}.{field}"


def _choose_pool(spec: TrainingJobSpec, platform: PlatformFacts) -> tuple[str, AcceleratorPool]:
    offering = {n: p for n, p in platform.accelerator_pools.items() if p.accelerator == spec.accelerator}
    if not offering:
        offered = sorted({p.accelerator for p in platform.accelerator_pools.values()})
        raise SpecError(
            f"{_key('accelerator')}: {spec.accelerator!r} is not offered by platform "
            f"{platform.cluster_name}; allowed: {', '.join(offered) or 'none (no GPU pools)'}"
            + case_hint(spec.accelerator, offered)
        )
    if spec.pool is not None:
        if spec.pool not in offering:
            raise SpecError(
                f"{_key('pool')}: {spec.pool!r} is not a {spec.accelerator} pool of "
                f"{platform.cluster_name}; allowed: {', '.join(sorted(offering))}"
            )
        candidates = {spec.pool: offering[spec.pool]}
    else:
        candidates = offering
    if not spec.spot_tolerant:
        # A pool that may launch Spot would put the job on Spot whenever Spot is cheaper. Reserved capacity
        # is not reclaimed before its window ends (`plan --reservations` checks the job against it).
        candidates = {n: p for n, p in candidates.items() if "spot" not in p.capacity_types}
        if not candidates:
            raise SpecError(
                f"{_key('spotTolerant')}: false, but every {spec.accelerator} pool of "
                f"{platform.cluster_name} may launch Spot ({', '.join(sorted(offering))}); allowed: "
                "true (the trainer checkpoints on the Spot notice), or add a pool with capacityTypes "
                "[on-demand] or [reserved]"
            )
    fitting = {n: p for n, p in candidates.items() if p.gpus_per_node >= spec.gpus_per_node}
    if not fitting:
        have = ", ".join(
            f"{n}: {p.gpus_per_node} ({', '.join(p.instance_types)})" for n, p in candidates.items()
        )
        most = max(p.gpus_per_node for p in candidates.values())
        raise SpecError(
            f"{_key('gpusPerNode')}: {spec.gpus_per_node} is more than the {spec.accelerator} "
            f"pools' instance types have ({have}); allowed: 1-{most}"
        )
    name = next(iter(fitting))
    return name, fitting[name]


def _check_platform_features(spec: TrainingJobSpec, platform: PlatformFacts) -> None:
    if platform.training_operators and not platform.training_operators.get(spec.operator, False):
        on = [k for k, v in platform.training_operators.items() if v]
        raise SpecError(
            f"{_key('operator')}: {spec.operator!r} is not installed on {platform.cluster_name}; "
            f"allowed: {', '.join(on) or 'none'}"
        )
    if spec.priority is not None and spec.priority not in platform.priority_classes:
        # The API server refuses a pod naming a PriorityClass that does not exist, so the operator's pods
        # would never be created and the job would wait forever.
        defined = ", ".join(platform.priority_classes)
        raise SpecError(
            f"{_key('priority')}: {spec.priority!r} is not a PriorityClass of {platform.cluster_name} (the "
            f"API server would refuse every pod); allowed: {defined or 'none defined'}, or leave priority "
            "unset; the platform stack defines them in addons.training.priorityClasses"
        )
    if spec.queue is None:
        return
    if platform.gang_scheduler is None:
        raise SpecError(
            f"{_key('queue')}: {spec.queue!r}, but {platform.cluster_name} runs no Kueue or "
            "Volcano; allowed: leave queue unset"
        )
    if spec.operator == "rayjob":
        # Kueue 0.19.2 can admit RayJobs (integration `ray.io/rayjob`), but the platform enables only
        # TrainJob and JobSet (infra/addons/training.py KUEUE_FRAMEWORKS: every integration adds webhooks
        # that fail closed in job namespaces), and KubeRay runs without a batch scheduler (Volcano's
        # PodGroups); the queue label would be ignored and the job would run unqueued.
        raise SpecError(
            f"{_key('queue')}: {spec.queue!r}: {platform.cluster_name} queues no RayJob (Kueue manages "
            "TrainJob and JobSet only, KubeRay runs without a batch scheduler); allowed: leave queue unset, "
            "or operator: trainjob"
        )
    if platform.gang_scheduler == "kueue" and spec.queue not in platform.kueue_queues:
        raise SpecError(
            f"{_key('queue')}: {spec.queue!r} is not a ClusterQueue of {platform.cluster_name}; "
            f"allowed: {', '.join(platform.kueue_queues) or 'none'}"
        )
    if platform.gang_scheduler == "kueue" and spec.operator == "mpijob":
        raise SpecError(
            f"{_key('queue')}: {spec.queue!r}: Kueue's MPIJob integration is for mpi-operator's "
            "kubeflow.org/v2beta1 MPIJob, not the Training Operator v1 kubeflow.org/v1 MPIJob that operator "
            "mpijob creates: the queue would be ignored; allowed: leave queue unset (the job then runs "
            f"without gang scheduling on {platform.cluster_name}), or a platform with gangScheduler: volcano"
        )
    if platform.gang_scheduler == "kueue" and spec.operator != "trainjob":
        # Kueue 0.19's default integrations (what infra installs) cover TrainJob/JobSet, not PyTorchJob:
        # the queue label would be ignored and the job would run unqueued.
        raise SpecError(
            f"{_key('queue')}: {spec.queue!r}: Kueue on {platform.cluster_name} admits TrainJobs only; "
            "allowed with operator: trainjob"
        )
    if platform.gang_scheduler == "volcano" and spec.operator not in ("pytorchjob", "mpijob"):
        raise SpecError(
            f"{_key('queue')}: Volcano queues are set through a Training Operator v1 job's schedulingPolicy; "
            "allowed with operator: pytorchjob or mpijob"
        )


def _pool_size(pool: AcceleratorPool) -> str:
    if pool.source == "karpenter":
        return (
            f"at most {pool.max_nodes} nodes (Karpenter gpuLimit {pool.gpu_limit} / "
            f"{pool.gpus_per_node} GPUs per node)"
        )
    return f"{pool.max_nodes} nodes (managed, fixed size)"


def _check_quota(
    spec: TrainingJobSpec, platform: PlatformFacts, pool: AcceleratorPool, cpu: float, memory: int, efa: int
) -> None:
    """A queued job is admitted only if its whole gang fits the queue's nominal quota (no cohort: nothing
    to borrow); a resource the queue does not cover is refused outright by Kueue ("resource ...
    unavailable in ClusterQueue", kueue 0.19 pkg/scheduler/flavorassigner/flavorassigner.go)."""
    queue = platform.queue(spec.queue) if spec.queue else None
    if queue is None:
        return
    per_pod = {"cpu": f"{cpu:g}", "memory": f"{memory}Gi", pool.resource_name: str(spec.gpus_per_node)}
    if efa:
        per_pod[EFA_RESOURCE] = str(efa)
    pods = spec.max_nodes
    problems = []
    for resource, amount in per_pod.items():
        nominal = queue.quota_for(resource, pool.accelerator)
        if nominal is None:
            problems.append(f"{resource} ({pool.accelerator} nodes) is not covered by the queue")
        elif quantity(amount) * pods > quantity(nominal):
            total = _format(quantity(amount) * pods, amount)
            problems.append(f"{resource} {pods} x {amount} = {total} > nominal quota {nominal}")
    if problems:
        have = ", ".join(
            [
                *(f"{k} {v}" for k, v in queue.nominal.items()),
                *(f"{k} GPUs {v}" for k, v in queue.gpus.items()),
            ]
        )
        raise SpecError(
            f"{_key('queue')}: {spec.queue!r} would never admit this job: {'; '.join(problems)}; allowed: "
            f"a job within the queue's quota ({have}), or a larger quota in the platform stack"
        )


def _format(value: Decimal, like: str) -> str:
    for suffix in ("Gi", "Mi"):
        if like.endswith(suffix):
            return f"{value / quantity('1' + suffix):g}{suffix}"
    return f"{value:g}"


def _image(spec: TrainingJobSpec, platform: PlatformFacts, acc: Accelerator) -> str:
    if spec.image:
        return spec.image
    # An MPIJob's image must have Open MPI: only the cpu image does (spec._mpi_image_problems).
    repo = spec.image_repository or ("cpu" if spec.operator == "mpijob" else VENDOR_REPOSITORY[acc.vendor])
    if repo not in platform.ecr_repository_urls:
        raise SpecError(
            f"{_key('imageRepository')}: {repo!r} is not an ECR repository of "
            f"{platform.cluster_name}; allowed: {', '.join(platform.ecr_repository_urls)}"
        )
    return f"{platform.ecr_repository_urls[repo]}:{spec.image_tag}"


def _check_bucket(spec: TrainingJobSpec, platform: PlatformFacts) -> None:
    """An s3:// URL in trainerConfig must be in the platform's bucket: the job's role reaches no other
    (parse_spec checks the prefix, which needs no platform facts)."""
    for section, keys in TRAINER_S3_KEYS:
        values = spec.trainer_config.get(section)
        for key in keys:
            url = values.get(key) if isinstance(values, dict) else None
            if isinstance(url, str) and url.startswith("s3://"):
                bucket = url.removeprefix("s3://").partition("/")[0]
                if bucket != platform.bucket_name:
                    prefix = job_prefix(spec.name)
                    raise SpecError(
                        f"{_key(f'trainerConfig.{section}.{key}')}: {url!r} is in bucket {bucket!r}; the "
                        f"job's IAM role reads only s3://{platform.bucket_name}/{prefix}/; allowed: "
                        f"{relative_form(section, key, prefix)} (copy it there first)"
                    )


def place(spec: TrainingJobSpec, platform: PlatformFacts) -> Placement:
    """Validate `spec` against the platform; raise SpecError naming the key, or return the placement."""
    _check_platform_features(spec, platform)
    _check_bucket(spec, platform)
    pool_name, pool = _choose_pool(spec, platform)
    acc = accelerator(spec.accelerator)
    types = tuple(t for t in (acc.instance(n) for n in pool.instance_types) if t.gpus >= spec.gpus_per_node)
    # Training "nodes" are pods: pods of 1 GPU pack 4 to a g4dn.12xlarge, so capacity counts GPUs.
    per_instance = max(t.gpus // spec.gpus_per_node for t in types)
    capacity = pool.max_nodes * per_instance
    if spec.max_nodes > capacity:
        field = "elastic.maxNodes" if spec.elastic else "nodes"
        raise SpecError(
            f"{_key(field)}: {spec.max_nodes} pods of {spec.gpus_per_node} GPU(s) do not fit pool "
            f"{pool_name}: {_pool_size(pool)} x {per_instance} such pods each = {capacity}; "
            f"allowed: {f'1-{capacity}' if capacity else 'none (grow the pool in the platform stack)'}"
        )
    smallest = min(types, key=lambda t: (t.gpus, t.vcpus))
    largest = max(types, key=lambda t: t.vcpus)
    # A pod's default share of an instance follows its share of the GPUs (packed pods all fit).
    share = DEFAULT_SHARE * spec.gpus_per_node / smallest.gpus
    cpu = spec.cpu_per_node or max(1, int(smallest.allocatable_cpu * Decimal(share)))
    memory = spec.memory_gib_per_node or max(1, int(smallest.allocatable_memory * Decimal(share) / 2**30))
    # What the node can allocate (infra.accelerators: kubelet reservations and DaemonSets), not its size.
    cpu_free, memory_free = largest.allocatable_cpu, largest.allocatable_memory
    if Decimal(str(cpu)) > cpu_free or Decimal(memory) * 2**30 > memory_free:
        raise SpecError(
            f"{_key('cpuPerNode' if Decimal(str(cpu)) > cpu_free else 'memoryGiBPerNode')}: "
            f"{cpu:g} vCPU / {memory} GiB does not fit the largest {pool_name} instance type with "
            f"{spec.gpus_per_node} GPUs ({largest.name}: {largest.vcpus} vCPU, {largest.memory_gib} GiB); "
            f"allowed: at most {cpu_free:g} vCPU / {memory_free / 2**30:.1f} GiB, what it can allocate "
            "after the kubelet's reservations and the platform's DaemonSets"
        )
    shm = spec.shm_gib or max(1, memory // 4)
    if shm >= memory:
        raise SpecError(
            f"{_key('shmGiB')}: {shm} is not below the pod's memory ({memory} GiB): /dev/shm "
            "is memory the pod's limit counts; allowed: 1-" + str(memory - 1)
        )
    efa = min(t.efa_interfaces for t in types) if pool.efa else 0
    _check_quota(spec, platform, pool, cpu, memory, efa)
    return Placement(
        pool_name=pool_name,
        pool=pool,
        accelerator=acc,
        instance_types=types,
        image=_image(spec, platform, acc),
        cpu=cpu,
        memory_gib=memory,
        shm_gib=shm,
        efa_interfaces=efa,
    )
