"""The harness every pack test goes through (tests/policy/engine_path.py) hands the pack what the engine
hands it: numbers as floats, resource references as ids, unknowns as pulumi-policy's unknown values."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from google.protobuf import json_format
from pulumi_policy import proxy
from pulumi_policy.proxy import UnknownValueError

from policy.core import known
from tests.policy.engine_path import UNKNOWN, analyze, as_sent, violations

ADMIN_INLINE = {
    "name": "admin",
    "policy": json.dumps({"Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}),
}


def test_numbers_arrive_as_floats_and_references_as_ids():
    reference = {
        "4dabf18193072939515e22adb298388d": "5cf8f73096256a8f31e491e813e4eb8e",
        "urn": "u",
        "id": "i-1",
    }
    sent = json_format.MessageToDict(as_sent({"port": 443, "ref": reference, "__internal": 1}))
    assert sent == {"port": 443.0, "ref": "i-1"}
    assert isinstance(sent["port"], float)


def test_a_field_unknown_in_a_preview_defers_only_the_policies_that_read_it():
    """A trust policy computed from another resource is unknown on a first preview: the trust policies
    cannot run (pulumi-policy reports that, advisory), while what is known is still judged."""
    role = {"assumeRolePolicy": UNKNOWN, "inlinePolicies": [ADMIN_INLINE]}
    found = analyze("aws:iam/role:Role", role)
    deferred = {d.policy for d in found if d.message.startswith("can't run policy")}
    assert deferred == {"iam-pod-role-trust-scoped", "iam-trust-not-open"}
    assert all(d.level == "advisory" for d in found if d.policy in deferred)
    assert any("every IAM action" in m for m in violations("iam-no-star-on-star", "aws:iam/role:Role", role))


def test_prod_is_decided_from_the_config_the_engine_hands_the_pack():
    office = {
        "version": "1.35",
        "enabledClusterLogTypes": ["api", "audit", "authenticator", "controllerManager", "scheduler"],
        "encryptionConfigKeyArn": "arn:aws:kms:us-east-1:1:key/k",
        "endpointPrivateAccess": True,
        "endpointPublicAccess": True,
        "publicAccessCidrs": ["100.64.16.0/20"],
    }
    assert violations("eks-prod-endpoint-deployer-only", "eks:index:Cluster", office) == []
    assert violations("eks-prod-endpoint-deployer-only", "eks:index:Cluster", office, prod=True)


def test_placeholders_are_found_beside_values_a_preview_does_not_know():
    """The placeholder policy reads every value: one unknown (the cluster's name, computed) must not stop
    it from finding the example account in the same resource."""
    entry = {"clusterName": UNKNOWN, "principalArn": "arn:aws:iam::123456789012:role/platform-admin"}
    (message,) = violations("no-documentation-placeholders", "aws:eks/accessEntry:AccessEntry", entry)
    assert "123456789012" in message


def _read_through(value: Any) -> Any:
    """A proxy's contents read item by item through the proxy, as a rule reads them: an item the proxy
    refuses (UnknownValueError) is unknown."""
    if not isinstance(value, Mapping | Sequence) or isinstance(value, str):
        return value
    keys = list(value) if isinstance(value, Mapping) else list(range(len(value)))
    read = {}
    for key in keys:
        try:
            read[key] = _read_through(value[key])
        except UnknownValueError:
            read[key] = UNKNOWN
    return read if isinstance(value, Mapping) else [read[i] for i in keys]


def test_the_known_copy_holds_what_the_proxies_give_and_marks_what_they_refuse():
    """policy.core.known reads what a proxy wraps: the same copy as reading every item through
    pulumi-policy's proxies, for each of its unknown values, in maps and lists at any depth."""
    sentinels = [v for k, v in vars(proxy).items() if k.startswith("UNKNOWN_") and k.endswith("_VALUE")]
    assert len(sentinels) == 7
    inputs = {
        "plain": {"name": "a", "port": 443.0, "on": True, "none": None, "list": [1.0, "b", [], {}]},
        "unknowns": {f"u{i}": s for i, s in enumerate(sentinels)},
        "listed": [sentinels[0], {"deep": [sentinels[3], {"x": sentinels[6]}]}, "c"],
        "top": sentinels[2],
    }
    wrapped = proxy.unknown_checking_proxy(json.loads(json.dumps(inputs)))
    copy = known(wrapped)
    assert copy == _read_through(wrapped)
    assert copy["unknowns"] == {f"u{i}": UNKNOWN for i in range(7)} and copy["plain"] == inputs["plain"]
    assert copy["listed"] == [UNKNOWN, {"deep": [UNKNOWN, {"x": UNKNOWN}]}, "c"]
    assert known(inputs) is inputs  # plain values hold no unknowns
