"""The startup GPU check: its objects are valid and as narrow as they claim, its admission policies allow
exactly the removal of the startup taint from the check's own node and the deletion of that node's
NodeClaim, and its script decides and patches right (its requests: test_gpu_node_check_api.py)."""

from __future__ import annotations

import copy
import re
from pathlib import Path

import celpy
import kubernetes_validate
import pytest

from infra.accelerators import CATALOG
from infra.addons import gpu_node_check as check
from infra.addons import gpu_node_check_script as script
from infra.config.cluster_rules import DEFAULT_KUBERNETES_VERSION
from infra.contract import taint_spec
from sim.kubernetes.scheduling import tolerated
from workloads.pod_security import restricted_violations

NAMESPACE = "gpu-system"
CLAIM_POLICY = f"{check.NAME}-nodeclaim"
OBJECTS = check.objects(NAMESPACE, ["g4dn.xlarge", "g4dn.12xlarge", "p4d.24xlarge", "g4ad.xlarge"])
NODE = "ip-10-0-1-23.ec2.internal"
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}
STARTUP = taint_spec(check.STARTUP_TAINT)


def of_kind(kind: str) -> list[dict]:
    return [o for o in OBJECTS if o["kind"] == kind]


@pytest.mark.parametrize("obj", OBJECTS, ids=lambda o: f"{o['kind']}/{o['metadata']['name']}")
def test_every_object_is_valid_at_the_clusters_kubernetes_version(obj):
    kubernetes_validate.validate(obj, f"{DEFAULT_KUBERNETES_VERSION}.0", strict=True)


def test_one_daemon_set_per_vendor_and_gpu_count():
    daemon_sets = {d["metadata"]["name"]: d for d in of_kind("DaemonSet")}
    assert set(daemon_sets) == {
        "gpu-node-check-1gpu",
        "gpu-node-check-4gpu",
        "gpu-node-check-8gpu",
        "gpu-node-check-amd-1gpu",
    }
    four = daemon_sets["gpu-node-check-4gpu"]["spec"]["template"]["spec"]
    env = {e["name"]: e.get("value") for e in four["containers"][0]["env"]}
    assert env["EXPECTED_GPUS"] == "4" and env["NVIDIA_VISIBLE_DEVICES"] == "all"
    term = four["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert term["nodeSelectorTerms"][0]["matchExpressions"][0]["values"] == ["g4dn.12xlarge"]
    assert check.objects(NAMESPACE, ["m6i.large"]) == []


def test_the_nvidia_check_runs_on_tainted_nvidia_nodes_and_requests_no_gpu():
    from infra.contract import PoolTaint, Toleration

    nvidia_taints = [taint_spec(a.taint) for a in CATALOG.values() if a.vendor == "nvidia"]
    for ds in of_kind("DaemonSet"):
        if "amd" in ds["metadata"]["name"]:
            continue  # test_gpu_node_check_amd.py
        spec = ds["spec"]["template"]["spec"]
        tolerations = [Toleration.model_validate(t) for t in spec["tolerations"]]
        for taint in (STARTUP, GPU_TAINT, *nvidia_taints):
            assert tolerated(tolerations, PoolTaint.model_validate(taint)), taint
        assert not tolerated(tolerations, PoolTaint.model_validate(taint_spec(CATALOG["amd-v520"].taint)))
        nvidia = [a.node_labels for a in CATALOG.values() if a.vendor == "nvidia"]
        assert nvidia and all(spec["nodeSelector"].items() <= labels.items() for labels in nvidia)
        # Before the device plugin runs (it does not tolerate the startup taint) nothing is allocatable.
        assert "nvidia.com/gpu" not in str(spec["containers"][0]["resources"])


def test_the_check_pods_pass_the_restricted_pod_security_level():
    for ds in of_kind("DaemonSet"):
        assert restricted_violations(ds["spec"]["template"]["spec"]) == []


def test_pulumi_does_not_wait_for_the_check_to_pass_on_every_node():
    # A node failing its check keeps its DaemonSet unready: `pulumi up` must not wait for the rollout.
    for ds in of_kind("DaemonSet"):
        assert ds["metadata"]["annotations"] == {"pulumi.com/skipAwait": "true"}


def test_rbac_grants_patch_on_nodes_delete_on_nodeclaims_and_nothing_else():
    (role,) = of_kind("ClusterRole")
    assert role["rules"] == [
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["patch"]},
        {"apiGroups": ["karpenter.sh"], "resources": ["nodeclaims"], "verbs": ["delete"]},
    ]
    (binding,) = of_kind("ClusterRoleBinding")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": check.NAME, "namespace": NAMESPACE}]
    assert not of_kind("Role") and not of_kind("RoleBinding")


def test_the_script_in_the_config_map_is_the_module_the_tests_exercise():
    (config_map,) = of_kind("ConfigMap")
    assert config_map["data"][check.SCRIPT_KEY] == Path(script.__file__).read_text()
    ds = of_kind("DaemonSet")[0]["spec"]["template"]["spec"]
    assert ds["containers"][0]["command"] == ["python", f"/check/{check.SCRIPT_KEY}"]


