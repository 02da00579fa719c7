"""Every object of every workload stack file against its upstream schema, and the facts rendering derives."""

from __future__ import annotations

import re

import kubernetes_validate
import pytest

from infra.accelerators import CATALOG
from infra.config.cluster_rules import DEFAULT_KUBERNETES_VERSION
from infra.contract import KUEUE_NAMESPACE_LABEL
from sim.operators.pods import operator_pods
from workloads import jobs
from workloads.platform import example_outputs_path, load_platform_outputs
from workloads.rayjob import pod_specs as ray_job_pod_specs
from workloads.render import render
from workloads.spec import SpecError, parse_spec
from workloads.stacks import load_stack, program_text, workload_stacks

EKS_KUBERNETES = f"{DEFAULT_KUBERNETES_VERSION}.0"  # the EKS version the platform pins
CRD_GROUPS = ("trainer.kubeflow.org/", "kubeflow.org/", "kueue.x-k8s.io/", "ray.io/")
STACKS = workload_stacks()
VOLUMES_SPEC = {
    "name": "big",
    "accelerator": "a100",
    "gpusPerNode": 8,
    "imageTag": "1",
    "queue": "research",
    "spotTolerant": False,
    "checkpoint": {"pvc": {"size": "500Gi", "storageClass": "gp3"}},
    "data": {"pvc": {"claim": "datasets"}, "path": "imdb/train.parquet"},
    "priority": "training-high",
}
ELASTIC_SPEC = {
    "name": "el",
    "accelerator": "t4",
    "nodes": 2,
    "imageTag": "1",
    "operator": "pytorchjob",
    "elastic": {"minNodes": 1, "maxNodes": 4},
}


def render_stack(name: str) -> list[dict]:
    stack = load_stack(name)
    platform = load_platform_outputs(example_outputs_path(stack.platform_stack))
    return render(stack.spec, platform, program_text=program_text(stack.spec))


def by_kind(objects: list[dict], kind: str) -> dict:
    (obj,) = [o for o in objects if o["kind"] == kind]
    return obj


def pod_templates(objects: list[dict]) -> dict[str, dict]:
    """Every pod spec the job objects hold, by where it is: a PyTorchJob's replicas, or a TrainJob's
    runtime pod and the TrainJob's runtime patch of it. The operators combine a runtime and its patch;
    each property below is checked where it is written, and nothing contradicts it elsewhere."""
    found = {}
    for obj in objects:
        if obj["kind"] == "PyTorchJob":
            for role, replica in obj["spec"]["pytorchReplicaSpecs"].items():
                found[f"PyTorchJob {role}"] = replica["template"]["spec"]
        elif obj["kind"] == "MPIJob":
            for role, replica in obj["spec"]["mpiReplicaSpecs"].items():
                found[f"MPIJob {role}"] = replica["template"]["spec"]
        elif obj["kind"] == "TrainingRuntime":
            for job in obj["spec"]["template"]["spec"]["replicatedJobs"]:
                found[f"TrainingRuntime {job['name']}"] = job["template"]["spec"]["template"]["spec"]
        elif obj["kind"] == "RayJob":
            for role, _, spec in ray_job_pod_specs(obj):
                if role != "submitter":  # runs `ray job submit`, no training (tests/workloads/test_rayjob.py)
                    found[f"RayJob {role}"] = spec
        elif obj["kind"] == "TrainJob":
            for patch in obj["spec"]["runtimePatches"]:
                for job in patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]:
                    found[f"TrainJob patch {job['name']}"] = job["template"]["spec"]["template"]["spec"]
    assert found, "no pod template among the objects"
    return found


def set_in_templates(objects: list[dict], key: str) -> list:
    """The values of `key` in the pod templates that set it (a runtime and its patch may both)."""
    return [spec[key] for spec in pod_templates(objects).values() if key in spec]


