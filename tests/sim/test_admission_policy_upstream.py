"""sim/kubernetes/admission.py against Kubernetes' own tables (release-1.35), transcribed case by case from
kubernetes/apiserver v0.35.7 (the staging copy of release-1.35): pkg/admission/plugin/webhook/predicates/
rules/rules_test.go (TestGroup, TestVersion, TestOperation, TestResource, TestScope: each part of a rule
alone), pkg/admission/plugin/policy/matching/matching_test.go TestMatcher (a policy's matchConstraints) and
pkg/admission/plugin/webhook/predicates/namespace/matcher_test.go (TestGetNamespaceLabels,
TestNotExemptClusterScopedResource). Each case keeps upstream's name; SKIPPED_MATCHER says why a case is
not run. predicates/object/matcher_test.go is not transcribed: the port does not read objectSelector.
"""

from __future__ import annotations

import pytest

from sim.kubernetes.admission import (
    NAME_LABEL,
    RULE_PARTS,
    Request,
    matches,
    namespace_labels,
    namespace_selector_matches,
)

CREATE, UPDATE, DELETE, CONNECT = "CREATE", "UPDATE", "DELETE", "CONNECT"


def a(group: str, version: str, resource: str, subresource: str, name: str, operation: str) -> Request:
    """rules_test.go a() and namespacedAttributes(): a request in namespace "ns"."""
    return Request(operation, group, version, resource, "u", "ns", name, subresource)


def cluster(group: str, version: str, resource: str, subresource: str, name: str, operation: str) -> Request:
    """rules_test.go clusterScopedAttributes(): a request with no namespace."""
    return Request(operation, group, version, resource, "u", "", name, subresource)


def _ops(*operations: str) -> dict:
    return {"operations": list(operations)}


