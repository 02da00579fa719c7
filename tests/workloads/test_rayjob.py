"""A job spec with `operator: rayjob` (workloads/rayjob.py): the RayJob against its CRD (schema and CEL
rules) and against what the KubeRay operator itself refuses, its pods against Pod Security `restricted`
and the scheduling simulation, its entry point against trainer.ray_train's own parser, and its retries."""

from __future__ import annotations

import copy
import shlex

import pytest
import yaml

from sim.kubernetes.cel import CrdRules
from sim.kubernetes.scheduling import simulate, unschedulable
from sim.operators.kuberay_validation import rayjob_problems
from sim.operators.pods import operator_pods
from trainer import ray_train
from workloads import pod, rayjob
from workloads.placement import place
from workloads.platform import example_outputs_path, load_platform_outputs
from workloads.pod_security import restricted_violations
from workloads.render import render
from workloads.spec import CONFIG_KEY, SpecError, parse_spec
from workloads.stacks import REPO, stack_file

BASE = "dev-zimdb"


def _platform(stack: str = "dev"):
    return load_platform_outputs(example_outputs_path(stack))


def _spec(**changes):
    raw = yaml.safe_load(stack_file(BASE).read_text())["config"][CONFIG_KEY]
    return parse_spec({**raw, "operator": "rayjob", **changes})


def _objects(**changes) -> list[dict]:
    spec = _spec(**changes)
    text = (REPO / spec.program.file).read_text() if spec.program.delivery == "configmap" else None
    return render(spec, _platform(), program_text=text)


def _job(**changes) -> dict:
    (job,) = [o for o in _objects(**changes) if o["kind"] == "RayJob"]
    return job


VARIANTS = {
    "one node": {},
    "two nodes": {"nodes": 2, "gpusPerNode": 2},
    "three nodes of one GPU": {"nodes": 3, "gpusPerNode": 1},
    "two processes a node": {"nodes": 2, "gpusPerNode": 4, "procsPerNode": 2},
    "a script from a ConfigMap": {
        "program": {"delivery": "configmap", "file": "trainer/gpu_check.py", "args": ["--expect-gpus", "4"]},
        "trainerConfig": {},
    },
}


@pytest.fixture(scope="module")
def rules() -> CrdRules:
    return CrdRules()


@pytest.mark.parametrize("variant", VARIANTS)
def test_the_rayjob_matches_its_crd(crd_check, variant):
    code, out = crd_check([_job(**VARIANTS[variant])])
    assert code == 0, out


@pytest.mark.parametrize("variant", VARIANTS)
def test_the_rayjob_passes_every_cel_rule_on_create_and_on_an_update(rules, variant):
    job = _job(**VARIANTS[variant])
    assert rules.schema_for(job) is not None
    assert [str(v) for v in rules.validate(job)] == []
    changed = copy.deepcopy(job)
    changed["spec"]["suspend"] = True
    assert [str(v) for v in rules.validate(changed, job)] == []


def test_the_cel_rules_do_refuse_a_bad_rayjob(rules):
    """The evaluator runs RayJob's rules: managedBy is immutable and limited to two values."""
    job = _job()
    job["spec"]["managedBy"] = "someone-else"
    assert ".spec.managedBy" in {v.path for v in rules.validate(job)}


@pytest.mark.parametrize("variant", VARIANTS)
def test_kuberay_would_run_it(variant):
    assert rayjob_problems(_job(**VARIANTS[variant])) == []


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda s: s.update(shutdownAfterJobFinishes=False), "cannot have TTLSecondsAfterFinished"),
        (lambda s: s["rayClusterSpec"]["workerGroupSpecs"][0].pop("minReplicas"), "must set both"),
        (lambda s: s.update(submissionMode="SidecarMode"), "SidecarMode doesn't support"),
        (lambda s: s.update(activeDeadlineSeconds=0), "activeDeadlineSeconds must be a positive"),
        (lambda s: s["rayClusterSpec"]["headGroupSpec"]["rayStartParams"].update(labels="a=b"), "labels"),
    ],
)
def test_kuberays_checks_refuse_what_kuberay_refuses(change, message):
    job = _job(nodes=2, gpusPerNode=2)
    change(job["spec"])
    assert any(message in p for p in rayjob_problems(job))


def _pod_specs(job: dict) -> dict[str, dict]:
    return {role: spec for role, _, spec in rayjob.pod_specs(job)}


