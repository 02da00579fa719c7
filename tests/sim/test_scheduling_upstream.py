"""Kubernetes' own test tables (release-1.35) run on sim/kubernetes/scheduling.py and infra.contract.quantity.

Vendored under sim/vendored/kubernetes/kubernetes/release-1.35/staging/src/k8s.io/ (PROVENANCE.txt):
api core/v1/toleration_test.go TestTolerationToleratesTaint, component-helpers scheduling/corev1/
nodeaffinity/nodeaffinity_test.go TestPodMatchesNodeSelectorAndAffinityTerms and apimachinery
pkg/api/resource/quantity_test.go TestQuantityParse. Transcribed without a vendored copy (the index holds
no release-1.35 text of those lines): nodeaffinity_test.go TestNodeSelectorMatch and
TestNodeSelectorRequirementsAsSelector. Each case keeps upstream's name; the SKIPPED_* lists say why a
case is not run.
"""

from __future__ import annotations

import re
from decimal import Decimal

import pydantic
import pytest

from infra.contract import PoolTaint, Toleration, quantity
from sim.kubernetes.scheduling import (
    node_selector_errors,
    required_affinity_matches,
    requirement_errors,
    term_matches,
    tolerated,
)
from tests.sim.upstream_tables import VENDORED, assert_covered, case_names

K8S = "kubernetes/kubernetes/release-1.35/staging/src/k8s.io"
TOLERATION_TEST = f"{K8S}/api/core/v1/toleration_test.go"
NODEAFFINITY_TEST = f"{K8S}/component-helpers/scheduling/corev1/nodeaffinity/nodeaffinity_test.go"
QUANTITY_TEST = f"{K8S}/apimachinery/pkg/api/resource/quantity_test.go"

GT_LT = (
    "TaintTolerationComparisonOperators is alpha in 1.35 and off on EKS: Gt/Lt then never tolerate, and "
    "infra.contract.Toleration refuses them (test_comparison_operators_are_refused)"
)
SKIPPED_TOLERATIONS = {
    "toleration with Gt operator - taint value less than toleration value, expect not tolerated": GT_LT,
    "toleration with Gt operator - taint value greater than toleration value, expect tolerated": GT_LT,
    "toleration with Lt operator - taint value greater than toleration value, expect not tolerated": GT_LT,
    "toleration with Lt operator - taint value less than toleration value, expect tolerated": GT_LT,
    "toleration with Gt operator and taint with equal numeric value, expect not tolerated": GT_LT,
    "toleration with Gt operator and taint with non-numeric value, expect not tolerated": GT_LT,
    "toleration with Gt operator and negative numeric values - taint value less than threshold, expect not tolerated": GT_LT,  # noqa: E501
    "toleration with Gt operator and large int64 values - taint value less than threshold, expect not tolerated": GT_LT,  # noqa: E501
}
SKIPPED_NODE_SELECTOR_MATCH = {"nil node": "a nil *v1.Node: the port always judges a node's labels"}

NO_SCHEDULE, NO_EXECUTE = "NoSchedule", "NoExecute"
TOLERATIONS = {  # description: (toleration, taint, tolerated)
    "toleration and taint have the same key and effect, and operator is Exists, and taint has no value, expect tolerated": (  # noqa: E501
        Toleration(key="foo", operator="Exists", effect=NO_SCHEDULE),
        PoolTaint(key="foo", effect=NO_SCHEDULE),
        True,
    ),
    "toleration and taint have the same key and effect, and operator is Exists, and taint has some value, expect tolerated": (  # noqa: E501
        Toleration(key="foo", operator="Exists", effect=NO_SCHEDULE),
        PoolTaint(key="foo", value="bar", effect=NO_SCHEDULE),
        True,
    ),
    "toleration and taint have the same effect, toleration has empty key and operator is Exists, means match all taints, expect tolerated": (  # noqa: E501
        Toleration(key="", operator="Exists", effect=NO_SCHEDULE),
        PoolTaint(key="foo", value="bar", effect=NO_SCHEDULE),
        True,
    ),
    "toleration and taint have the same key, effect and value, and operator is Equal, expect tolerated": (
        Toleration(key="foo", operator="Equal", value="bar", effect=NO_SCHEDULE),
        PoolTaint(key="foo", value="bar", effect=NO_SCHEDULE),
        True,
    ),
    "toleration and taint have the same key and effect, but different values, and operator is Equal, expect not tolerated": (  # noqa: E501
        Toleration(key="foo", operator="Equal", value="value1", effect=NO_SCHEDULE),
        PoolTaint(key="foo", value="value2", effect=NO_SCHEDULE),
        False,
    ),
    "toleration and taint have the same key and value, but different effects, and operator is Equal, expect not tolerated": (  # noqa: E501
        Toleration(key="foo", operator="Equal", value="bar", effect=NO_SCHEDULE),
        PoolTaint(key="foo", value="bar", effect=NO_EXECUTE),
        False,
    ),
}


