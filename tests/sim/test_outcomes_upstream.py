"""sim/operators/outcomes.py against the Job controller's own table: kubernetes/kubernetes
pkg/controller/job/pod_failure_policy_test.go TestMatchPodFailurePolicy, transcribed case by case (each
named as upstream names it) onto match_pod_failure_policy, the port of matchPodFailurePolicy that
train_job_outcome decides a TrainJob node's pod by. SKIPPED says why a case is not run. The JobSet and
Training Operator decisions the model also ports are not table-tested upstream (they live in envtest
suites: jobset pkg/controllers/jobset_controller_test.go, Training Operator's Ginkgo specs).
"""

from __future__ import annotations

import pytest

from sim.operators.outcomes import PodEnd, failed_pod, match_pod_failure_policy, train_job_outcome

DISRUPTED = {"type": "DisruptionTarget", "status": "True"}


def pod(*containers: tuple[str, int | None], conditions: tuple[dict, ...] = (), init: tuple = ()) -> dict:
    """A failed pod default/mypod: (container name, exit code; None: not terminated) and conditions."""

    def statuses(entries: tuple) -> list[dict]:
        return [
            {"name": name, "state": {} if code is None else {"terminated": {"exitCode": code}}}
            for name, code in entries
        ]

    status = {"phase": "Failed", "containerStatuses": statuses(containers), "conditions": list(conditions)}
    if init:
        status["initContainerStatuses"] = statuses(init)
    return {"metadata": {"namespace": "default", "name": "mypod"}, "status": status}


def codes(action: str, operator: str, *values: int) -> dict:
    return {"action": action, "onExitCodes": {"operator": operator, "values": list(values)}}


def condition(action: str, type_: str = "DisruptionTarget", status: str = "True") -> dict:
    return {"action": action, "onPodConditions": [{"type": type_, "status": status}]}


def failed_with(code: int, name: str = "main-container") -> dict:
    return pod((name, code))


def message(code: int, index: int) -> str:
    return f"Container main-container for pod default/mypod failed with exit code {code} matching FailJob rule at index {index}"  # noqa: E501