def training_containers(objects: list[dict]) -> dict[str, dict]:
    """Where each pod's training process gets its command, env and resources: a PyTorchJob's
    `pytorch` container, a TrainJob's `spec.trainer` (the operator puts it into the `node` container)."""
    found = {}
    for obj in objects:
        if obj["kind"] == "TrainJob":
            found["TrainJob trainer"] = obj["spec"]["trainer"]
        elif obj["kind"] == "RayJob":
            for role, _, spec in ray_job_pod_specs(obj):
                if role != "submitter":  # KubeRay runs `ray start` in the first container
                    container = spec["containers"][0]
                    found[f"RayJob {role}"] = {**container, "resourcesPerNode": container["resources"]}
        elif obj["kind"] == "PyTorchJob":
            for role, replica in obj["spec"]["pytorchReplicaSpecs"].items():
                (container,) = [
                    c for c in replica["template"]["spec"]["containers"] if c["name"] == "pytorch"
                ]
                found[f"PyTorchJob {role}"] = {**container, "resourcesPerNode": container["resources"]}
        elif obj["kind"] == "MPIJob":  # the ranks run in the workers; the launcher only runs mpirun
            (container,) = obj["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"]
            found["MPIJob Worker"] = {**container, "resourcesPerNode": container["resources"]}
    assert found, "no training container among the objects"
    return found


def test_the_example_workload_stacks_exist():
    assert {"dev-zimdb", "dev-zimdb-multinode", "prod-a100", "dev-amd", "dev-gpu-check"} <= set(STACKS)


@pytest.mark.parametrize("stack", STACKS)
def test_core_objects_validate_strictly_at_the_eks_version(stack):
    core = [o for o in render_stack(stack) if not o["apiVersion"].startswith(CRD_GROUPS)]
    assert {"Namespace", "ResourceQuota", "ServiceAccount"} <= {o["kind"] for o in core}
    for obj in core:
        kubernetes_validate.validate(obj, EKS_KUBERNETES, strict=True)


def test_custom_resources_validate_against_the_upstream_crds(crd_check, dev_platform, prod_platform):
    # One checker run for every stack (it parses all upstream CRDs, seconds each time), plus the shapes
    # no stack file uses: PVCs, a Kueue queue, a priority, an elastic PyTorchJob.
    extra = render(parse_spec(VOLUMES_SPEC), prod_platform) + render(parse_spec(ELASTIC_SPEC), dev_platform)
    objects = [o for s in STACKS for o in render_stack(s)] + extra
    custom = [o for o in objects if o["apiVersion"].startswith(CRD_GROUPS)]
    assert {"TrainJob", "TrainingRuntime", "PyTorchJob", "LocalQueue"} <= {o["kind"] for o in custom}
    code, output = crd_check(custom)
    assert code == 0, output
    assert f"{len(custom)} checked against upstream CRDs, 0 invalid" in output


@pytest.mark.parametrize("stack", [s for s in STACKS if load_stack(s).spec.operator == "trainjob"])
def test_trainjob_and_runtime_round_trip_through_the_kubeflow_trainer_models(stack):
    # Imported here: its generated models take a second to import, in every worker that collects this file.
    from kubeflow_trainer_api.models import TrainerV1alpha1TrainingRuntime, TrainerV1alpha1TrainJob

    models = {"TrainJob": TrainerV1alpha1TrainJob, "TrainingRuntime": TrainerV1alpha1TrainingRuntime}
    # The models drop fields they do not know: an unchanged round trip means every field is in the API.
    for obj in render_stack(stack):
        if obj["kind"] in models:
            assert models[obj["kind"]].from_dict(obj).to_dict() == obj


