"""The pods the operators create (sim/operators/pods.py): the model's constants against the upstream
source it copies (sim/vendored, scripts/vendor_model_sources.py), what each operator adds,
and that every pod of every committed workload stack passes its namespace's Pod Security level and the
namespace's ResourceQuota."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest

from infra.accelerators import CATALOG
from infra.config.addons import TeamQueue
from infra.contract import ACCELERATOR_LABEL, Toleration
from infra.exports import kueue_objects
from sim.kubernetes.scheduling import quota_problems, simulate, tolerated, unschedulable
from sim.operators import pods as model
from workloads.platform import PlatformFacts, example_outputs_path, load_platform_outputs
from workloads.pod_security import baseline_violations, restricted_violations
from workloads.render import render
from workloads.stacks import load_stack, program_text, workload_stacks

FIXTURES = Path(__file__).resolve().parents[2] / "sim" / "vendored"
V1 = FIXTURES / "kubeflow/trainer/v1.9.2"
TRAINER = FIXTURES / "kubeflow/trainer/v2.3.0"
JOBSET = FIXTURES / "kubernetes-sigs/jobset/v0.12.0"
KUBERAY = FIXTURES / "ray-project/kuberay/v1.7.0"
KUEUE = FIXTURES / "kubernetes-sigs/kueue/v0.19.2"
STACKS = workload_stacks()


def go_value(path: Path, name: str) -> str:
    """A Go constant or var: `Name = "x"`, `Name string = "x"`, `Name = 42` or a raw `...` string."""
    text = path.read_text()
    raw = re.search(rf"\b{name}\b\s*=\s*`([^`]*)`", text)
    if raw:
        return raw.group(1)
    found = re.search(rf"\b{name}\b\s*(?:\w+\s*)?=\s*(?:\"([^\"]*)\"|(\d+))", text)
    assert found, f"{name} not in {path}"
    return found.group(1) if found.group(1) is not None else found.group(2)


CONFIG = V1 / "pkg/config/config.go"
PYTORCH_TYPES = V1 / "pkg/apis/kubeflow.org/v1/pytorch_types.go"
COMMON_TYPES = V1 / "pkg/apis/kubeflow.org/v1/common_types.go"
TRAINER_CONSTANTS = TRAINER / "pkg/constants/constants.go"
JOBSET_TYPES = JOBSET / "api/jobset/v1alpha2/jobset_types.go"
RAY_CONSTANTS = KUBERAY / "ray-operator/controllers/ray/utils/constant.go"
KUEUE_CONSTANTS = KUEUE / "pkg/constants/constants.go"


@pytest.mark.parametrize(
    ("source", "name", "modelled"),
    [
        (CONFIG, "PyTorchInitContainerImageDefault", model.PYTORCH_INIT_IMAGE),
        (CONFIG, "PyTorchInitContainerTemplateFileDefault", model.PYTORCH_INIT_TEMPLATE_FILE),
        (CONFIG, "PyTorchInitContainerMaxTriesDefault", str(model.PYTORCH_INIT_MAX_TRIES)),
        (CONFIG, "MPIKubectlDeliveryImageDefault", model.MPI_KUBECTL_DELIVERY_IMAGE),
        (
            V1 / "pkg/controller.v1/pytorch/initcontainer.go",
            "initContainerTemplate",
            model.PYTORCH_INIT_TEMPLATE_BUILTIN,
        ),
        (PYTORCH_TYPES, "PyTorchJobDefaultPortName", model.PYTORCH_PORT_NAME),
        (PYTORCH_TYPES, "PyTorchJobDefaultPort", str(model.PYTORCH_PORT)),
        (PYTORCH_TYPES, "PyTorchJobDefaultContainerName", model.PYTORCH_CONTAINER),
        (COMMON_TYPES, "OperatorNameLabel", model.V1_LABELS["operator"]),
        (COMMON_TYPES, "JobNameLabel", model.V1_LABELS["job"]),
        (COMMON_TYPES, "ReplicaTypeLabel", model.V1_LABELS["type"]),
        (COMMON_TYPES, "ReplicaIndexLabel", model.V1_LABELS["index"]),
        (COMMON_TYPES, "JobRoleLabel", model.V1_LABELS["role"]),
        (TRAINER_CONSTANTS, "Node", model.TRAINER_CONTAINER),
        (TRAINER_CONSTANTS, "ContainerTrainerPort", str(model.TRAINER_PORT)),
        (TRAINER_CONSTANTS, "TorchEnvMasterAddr", "PET_MASTER_ADDR"),
        (TRAINER_CONSTANTS, "TorchEnvNodeRank", "PET_NODE_RANK"),
        (JOBSET_TYPES, "JobSetNameKey", model.JOBSET_LABELS["jobset"]),
        (JOBSET_TYPES, "ReplicatedJobNameKey", model.JOBSET_LABELS["rjob"]),
        (JOBSET_TYPES, "JobKey", model.JOBSET_LABELS["key"]),
        (JOBSET_TYPES, "GroupNameKey", model.JOBSET_LABELS["group"]),
        (RAY_CONSTANTS, "DefaultMetricsPort", str(model.RAY_METRICS_PORT[1])),
        (RAY_CONSTANTS, "MetricsPortName", model.RAY_METRICS_PORT[0]),
        (KUEUE_CONSTANTS, "PodSetLabel", model.KUEUE_POD_LABELS["podset"]),
        (KUEUE_CONSTANTS, "LocalQueueLabel", model.KUEUE_POD_LABELS["local_queue"]),
        (KUEUE_CONSTANTS, "ClusterQueueLabel", model.KUEUE_POD_LABELS["cluster_queue"]),
        (KUEUE / "pkg/controller/constants/constants.go", "QueueLabel", model.KUEUE_QUEUE_LABEL),
        (
            KUEUE / "apis/kueue/v1beta2/topology_types.go",
            "WorkloadAnnotation",
            model.KUEUE_WORKLOAD_ANNOTATION,
        ),
        (
            KUEUE / "pkg/controller/jobs/trainjob/trainjob_controller.go",
            "runtimePatchManagerName",
            model.KUEUE_RUNTIME_PATCH_MANAGER,
        ),
    ],
)
def test_the_models_constants_are_the_pinned_operators(source, name, modelled):
    assert go_value(source, name) == modelled


def test_kuberays_init_container_is_the_one_its_source_builds():
    source = (KUBERAY / "ray-operator/controllers/ray/common/pod.go").read_text()
    assert f'Name:            "{model.RAY_INIT_CONTAINER}"' in source
    assert (
        "SecurityContext: podTemplate.Spec.Containers[utils.RayContainerIndex].SecurityContext.DeepCopy()"
        in source
    )
    for resource, amount in model.RAY_INIT_RESOURCES.items():
        go_name = {"cpu": "CPU", "memory": "Memory"}[resource]
        found = re.findall(rf'corev1.Resource{go_name}:\s+resource.MustParse\("([^"]+)"\)', source)
        assert found == [amount, amount], resource  # limits and requests


def _rendered(stack: str) -> tuple[list[dict], PlatformFacts]:
    loaded = load_stack(stack)
    platform = load_platform_outputs(example_outputs_path(loaded.platform_stack))
    return render(loaded.spec, platform, program_text=program_text(loaded.spec)), platform


def _enforced(objects: list[dict]) -> str:
    (namespace,) = [o for o in objects if o["kind"] == "Namespace"]
    return namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"]


@pytest.mark.parametrize("stack", STACKS)
def test_every_pod_the_operators_create_passes_its_namespaces_pod_security(stack):
    objects, platform = _rendered(stack)
    level = _enforced(objects)
    check = {"restricted": restricted_violations, "baseline": baseline_violations}[level]
    pods = model.operator_pods(objects, platform)
    assert pods
    assert {p.pod["metadata"]["namespace"] for p in pods} == {load_stack(stack).spec.namespace_name}
    for created in pods:
        assert check(created.spec) == [], f"{created.job}/{created.role} under {level}"


def test_a_multinode_pytorchjobs_workers_get_the_operators_init_container_from_our_template():
    objects, platform = _rendered("dev-zimdb-multinode")
    pods = {p.pod["metadata"]["name"]: p for p in model.operator_pods(objects, platform)}
    assert set(pods) == {"zimdb-multinode-master-0", *(f"zimdb-multinode-worker-{i}" for i in range(3))}
    assert "initContainers" not in pods["zimdb-multinode-master-0"].spec  # setInitContainer: Workers only
    (init,) = pods["zimdb-multinode-worker-1"].spec["initContainers"]
    assert init["name"] == "init-pytorch"
    # Through the platform's image path: ECR Public's copy of Docker Hub's alpine, by digest.
    assert init["image"].startswith(
        f"{platform.image_path.path().registry}/dev/ecr-public/docker/library/alpine:"
    )
    assert "@sha256:" in init["image"]
    assert "nslookup zimdb-multinode-master-0;" in init["command"][2] and "seq 100" in init["command"][2]
    assert init["securityContext"]["runAsNonRoot"] is True


def test_the_operators_builtin_template_is_refused_under_restricted():
    """What a job namespace's Pod Security refuses with the operator's own template (no template file)."""
    objects, platform = _rendered("dev-zimdb-multinode")
    builtin = replace(
        model.operator_settings(platform),
        pytorch_init_template=model.PYTORCH_INIT_TEMPLATE_BUILTIN,
        pytorch_init_image=model.PYTORCH_INIT_IMAGE,
    )
    worker = next(p for p in model.operator_pods(objects, platform, builtin) if p.role == "Worker")
    assert sorted(restricted_violations(worker.spec)) == [
        "allowPrivilegeEscalation: container 'init-pytorch' does not set allowPrivilegeEscalation: false",
        "capabilities_restricted: container 'init-pytorch' does not drop ALL capabilities",
    ]


def test_the_operator_sets_the_rendezvous_environment_restart_policy_and_port():
    objects, platform = _rendered("dev-zimdb-multinode")
    worker = next(
        p for p in model.operator_pods(objects, platform) if p.pod["metadata"]["name"].endswith("-1")
    )
    (container,) = worker.spec["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["PET_MASTER_ADDR"] == "zimdb-multinode-master-0" and env["PET_MASTER_PORT"] == "23456"
    assert (env["RANK"], env["PET_NODE_RANK"], env["PET_NNODES"], env["WORLD_SIZE"]) == ("2", "2", "4", "4")
    assert {"name": "pytorchjob-port", "containerPort": 23456} in container["ports"]
    assert worker.spec["restartPolicy"] == "Never"  # ExitCode: the operator recreates the pod
    assert (
        worker.labels[model.V1_LABELS["type"]] == "worker" and worker.labels[model.V1_LABELS["index"]] == "1"
    )


def test_go_templates_escape_data_as_html_template_does():
    assert model.go_template("a {{.X}} b {{ .Y }}", {"X": "<x&'\"+>", "Y": 3}) == (
        "a &lt;x&amp;&#39;&#34;&#43;&gt; b 3"
    )


def test_train_job_pods_are_the_jobsets_indexed_pods_with_trainers_torch_environment():
    objects, platform = _rendered("prod-a100")
    pods = model.operator_pods(objects, platform)
    assert [p.spec["hostname"] for p in pods] == ["zimdb-a100-node-0-0", "zimdb-a100-node-0-1"]
    node = pods[1].spec["containers"][0]
    env = {e["name"]: e for e in node["env"]}
    assert env["PET_MASTER_ADDR"]["value"] == "zimdb-a100-node-0-0.zimdb-a100"
    assert env["PET_NNODES"]["value"] == "2" and env["PET_NPROC_PER_NODE"]["value"] == "8"
    assert env["PET_NODE_RANK"]["valueFrom"]["fieldRef"]["fieldPath"].endswith(
        "['batch.kubernetes.io/job-completion-index']"
    )
    assert {"containerPort": 29500, "protocol": "TCP"} in node["ports"]
    assert pods[1].labels[model.COMPLETION_INDEX] == "1" and pods[1].spec["subdomain"] == "zimdb-a100"
    assert node["image"] == next(o for o in objects if o["kind"] == "TrainJob")["spec"]["trainer"]["image"]


def test_kueue_writes_the_platforms_flavor_into_an_admitted_train_jobs_pods():
    objects, platform = _rendered("prod-a100")
    (research,) = [q for q in platform.queue_quotas if q.name == "research"]
    flavors = {
        o["metadata"]["name"]: o["spec"]
        for o in kueue_objects(
            [TeamQueue(name="research", cpu=1, memory_gib=1, gpus=research.gpus, efa_interfaces=8)]
        )
        if o["kind"] == "ResourceFlavor"
    }
    for created in model.operator_pods(objects, platform):
        assert created.held is None
        assert created.labels[model.KUEUE_POD_LABELS["podset"]] == "node"
        assert created.labels[model.KUEUE_POD_LABELS["cluster_queue"]] == "research"
        assert created.pod["metadata"]["annotations"][model.KUEUE_WORKLOAD_ANNOTATION].startswith("trainjob-")
        assert flavors["gpu-a100"]["nodeLabels"].items() <= created.spec["nodeSelector"].items()
        # Tolerations are a replaced list under a strategic merge patch: Kueue's patch, applied after ours,
        # leaves the flavor's; the a100 nodes' taint must still be tolerated.
        assert created.spec["tolerations"] == flavors["gpu-a100"]["tolerations"]
        taint = CATALOG["a100"].taint
        assert tolerated([Toleration(**t) for t in created.spec["tolerations"]], taint)  # type: ignore[arg-type]


def test_a_queue_without_a_flavor_for_the_pods_nodes_holds_the_job():
    objects, platform = _rendered("prod-a100")
    research = platform.queue("research")
    t4_only = research.model_copy(update={"gpus": {"t4": 8}})
    others = tuple(q for q in platform.queue_quotas if q.name != "research")
    held = platform.model_copy(update={"queue_quotas": (t4_only, *others)})
    pods = model.operator_pods(objects, held)
    assert pods and all(
        "no flavor of ClusterQueue research covers nvidia.com/gpu" in (p.held or "") for p in pods
    )
    assert any("not admitted: no flavor" in line for line in unschedulable(simulate(objects, held)))
    assert ACCELERATOR_LABEL in held.accelerator_pools["a100"].node_labels


def test_kuberay_adds_wait_gcs_ready_with_the_ray_containers_security_to_workers_only():
    objects, platform = _rendered("dev-zimdb-ray")
    pods = {p.role: p for p in model.operator_pods(objects, platform)}
    assert set(pods) == {"head", "gpu", "submitter"}
    (init,) = pods["gpu"].spec["initContainers"]
    assert init["name"] == model.RAY_INIT_CONTAINER
    assert init["securityContext"] == pods["gpu"].spec["containers"][0]["securityContext"]
    assert "initContainers" not in pods["head"].spec
    assert pods["head"].labels["ray.io/node-type"] == "head" and pods["gpu"].labels["ray.io/group"] == "gpu"
    # The job's own /dev/shm stays: KubeRay adds its shared-mem volume only where none is mounted.
    assert not any(v["name"] == "shared-mem" for v in pods["gpu"].spec["volumes"])


def test_the_mpi_launcher_is_baseline_only_and_its_namespace_enforces_baseline():
    objects, platform = _rendered("dev-zimdb-mpi")
    launcher = next(p for p in model.operator_pods(objects, platform) if p.role == "Launcher")
    assert launcher.spec["serviceAccountName"] == "zimdb-mpi-launcher"
    assert [c["name"] for c in launcher.spec["initContainers"]] == ["kubectl-delivery"]
    assert sorted(restricted_violations(launcher.spec)) == [
        "allowPrivilegeEscalation: container 'kubectl-delivery' does not set allowPrivilegeEscalation: false",
        "capabilities_restricted: container 'kubectl-delivery' does not drop ALL capabilities",
    ]
    assert _enforced(objects) == "baseline"


def test_a_strategic_merge_patch_merges_named_lists_and_replaces_tolerations():
    base = {
        "containers": [{"name": "node", "image": "a", "env": [{"name": "A", "value": "1"}]}],
        "tolerations": [{"key": "x"}],
        "nodeSelector": {"a": "1"},
    }
    patch = {
        "containers": [{"name": "node", "env": [{"name": "B", "value": "2"}]}],
        "tolerations": [{"key": "y"}],
        "nodeSelector": {"b": "2"},
    }
    merged = model.strategic_merge(base, patch)
    env = [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]
    assert merged["containers"] == [{"name": "node", "image": "a", "env": env}]
    assert merged["tolerations"] == [{"key": "y"}] and merged["nodeSelector"] == {"a": "1", "b": "2"}


@pytest.mark.parametrize("stack", STACKS)
def test_the_namespace_quota_admits_two_gangs_of_the_pods_the_operators_create(stack):
    objects, platform = _rendered(stack)
    assert quota_problems(objects, platform) == []


def test_the_quota_refuses_an_init_container_without_a_memory_limit():
    """kubernetes pkg/quota/v1/evaluator/core/pods.go: a quota on limits.memory makes every container, init
    containers included, state one; the API server refuses the pod otherwise."""
    objects, platform = _rendered("dev-zimdb-multinode")
    settings = model.operator_settings(platform)
    unlimited = settings.pytorch_init_template.replace("      memory: 20Mi\n", "", 1)
    assert unlimited != settings.pytorch_init_template
    problems = quota_problems(objects, platform, settings=replace(settings, pytorch_init_template=unlimited))
    assert problems == [
        f"zimdb-multinode-worker-{i}: must specify limits.memory for: init-pytorch (ResourceQuota "
        "zimdb-multinode tracks them)"
        for i in range(3)
    ]


def test_the_quota_counts_two_gangs():
    objects, platform = _rendered("dev-zimdb-multinode")
    assert quota_problems(objects, platform, gangs=2) == []
    assert "ResourceQuota zimdb-multinode: pods 12 for 3 x the job's pods > hard 8" in quota_problems(
        objects, platform, gangs=3
    )
