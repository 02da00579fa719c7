"""The pack's Kubernetes rules over every object the platform's Helm releases install, rendered from the
pinned chart packages: only the findings policy/chart_exceptions.yaml accepts, one rule, one object and
one reason each, and no entry there that nothing needs."""

from __future__ import annotations

import pytest

from policy.chart_exceptions import findings, load_exceptions, object_id, stale, unexplained
from policy.pack import RULES


@pytest.fixture(scope="module")
def found(chart_objects) -> set[tuple[str, str, str]]:
    return set().union(*(findings(objects, RULES) for objects in chart_objects.values()))


def test_chart_objects_break_no_rule_outside_the_exceptions(found):
    assert unexplained(found, load_exceptions()) == []


def test_every_exception_is_still_needed(found):
    assert stale(found, load_exceptions()) == []


def test_exceptions_are_one_rule_one_object_with_a_reason():
    exceptions = load_exceptions()
    keys = [(e["rule"], e["object"]) for e in exceptions]
    assert len(keys) == len(set(keys))
    rules = {r.name for r in RULES}
    for e in exceptions:
        assert e["rule"] in rules and len(e["reason"].split()) >= 15 and e["accepts"], e
        assert "*" not in e["object"] and e["object"].count("/") == 2, e


def test_the_rule_really_judges_the_rendered_charts(chart_objects, found):
    # The privileged node agents are found (so the rule reads what the charts render) ...
    daemonsets = {object_id(o) for objs in chart_objects.values() for o in objs if o["kind"] == "DaemonSet"}
    assert {o for _, o, _ in found} <= daemonsets
    assert "DaemonSet/monitoring/kube-prometheus-stack-prometheus-node-exporter" in {o for _, o, _ in found}
    # ... and a controller made privileged is not accepted by any exception.
    deployment = next(o for o in chart_objects["dev"] if o["kind"] == "Deployment")
    spec = deployment["spec"]["template"]["spec"]
    broken = {**deployment, "spec": {**deployment["spec"], "template": {"spec": {**spec, "hostPID": True}}}}
    assert unexplained(findings([broken], RULES), load_exceptions())
