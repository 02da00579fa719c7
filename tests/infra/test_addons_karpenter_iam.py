"""Karpenter's controller IAM against the upstream reference CloudFormation (Karpenter 1.14)."""

from __future__ import annotations

import json
import re

import pytest
import yaml

from infra.addons.karpenter.iam import INTERRUPTION_EVENTS, controller_policies, interruption_queue_policy
from sim.contracts import UPSTREAM

REFERENCE = UPSTREAM / "karpenter-1.14-cloudformation.yaml"
FACTS = {
    "ClusterName": "mlops-eks-dev",
    "AWS::Partition": "aws",
    "AWS::Region": "us-east-1",
    "AWS::AccountId": "123456789012",
    "AWS::URLSuffix": "amazonaws.com",
    "KarpenterNodeRole.Arn": "arn:aws:iam::123456789012:role/karpenter-node",
    "KarpenterInterruptionQueue.Arn": "arn:aws:sqs:us-east-1:123456789012:karpenter-interruption",
}


class _CloudFormationLoader(yaml.SafeLoader):
    pass


def _sub(loader, node):
    return re.sub(r"\$\{([^}]+)\}", lambda m: FACTS[m.group(1)], loader.construct_scalar(node))


_CloudFormationLoader.add_constructor("!Sub", _sub)
_CloudFormationLoader.add_constructor("!GetAtt", lambda loader, node: FACTS[loader.construct_scalar(node)])
_CloudFormationLoader.add_constructor("!Ref", lambda loader, node: loader.construct_scalar(node))


@pytest.fixture(scope="module")
def reference() -> dict:
    return yaml.load(REFERENCE.read_text(), Loader=_CloudFormationLoader)["Resources"]


@pytest.fixture(scope="module")
def ours() -> dict:
    return controller_policies(
        partition="aws",
        region=FACTS["AWS::Region"],
        account_id=FACTS["AWS::AccountId"],
        cluster_name=FACTS["ClusterName"],
        node_role_arn=FACTS["KarpenterNodeRole.Arn"],
        queue_arn=FACTS["KarpenterInterruptionQueue.Arn"],
    )


def _as_set(value) -> set:
    return {value} if isinstance(value, str) else set(value)


def _statements(documents) -> dict[str, dict]:
    return {s["Sid"]: s for doc in documents for s in doc["Statement"]}


def test_every_reference_statement_is_granted_with_the_same_actions_resources_and_conditions(reference, ours):
    ref_docs = [
        json.loads(r["Properties"]["PolicyDocument"])
        for r in reference.values()
        if r["Type"] == "AWS::IAM::ManagedPolicy"
    ]
    expected, granted = _statements(ref_docs), _statements(ours.values())
    assert set(granted) == set(expected)
    for sid, statement in expected.items():
        assert _as_set(granted[sid]["Action"]) == _as_set(statement["Action"]), sid
        assert _as_set(granted[sid]["Resource"]) == _as_set(statement["Resource"]), sid
        assert granted[sid].get("Condition") == statement.get("Condition"), sid
        assert granted[sid]["Effect"] == "Allow"


def test_no_statement_allows_every_action_on_every_resource(ours):
    for statement in _statements(ours.values()).values():
        wildcard_action = any("*" in a for a in _as_set(statement["Action"]))
        assert not (wildcard_action and "*" in _as_set(statement["Resource"])), statement["Sid"]


def test_unscoped_resources_are_only_where_aws_offers_no_resource_level_permission(ours):
    unscoped = {sid for sid, s in _statements(ours.values()).items() if "*" in _as_set(s["Resource"])}
    assert unscoped == {
        "AllowRegionalReadActions",
        "AllowPricingReadActions",
        "AllowUnscopedInstanceProfileListAction",
        "AllowZonalShiftStatusReadOnly",
    }
    statements = _statements(ours.values())
    assert statements["AllowRegionalReadActions"]["Condition"] == {
        "StringEquals": {"aws:RequestedRegion": "us-east-1"}
    }


def test_writes_to_what_karpenter_creates_are_conditioned_on_this_clusters_tag(ours):
    created = ("instance/*", "launch-template/*", "instance-profile/*")
    read_only = ("Describe", "Get", "List")
    checked = 0
    for sid, statement in _statements(ours.values()).items():
        writes = [a for a in _as_set(statement["Action"]) if not a.split(":")[1].startswith(read_only)]
        if writes and any(r.endswith(created) for r in _as_set(statement["Resource"])):
            assert f"kubernetes.io/cluster/{FACTS['ClusterName']}" in json.dumps(statement["Condition"]), sid
            checked += 1
    assert checked == 8
    eks = _statements(ours.values())["AllowAPIServerEndpointDiscovery"]
    assert eks["Resource"] == f"arn:aws:eks:us-east-1:123456789012:cluster/{FACTS['ClusterName']}"


def test_queue_policy_lets_only_the_stacks_rules_send_and_denies_plain_http(reference):
    """The reference's Allow for events.amazonaws.com and sqs.amazonaws.com, narrowed: EventBridge only,
    for the stack's own rules (aws:SourceArn), so no other rule (of any account) feeds the queue."""
    ref = reference["KarpenterInterruptionQueuePolicy"]["Properties"]["PolicyDocument"]["Statement"]
    rules = ["arn:aws:events:us-east-1:123456789012:rule/b", "arn:aws:events:us-east-1:123456789012:rule/a"]
    ours = interruption_queue_policy(FACTS["KarpenterInterruptionQueue.Arn"], rules)["Statement"]
    assert ours[0]["Action"] == ref[0]["Action"] and "events.amazonaws.com" in ref[0]["Principal"]["Service"]
    assert ours[0]["Principal"] == {"Service": "events.amazonaws.com"}
    assert ours[0]["Condition"] == {"ArnEquals": {"aws:SourceArn": sorted(rules)}}
    assert ours[1]["Effect"] == "Deny" and ours[1]["Action"] == "sqs:*"
    assert ours[1]["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}


def test_eventbridge_rules_cover_every_reference_interruption_source(reference):
    expected = {
        (r["Properties"]["EventPattern"]["source"][0], r["Properties"]["EventPattern"]["detail-type"][0])
        for r in reference.values()
        if r["Type"] == "AWS::Events::Rule"
    }
    assert {(source, detail) for _, source, detail in INTERRUPTION_EVENTS} == expected
    queue = reference["KarpenterInterruptionQueue"]["Properties"]
    assert (queue["MessageRetentionPeriod"], queue["SqsManagedSseEnabled"]) == (300, True)