def test_the_check_image_is_the_python_base_the_cpu_image_is_built_from():
    dockerfile = (Path(__file__).parents[2] / "docker" / "cpu" / "Dockerfile").read_text()
    base = re.search(r"^ARG BASE_IMAGE=(\S+)$", dockerfile, re.M)
    assert base and base.group(1) == check.CHECK_IMAGE
    assert "@sha256:" in check.CHECK_IMAGE


# The admission policy, evaluated with cel-python the way the API server runs it on an UPDATE.
def _node(taints: list[dict], **labels: str) -> dict:
    return {
        "metadata": {"name": NODE, "labels": {"kubernetes.io/hostname": NODE, **labels}},
        "spec": {"providerID": "aws:///us-east-1a/i-0abc", "taints": taints},
    }


def _policy(name: str) -> dict:
    (policy,) = [p for p in of_kind("ValidatingAdmissionPolicy") if p["metadata"]["name"] == name]
    return policy


def _admit(
    old: dict,
    new: dict | None,
    *,
    user: str | None = None,
    node_name: str | None = NODE,
    policy_name: str = check.NAME,
) -> list[str]:
    """The messages of the policy's failed validations; ["not matched"] when its match condition excludes
    the user. `new` is None on a DELETE (the API server binds `object` to null, `oldObject` to the stored
    object)."""
    policy = _policy(policy_name)
    env = celpy.Environment()
    extra = {check.NODE_NAME_EXTRA: [node_name]} if node_name else {}
    request = {"userInfo": {"username": user or check.service_account_user(NAMESPACE), "extra": extra}}
    activation = {
        k: celpy.json_to_cel(v) for k, v in {"object": new, "oldObject": old, "request": request}.items()
    }

    def holds(expression: str) -> bool:
        return bool(env.program(env.compile(expression)).evaluate(activation))

    if not all(holds(c["expression"]) for c in policy["spec"]["matchConditions"]):
        return ["not matched"]
    return [v["message"] for v in policy["spec"]["validations"] if not holds(v["expression"])]


def test_the_policies_bind_every_node_update_and_nodeclaim_deletion_by_the_check():
    rules = {
        name: _policy(name)["spec"]["matchConstraints"]["resourceRules"]
        for name in (check.NAME, CLAIM_POLICY)
    }
    assert rules[check.NAME][0]["resources"] == ["nodes"]
    assert rules[check.NAME][0]["operations"] == ["UPDATE"]
    claims = rules[CLAIM_POLICY][0]
    assert (claims["apiGroups"], claims["resources"], claims["operations"]) == (
        ["karpenter.sh"],
        ["nodeclaims"],
        ["DELETE"],
    )
    bindings = {b["spec"]["policyName"]: b["spec"] for b in of_kind("ValidatingAdmissionPolicyBinding")}
    assert set(bindings) == set(rules)
    assert all(b["validationActions"] == ["Deny"] for b in bindings.values())


def test_a_refusal_is_forbidden_not_invalid():
    # 422 (the default reason, Invalid) is what the script retries: a failed JSON patch `test`.
    validations = [v for p in of_kind("ValidatingAdmissionPolicy") for v in p["spec"]["validations"]]
    assert validations and all(v["reason"] == "Forbidden" for v in validations)


def test_the_policy_allows_removing_the_startup_taint_from_the_checks_own_node():
    old = _node([GPU_TAINT, STARTUP])
    assert _admit(old, _node([GPU_TAINT])) == []
    assert _admit(old, copy.deepcopy(old)) == []  # the read: a patch that changes nothing


@pytest.mark.parametrize(
    ("new", "node_name", "refused"),
    [
        (_node([GPU_TAINT]), "ip-10-0-9-9.ec2.internal", "only the node its own pod runs on"),
        (_node([GPU_TAINT]), None, "only the node its own pod runs on"),
        (_node([STARTUP]), NODE, "may only remove the taint"),
        (_node([]), NODE, "may only remove the taint"),
        (
            _node([GPU_TAINT, STARTUP, {"key": "x", "value": "y", "effect": "NoSchedule"}]),
            NODE,
            "only remove",
        ),
        (_node([GPU_TAINT], **{"mlops-eks.io/accelerator": "a100"}), NODE, "nothing but the node's taints"),
    ],
    ids=["another-node", "token-without-node", "gpu-taint", "every-taint", "adds-a-taint", "relabels"],
)
def test_the_policy_refuses_anything_else(new, node_name, refused):
    messages = _admit(_node([GPU_TAINT, STARTUP]), new, node_name=node_name)
    assert any(refused in m for m in messages), messages


def test_the_policy_leaves_other_users_alone():
    old = _node([GPU_TAINT, STARTUP])
    assert _admit(old, _node([]), user="system:node:" + NODE) == ["not matched"]