def test_every_toleration_case_is_run_or_skipped():
    assert_covered(case_names(TOLERATION_TEST, "description"), TOLERATIONS, SKIPPED_TOLERATIONS)


@pytest.mark.parametrize("description", TOLERATIONS)
def test_toleration_tolerates_taint(description):
    toleration, taint, expected = TOLERATIONS[description]
    assert tolerated([toleration], taint) is expected


def test_comparison_operators_are_refused():
    with pytest.raises(pydantic.ValidationError):
        Toleration(key="node.kubernetes.io/sla", operator="Gt", value="950")  # type: ignore[arg-type]


def _required(*terms: dict) -> dict:
    return {
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": list(terms)}
            }
        }
    }  # noqa: E501


def _expr(key: str, op: str, *values: str) -> dict:
    return {"key": key, "operator": op, **({"values": list(values)} if values else {})}


NAME_IN_NODE_1 = {"matchFields": [_expr("metadata.name", "In", "node_1")]}
FOO_IN_BAR = {"matchExpressions": [_expr("foo", "In", "bar")]}
FOO = {"foo": "bar"}
GPU = {"GPU": "NVIDIA-GRID-K1"}
# TestPodMatchesNodeSelectorAndAffinityTerms: name -> (pod spec, node labels, node name, matches)
POD_MATCHES = {
    "no selector": ({}, {}, "", True),
    "missing labels": ({"nodeSelector": FOO}, {}, "", False),
    "same labels": ({"nodeSelector": FOO}, FOO, "", True),
    "node labels are superset": ({"nodeSelector": FOO}, {"foo": "bar", "baz": "blah"}, "", True),
    "node labels are subset": ({"nodeSelector": {"foo": "bar", "baz": "blah"}}, FOO, "", False),
    "Pod with matchExpressions using In operator that matches the existing node": (
        _required({"matchExpressions": [_expr("foo", "In", "bar", "value2")]}),
        FOO,
        "",
        True,
    ),
    "Pod with matchExpressions using Gt operator that matches the existing node": (
        _required({"matchExpressions": [_expr("kernel-version", "Gt", "0204")]}),
        {"kernel-version": "0206"},
        "",
        True,  # noqa: E501
    ),
    "Pod with matchExpressions using NotIn operator that matches the existing node": (
        _required({"matchExpressions": [_expr("mem-type", "NotIn", "DDR", "DDR2")]}),
        {"mem-type": "DDR3"},
        "",
        True,  # noqa: E501
    ),
    "Pod with matchExpressions using Exists operator that matches the existing node": (
        _required({"matchExpressions": [_expr("GPU", "Exists")]}),
        GPU,
        "",
        True,
    ),
    "Pod with affinity that don't match node's labels won't schedule onto the node": (
        _required({"matchExpressions": [_expr("foo", "In", "value1", "value2")]}),
        FOO,
        "",
        False,
    ),
    "Pod with a nil []NodeSelectorTerm in affinity, can't match the node's labels and won't schedule onto the node": (  # noqa: E501
        {
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": None}
                }
            }
        },
        FOO,
        "",
        False,  # noqa: E501
    ),
    "Pod with an empty []NodeSelectorTerm in affinity, can't match the node's labels and won't schedule onto the node": (  # noqa: E501
        _required(),
        FOO,
        "",
        False,
    ),
    "Pod with empty MatchExpressions is not a valid value will match no objects and won't schedule onto the node": (  # noqa: E501
        _required({"matchExpressions": []}),
        FOO,
        "",
        False,
    ),
    "Pod with no Affinity will schedule onto a node": ({}, FOO, "", True),
    "Pod with Affinity but nil NodeSelector will schedule onto a node": (
        {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": None}}},
        FOO,
        "",
        True,
    ),
    "Pod with multiple matchExpressions ANDed that matches the existing node": (
        _required({"matchExpressions": [_expr("GPU", "Exists"), _expr("GPU", "NotIn", "AMD", "INTER")]}),
        GPU,
        "",
        True,  # noqa: E501
    ),
    "Pod with multiple matchExpressions ANDed that doesn't match the existing node": (
        _required({"matchExpressions": [_expr("GPU", "Exists"), _expr("GPU", "In", "AMD", "INTER")]}),
        GPU,
        "",
        False,  # noqa: E501
    ),
    "Pod with multiple NodeSelectorTerms ORed in affinity, matches the node's labels and will schedule onto the node": (  # noqa: E501
        _required(
            {"matchExpressions": [_expr("foo", "In", "bar", "value2")]},
            {"matchExpressions": [_expr("diffkey", "In", "wrong", "value2")]},
        ),
        FOO,
        "",
        True,
    ),
    "Pod with an Affinity and a PodSpec.NodeSelector(the old thing that we are deprecating) both are satisfied, will schedule onto the node": (  # noqa: E501
        {"nodeSelector": FOO, **_required({"matchExpressions": [_expr("foo", "Exists")]})},
        FOO,
        "",
        True,
    ),
    "Pod with an Affinity matches node's labels but the PodSpec.NodeSelector(the old thing that we are deprecating) is not satisfied, won't schedule onto the node": (  # noqa: E501
        {"nodeSelector": FOO, **_required({"matchExpressions": [_expr("foo", "Exists")]})},
        {"foo": "barrrrrr"},
        "",
        False,  # noqa: E501
    ),
    "Pod with an invalid value in Affinity term won't be scheduled onto the node": (
        _required({"matchExpressions": [_expr("foo", "NotIn", "invalid value: ___@#$%^")]}),
        FOO,
        "",
        False,
    ),
    "Pod with matchFields using In operator that matches the existing node": (
        _required(NAME_IN_NODE_1),
        {},
        "node_1",
        True,
    ),
    "Pod with matchFields using In operator that does not match the existing node": (
        _required(NAME_IN_NODE_1),
        {},
        "node_2",
        False,
    ),
    "Pod with two terms: matchFields does not match, but matchExpressions matches": (
        _required(NAME_IN_NODE_1, FOO_IN_BAR),
        FOO,
        "node_2",
        True,
    ),
    "Pod with one term: matchFields does not match, but matchExpressions matches": (
        _required({**NAME_IN_NODE_1, **FOO_IN_BAR}),
        FOO,
        "node_2",
        False,
    ),
    "Pod with one term: both matchFields and matchExpressions match": (
        _required({**NAME_IN_NODE_1, **FOO_IN_BAR}),
        FOO,
        "node_1",
        True,
    ),
    "Pod with two terms: both matchFields and matchExpressions do not match": (
        _required(NAME_IN_NODE_1, {"matchExpressions": [_expr("foo", "In", "not-match-to-bar")]}),
        FOO,
        "node_2",
        False,  # noqa: E501
    ),
}


