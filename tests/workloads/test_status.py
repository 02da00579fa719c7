"""`python -m workloads status` and `logs` against a fake API server (tests/workloads/fake_kube.py): the
real `kubernetes` client, real HTTP. Object shapes follow the CRDs in upstream/crds (TrainJob
status.conditions Complete/Failed, Kueue Workload conditions QuotaReserved/Admitted, karpenter.sh/v1
NodeClaim conditions Launched/Registered/Initialized/Ready) and core/v1 Pod containerStatuses."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import yaml
from ports import reserved_port

from tests.workloads.fake_kube import FakeKube
from workloads.__main__ import main
from workloads.platform import example_outputs_path, load_platform_outputs
from workloads.render import render
from workloads.stacks import load_stack, program_text

NS = "zimdb"
PODS = f"/api/v1/namespaces/{NS}/pods"
TRAINJOBS = f"/apis/trainer.kubeflow.org/v1alpha1/namespaces/{NS}/trainjobs"
WORKLOADS = f"/apis/kueue.x-k8s.io/v1beta2/namespaces/{NS}/workloads"
NODECLAIMS = "/apis/karpenter.sh/v1/nodeclaims"
EVENTS = f"/api/v1/namespaces/{NS}/events"
CONFIGMAPS = f"/api/v1/namespaces/{NS}/configmaps"


@pytest.fixture
def kube(tmp_path):
    fake = FakeKube()
    fake.kubeconfig(tmp_path)
    yield fake
    fake.close()


def rendered(stack: str) -> list[dict]:
    spec = load_stack(stack).spec
    facts = load_platform_outputs(example_outputs_path("dev"))
    return render(spec, facts, program_text=program_text(spec))


def deploy(kube: FakeKube, conditions: list[dict] | None = None) -> dict:
    """The TrainJob and its trainer ConfigMap as `pulumi up` creates them, with a status."""
    objects = rendered("dev-zimdb")
    job = copy.deepcopy(next(o for o in objects if o["kind"] == "TrainJob"))
    job["metadata"]["uid"] = "uid-1"
    job["status"] = {"conditions": conditions or []}
    kube.add(TRAINJOBS, job)
    kube.add(CONFIGMAPS, next(o for o in objects if o["kind"] == "ConfigMap"))
    return job


def cond(type_: str, status: str = "True", reason: str = "", message: str = "") -> dict:
    return {"type": type_, "status": status, "reason": reason, "message": message}


def make_pod(index: int, phase: str, *, statuses: list[dict] | None = None, conditions=None) -> dict:
    name = f"zimdb-node-0-{index}-abcde"
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": NS,
            "labels": {"mlops-eks.io/job": "zimdb", "batch.kubernetes.io/job-completion-index": str(index)},
        },
        "spec": {
            "containers": [
                {"name": "node", "image": "x", "ports": [{"name": "metrics", "containerPort": 9464}]}
            ]
        },
        "status": {"phase": phase, "conditions": conditions or [], "containerStatuses": statuses or []},
    }


def terminated(code: int, reason: str = "Error", message: str = "", *, last: bool = False) -> dict:
    state = {"terminated": {"exitCode": code, "reason": reason, "message": message}}
    return (
        {"name": "node", "lastState": state, "state": {"running": {}}}
        if last
        else {"name": "node", "state": state}
    )


def run(tmp_path, capsys, *args: str) -> tuple[int, str, str]:
    code = main([*args, "--stack", "dev-zimdb", "--kubeconfig", str(tmp_path / "kubeconfig")])
    out, err = capsys.readouterr()
    return code, out, err


def test_not_deployed_job_says_so_with_exit_3(kube, tmp_path, capsys):
    code, out, _ = run(tmp_path, capsys, "status")
    assert code == 3
    assert "zimdb: not deployed" in out
    assert any(r.startswith(f"{TRAINJOBS}/zimdb") for r in kube.requests)


def test_queued_in_kueue_shows_the_workloads_reason(kube, tmp_path, capsys):
    deploy(kube, [cond("Suspended", reason="Suspended")])
    kube.objects[TRAINJOBS]["zimdb"]["spec"]["suspend"] = True  # Kueue suspends it until admitted
    why = (
        "couldn't assign flavors to pod set node: insufficient quota for nvidia.com/gpu in flavor t4, "
        "4 more needed"
    )
    kube.add(
        WORKLOADS,
        {
            "metadata": {
                "name": "trainjob-zimdb-1a2b3",
                "ownerReferences": [{"kind": "TrainJob", "name": "zimdb", "uid": "uid-1"}],
            },
            "spec": {"queueName": "gpu"},
            "status": {"conditions": [cond("QuotaReserved", "False", "Pending", why)]},
        },
    )
    kube.add(
        WORKLOADS,
        {
            "metadata": {"name": "other", "ownerReferences": [{"name": "x", "uid": "u2"}]},
            "status": {"conditions": [cond("QuotaReserved", "False", "Pending", "not ours")]},
        },
    )
    code, out, _ = run(tmp_path, capsys, "status")
    assert code == 0
    assert out.splitlines()[0] == "zimdb: queued in Kueue (not admitted)"
    assert f"workload trainjob-zimdb-1a2b3 in queue gpu: {why}" in out
    assert "not ours" not in out


def test_pending_pod_names_the_nodeclaim_karpenter_launches(kube, tmp_path, capsys):
    deploy(kube)
    unschedulable = "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."
    kube.add(
        PODS,
        make_pod(0, "Pending", conditions=[cond("PodScheduled", "False", "Unschedulable", unschedulable)]),
    )
    kube.add(
        EVENTS,
        {
            "metadata": {"name": "e1"},
            "involvedObject": {"name": "zimdb-node-0-0-abcde"},
            "reason": "Nominated",
            "message": "Pod should schedule on: nodeclaim/gpu-t4-x7k2p",
        },
    )
    claim_labels = {
        "karpenter.sh/nodepool": "gpu-t4",
        "node.kubernetes.io/instance-type": "g4dn.12xlarge",
        "karpenter.sh/capacity-type": "spot",
    }
    kube.add(
        NODECLAIMS,
        {
            "metadata": {"name": "gpu-t4-x7k2p", "labels": claim_labels},
            "status": {
                "conditions": [cond("Launched"), cond("Registered", "Unknown"), cond("Ready", "Unknown")]
            },
        },
    )
    kube.add(
        NODECLAIMS,
        {
            "metadata": {"name": "system-abc", "labels": {}},
            "status": {"conditions": [cond("Launched"), cond("Ready", "False", "NotReady", "x")]},
        },
    )
    code, out, _ = run(tmp_path, capsys, "status")
    assert code == 0
    assert out.splitlines()[0] == "zimdb: waiting for a node"
    assert f"pod zimdb-node-0-0-abcde (node 0) pending: {unschedulable}" in out
    assert "nodeclaim gpu-t4-x7k2p (pool gpu-t4, g4dn.12xlarge, spot): Launched" in out
    assert "system-abc" not in out  # not the one nominated for this pod


def test_running_job_reports_step_and_loss_from_the_metrics_endpoint(kube, tmp_path, capsys):
    deploy(kube)
    kube.add(PODS, make_pod(0, "Running", conditions=[cond("PodScheduled")]))
    kube.proxied[f"{NS}/zimdb-node-0-0-abcde:9464/metrics"] = (
        "# HELP trainer_step optimizer steps done\n# TYPE trainer_step gauge\ntrainer_step 120.0\n"
        "trainer_total_steps 300.0\ntrainer_loss 0.4321\n"
    )
    code, out, _ = run(tmp_path, capsys, "status")
    assert code == 0
    assert out.splitlines() == ["zimdb: running", "  step 120/300 loss 0.4321 (metrics); 1/1 pods running"]


def test_running_job_falls_back_to_the_trainers_log_lines(kube, tmp_path, capsys):
    deploy(kube)
    kube.add(PODS, make_pod(0, "Running", statuses=[terminated(143, "Error", last=True)]))
    kube.logs[f"{NS}/zimdb-node-0-0-abcde"] = [
        "[trainer] train step 40/300 loss 0.91 lr 0.0003",
        "[trainer] train step 50/300 loss 0.87 lr 0.0003 eta 4m",
    ]
    code, out, _ = run(tmp_path, capsys, "status")
    assert code == 0
    assert "zimdb: running (restarted)" in out
    assert "step 50/300 loss 0.87 (log)" in out
    assert (
        "previous run: exit 143 (retryable: the job restarts from its last checkpoint): stopped by SIGTERM"
        in out
    )


def test_failed_job_names_the_permanent_exit_and_its_message(kube, tmp_path, capsys):
    deploy(kube, [cond("Failed", reason="JobSetFailed", message="jobset failed: permanent-exit-code")])
    message = "config: train.batch_size: 0 is not allowed (>= 1)"
    kube.add(PODS, make_pod(0, "Failed", statuses=[terminated(2, "Error", message)]))
    code, out, _ = run(tmp_path, capsys, "status")
    assert code == 1
    assert out.splitlines()[0] == "zimdb: failed"
    assert "JobSetFailed: jobset failed: permanent-exit-code" in out
    assert (
        f"exited: exit 2 (permanent): invalid configuration or data: permanent, the same pod would fail "
        f"the same way [Error; {message}]"
    ) in out


def test_succeeded_job_gives_the_deployed_output_location(kube, tmp_path, capsys):
    deploy(kube, [cond("Complete", reason="JobSetCompleted", message="jobset completed")])
    config = yaml.safe_load(kube.objects[CONFIGMAPS]["zimdb-trainer-config"]["data"]["config.yaml"])
    code, out, _ = run(tmp_path, capsys, "status")
    assert code == 0
    assert out.splitlines()[0] == f"zimdb: succeeded; output in {config['output']['dir']}"
    assert config["output"]["dir"].startswith("s3://") and config["output"]["dir"].endswith(
        "/jobs/zimdb/output"
    )


def test_logs_prefix_every_line_with_its_node_rank(kube, tmp_path, capsys):
    deploy(kube)
    for i in (1, 0):
        kube.add(PODS, make_pod(i, "Running"))
        kube.logs[f"{NS}/zimdb-node-0-{i}-abcde"] = [f"hello from node {i}", f"bye from node {i}"]
    code, out, _ = run(tmp_path, capsys, "logs")
    assert code == 0
    assert out.splitlines() == [
        "[node 0 zimdb-node-0-0-abcde] hello from node 0",
        "[node 0 zimdb-node-0-0-abcde] bye from node 0",
        "[node 1 zimdb-node-0-1-abcde] hello from node 1",
        "[node 1 zimdb-node-0-1-abcde] bye from node 1",
    ]


def test_logs_follow_streams_all_nodes_until_they_end(kube, tmp_path, capsys):
    deploy(kube)
    kube.follow_delay = 0.05
    for i in (0, 1):
        kube.add(PODS, make_pod(i, "Running"))
        kube.logs[f"{NS}/zimdb-node-0-{i}-abcde"] = [f"line {n} of node {i}" for n in range(5)]
    code, out, _ = run(tmp_path, capsys, "logs", "--follow")
    assert code == 0
    lines = out.splitlines()
    assert sorted(lines) == sorted(
        f"[node {i} zimdb-node-0-{i}-abcde] line {n} of node {i}" for i in (0, 1) for n in range(5)
    )
    for i in (0, 1):  # each node's lines in order, the two streams interleaved as they came
        mine = [line for line in lines if line.startswith(f"[node {i} ")]
        assert mine == sorted(mine)
    assert sorted(kube.streamed) == [f"{NS}/zimdb-node-0-0-abcde", f"{NS}/zimdb-node-0-1-abcde"]


def test_unreachable_api_server_exits_200_and_names_it(tmp_path, capsys):
    port = reserved_port()  # nothing listens there
    fake = FakeKube()
    fake.url = f"http://127.0.0.1:{port}"
    fake.kubeconfig(tmp_path)
    fake.close()
    code, _, err = run(tmp_path, capsys, "status")
    assert code == 200
    assert f"error: cannot reach http://127.0.0.1:{port}" in err


def test_missing_kubeconfig_is_a_config_error(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("KUBECONFIG", raising=False)
    code = main(["status", "--stack", "dev-zimdb", "--kubeconfig", str(tmp_path / "absent")])
    assert code == 2
    assert "no kubeconfig at" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("content", "says"),
    [(None, "cannot read it"), ("{not json", "not valid JSON"), ("[]", "got a JSON list, not an object")],
)
def test_unreadable_platform_outputs_exit_2_naming_the_file(tmp_path, capsys, monkeypatch, content, says):
    monkeypatch.delenv("KUBECONFIG", raising=False)
    outputs = tmp_path / "outputs.json"
    if content is not None:
        outputs.write_text(content)
    code = main(["status", "--stack", "dev-zimdb", "--platform-outputs", str(outputs)])
    assert code == 2
    assert f"error: {outputs}: {says}" in capsys.readouterr().err


def test_kubeconfig_from_platform_outputs(kube, tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("KUBECONFIG", raising=False)
    outputs = tmp_path / "outputs.json"
    outputs.write_text(json.dumps({"kubeconfig": (tmp_path / "kubeconfig").read_text()}))
    deploy(kube, [cond("Complete")])
    code = main(["status", "--stack", "dev-zimdb", "--platform-outputs", str(outputs)])
    assert code == 0
    assert capsys.readouterr().out.startswith("zimdb: succeeded")


def test_every_trainer_exit_code_has_a_meaning():
    from trainer import faults
    from workloads.status import EXIT_MEANINGS

    codes = [
        faults.INVALID,
        faults.STOPPED,
        faults.STORAGE_UNAVAILABLE,
        faults.NO_GPU,
        faults.PEER_LOST,
        faults.RENDEZVOUS_TIMEOUT,
    ]
    assert all(EXIT_MEANINGS.get(code) for code in codes), EXIT_MEANINGS


def test_quota_reserved_but_not_admitted_shows_the_admission_check(kube, tmp_path, capsys):
    deploy(kube)
    waiting = "The workload has not all checks ready: capacity: Pending"
    kube.add(
        WORKLOADS,
        {
            "metadata": {"name": "trainjob-zimdb-1", "ownerReferences": [{"name": "zimdb", "uid": "uid-1"}]},
            "spec": {"queueName": "gpu"},
            "status": {
                "conditions": [
                    cond("QuotaReserved", "True", "QuotaReserved", "Quota reserved in gpu"),
                    cond("Admitted", "False", "NoChecks", waiting),
                ]
            },
        },
    )
    code, out, _ = run(tmp_path, capsys, "status")
    assert code == 0
    assert f"workload trainjob-zimdb-1 in queue gpu: {waiting}" in out


@pytest.mark.parametrize(
    ("answer", "code", "says"), [(401, 2, "refused the request (401"), (503, 200, "answered 503")]
)
def test_refused_or_failing_api_server(kube, tmp_path, capsys, answer, code, says):
    kube.answer_all = answer
    exit_code, _, err = run(tmp_path, capsys, "status")
    assert exit_code == code
    assert says in err


def test_a_job_its_operator_could_not_give_pods_says_why_from_its_events(kube, tmp_path, capsys):
    """Kubeflow Trainer records a refused JobSet only as a warning event on the TrainJob (pkg/controller/
    trainjob_controller.go, reason TrainJobResourcesCreationFailed): `pulumi up` succeeded, no pod exists."""
    deploy(kube)
    refusal = (
        "TrainJob resources reconciliation failed: admission webhook "
        '"validate-jobset-x-k8s-io-v1alpha2-jobset.x-k8s.io" denied the request: '
        "JobSet.jobset.x-k8s.io \"zimdb\" is invalid: invalid failure policy rule name 'permanent-exit-code'"
    )
    for name, count, when in (("e1", 3, "2026-11-01T10:00:00Z"), ("e2", 7, "2026-11-01T10:05:00Z")):
        kube.add(
            EVENTS,
            {
                "metadata": {"name": name},
                "involvedObject": {"kind": "TrainJob", "name": "zimdb"},
                "type": "Warning",
                "reason": "TrainJobResourcesCreationFailed",
                "message": refusal,
                "count": count,
                "lastTimestamp": when,
            },
        )
    kube.add(
        EVENTS,
        {
            "metadata": {"name": "e3"},
            "involvedObject": {"kind": "TrainJob", "name": "zimdb"},
            "type": "Normal",
            "reason": "Created",
            "message": "not a warning",
        },
    )
    code, out, _ = run(tmp_path, capsys, "status")
    assert code == 0
    assert out.splitlines()[0] == "zimdb: created, no pods: its operator could not create them"
    assert f"event TrainJobResourcesCreationFailed (x7): {refusal}" in out
    assert "not a warning" not in out and "(x3)" not in out


REPO_ROOT = Path(__file__).resolve().parents[2]
NODEPOOLS = "/apis/karpenter.sh/v1/nodepools"
NODE_CLASSES = "/apis/karpenter.k8s.aws/v1/ec2nodeclasses"
# Karpenter core's event (scheduler.go: `incompatible with nodepool %q, daemonset overhead=%s, %w`) when the
# reserved-only pool has no offering to launch.
NO_OFFERING = (
    'Failed to schedule pod, incompatible with nodepool "gpu-h100-block", daemonset overhead={"cpu":"1",'
    '"memory":"2Gi","pods":"9"}, no instance type has the required offering'
)


def _reserved_pool(kube: FakeKube, reservations: list[dict]) -> None:
    """The prod platform's h100-block NodePool and its EC2NodeClass, with the reservations Karpenter's
    status reports (active ones only)."""
    kube.add(
        NODEPOOLS,
        {
            "metadata": {"name": "gpu-h100-block"},
            "spec": {"template": {"spec": {"nodeClassRef": {"name": "efa-h100-block"}}}},
        },
    )
    kube.add(
        NODE_CLASSES,
        {
            "metadata": {"name": "efa-h100-block"},
            "spec": {"capacityReservationSelectorTerms": [{"id": "cr-0123456789abcdef0"}]},
            "status": {"capacityReservations": reservations},
        },
    )


def _pending_on_the_block(kube: FakeKube) -> None:
    deploy(kube)
    why = "0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector."
    kube.add(PODS, make_pod(0, "Pending", conditions=[cond("PodScheduled", "False", "Unschedulable", why)]))
    kube.add(
        EVENTS,
        {
            "metadata": {"name": "e2"},
            "involvedObject": {"name": "zimdb-node-0-0-abcde"},
            "type": "Warning",
            "reason": "FailedScheduling",
            "message": NO_OFFERING,
        },
    )


def test_a_job_pending_on_a_reservation_that_is_not_active_says_so(kube, tmp_path, capsys):
    _pending_on_the_block(kube)
    _reserved_pool(kube, [])
    code, out, _ = run(tmp_path, capsys, "status")
    assert code == 0 and out.splitlines()[0] == "zimdb: waiting for a node"
    assert (
        "nodepool gpu-h100-block (no instance type has the required offering): it launches into capacity "
        "reservations (cr-0123456789abcdef0) and Karpenter sees none active: the reservation has not started "
        "yet, or has ended"
    ) in out


def test_a_job_pending_on_an_expiring_block_says_karpenter_drains_it(kube, tmp_path, capsys):
    _pending_on_the_block(kube)
    block = {
        "id": "cr-0123456789abcdef0",
        "reservationType": "capacity-block",
        "instanceType": "p5.48xlarge",
        "availabilityZone": "us-east-1a",
        "instanceMatchCriteria": "targeted",
        "ownerID": "210987654321",
        "endTime": "2026-12-02T11:00:00Z",
        "state": "expiring",
    }
    _reserved_pool(kube, [block])
    code, out, _ = run(tmp_path, capsys, "status")
    assert code == 0
    assert (
        "reservation cr-0123456789abcdef0 (capacity-block, p5.48xlarge, us-east-1a): expiring, ends "
        "2026-12-02T11:00:00Z; in its last 40 minutes Karpenter launches no node into it"
    ) in out


def test_the_reservation_status_fields_are_the_ec2nodeclass_crds():
    """The fields read above exist in Karpenter 1.14's EC2NodeClass CRD (status.capacityReservations)."""
    crd = yaml.safe_load((REPO_ROOT / "upstream/crds/karpenter.k8s.aws_ec2nodeclasses.yaml").read_text())
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    item = schema["properties"]["status"]["properties"]["capacityReservations"]["items"]["properties"]
    assert {"id", "reservationType", "instanceType", "availabilityZone", "endTime", "state"} <= set(item)
    assert item["state"]["enum"] == ["active", "expiring"]