@pytest.mark.parametrize(
    ("stack", "accelerator"), [("dev-zimdb", "t4"), ("prod-a100", "a100"), ("dev-amd", "amd-v520")]
)
def test_scheduling_facts_match_the_accelerator_catalog(stack, accelerator):
    acc = CATALOG[accelerator]
    objects = render_stack(stack)
    # Selected and tolerated by exactly the catalog's labels and taint, wherever the job sets them.
    assert set_in_templates(objects, "nodeSelector") == [acc.node_labels]
    assert set_in_templates(objects, "tolerations") == [
        [{"key": acc.taint.key, "operator": "Equal", "value": acc.taint.value, "effect": acc.taint.effect}]
    ]
    (affinity,) = set_in_templates(objects, "affinity")
    (term,) = affinity["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    (expr,) = term["matchExpressions"]
    gpus = load_stack(stack).spec.gpus_per_node
    # Only instance types of the platform's pools for the accelerator, each with enough GPUs.
    platform = load_platform_outputs(example_outputs_path(load_stack(stack).platform_stack))
    offered = {
        t
        for p in platform.accelerator_pools.values()
        if p.accelerator == accelerator
        for t in p.instance_types
    }
    assert expr["key"] == "node.kubernetes.io/instance-type" and expr["operator"] == "In"
    assert expr["values"] and set(expr["values"]) <= offered
    assert all(acc.instance(t).gpus >= gpus for t in expr["values"])
    assert by_kind(objects, "TrainJob")["metadata"]["labels"]["mlops-eks.io/accelerator"] == accelerator


@pytest.mark.parametrize("stack", STACKS)
def test_every_training_pod_gets_the_specs_gpus_guaranteed_memory_and_the_platforms_region(stack):
    spec = load_stack(stack).spec
    platform = load_platform_outputs(example_outputs_path(load_stack(stack).platform_stack))
    (resource,) = {
        p.resource_name for p in platform.accelerator_pools.values() if p.accelerator == spec.accelerator
    }
    for where, container in training_containers(render_stack(stack)).items():
        requests, limits = container["resourcesPerNode"]["requests"], container["resourcesPerNode"]["limits"]
        assert requests[resource] == limits[resource] == str(spec.gpus_per_node), where
        # Memory is guaranteed (request = limit); CPU is not limited (throttling stalls data loading).
        assert requests["memory"] == limits.get("memory") and "cpu" in requests and "cpu" not in limits, where
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert env["AWS_REGION"] == platform.region, where
        assert env["HOME"].startswith("/tmp"), where  # the root filesystem is read-only


def test_a100_on_efa_requests_every_interface_and_sets_nccl_for_efa():
    trainer = by_kind(render_stack("prod-a100"), "TrainJob")["spec"]["trainer"]
    assert trainer["resourcesPerNode"]["limits"]["vpc.amazonaws.com/efa"] == str(
        CATALOG["a100"].instance("p4d.24xlarge").efa_interfaces
    )
    env = {e["name"]: e["value"] for e in trainer["env"]}
    assert env["FI_PROVIDER"] == "efa" and env["FI_EFA_USE_DEVICE_RDMA"] == "1"
    assert "NCCL_P2P_DISABLE" not in env  # NVLink on p4d
    # The trainer's fabric check: NCCL's INIT/NET report in a file per process, and the devices to expect.
    assert (env["NCCL_DEBUG"], env["NCCL_DEBUG_SUBSYS"]) == ("INFO", "INIT,NET")
    assert env["NCCL_DEBUG_FILE"].startswith("/tmp/") and "%p" in env["NCCL_DEBUG_FILE"]
    assert env["MLOPS_EKS_EFA_DEVICES"] == "4"


def test_the_h100_block_job_expects_every_efa_device_of_a_p5():
    trainer = by_kind(render_stack("prod-h100-block"), "TrainJob")["spec"]["trainer"]
    env = {e["name"]: e["value"] for e in trainer["env"]}
    assert (
        env["MLOPS_EKS_EFA_DEVICES"] == trainer["resourcesPerNode"]["limits"]["vpc.amazonaws.com/efa"] == "32"
    )


def test_t4_without_efa_disables_p2p_and_requests_no_efa():
    trainer = by_kind(render_stack("dev-zimdb"), "TrainJob")["spec"]["trainer"]
    env = {e["name"]: e["value"] for e in trainer["env"]}
    assert env["NCCL_P2P_DISABLE"] == "1" and env["NCCL_SOCKET_IFNAME"] == "^lo" and "FI_PROVIDER" not in env
    assert env["NCCL_DEBUG"] == "WARN" and "MLOPS_EKS_EFA_DEVICES" not in env  # nothing for the check
    assert "vpc.amazonaws.com/efa" not in trainer["resourcesPerNode"]["limits"]


def test_seed_shape_single_node_four_t4_runs_standalone_torchrun_through_the_trainer_launcher():
    trainer = by_kind(render_stack("dev-zimdb"), "TrainJob")["spec"]["trainer"]
    assert trainer["command"] == [
        "python",
        "-m",
        "trainer.launch",  # torchrun that passes the trainer's exit codes (2, 143) on to the pod
        "--standalone",
        "--nproc_per_node=4",
        "--shutdown-timeout=160",  # workers get 160 s for their SIGTERM checkpoint, inside the 180 s grace
        "-m",
        "trainer",
        "--config",
        "/etc/trainer/config.yaml",
    ]
    assert (trainer["numNodes"], trainer["numProcPerNode"]) == (1, 4)


def test_seed_shape_four_pods_one_t4_as_pytorchjob_with_exit_code_restarts():
    job = by_kind(render_stack("dev-zimdb-multinode"), "PyTorchJob")["spec"]
    replicas = job["pytorchReplicaSpecs"]
    assert (replicas["Master"]["replicas"], replicas["Worker"]["replicas"]) == (1, 3)
    assert {r["restartPolicy"] for r in replicas.values()} == {"ExitCode"}
    assert job["nprocPerNode"] == "1" and job["runPolicy"]["backoffLimit"] == 5
    container = replicas["Worker"]["template"]["spec"]["containers"][0]
    assert container["name"] == "pytorch"
    assert "--standalone" not in container["command"]  # the operator's PET_* variables drive rendezvous
    # The launcher keeps the restart budget beside the checkpoints (trainer/attempts.py).
    env = {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}
    assert env["MLOPS_EKS_RESTART_BUDGET"] == "5"
    assert env["MLOPS_EKS_ATTEMPTS"].startswith("s3://") and env["MLOPS_EKS_ATTEMPTS"].endswith(
        "/jobs/zimdb-multinode/checkpoints/attempts"
    )
    # Which creation of the job a pod belongs to: its template's annotation, the same on every replica.
    annotation = f"metadata.annotations['{jobs.CREATION_ANNOTATION}']"
    assert env["MLOPS_EKS_CREATION"] == {"fieldRef": {"fieldPath": annotation}}
    (identity,) = {
        r["template"]["metadata"]["annotations"][jobs.CREATION_ANNOTATION] for r in replicas.values()
    }
    assert re.fullmatch(r"[0-9a-f]{16}", identity)


def test_a_pytorchjob_whose_restarts_nothing_can_count_is_refused_or_runs_once():
    base = {"name": "j", "accelerator": "t4", "imageTag": "1", "operator": "pytorchjob", "nodes": 2}
    script = {"delivery": "configmap", "file": "trainer/gpu_check.py"}
    with pytest.raises(SpecError) as err:
        parse_spec(base | {"program": script, "restartBudget": 2})
    assert str(err.value).startswith("mlops-eks:job.restartBudget: 2 cannot be kept for this PyTorchJob")
    with pytest.raises(SpecError, match="this job has no checkpoint location; allowed: restartBudget 0"):
        parse_spec(base | {"checkpoint": None})
    once = parse_spec(base | {"program": script, "restartBudget": 0})
    platform = load_platform_outputs(example_outputs_path("dev"))
    job = by_kind(render(once, platform, program_text="print()"), "PyTorchJob")["spec"]
    assert {r["restartPolicy"] for r in job["pytorchReplicaSpecs"].values()} == {"Never"}


def test_seed_shape_configmap_mounted_script():
    objects = render_stack("dev-gpu-check")
    program = next(
        o for o in objects if o["kind"] == "ConfigMap" and o["metadata"]["name"] == "gpu-check-program"
    )
    assert "def main(" in program["data"]["gpu_check.py"]
    trainer = by_kind(objects, "TrainJob")["spec"]["trainer"]
    assert trainer["command"][:5] == [
        "torchrun",
        "--standalone",
        "--nproc_per_node=4",
        "--shutdown-timeout=160",
        "/opt/program/gpu_check.py",
    ]
    (volumes,) = set_in_templates(objects, "volumes")
    assert {"name": "program", "configMap": {"name": "gpu-check-program"}} in volumes
    mounts = [
        m
        for spec in pod_templates(objects).values()
        for c in spec["containers"]
        for m in c.get("volumeMounts", [])
    ]
    assert {"name": "program", "mountPath": "/opt/program", "readOnly": True} in mounts


@pytest.mark.parametrize("stack", STACKS)
def test_pods_are_non_root_read_only_and_carry_no_api_token(stack):
    objects = render_stack(stack)
    # Every template is secure on its own: whichever of a runtime and its patch wins a field, it is safe.
    for where, spec in pod_templates(objects).items():
        pod = spec.get("securityContext", {})
        assert pod.get("runAsNonRoot") is True and pod.get("runAsUser", 0) != 0, where
        assert pod.get("seccompProfile") == {"type": "RuntimeDefault"}, where
        for container in spec["containers"]:
            security = container.get("securityContext", {})
            assert security.get("allowPrivilegeEscalation") is False, where
            assert security.get("readOnlyRootFilesystem") is True and security.get("runAsNonRoot") is True, (
                where
            )
            assert security.get("capabilities") == {"drop": ["ALL"]}, where
        # Only an MPIJob's launcher has a token: its kubectl execs into the workers (workloads/mpijob.py).
        assert spec.get("automountServiceAccountToken") is not True or where == "MPIJob Launcher", where
    # The Spot notice is 2 minutes. A TrainJob's runtime holds the grace period (its patch may not: Kueue's
    # Trainer v2.2.1 types would drop the field), so it is judged on the pods as the operators create them.
    stack_platform = load_platform_outputs(example_outputs_path(load_stack(stack).platform_stack))
    for made in operator_pods(objects, stack_platform):
        assert made.spec["terminationGracePeriodSeconds"] > 120, f"{made.job}/{made.role}"
    assert by_kind(objects, "ServiceAccount")["automountServiceAccountToken"] is False
    training = {w: s for w, s in pod_templates(objects).items() if w != "MPIJob Launcher"}
    pod_volumes = [s["volumes"] for s in training.values() if "volumes" in s]
    assert pod_volumes
    for volumes in pod_volumes:  # NCCL's shared memory is RAM, not the 64 MiB container default
        assert {v["name"]: v["emptyDir"]["medium"] for v in volumes if v["name"] == "dshm"} == {
            "dshm": "Memory"
        }
    # An MPIJob's launcher gets the operator's init container, which only `baseline` admits.
    level = "baseline" if load_stack(stack).spec.operator == "mpijob" else "restricted"
    assert by_kind(objects, "Namespace")["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == level


@pytest.mark.parametrize("stack", STACKS)
def test_every_object_and_pod_carries_the_dashboard_labels(stack):
    spec = load_stack(stack).spec
    objects = render_stack(stack)
    for obj in objects:
        assert obj["metadata"]["labels"]["mlops-eks.io/job"] == spec.name
    assert (
        by_kind(objects, "ServiceAccount")["metadata"]["labels"]["mlops-eks.io/accelerator"]
        == spec.accelerator
    )


def test_trainjob_runtime_fails_fast_on_permanent_exit_codes_and_retries_the_rest():
    runtime = by_kind(render_stack("dev-zimdb"), "TrainingRuntime")["spec"]["template"]["spec"]
    assert runtime["failurePolicy"]["maxRestarts"] == 3
    job = runtime["replicatedJobs"][0]["template"]["spec"]
    fail = next(r for r in job["podFailurePolicy"]["rules"] if r["action"] == "FailJob")["onExitCodes"]
    assert 2 in fail["values"] and 143 not in fail["values"] and 137 not in fail["values"]
    assert job["template"]["spec"]["restartPolicy"] == "Never"


def test_trainer_config_points_at_the_job_prefix_in_the_platform_bucket():
    config_map = by_kind(render_stack("dev-zimdb"), "ConfigMap")
    text = config_map["data"]["config.yaml"]
    bucket = load_platform_outputs(example_outputs_path("dev")).bucket_name
    assert f"dir: s3://{bucket}/jobs/zimdb/checkpoints" in text
    assert "max_steps: 300" in text


def test_volumes_and_kueue_queue_render_as_asked(prod_platform):
    spec = parse_spec(VOLUMES_SPEC)
    objects = render(spec, prod_platform)
    pvc = by_kind(objects, "PersistentVolumeClaim")
    assert pvc["spec"] == {
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": "500Gi"}},
        "storageClassName": "gp3",
    }
    assert by_kind(objects, "LocalQueue")["spec"] == {"clusterQueue": "research"}
    assert by_kind(objects, "TrainJob")["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "research"
    runtime_pod = by_kind(objects, "TrainingRuntime")["spec"]["template"]["spec"]["replicatedJobs"][0]
    assert runtime_pod["template"]["spec"]["template"]["spec"]["priorityClassName"] == "training-high"
    (volumes,) = set_in_templates(objects, "volumes")
    claims = {v["name"]: v["persistentVolumeClaim"] for v in volumes if "persistentVolumeClaim" in v}
    assert claims == {
        "data": {"claimName": "datasets", "readOnly": True},
        "checkpoint": {"claimName": "big-checkpoint", "readOnly": False},
    }
    config = by_kind(objects, "ConfigMap")["data"]["config.yaml"]
    assert "source: /mnt/data/imdb/train.parquet" in config and "dir: /mnt/checkpoint" in config
    for obj in objects:
        if not obj["apiVersion"].startswith(CRD_GROUPS):
            kubernetes_validate.validate(obj, EKS_KUBERNETES, strict=True)


def test_elastic_pytorchjob_has_only_workers_and_an_elastic_policy(dev_platform):
    spec = parse_spec(ELASTIC_SPEC)
    job = by_kind(render(spec, dev_platform), "PyTorchJob")["spec"]
    assert list(job["pytorchReplicaSpecs"]) == ["Worker"]
    assert job["elasticPolicy"] == {
        "minReplicas": 1,
        "maxReplicas": 4,
        "rdzvBackend": "c10d",
        "maxRestarts": 3,
    }


@pytest.mark.parametrize("platform_stack", ["dev", "prod"])
def test_example_platform_outputs_are_what_the_platform_stack_files_export(platform_stack):
    # The pools `render` reads when no --platform-outputs is given are the real stack's, not invented ones.
    from infra.config.platform import PlatformConfig
    from infra.exports import accelerator_pools
    from infra.tools.synth import stack_config

    example = load_platform_outputs(example_outputs_path(platform_stack))
    config = PlatformConfig.from_mapping(stack_config(platform_stack))
    assert example.accelerator_pools == accelerator_pools(config)


def test_job_in_an_existing_team_namespace_creates_neither_namespace_nor_local_queue(prod_platform):
    spec = parse_spec({**VOLUMES_SPEC, "namespace": "ml-team", "createNamespace": False})
    objects = render(spec, prod_platform)
    assert not [o for o in objects if o["kind"] in ("Namespace", "LocalQueue")]
    assert {o["metadata"]["namespace"] for o in objects} == {"ml-team"}
    assert by_kind(objects, "TrainJob")["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "research"


def test_only_a_queued_jobs_namespace_is_managed_by_kueue():
    """Kueue's Fail webhooks apply where its managedJobsNamespaceSelector selects (infra/addons/training.py):
    a job without a queue keeps its restarts out of Kueue's reach."""
    queued = by_kind(render_stack("prod-a100"), "Namespace")["metadata"]["labels"]
    assert queued[KUEUE_NAMESPACE_LABEL] == "true"
    for stack in ("dev-zimdb", "dev-zimdb-ray", "dev-zimdb-multinode"):
        assert KUEUE_NAMESPACE_LABEL not in by_kind(render_stack(stack), "Namespace")["metadata"]["labels"]