def test_every_pod_affinity_case_is_run():
    assert_covered(case_names(NODEAFFINITY_TEST), POD_MATCHES, {})


@pytest.mark.parametrize("name", POD_MATCHES)
def test_pod_matches_node_selector_and_affinity_terms(name):
    spec, labels, node_name, expected = POD_MATCHES[name]
    assert required_affinity_matches(spec, labels, node_name) is expected


# TestNodeSelectorMatch (nodeaffinity_test.go, transcribed): name -> (terms, node labels, node name, matches)
NODE_SELECTOR_MATCH = {
    "node matches field selector, but not labels": (
        [
            {
                "matchExpressions": [_expr("label_1", "In", "label_1_val")],
                "matchFields": [_expr("metadata.name", "In", "host_1")],
            }
        ],  # noqa: E501
        {},
        "host_1",
        False,
    ),
    "node matches field selector and label selector": (
        [
            {
                "matchExpressions": [_expr("label_1", "In", "label_1_val")],
                "matchFields": [_expr("metadata.name", "In", "host_1")],
            }
        ],  # noqa: E501
        {"label_1": "label_1_val"},
        "host_1",
        True,
    ),
    "second term matches": (
        [
            {"matchExpressions": [_expr("label_1", "In", "label_1_val")]},
            {"matchFields": [_expr("metadata.name", "In", "host_1")]},
        ],  # noqa: E501
        {},
        "host_1",
        True,
    ),
}