# rules_test.go: test -> case -> (rule, requests that match, requests that do not)
RULE_TABLES: dict[str, dict[str, tuple[dict, list[Request], list[Request]]]] = {
    "TestGroup": {
        "wildcard": ({"apiGroups": ["*"]}, [a("g", "v", "r", "", "name", CREATE)], []),
        "exact": (
            {"apiGroups": ["g1", "g2"]},
            [a("g1", "v", "r", "", "name", CREATE), a("g2", "v2", "r3", "", "name", CREATE)],
            [a("g3", "v", "r", "", "name", CREATE), a("g4", "v", "r", "", "name", CREATE)],
        ),
    },
    "TestVersion": {
        "wildcard": ({"apiVersions": ["*"]}, [a("g", "v", "r", "", "name", CREATE)], []),
        "exact": (
            {"apiVersions": ["v1", "v2"]},
            [a("g1", "v1", "r", "", "name", CREATE), a("g2", "v2", "r", "", "name", CREATE)],
            [a("g1", "v3", "r", "", "name", CREATE), a("g2", "v4", "r", "", "name", CREATE)],
        ),
    },
    "TestOperation": {
        "wildcard": (
            _ops("*"),
            [a("g", "v", "r", "", "name", op) for op in (CREATE, UPDATE, DELETE, CONNECT)],
            [],
        ),
        **{
            op.lower(): (
                _ops(op),
                [a("g", "v", "r", "", "name", op)],
                [
                    a("g", "v", "r", "", "name", other)
                    for other in (CREATE, UPDATE, DELETE, CONNECT)
                    if other != op
                ],
            )
            for op in (CREATE, UPDATE, DELETE, CONNECT)
        },
        "multiple": (
            _ops(UPDATE, DELETE),
            [a("g", "v", "r", "", "name", UPDATE), a("g", "v", "r", "", "name", DELETE)],
            [a("g", "v", "r", "", "name", CREATE), a("g", "v", "r", "", "name", CONNECT)],
        ),
    },
    "TestResource": {
        "no subresources": (
            {"resources": ["*"]},
            [a("g", "v", "r", "", "name", CREATE), a("2", "v", "r2", "", "name", CREATE)],
            [a("g", "v", "r", "exec", "name", CREATE), a("2", "v", "r2", "proxy", "name", CREATE)],
        ),
        "r & subresources": (
            {"resources": ["r/*"]},
            [a("g", "v", "r", "", "name", CREATE), a("g", "v", "r", "exec", "name", CREATE)],
            [a("2", "v", "r2", "", "name", CREATE), a("2", "v", "r2", "proxy", "name", CREATE)],
        ),
        "r & subresources or r2": (
            {"resources": ["r/*", "r2"]},
            [
                a("g", "v", "r", "", "name", CREATE),
                a("g", "v", "r", "exec", "name", CREATE),
                a("2", "v", "r2", "", "name", CREATE),
            ],
            [a("2", "v", "r2", "proxy", "name", CREATE)],
        ),
        "proxy or exec": (
            {"resources": ["*/proxy", "*/exec"]},
            [
                a("g", "v", "r", "exec", "name", CREATE),
                a("2", "v", "r2", "proxy", "name", CREATE),
                a("2", "v", "r3", "proxy", "name", CREATE),
            ],
            [
                a("g", "v", "r", "", "name", CREATE),
                a("2", "v", "r2", "", "name", CREATE),
                a("2", "v", "r4", "scale", "name", CREATE),
            ],
        ),
    },
    "TestScope": {
        "cluster scope": (
            {"resources": ["*"], "scope": "Cluster"},
            [
                cluster("g", "v", "r", "", "name", CREATE),
                cluster("g", "v", "r", "exec", "name", CREATE),
                cluster("", "v1", "namespaces", "", "ns", CREATE),
                cluster("", "v1", "namespaces", "finalize", "ns", CREATE),
                a("", "v1", "namespaces", "", "ns", CREATE),
                a("", "v1", "namespaces", "finalize", "ns", CREATE),
            ],
            [a("g", "v", "r", "", "name", CREATE), a("g", "v", "r", "exec", "name", CREATE)],
        ),
        "namespace scope": (
            {"resources": ["*"], "scope": "Namespaced"},
            [a("g", "v", "r", "", "name", CREATE), a("g", "v", "r", "exec", "name", CREATE)],
            [
                cluster("", "v1", "namespaces", "", "ns", CREATE),
                cluster("", "v1", "namespaces", "finalize", "ns", CREATE),
                a("", "v1", "namespaces", "", "ns", CREATE),
                a("", "v1", "namespaces", "finalize", "ns", CREATE),
                cluster("g", "v", "r", "", "name", CREATE),
                cluster("g", "v", "r", "exec", "name", CREATE),
            ],
        ),
        "all scopes": (
            {"resources": ["*"], "scope": "*"},
            [
                a("g", "v", "r", "", "name", CREATE),
                a("g", "v", "r", "exec", "name", CREATE),
                cluster("g", "v", "r", "", "name", CREATE),
                cluster("g", "v", "r", "exec", "name", CREATE),
                cluster("", "v1", "namespaces", "", "ns", CREATE),
                cluster("", "v1", "namespaces", "finalize", "ns", CREATE),
                a("", "v1", "namespaces", "", "ns", CREATE),
                a("", "v1", "namespaces", "finalize", "ns", CREATE),
            ],
            [],
        ),
    },
}
PART_OF = {"TestGroup": "group", "TestVersion": "version", "TestOperation": "operation"}
PART_OF |= {"TestResource": "resource", "TestScope": "scope"}


def _rule_cases() -> list:
    cases = []
    for test, table in RULE_TABLES.items():
        for name, (rule, match, no_match) in table.items():
            for kind, requests in (("match", match), ("nomatch", no_match)):
                for index, request in enumerate(requests):
                    expected = kind == "match"
                    cases.append(
                        pytest.param(test, rule, request, expected, id=f"{test}/{name}_{kind}_{index}")
                    )
    return cases