def _claim(node_name: str | None) -> dict:
    claim = {"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim", "metadata": {"name": "gpu-t4-x7k2p"}}
    if node_name:
        claim["status"] = {"nodeName": node_name, "providerID": "aws:///us-east-1a/i-0abc"}
    return claim


def test_the_check_may_delete_the_nodeclaim_of_its_own_node():
    assert _admit(_claim(NODE), None, policy_name=CLAIM_POLICY) == []


@pytest.mark.parametrize(
    ("claim_node", "token_node"),
    [("ip-10-0-9-9.ec2.internal", NODE), (None, NODE), (NODE, None)],
    ids=["another-nodes-claim", "claim-not-registered", "token-without-node"],
)
def test_the_check_may_delete_no_other_nodeclaim(claim_node, token_node):
    messages = _admit(_claim(claim_node), None, node_name=token_node, policy_name=CLAIM_POLICY)
    assert any("only the NodeClaim of the node its own pod runs on" in m for m in messages), messages


def test_the_nodeclaim_policy_leaves_karpenter_alone():
    karpenter = "system:serviceaccount:karpenter:karpenter"
    messages = _admit(_claim("ip-10-0-9-9.ec2.internal"), None, user=karpenter, policy_name=CLAIM_POLICY)
    assert messages == ["not matched"]


# The script: its verdict on nvidia-smi's output and the patches it sends.
HEALTHY_T4 = "\n".join(f"{i}, GPU-{i}, Tesla T4, 0, No, [N/A], [N/A]" for i in range(4))
HEALTHY_A100 = "\n".join(f"{i}, GPU-{i}, NVIDIA A100-SXM4-40GB, 0, [N/A], No, No" for i in range(8))


def test_healthy_gpus_pass():
    assert script.gpu_problems(HEALTHY_T4, 4) == []
    assert script.gpu_problems(HEALTHY_A100, 8) == []


@pytest.mark.parametrize(
    ("output", "expected", "problem"),
    [
        ("\n".join(HEALTHY_T4.splitlines()[:3]), 4, "3 GPUs visible, the instance type has 4"),
        (HEALTHY_T4.replace("GPU-2, Tesla T4, 0,", "GPU-2, Tesla T4, 3,"), 4, "3 uncorrected ECC errors"),
        (HEALTHY_T4.replace("0, No, [N/A]", "0, Yes, [N/A]", 1), 4, "a page retirement is pending"),
        (HEALTHY_A100.replace("0, [N/A], No, No", "0, [N/A], Yes, No", 1), 8, "a row remapping is pending"),
        (HEALTHY_A100.replace("0, [N/A], No, No", "0, [N/A], No, Yes", 1), 8, "a row remapping failed"),
        ("", 1, "0 GPUs visible"),
    ],
    ids=["missing-gpu", "ecc", "retired-pages", "remap-pending", "remap-failed", "none"],
)
def test_faulty_gpus_fail(output, expected, problem):
    assert any(problem in p for p in script.gpu_problems(output, expected))


def test_the_query_has_one_column_per_field_the_verdict_reads():
    assert len(script.QUERY.split(",")) == len(HEALTHY_T4.splitlines()[0].split(","))


def _apply(doc: dict, patch: list[dict]) -> dict:
    """RFC 6902 `test` and `remove`, as the API server applies a json-patch+json body."""
    doc = copy.deepcopy(doc)
    for op in patch:
        *parents, last = [int(p) if p.isdigit() else p for p in op["path"].strip("/").split("/")]
        target = doc
        for p in parents:
            target = target[p]
        if op["op"] == "test" and target[last] != op["value"]:
            raise ValueError(f"test failed at {op['path']}")  # the API server answers 422
        if op["op"] == "remove":
            del target[last]
    return doc


def test_the_read_patch_changes_nothing():
    node = _node([GPU_TAINT, STARTUP])
    assert _apply(node, script.read_patch(NODE)) == node


def test_the_removal_patch_removes_the_startup_taint_only():
    node = _node([GPU_TAINT, STARTUP, {"key": "z", "value": "", "effect": "NoSchedule"}])
    patch = script.taint_removal_patch(node, check.STARTUP_TAINT.key)
    assert _apply(node, patch)["spec"]["taints"] == [
        GPU_TAINT,
        {"key": "z", "value": "", "effect": "NoSchedule"},
    ]
    assert script.taint_removal_patch(_node([GPU_TAINT]), check.STARTUP_TAINT.key) is None


def test_the_removal_patch_fails_when_the_taints_moved_meanwhile():
    node = _node([GPU_TAINT, STARTUP])
    patch = script.taint_removal_patch(node, check.STARTUP_TAINT.key)
    with pytest.raises(ValueError, match="test failed"):
        _apply(_node([STARTUP, GPU_TAINT]), patch)


def test_startup_taints_go_on_every_gpu_pool_while_the_check_is_on():
    for accelerator in ("t4", "amd-v520"):
        assert check.startup_taints(accelerator, enabled=True) == (check.STARTUP_TAINT,)
        assert check.startup_taints(accelerator, enabled=False) == ()