def test_every_node_selector_match_case_is_run_or_skipped():
    """TestNodeSelectorMatch's case names, as upstream lists them (not vendored)."""
    upstream = [
        "nil node",
        "invalid field selector and label selector",
        "node matches field selector, but not labels",
        "node matches field selector and label selector",
        "second term matches",
    ]
    transcribed = [*NODE_SELECTOR_MATCH, "invalid field selector and label selector"]
    assert_covered(upstream, transcribed, SKIPPED_NODE_SELECTOR_MATCH)


@pytest.mark.parametrize("name", NODE_SELECTOR_MATCH)
def test_node_selector_match(name):
    terms, labels, node_name, expected = NODE_SELECTOR_MATCH[name]
    assert node_selector_errors(terms) == []
    assert any(term_matches(t, labels, node_name) for t in terms) is expected


def test_node_selector_match_invalid_field_selector_and_label_selector():
    """Upstream: NewNodeSelector reports both errors, by field path."""
    terms = [
        {"matchFields": [_expr("metadata.name", "In", "host_1", "host_2")]},
        {
            "matchExpressions": [_expr("label_1", "In", "label_1_val")],
            "matchFields": [_expr("metadata.name", "In", "host_1")],
        },  # noqa: E501
        {"matchExpressions": [_expr("invalid key", "In", "label_value")]},
    ]
    errors = node_selector_errors(terms)
    assert [field for field, _ in errors] == [
        "nodeSelectorTerms[0].matchFields[0].values",
        "nodeSelectorTerms[2].matchExpressions[0].key",
    ]
    assert errors[0][1] == "must have one element" and errors[1][1].startswith("name part must consist of")
    assert not any(term_matches(t, {"label_1": "label_1_val"}, "host_1") for t in (terms[0], terms[2]))


# TestNodeSelectorRequirementsAsSelector (transcribed): requirements -> error fields ([] when it parses)
AS_SELECTOR = [
    ([_expr("foo", "In", "bar", "baz")], []),
    ([_expr("foo", "Exists", "bar", "baz")], ["root[0].values"]),
    ([_expr("foo", "Gt", "1")], []),
    ([_expr("bar", "Lt", "7")], []),
    ([_expr("baz", "invalid", "5")], ["root[0].operator"]),
]


@pytest.mark.parametrize(("requirements", "error_fields"), AS_SELECTOR)
def test_node_selector_requirements_as_selector(requirements, error_fields):
    errors = [e for i, r in enumerate(requirements) for e in requirement_errors(r, f"root[{i}]")]
    assert [field for field, _ in errors] == error_fields


def test_node_selector_requirements_as_selector_nothing():
    """Upstream: nil and empty requirements give labels.Nothing(); a term without them selects no node."""
    assert not term_matches({"matchExpressions": []}, {"foo": "bar"})
    assert not term_matches({}, {"foo": "bar"})


MAX_ALLOWED = Decimal(2**63 - 1)


def _dec(mantissa: float, exponent: int) -> Decimal:
    return Decimal(str(mantissa)).scaleb(exponent)