def test_every_rule_case_is_transcribed():
    """rules_test.go's case names and how many requests each lists."""
    counts = {
        test: {name: (len(match), len(no_match)) for name, (_, match, no_match) in table.items()}
        for test, table in RULE_TABLES.items()
    }
    assert counts == {
        "TestGroup": {"wildcard": (1, 0), "exact": (2, 2)},
        "TestVersion": {"wildcard": (1, 0), "exact": (2, 2)},
        "TestOperation": {
            "wildcard": (4, 0),
            "create": (1, 3),
            "update": (1, 3),
            "delete": (1, 3),
            "connect": (1, 3),
            "multiple": (2, 2),
        },
        "TestResource": {
            "no subresources": (2, 2),
            "r & subresources": (2, 2),
            "r & subresources or r2": (3, 1),
            "proxy or exec": (3, 3),
        },
        "TestScope": {"cluster scope": (6, 2), "namespace scope": (2, 6), "all scopes": (8, 0)},
    }


@pytest.mark.parametrize(("test", "rule", "request_", "expected"), _rule_cases())
def test_rule_part(test, rule, request_, expected):
    assert RULE_PARTS[PART_OF[test]](rule, request_) is expected


def _rule(group: str, version: str, *resources: str, names: tuple[str, ...] = ()) -> dict:
    rule = {"operations": ["*"], "apiGroups": [group], "apiVersions": [version], "resources": list(resources)}
    return {**rule, "scope": "*", **({"resourceNames": list(names)} if names else {})}


