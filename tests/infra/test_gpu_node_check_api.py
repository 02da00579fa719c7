"""The startup GPU check's script against a fake API server (its `_send`, the one function that reaches the
network): it removes the taint of a node that passes, deletes the NodeClaim of a Karpenter node that keeps
failing, leaves a managed group's node tainted, and stops at an admission policy's refusal, printing it."""

from __future__ import annotations

import copy
import io
import json
import urllib.error
import urllib.request

import pytest

from infra.addons import gpu_node_check_script as script

NODE = "ip-10-0-1-23.ec2.internal"
KEY = "mlops-eks.io/gpu-check"
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}
STARTUP = {"key": KEY, "value": "pending", "effect": "NoSchedule"}
CLAIM = {"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim", "name": "gpu-t4-x7k2p", "uid": "1"}
# What the API server answers when a ValidatingAdmissionPolicy with `reason: Forbidden` refuses.
REFUSAL = {
    "kind": "Status",
    "status": "Failure",
    "reason": "Forbidden",
    "code": 403,
    "message": "ValidatingAdmissionPolicy 'gpu-node-check' denied request: the GPU node check may only "
    f"remove the taint {KEY}",
}
CONFLICT = {"kind": "Status", "status": "Failure", "reason": "Invalid", "code": 422, "message": "test failed"}


class Idle(Exception):
    """Stands for the endless sleep the script ends in."""


class FakeApiServer:
    def __init__(self, node: dict, refuse: dict[str, list[dict]] | None = None):
        self.node = node
        self.requests: list[tuple[str, str]] = []
        # "PATCH-remove" / "DELETE" -> Status bodies answered, in turn, before that request succeeds.
        self.refuse = refuse or {}

    def send(self, request: urllib.request.Request) -> bytes:
        method, path = request.get_method(), request.full_url.split(":443", 1)[1]
        self.requests.append((method, path))
        patch = json.loads(request.data) if request.data else []
        kind = "PATCH-remove" if any(op["op"] == "remove" for op in patch) else method
        if self.refuse.get(kind):
            status = self.refuse[kind].pop(0)
            fp = io.BytesIO(json.dumps(status).encode())
            raise urllib.error.HTTPError(request.full_url, status["code"], status["reason"], None, fp)  # type: ignore[arg-type]
        if kind == "PATCH-remove":
            index = int(patch[1]["path"].rsplit("/", 1)[1])
            assert self.node["spec"]["taints"][index] == patch[0]["value"]  # the guarding `test`
            del self.node["spec"]["taints"][index]
        return json.dumps(self.node).encode() if method == "PATCH" else b'{"kind": "NodeClaim"}'


def _node(*, owners: list[dict]) -> dict:
    return {
        "metadata": {"name": NODE, "ownerReferences": owners},
        "spec": {"taints": [GPU_TAINT, STARTUP]},
    }


@pytest.fixture
def cluster(monkeypatch, tmp_path):
    """Installs a fake API server; returns a function taking the node, whether the GPUs pass (or the
    verdicts of successive checks) and the refusals, which runs the script's main and returns (its exit
    code or "idle", the server)."""
    (tmp_path / "token").write_text("token\n")
    monkeypatch.setattr(script, "SERVICE_ACCOUNT", str(tmp_path))
    for name, value in {
        "KUBERNETES_SERVICE_HOST": "10.100.0.1",
        "KUBERNETES_SERVICE_PORT": "443",
        "NODE_NAME": NODE,
        "STARTUP_TAINT_KEY": KEY,
        "EXPECTED_GPUS": "4",
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(script.time, "sleep", lambda seconds: None)

    def idle() -> None:
        raise Idle

    monkeypatch.setattr(script, "idle", idle)

    def run(
        node: dict, *, healthy: bool | list[bool], refuse: dict | None = None
    ) -> tuple[object, FakeApiServer]:
        server = FakeApiServer(copy.deepcopy(node), refuse)
        monkeypatch.setattr(script, "_send", server.send)
        verdicts = healthy if isinstance(healthy, list) else [True] if healthy else [False] * script.ATTEMPTS
        checks = []

        def check_gpus(expected: int) -> str:
            checks.append(expected)
            if not verdicts[len(checks) - 1]:
                raise script.CheckFailed("3 GPUs visible, the instance type has 4")
            return "4 GPUs healthy"

        monkeypatch.setattr(script, "check_gpus", check_gpus)
        try:
            result: object = script.main()
        except Idle:
            result = "idle"
        assert checks == [4] * len(verdicts)
        return result, server

    return run


def test_a_node_that_passes_loses_the_startup_taint_and_keeps_its_claim(cluster):
    result, server = cluster(_node(owners=[CLAIM]), healthy=True)
    assert result == "idle"
    assert server.node["spec"]["taints"] == [GPU_TAINT]
    assert [m for m, _ in server.requests] == ["PATCH", "PATCH"]


def test_a_check_that_fails_once_is_tried_again_before_the_node_is_given_up(cluster):
    result, server = cluster(_node(owners=[CLAIM]), healthy=[False, True])
    assert result == "idle"
    assert server.node["spec"]["taints"] == [GPU_TAINT]
    assert "DELETE" not in [m for m, _ in server.requests]


def test_a_karpenter_node_that_keeps_failing_deletes_its_own_nodeclaim(cluster, capsys):
    result, server = cluster(_node(owners=[CLAIM]), healthy=False)
    assert result == "idle"
    assert server.requests[-1] == ("DELETE", f"/apis/karpenter.sh/v1/nodeclaims/{CLAIM['name']}")
    assert server.node["spec"]["taints"] == [GPU_TAINT, STARTUP]
    assert f"failed ({script.ATTEMPTS} of {script.ATTEMPTS})" in capsys.readouterr().err


def test_a_managed_groups_node_that_fails_keeps_its_taint_and_exits_1(cluster, capsys):
    owners = [{"apiVersion": "v1", "kind": "Node", "name": "x", "uid": "2"}]  # no NodeClaim among them
    result, server = cluster(_node(owners=owners), healthy=False)
    assert result == 1
    assert [m for m, _ in server.requests] == ["PATCH"]  # the read; nothing deleted
    assert server.node["spec"]["taints"] == [GPU_TAINT, STARTUP]
    assert "replace it" in capsys.readouterr().err


def test_a_refused_taint_removal_is_not_retried_and_its_answer_is_printed(cluster, capsys):
    result, server = cluster(_node(owners=[CLAIM]), healthy=True, refuse={"PATCH-remove": [REFUSAL] * 5})
    assert result == 1
    assert len(server.requests) == 2  # one read, one refused removal
    assert REFUSAL["message"] in capsys.readouterr().err


def test_a_refused_nodeclaim_deletion_is_printed(cluster, capsys):
    refusal = {**REFUSAL, "message": "denied: may delete only the NodeClaim of the node its own pod runs on"}
    result, _ = cluster(_node(owners=[CLAIM]), healthy=False, refuse={"DELETE": [refusal]})
    assert result == 1
    assert refusal["message"] in capsys.readouterr().err


def test_a_removal_that_lost_a_race_reads_again_and_retries(cluster):
    result, server = cluster(_node(owners=[CLAIM]), healthy=True, refuse={"PATCH-remove": [CONFLICT]})
    assert result == "idle"
    assert server.node["spec"]["taints"] == [GPU_TAINT]
    assert len(server.requests) == 4  # read, conflict, read, removal