# TestQuantityParse: input -> the value upstream's decQuantity(mantissa, exponent, format) stands for.
# The Format (DecimalSI, BinarySI, DecimalExponent) is not modelled: only the value is used here.
QUANTITIES = {
    "0": _dec(0, 0), "0n": _dec(0, 0), "0u": _dec(0, 0), "0m": _dec(0, 0), "0Ki": _dec(0, 0),
    "0k": _dec(0, 0), "0Mi": _dec(0, 0), "0M": _dec(0, 0), "0Gi": _dec(0, 0), "0G": _dec(0, 0),
    "0Ti": _dec(0, 0), "0T": _dec(0, 0), "1": _dec(1, 0), "1Ki": _dec(1024, 0), "8Ki": _dec(8 * 1024, 0),
    "7Mi": _dec(7 * 1024**2, 0), "6Gi": _dec(6 * 1024**3, 0), "5Ti": _dec(5 * 1024**4, 0),
    "4Pi": _dec(4 * 1024**5, 0), "3Ei": _dec(3 * 1024**6, 0), "10Ti": _dec(10 * 1024**4, 0),
    "100Ti": _dec(100 * 1024**4, 0), "5n": _dec(5, -9), "4u": _dec(4, -6), "3m": _dec(3, -3),
    "9": _dec(9, 0), "8k": _dec(8, 3), "50k": _dec(5, 4), "7M": _dec(7, 6), "6G": _dec(6, 9),
    "5T": _dec(5, 12), "40T": _dec(4, 13), "300T": _dec(3, 14), "2P": _dec(2, 15), "1E": _dec(1, 18),
    "1E-3": _dec(1, -3), "1e3": _dec(1, 3), "1E6": _dec(1, 6), "1e9": _dec(1, 9), "1E12": _dec(1, 12),
    "1e15": _dec(1, 15), "1E18": _dec(1, 18), "1e14": _dec(1, 14), "1e13": _dec(1, 13),
    "100.035k": _dec(100035, 0), "0.001": _dec(1, -3), "0.0005k": _dec(5, -1), "0.005": _dec(5, -3),
    "0.05": _dec(5, -2), "0.5": _dec(5, -1), "0.00050k": _dec(5, -1), "0.00500": _dec(5, -3),
    "0.05000": _dec(5, -2), "0.50000": _dec(5, -1), "0.5e0": _dec(5, -1), "0.5e-1": _dec(5, -2),
    "0.5e-2": _dec(5, -3), "10.035M": _dec(10035, 3), "1.2e3": _dec(12, 2), "1.3E+6": _dec(13, 5),
    "1.40e9": _dec(14, 8), "1.53E12": _dec(153, 10), "1.6e15": _dec(16, 14), "1.7E18": _dec(17, 17),
    "9.01": _dec(901, -2), "8.1k": _dec(81, 2), "7.123456M": _dec(7123456, 0),
    "6.987654321G": _dec(6987654321, 0), "5.444T": _dec(5444, 9), "40.1T": _dec(401, 11),
    "300.2T": _dec(3002, 11), "2.5P": _dec(25, 14), "1.01E": _dec(101, 16), "3.001n": _dec(4, -9),
    "1.1E-9": _dec(2, -9), "0.0000000001": _dec(1, -9), "0.0000000005": _dec(1, -9),
    "0.00000000050": _dec(1, -9), "0.5e-9": _dec(1, -9), "0.9n": _dec(1, -9),
    "0.00000012345": _dec(124, -9), "0.00000012354": _dec(124, -9), "9Ei": MAX_ALLOWED,
    "9223372036854775807Ki": MAX_ALLOWED, "12E": _dec(12, 18), "100.035Ki": _dec(10243584, -2),
    "0.5Mi": _dec(0.5 * 1024 * 1024, 0), "0.05Gi": _dec(536870912, -1), "0.025Ti": _dec(274877906944, -1),
    "0.000000000001Ki": _dec(2, -9), ".001": _dec(1, -3), ".0001k": _dec(100, -3), "1.": _dec(1, 0),
    "1.G": _dec(1, 9),
}  # fmt: skip
INVALID = ["1.1.M", "1+1.0M", "0.1mi", "0.1am", "aoeu", ".5i", "1i", "-3.01i", "-3.01e-", " 1", "1 ", ""]


def test_every_quantity_case_is_run():
    text = (VENDORED / QUANTITY_TEST).read_text()
    table, invalid = text.split("\tinvalid := []string{")
    assert_covered(re.findall(r'^\t\t\{"([^"]*)", ', table, re.M), QUANTITIES, {})
    assert_covered([*re.findall(r'^\t\t"([^"]*)",$', invalid, re.M), ""], INVALID, {})


@pytest.mark.parametrize("text", QUANTITIES)
def test_quantity_parse(text):
    """Upstream also parses every input with a leading "-" (the negated value) and "+" (the same)."""
    assert quantity(text) == QUANTITIES[text]
    assert quantity(f"-{text}") == -QUANTITIES[text]
    assert quantity(f"+{text}") == QUANTITIES[text]


@pytest.mark.parametrize("text", INVALID)
def test_quantity_parse_refuses(text):
    with pytest.raises(ValueError, match="not a Kubernetes quantity"):
        quantity(text)