ANY = {"operations": ["*"], "apiGroups": ["*"], "apiVersions": ["*"], "resources": ["*"], "scope": "*"}
EXT_V1BETA1, APPS_V1BETA1 = (
    _rule("extensions", "v1beta1", "deployments"),
    _rule("apps", "v1beta1", "deployments"),
)
DEPLOYMENT = a("apps", "v1", "deployments", "", "name", CREATE)
SCALE = a("apps", "v1", "deployments", "scale", "name", CREATE)
POD = a("example.apiserver.k8s.io", "v1", "pods", "", "name", CREATE)
BAD_NS = {"matchExpressions": [{"key": "key ", "operator": "In", "values": ["bad value"]}]}
SUBRESOURCES = ("deployments", "deployments/scale")
# TestMatcher: name -> (matchConstraints, request, matches); every case's selectors are {} unless named.
MATCHER = {
    "wildcard rule, match as requested": ({"resourceRules": [ANY]}, DEPLOYMENT, True),
    "specific rules, prefer exact match": (
        {
            "resourceRules": [
                _rule("extensions", "v1", "deployments"),
                APPS_V1BETA1,
                _rule("apps", "v1", "deployments"),
            ]
        },
        DEPLOYMENT,
        True,
    ),
    "specific rules, match miss": ({"resourceRules": [EXT_V1BETA1, APPS_V1BETA1]}, DEPLOYMENT, False),
    "specific rules, exact match miss": (
        {"matchPolicy": "Exact", "resourceRules": [EXT_V1BETA1, APPS_V1BETA1]},
        DEPLOYMENT,
        False,
    ),
    "specific rules, subresource prefer exact match": (
        {
            "resourceRules": [
                _rule("extensions", "v1beta1", *SUBRESOURCES),
                _rule("apps", "v1beta1", *SUBRESOURCES),
                _rule("apps", "v1", *SUBRESOURCES),
            ]
        },
        SCALE,
        True,
    ),
    "specific rules, subresource match miss": (
        {
            "resourceRules": [
                _rule("extensions", "v1beta1", *SUBRESOURCES),
                _rule("apps", "v1beta1", *SUBRESOURCES),
            ]
        },
        SCALE,
        False,
    ),
    "specific rules, subresource exact match miss": (
        {
            "matchPolicy": "Exact",
            "resourceRules": [
                _rule("extensions", "v1beta1", *SUBRESOURCES),
                _rule("apps", "v1beta1", *SUBRESOURCES),
            ],
        },
        SCALE,
        False,
    ),
    "specific rules, prefer exact match and name match": (
        {"resourceRules": [_rule("apps", "v1", "deployments", names=("name",))]},
        DEPLOYMENT,
        True,
    ),
    "specific rules, prefer exact match and name match miss": (
        {"resourceRules": [_rule("apps", "v1", "deployments", names=("wrong-name",))]},
        DEPLOYMENT,
        False,
    ),
    "exclude resource match on miss": (
        {"resourceRules": [ANY], "excludeResourceRules": [EXT_V1BETA1]},
        DEPLOYMENT,
        True,
    ),
    "exclude resource miss on match": (
        {"resourceRules": [ANY], "excludeResourceRules": [EXT_V1BETA1]},
        a("extensions", "v1beta1", "deployments", "", "name", CREATE),
        False,
    ),
    "treat empty ResourceRules as match": ({"excludeResourceRules": [EXT_V1BETA1]}, DEPLOYMENT, True),
    "treat non-empty ResourceRules as no match": ({"resourceRules": [{}]}, DEPLOYMENT, False),
    "erroring namespace selector on otherwise non-matching rule doesn't error": (
        {"namespaceSelector": BAD_NS, "resourceRules": [{**ANY, "resources": ["deployments"]}]},
        POD,
        False,
    ),
    "erroring object selector on otherwise non-matching rule doesn't error": (
        {"resourceRules": [{**ANY, "resources": ["deployments"]}]},
        POD,
        False,
    ),
}
EQUIVALENT = (
    "matchPolicy Equivalent converts the request to the same resource in another group or version "
    "(extensions/v1beta1 to apps/v1 deployments), which needs the API server's equivalent-resource "
    "registry; the port matches as Exact, and no group the platform's policies name has an equivalent "
    "served in 1.35"
)
SKIPPED_MATCHER = {
    "no rules (just write)": (
        "its ObjectSelector is nil, which the matcher reads as matching nothing; the API server defaults a "
        "policy's objectSelector to {} before any request, and the port does not read objectSelector"
    ),
    "specific rules, equivalent match, prefer extensions": EQUIVALENT,
    "specific rules, equivalent match, prefer apps": EQUIVALENT,
    "specific rules, subresource equivalent match, prefer extensions": EQUIVALENT,
    "specific rules, subresource equivalent match, prefer apps": EQUIVALENT,
    "specific rules, subresource equivalent match, prefer extensions and name match": EQUIVALENT,
    "specific rules, subresource equivalent match, prefer extensions and name match miss": EQUIVALENT,
    "erroring namespace selector on otherwise matching rule errors": (
        "a selector the matcher cannot parse: the API server refuses such a policy when it is created "
        "(ValidatingAdmissionPolicy validation), so the port never meets one"
    ),
    "erroring object selector on otherwise matching rule errors": "the port does not read objectSelector",
}
MATCHER_CASES = [  # TestMatcher's names, in the table's order
    "no rules (just write)",
    "wildcard rule, match as requested",
    "specific rules, prefer exact match",
    "specific rules, match miss",
    "specific rules, exact match miss",
    "specific rules, equivalent match, prefer extensions",
    "specific rules, equivalent match, prefer apps",
    "specific rules, subresource prefer exact match",
    "specific rules, subresource match miss",
    "specific rules, subresource exact match miss",
    "specific rules, subresource equivalent match, prefer extensions",
    "specific rules, subresource equivalent match, prefer apps",
    "specific rules, prefer exact match and name match",
    "specific rules, prefer exact match and name match miss",
    "specific rules, subresource equivalent match, prefer extensions and name match",
    "specific rules, subresource equivalent match, prefer extensions and name match miss",
    "exclude resource match on miss",
    "exclude resource miss on match",
    "treat empty ResourceRules as match",
    "treat non-empty ResourceRules as no match",
    "erroring namespace selector on otherwise non-matching rule doesn't error",
    "erroring namespace selector on otherwise matching rule errors",
    "erroring object selector on otherwise non-matching rule doesn't error",
    "erroring object selector on otherwise matching rule errors",
]