@pytest.mark.parametrize("variant", VARIANTS)
def test_every_pod_of_the_rayjob_is_restricted(variant):
    job = _job(**VARIANTS[variant])
    specs = _pod_specs(job)
    assert {"head", "submitter"} <= set(specs)
    for role, spec in specs.items():
        assert restricted_violations(spec) == [], role


def test_the_init_container_kuberay_adds_to_workers_is_restricted_too():
    """KubeRay injects `wait-gcs-ready` into worker pods with the Ray container's securityContext
    (common/pod.go DefaultWorkerPodTemplate): restricted if the Ray container is. The worker pod as
    KubeRay creates it comes from sim/operators/pods.py."""
    job = _job(nodes=2, gpusPerNode=2)
    (worker,) = [p for p in operator_pods([job], _platform()) if p.role == rayjob.WORKER_GROUP]
    assert [c["name"] for c in worker.spec["initContainers"]] == ["wait-gcs-ready"]
    assert restricted_violations(worker.spec) == []


def test_head_and_workers_are_the_jobs_pods_on_the_jobs_pool():
    spec = _spec(nodes=2, gpusPerNode=2)
    placement = place(spec, _platform())
    job = _job(nodes=2, gpusPerNode=2)
    for role in ("head", rayjob.WORKER_GROUP):
        pod_spec = _pod_specs(job)[role]
        (container,) = pod_spec["containers"]
        assert container["resources"] == pod.resources(spec, placement)
        assert pod_spec["nodeSelector"] == pod.node_selector(placement)
        assert pod_spec["tolerations"] == pod.tolerations(placement)
        assert pod_spec["serviceAccountName"] == spec.name  # its Pod Identity role
        assert pod_spec["volumes"] == pod.volumes(spec, placement)
    cluster = job["spec"]["rayClusterSpec"]
    (group,) = cluster["workerGroupSpecs"]
    assert group["replicas"] == group["minReplicas"] == group["maxReplicas"] == spec.nodes - 1
    assert cluster["enableInTreeAutoscaling"] is False
    assert "workerGroupSpecs" not in _job()["spec"]["rayClusterSpec"]  # one node: the head alone


@pytest.mark.parametrize("variant", VARIANTS)
def test_the_entry_point_is_the_ray_train_driver_with_the_programs_command(variant):
    spec = _spec(**VARIANTS[variant])
    argv = shlex.split(_job(**VARIANTS[variant])["spec"]["entrypoint"])
    assert argv[:3] == ["python", "-m", "trainer.ray_train"]
    args = ray_train.parse_args(argv[3:])
    assert args.workers == spec.nodes * spec.processes_per_node
    assert args.gpus_per_worker * args.workers == spec.nodes * spec.gpus_per_node
    assert args.restart_budget == spec.restart_budget
    launcher = pod.command(spec)
    assert launcher[-len(args.program) :] == args.program  # what torchrun runs in the other kinds


def test_checkpoints_and_ray_trains_run_directory_are_under_the_jobs_s3_prefix():
    spec = _spec()
    args = ray_train.parse_args(shlex.split(_job()["spec"]["entrypoint"])[3:])
    prefix = f"s3://{_platform().bucket_name}/{pod.s3_prefix(spec)}/"
    assert args.storage_path.startswith(prefix)
    (config,) = [o for o in _objects() if o["kind"] == "ConfigMap"]
    assert yaml.safe_load(config["data"]["config.yaml"])["checkpoint"]["dir"].startswith(prefix)


def test_retries_follow_the_restart_budget_and_end_with_the_deadline():
    spec = _spec(restartBudget=5, maxRuntimeHours=2)
    job = _job(restartBudget=5, maxRuntimeHours=2)["spec"]
    assert job["backoffLimit"] == spec.restart_budget == 5
    assert job["activeDeadlineSeconds"] == 7200  # DeadlineExceeded: KubeRay never retries it
    assert job["shutdownAfterJobFinishes"] is True  # the GPU pods go when the job ends
    assert job["submissionMode"] == "K8sJobMode"


def test_every_pod_finds_a_node_source_and_the_gang_fits_the_pool():
    objects = _objects(nodes=2, gpusPerNode=4)
    verdicts = simulate(objects, _platform())
    assert unschedulable(verdicts) == []
    counts = {v.template.job.rsplit("/", 1)[-1]: v.template.count for v in verdicts}
    assert counts == {"head": 1, rayjob.WORKER_GROUP: 1, "submitter": 1}
    too_big = _objects(nodes=2, gpusPerNode=4)
    for role, _, spec in rayjob.pod_specs(next(o for o in too_big if o["kind"] == "RayJob")):
        if role == rayjob.WORKER_GROUP:
            spec["containers"][0]["resources"]["requests"]["nvidia.com/gpu"] = "8"
    assert any("nvidia.com/gpu 8 per pod" in line for line in unschedulable(simulate(too_big, _platform())))