# name -> (policy, failed pod, (wantJobFailureMessage, wantCountFailed, wantAction))
CASES = {
    "unknown action for rule matching by exit codes - skip rule with unknown action": (
        {"rules": [codes("UnknownAction", "In", 1, 2), codes("FailJob", "In", 2, 3)]},
        failed_with(2),
        (message(2, 1), True, "FailJob"),
    ),
    "unknown action for rule matching by pod conditions - skip rule with unknown action": (
        {"rules": [condition("UnkonwnAction"), condition("Ignore")]},
        pod(conditions=(DISRUPTED,)),
        (None, False, "Ignore"),
    ),
    "unknown operator - rule with unknown action is skipped for onExitCodes": (
        {"rules": [codes("Ignore", "UnknownOperator", 1, 2), codes("FailJob", "In", 2, 3)]},
        failed_with(2),
        (message(2, 1), True, "FailJob"),
    ),
    "no policy rules": (None, failed_with(2, ""), (None, True, None)),
    "ignore rule matched for exit codes": (
        {"rules": [codes("Ignore", "In", 1, 2, 3)]},
        failed_with(2, ""),
        (None, False, "Ignore"),
    ),
    "ignore rule matched on negative exit codes - needed for Windows support": (
        {"rules": [codes("Ignore", "In", -1073741676, -1073741510)]},
        failed_with(-1073741510, ""),
        (None, False, "Ignore"),
    ),
    "FailJob rule matched for exit codes": (
        {"rules": [codes("FailJob", "In", 1, 2, 3)]},
        failed_with(2),
        (message(2, 0), True, "FailJob"),
    ),
    "successful containers are skipped by the rules": (
        {"rules": [codes("FailJob", "NotIn", 111)]},
        pod(("main-container", 111), ("suppport-container", 0), init=(("init-container", 0),)),
        (None, True, None),
    ),
    "FailIndex rule matched for exit codes": (
        {"rules": [codes("FailIndex", "In", 1, 2, 3)]},
        failed_with(2, ""),
        (None, True, "FailIndex"),
    ),
    "pod failure policy with NotIn operator and value 0": (
        {"rules": [codes("FailJob", "NotIn", 0)]},
        pod(("main-container", 1), ("suppport-container", 0)),
        (message(1, 0), True, "FailJob"),
    ),
    "second jobfail rule matched for exit codes": (
        {"rules": [codes("Count", "In", 1, 2, 3), codes("FailJob", "In", 4, 5, 6)]},
        failed_with(6),
        (message(6, 1), True, "FailJob"),
    ),
    "count rule matched for exit codes": (
        {"rules": [codes("Count", "In", 1, 2, 3)]},
        pod(("foo", None), ("bar", 2)),
        (None, True, "Count"),
    ),
    "FailIndex rule matched for pod conditions": (
        {"rules": [condition("FailIndex")]},
        pod(conditions=(DISRUPTED,)),
        (None, True, "FailIndex"),
    ),
    "ignore rule matched for pod conditions": (
        {"rules": [condition("Ignore")]},
        pod(conditions=(DISRUPTED,)),
        (None, False, "Ignore"),
    ),
    "ignore rule matches by the status=False": (
        {"rules": [condition("Ignore", status="False")]},
        pod(conditions=({"type": "DisruptionTarget", "status": "False"},)),
        (None, False, "Ignore"),
    ),
    "ignore rule matches by the status=Unknown": (
        {"rules": [condition("Ignore", status="Unknown")]},
        pod(conditions=({"type": "DisruptionTarget", "status": "Unknown"},)),
        (None, False, "Ignore"),
    ),
    "ignore rule does not match when status for pattern is False, but actual True": (
        {"rules": [condition("Ignore", status="False")]},
        pod(conditions=(DISRUPTED,)),
        (None, True, None),
    ),
    "ignore rule does not match when status for pattern is True, but actual False": (
        {"rules": [condition("Ignore")]},
        pod(conditions=({"type": "DisruptionTarget", "status": "False"},)),
        (None, True, None),
    ),
    "default - do not match condition with status=False": (
        {"rules": [condition("Ignore")]},
        pod(conditions=({"type": "DisruptionTarget", "status": "False"},)),
        (None, True, None),
    ),
    "job fail rule matched for pod conditions": (
        {"rules": [condition("FailJob")]},
        pod(conditions=(DISRUPTED,)),
        (
            "Pod default/mypod has condition DisruptionTarget matching FailJob rule at index 0",
            True,
            "FailJob",
        ),
    ),
    "count rule matched for pod conditions": (
        {"rules": [condition("Count")]},
        pod(conditions=(DISRUPTED,)),
        (None, True, "Count"),
    ),
    "no rule matched": (
        {
            "rules": [
                codes("Count", "NotIn", 8),
                codes("Ignore", "In", 1, 2, 3),
                codes("FailJob", "NotIn", 5, 6, 7),
                condition("Count", "ResourceLimitExceeded"),
                condition("Ignore"),
            ]
        },
        failed_with(32, ""),
        (None, True, "Count"),
    ),
}
SKIPPED = {
    "expected matching rule returned": (
        "pod failure policy rule names come after release-1.35 (k8s.io/api v0.35.7 PodFailurePolicyRule has "
        "no name); the stored copy of the table is a later one"
    ),
}
UPSTREAM_ORDER = [*CASES, *SKIPPED]  # the table's 23 cases, the last one skipped


def test_every_case_is_run_or_skipped():
    assert len(UPSTREAM_ORDER) == len(set(UPSTREAM_ORDER)) == 23
    assert all(SKIPPED.values())


@pytest.mark.parametrize("name", CASES)
def test_match_pod_failure_policy(name):
    policy, failed, expected = CASES[name]
    assert match_pod_failure_policy(policy, failed) == expected


def _runtime(rules: list[dict], container: str = "node") -> dict:
    job = {
        "backoffLimit": 0,
        "podFailurePolicy": {"rules": rules},
        "template": {"spec": {"containers": [{"name": container}]}},
    }
    jobset = {"replicatedJobs": [{"template": {"spec": job}}], "failurePolicy": {"maxRestarts": 0}}
    return {"spec": {"template": {"spec": jobset}}}


def test_a_rule_for_another_container_does_not_decide():
    """containerName narrows an exit-code rule to that container, as getMatchingContainerFromList does."""
    ignore_others = [
        {"action": "Ignore", "onExitCodes": {"containerName": "sidecar", "operator": "In", "values": [143]}}
    ]
    assert train_job_outcome(_runtime(ignore_others), PodEnd(143)) == "failed"
    ignore_node = [
        {"action": "Ignore", "onExitCodes": {"containerName": "node", "operator": "In", "values": [143]}}
    ]
    assert train_job_outcome(_runtime(ignore_node), PodEnd(143)) == "replaced without counting"


def test_the_pod_a_pod_end_stands_for():
    assert failed_pod(PodEnd(None, ("DisruptionTarget",)), "node")["status"] == {
        "phase": "Failed",
        "containerStatuses": [],
        "conditions": [DISRUPTED],
    }