def test_every_matcher_case_is_run_or_skipped():
    assert all(SKIPPED_MATCHER.values())
    assert [c for c in MATCHER_CASES if c not in SKIPPED_MATCHER] == list(MATCHER)


@pytest.mark.parametrize("name", MATCHER)
def test_matcher(name):
    constraints, request, expected = MATCHER[name]
    assert matches({"spec": {"matchConstraints": constraints}}, request) is expected


def _namespace(name: str, labels: dict[str, str]) -> dict:
    return {"metadata": {"name": name, "labels": labels}}


RUNLEVEL_1, RUNLEVEL_2 = {"runlevel": "1"}, {"runlevel": "2"}
# TestGetNamespaceLabels: name -> (request, the labels upstream expects). Namespace "1" is the lister's
# (here the request's namespace_labels); the port adds the name label every namespace carries.
NAMESPACE_LABELS = {
    "request is for creating namespace, the labels should be from the object itself": (
        Request(CREATE, "", "", "namespaces", "u", "", "2", object=_namespace("2", RUNLEVEL_2)),
        RUNLEVEL_2 | {NAME_LABEL: "2"},
    ),
    "request is for updating namespace, the labels should be from the new object": (
        Request(UPDATE, "", "", "namespaces", "u", "2", "2", object=_namespace("2", RUNLEVEL_2)),
        RUNLEVEL_2 | {NAME_LABEL: "2"},
    ),
    "request is for deleting namespace, the labels should be from the cache": (
        Request(
            DELETE,
            "",
            "",
            "namespaces",
            "u",
            "1",
            "1",
            object=_namespace("2", RUNLEVEL_2),
            namespace_labels=RUNLEVEL_1,
        ),
        RUNLEVEL_1 | {NAME_LABEL: "1"},
    ),
    "request is for namespace/finalizer": (
        Request(
            CREATE, "", "", "namespaces", "u", "1", "mock-name", "finalizers", namespace_labels=RUNLEVEL_1
        ),
        RUNLEVEL_1 | {NAME_LABEL: "1"},
    ),
    "request is for pod": (
        Request(CREATE, "", "", "pods", "u", "1", "mock-name", namespace_labels=RUNLEVEL_1),
        RUNLEVEL_1 | {NAME_LABEL: "1"},
    ),
}


@pytest.mark.parametrize("name", NAMESPACE_LABELS)
def test_get_namespace_labels(name):
    request, expected = NAMESPACE_LABELS[name]
    assert namespace_labels(request) == expected


def test_not_exempt_cluster_scoped_resource():
    """TestNotExemptClusterScopedResource: a cluster-scoped request (not a namespace) meets every selector."""
    node = Request(CREATE, "", "v1", "nodes", "u", "", "mock-name")
    assert namespace_selector_matches({}, node)
    assert namespace_selector_matches({"matchLabels": RUNLEVEL_1}, node)


def test_a_namespace_is_judged_by_the_labels_it_sends():
    """What TestGetNamespaceLabels' first case means for a policy: creating a namespace that lacks the
    selected label is not matched, one that has it is."""
    constraints = {"namespaceSelector": {"matchLabels": RUNLEVEL_1}, "resourceRules": [ANY]}
    for labels, expected in ((RUNLEVEL_2, False), (RUNLEVEL_1, True)):
        request = Request(CREATE, "", "v1", "namespaces", "u", "", "2", object=_namespace("2", labels))
        assert matches({"spec": {"matchConstraints": constraints}}, request) is expected
