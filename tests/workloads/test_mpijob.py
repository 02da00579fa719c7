"""operator: mpijob. The MPIJob (Training Operator v1) a job spec renders: its CRD, its pods as the operator
creates them (Pod Security, placement, network), its gang under Volcano, and what is refused."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml

from infra.contract import JOB_LABEL, QueueQuota
from sim.kubernetes.cel import CrdRules
from sim.kubernetes.netpol import Endpoint, allowed
from sim.kubernetes.scheduling import simulate, unschedulable
from sim.operators.pods import operator_pods
from trainer import attempts
from workloads import jobs, mpijob
from workloads.__main__ import platform_facts
from workloads.placement import place
from workloads.platform import PlatformFacts
from workloads.pod_security import baseline_violations, restricted_violations
from workloads.render import render
from workloads.spec import SpecError, TrainingJobSpec, parse_spec
from workloads.stacks import load_stack

STACK = "dev-zimdb-mpi"
BASE = {
    "name": "zimdb-mpi",
    "accelerator": "t4",
    "gpusPerNode": 1,
    "nodes": 2,
    "operator": "mpijob",
    "imageTag": "0.1.0",
    "trainerConfig": {"train": {"max_steps": 300}},
}


def _spec(**change: Any) -> TrainingJobSpec:
    return parse_spec({**BASE, **change})


@pytest.fixture(scope="module")
def dev() -> PlatformFacts:
    return platform_facts("dev", None)[0]


@pytest.fixture(scope="module")
def volcano(dev) -> PlatformFacts:
    """dev as if it gang-scheduled with Volcano: its ml-team queue as a Volcano Queue's capability
    (infra/addons/training.py volcano_queues)."""
    queue = QueueQuota(
        name="ml-team", scheduler="volcano", nominal={"cpu": "64", "memory": "256Gi", "nvidia.com/gpu": "8"}
    )
    return dev.model_copy(
        update={
            "gang_scheduler": "volcano",
            "kueue_queues": (),
            "queue_quotas": (queue,),
            "priority_classes": ("research",),
        }
    )


def _kind(objects: list[dict], kind: str) -> dict:
    (found,) = [o for o in objects if o["kind"] == kind]
    return found


def _replicas(job: dict) -> dict[str, dict]:
    return job["spec"]["mpiReplicaSpecs"]


def test_the_committed_stack_renders_an_mpijob_its_crd_accepts(crd_check):
    stack = load_stack(STACK)
    facts = platform_facts(stack.platform_stack, None)[0]
    objects = render(stack.spec, facts)
    job = _kind(objects, "MPIJob")
    assert job["apiVersion"] == "kubeflow.org/v1"
    code, out = crd_check([job])
    assert code == 0, out


def test_a_job_the_crd_refuses_is_caught(crd_check):
    job = _kind(render(_spec(), platform_facts("dev", None)[0]), "MPIJob")
    broken = copy.deepcopy(job)
    broken["spec"]["slotsPerWorker"] = "one"
    code, out = crd_check([broken])
    assert code != 0 and "slotsPerWorker" in out


def test_workers_get_the_pool_gpus_identity_and_security_a_pytorchjobs_pods_get(dev):
    spec = _spec()
    worker = _replicas(_kind(render(spec, dev), "MPIJob"))["Worker"]
    torch_spec = spec.model_copy(update={"operator": "pytorchjob"})
    master = jobs.pytorch_job(torch_spec, place(torch_spec, dev), dev)["spec"]["pytorchReplicaSpecs"][
        "Master"
    ]
    ours, theirs = worker["template"]["spec"], master["template"]["spec"]
    for key in (
        "nodeSelector",
        "affinity",
        "tolerations",
        "securityContext",
        "serviceAccountName",
        "volumes",
        "automountServiceAccountToken",
        "terminationGracePeriodSeconds",
    ):
        assert ours[key] == theirs[key], key
    for key in ("resources", "volumeMounts", "securityContext", "ports"):
        assert ours["containers"][0][key] == theirs["containers"][0][key], key
    # The PyTorchJob's pods also carry where its launcher counts restarts (trainer/attempts.py): an MPIJob's
    # restarts are the kubelet's, counted by the operator's backoffLimit.
    ledger = {attempts.DIR_ENV, attempts.BUDGET_ENV, attempts.CREATION_ENV}
    assert ours["containers"][0]["env"] == [
        e for e in theirs["containers"][0]["env"] if e["name"] not in ledger
    ]
    assert worker["replicas"] == 2
    assert ours["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert ours["containers"][0]["command"] == ["python", "-m", "trainer.mpi_worker"]


def test_the_launcher_runs_mpirun_on_the_pool_without_gpus_or_s3(dev):
    launcher = _replicas(_kind(render(_spec(), dev), "MPIJob"))["Launcher"]
    spec = launcher["template"]["spec"]
    (container,) = spec["containers"]
    assert launcher["replicas"] == 1
    assert container["command"] == [
        "python",
        "-m",
        "trainer.mpi_launch",
        "--container",
        "mpi",
        "--",
        "python",
        "-m",
        "trainer",
        "--config",
        "/etc/trainer/config.yaml",
    ]
    assert set(container["resources"]["requests"]) == {"cpu", "memory"}
    worker = _replicas(_kind(render(_spec(), dev), "MPIJob"))["Worker"]["template"]["spec"]
    assert spec["tolerations"] == worker["tolerations"] and spec["nodeSelector"] == worker["nodeSelector"]
    assert container["image"] == worker["containers"][0]["image"]  # one Open MPI version
    # The operator's own account (bound to its exec Role), with its token for kubectl; not the job's role.
    assert "serviceAccountName" not in spec and spec["automountServiceAccountToken"] is True


def test_the_image_defaults_to_the_cpu_repository_the_one_with_open_mpi(dev):
    job = _kind(render(_spec(), dev), "MPIJob")
    image = _replicas(job)["Worker"]["template"]["spec"]["containers"][0]["image"]
    assert image == f"{dev.ecr_repository_urls['cpu']}:0.1.0"


def test_ranks_per_worker_are_its_slots():
    spec = _spec(gpusPerNode=4, nodes=1)
    job = mpijob.mpi_job(spec, place(spec, platform_facts("dev", None)[0]), platform_facts("dev", None)[0])
    assert job["spec"]["slotsPerWorker"] == 4 and job["spec"]["mainContainer"] == mpijob.CONTAINER


def test_both_replicas_restart_in_place_within_the_restart_budget(dev):
    job = _kind(render(_spec(restartBudget=5), dev), "MPIJob")
    assert {r["restartPolicy"] for r in _replicas(job).values()} == {"OnFailure"}
    assert job["spec"]["runPolicy"]["backoffLimit"] == 5


def test_our_templates_are_restricted_the_operators_launcher_pod_only_baseline(dev):
    objects = render(_spec(), dev)
    replicas = _replicas(_kind(objects, "MPIJob"))
    for role in ("Launcher", "Worker"):
        assert restricted_violations(replicas[role]["template"]["spec"]) == [], role
    # The launcher as mpijob_controller.go newLauncher creates it (sim/operators/pods.py).
    launcher_pod = next(p for p in operator_pods(objects, dev) if p.role == "Launcher").spec
    assert sorted(restricted_violations(launcher_pod)) == [
        "allowPrivilegeEscalation: container 'kubectl-delivery' does not set allowPrivilegeEscalation: false",
        "capabilities_restricted: container 'kubectl-delivery' does not drop ALL capabilities",
    ]
    assert baseline_violations(launcher_pod) == []
    labels = _kind(objects, "Namespace")["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "baseline"
    assert labels["pod-security.kubernetes.io/warn"] == "restricted"


def test_only_the_launcher_reaches_the_api_server(dev):
    objects = render(_spec(), dev)
    policies = [o for o in objects if o["kind"] == "NetworkPolicy"]
    job = _kind(objects, "MPIJob")
    ns = job["metadata"]["namespace"]
    replicas = _replicas(job)

    def pod(role: str, ip: str) -> Endpoint:
        labels = replicas[role]["template"]["metadata"]["labels"] | {mpijob.REPLICA_TYPE_LABEL: role.lower()}
        return Endpoint(role, ip, ns, labels)

    launcher, worker = pod("Launcher", "10.20.1.5"), pod("Worker", "10.20.1.6")
    namespaces = {n: {"kubernetes.io/metadata.name": n} for n in (ns, "kubecost")}
    for api in (Endpoint("kubernetes Service", "10.100.0.1"), Endpoint("control plane ENI", "10.20.0.9")):
        assert allowed(policies, launcher, api, 443, namespaces)
        assert not allowed(policies, worker, api, 443, namespaces)
    # Open MPI's daemons call back to mpirun on ports it picks; the ranks meet on worker 0.
    assert allowed(policies, worker, launcher, 41234, namespaces)
    assert allowed(policies, launcher, worker, 29500, namespaces)
    assert not allowed(
        policies, launcher, Endpoint("kubecost", "10.20.2.2", "kubecost", {}), 9090, namespaces
    )
    assert JOB_LABEL in mpijob.launcher_api_policy(_spec())["spec"]["podSelector"]["matchLabels"]


def test_the_pods_fit_the_pool_and_the_quota_holds_two_gangs(dev):
    objects = render(_spec(), dev)
    verdicts = simulate(objects, dev)
    assert {v.template.job for v in verdicts} == {"MPIJob/zimdb-mpi/Launcher", "MPIJob/zimdb-mpi/Worker"}
    assert unschedulable(verdicts) == []
    hard = _kind(objects, "ResourceQuota")["spec"]["hard"]
    assert hard["pods"] == "6"  # (launcher + 2 workers) x 2 gangs


def test_workers_beyond_the_pool_are_unschedulable(dev):
    objects = render(_spec(), dev)
    _replicas(_kind(objects, "MPIJob"))["Worker"]["replicas"] = 9  # t4 scales to 2 nodes x 4 GPUs
    problems = unschedulable(simulate(objects, dev))
    assert any("MPIJob/zimdb-mpi/Worker" in p for p in problems)


def test_volcano_gangs_the_launcher_with_the_workers_in_the_queue(volcano):
    spec = _spec(queue="ml-team", priority="research")
    job = _kind(render(spec, volcano), "MPIJob")
    policy = job["spec"]["runPolicy"]["schedulingPolicy"]
    # The operator's PodGroup takes minMember from minAvailable (common/job.go): the whole job.
    assert policy == {"minAvailable": 3, "queue": "ml-team", "priorityClass": "research"}
    assert policy["minAvailable"] == sum(r["replicas"] for r in _replicas(job).values())
    assert unschedulable(simulate(render(spec, volcano), volcano)) == []


def test_without_volcano_there_is_no_scheduling_policy(dev):
    assert "schedulingPolicy" not in _kind(render(_spec(), dev), "MPIJob")["spec"]["runPolicy"]


def test_a_kueue_queue_is_refused_naming_the_api_kueue_integrates(dev):
    with pytest.raises(
        SpecError, match=r"mpi-operator's kubeflow.org/v2beta1 MPIJob.*allowed: leave queue unset"
    ):
        place(_spec(queue="ml-team"), dev)


def test_a_platform_without_training_operator_v1_is_refused(dev):
    facts = dev.model_copy(
        update={"training_operators": {"trainjob": True, "pytorchjob": False, "mpijob": False}}
    )
    with pytest.raises(SpecError, match=r"operator: 'mpijob' is not installed on .*allowed: trainjob"):
        place(_spec(), facts)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"imageRepository": "cuda"}, r"imageRepository: 'cuda' has no Open MPI"),
        (
            {"trainerConfig": {"train": {"device": "cuda"}}},
            r"device: 'cuda': .* cpu image",
        ),
    ],
)
def test_an_image_without_open_mpi_or_cuda_is_refused(change, message):
    with pytest.raises(SpecError, match=message):
        _spec(**change)


def test_the_trainer_runs_on_the_cpu_unless_told_otherwise(dev):
    objects = render(_spec(trainerConfig={"train": {"max_steps": 300}}), dev)
    config = yaml.safe_load(_kind(objects, "ConfigMap")["data"]["config.yaml"])
    assert config["train"]["device"] == "cpu"


def test_an_image_of_ones_own_is_taken_as_it_is(dev):
    spec = _spec(imageTag=None, image="registry.example/mpi-trainer:1.0", trainerConfig={})
    job = _kind(render(spec, dev), "MPIJob")
    assert {r["template"]["spec"]["containers"][0]["image"] for r in _replicas(job).values()} == {
        "registry.example/mpi-trainer:1.0"
    }


def test_a_changed_queue_the_crd_refuses_to_update_replaces_the_job(volcano):
    rules = CrdRules()
    old = _kind(render(_spec(queue="ml-team"), volcano), "MPIJob")
    other = volcano.queue_quotas[0].model_copy(update={"name": "other"})
    facts = volcano.model_copy(update={"queue_quotas": (*volcano.queue_quotas, other)})
    new = _kind(render(_spec(queue="other"), facts), "MPIJob")
    assert rules.validate(old) == [] and rules.validate(new) == []
    refused = {v.path for v in rules.validate(new, old)}
    assert refused == {".spec.runPolicy.schedulingPolicy.queue"}
    replaced = set(jobs.REPLACE_ON_CHANGES["MPIJob"])
    assert {"spec.mpiReplicaSpecs", "spec.runPolicy.schedulingPolicy"} <= replaced
    assert "MPIJob" in jobs.DELETE_BEFORE_REPLACE