def test_the_namespace_quota_holds_two_gangs_with_their_submitters():
    spec = _spec(nodes=2, gpusPerNode=4)
    (quota,) = [o for o in _objects(nodes=2, gpusPerNode=4) if o["kind"] == "ResourceQuota"]
    assert quota["spec"]["hard"]["pods"] == str(2 * (spec.nodes + 1))
    assert quota["spec"]["hard"]["requests.nvidia.com/gpu"] == str(2 * spec.nodes * spec.gpus_per_node)


def test_only_the_operator_reaches_the_head_and_only_on_the_dashboard():
    policies = [o for o in _objects() if o["kind"] == "NetworkPolicy"]
    (dashboard,) = [p for p in policies if p["metadata"]["name"].endswith("-ray-dashboard")]
    assert dashboard["spec"]["podSelector"]["matchLabels"][rayjob.NODE_TYPE_LABEL] == "head"
    ((rule,),) = [dashboard["spec"]["ingress"]]
    assert rule["ports"] == [{"protocol": "TCP", "port": 8265}]
    (peer,) = rule["from"]
    assert peer["namespaceSelector"]["matchLabels"] == {"kubernetes.io/metadata.name": "kuberay-system"}


def test_a_queue_is_refused_with_the_reason():
    with pytest.raises(SpecError, match=r"queue: 'ml-team'.*RayJob.*leave queue unset"):
        render(_spec(queue="ml-team"), _platform())


def test_a_platform_without_kuberay_refuses_the_job():
    platform = _platform()
    operators = {**platform.training_operators, "rayjob": False}
    platform = platform.model_copy(update={"training_operators": operators})
    with pytest.raises(SpecError, match=r"operator: 'rayjob' is not installed"):
        render(_spec(), platform)


def test_logs_and_status_find_the_rayjob_and_read_each_pods_only_container(tmp_path, capsys):
    """`python -m workloads logs|status` against a fake API server (tests/workloads/fake_kube.py): the head,
    worker and submitter pods each run one container, named differently, so no container is named."""
    from tests.workloads.fake_kube import FakeKube
    from workloads.__main__ import main

    kube = FakeKube()
    try:
        kube.kubeconfig(tmp_path)
        (job,) = [o for o in render_stack("dev-zimdb-ray") if o["kind"] == "RayJob"]
        ns = job["metadata"]["namespace"]
        kube.add(f"/apis/ray.io/v1/namespaces/{ns}/rayjobs", job | {"status": {"jobStatus": "RUNNING"}})
        labels = job["metadata"]["labels"]
        for name, container in (("head", rayjob.HEAD_CONTAINER), ("submitter", rayjob.SUBMITTER_CONTAINER)):
            kube.add(
                f"/api/v1/namespaces/{ns}/pods",
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {"name": f"zimdb-ray-{name}", "namespace": ns, "labels": labels},
                    "spec": {"containers": [{"name": container, "image": "x"}]},
                    "status": {"phase": "Running", "containerStatuses": []},
                },
            )
            kube.logs[f"{ns}/zimdb-ray-{name}"] = [f"hello from the {name}"]
        kubeconfig = ["--stack", "dev-zimdb-ray", "--kubeconfig", str(tmp_path / "kubeconfig")]
        assert main(["logs", *kubeconfig]) == 0
        out = capsys.readouterr().out
        assert "hello from the head" in out and "hello from the submitter" in out
        log_requests = [r for r in kube.requests if "/log" in r]
        assert log_requests and not any("container=" in r for r in log_requests)
        capsys.readouterr()
        failed = {"jobDeploymentStatus": "Failed", "reason": "AppFailed", "message": "Job entrypoint failed"}
        kube.add(f"/apis/ray.io/v1/namespaces/{ns}/rayjobs", job | {"status": failed})
        assert main(["status", *kubeconfig]) == 1
        out = capsys.readouterr().out
        assert out.splitlines()[0] == "zimdb-ray: failed" and "AppFailed: Job entrypoint failed" in out
    finally:
        kube.close()


def render_stack(stack: str) -> list[dict]:
    from workloads.stacks import load_stack, program_text

    loaded = load_stack(stack)
    return render(
        loaded.spec,
        _platform(loaded.platform_stack.rsplit("/", 1)[-1]),
        program_text=program_text(loaded.spec),
    )
