"""sim/admission/jobset_webhook.py against JobSet's own test table: the failure-policy cases of
kubernetes-sigs/jobset v0.12.0 pkg/webhooks/jobset_webhook_test.go TestValidateCreate (`failurePolicyTests`,
vendored verbatim at sim/vendored/kubernetes-sigs/jobset/v0.12.0/pkg/webhooks/jobset_webhook_test.go),
transcribed case by case; then the port on the JobSets Trainer creates from the committed stacks."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from sim.admission import jobset_webhook

VENDORED = Path(__file__).resolve().parents[2] / "sim/vendored/kubernetes-sigs/jobset/v0.12.0/pkg/webhooks"
BAD_NAME = (
    "invalid failure policy rule name '{}', a failure policy rule name must start with an alphabetic "
    "character, optionally followed by a string of alphanumeric characters or '_,:', and must end with an "
    "alphanumeric character or '_'"
)
BAD_LENGTH = (
    "invalid failure policy rule name of length {}, the rule name must be at least 1 characters long and at "
    "most 128 characters long"
)


def _jobset(rules: list[dict], max_restarts: int | None = None) -> dict:
    """The cases' JobSet: one replicated job `rj` (group default, 1 replica, Indexed 1/1) and the policy."""
    policy: dict = {"rules": rules}
    if max_restarts is not None:
        policy["maxRestarts"] = max_restarts
    rjob = {
        "name": "rj",
        "groupName": "default",
        "replicas": 1,
        "template": {"spec": {"completionMode": "Indexed", "completions": 1, "parallelism": 1}},
    }
    return {
        "metadata": {"name": "js"},
        "spec": {"replicatedJobs": [rjob], "failurePolicy": policy, "successPolicy": {}},
    }


# (Go test case name, JobSet, the errors it wants), in the table's order.
CASES = [
    ("failure policy rule name is valid", _jobset([{"name": "superAwesomeFailurePolicyRule"}]), []),
    (
        "jobset failure policy has an invalid on job failure reason",
        _jobset([{"action": "FailJobSet", "onJobFailureReasons": ["fakeReason"]}], max_restarts=1),
        [
            "invalid job failure reason 'fakeReason' in failure policy is not a recognized job failure "
            "reason",
        ],
    ),
    (
        "jobset failure policy has an invalid replicated job",
        _jobset([{"action": "FailJobSet", "targetReplicatedJobs": ["fakeReplicatedJob"]}], max_restarts=1),
        [
            "invalid replicatedJob name 'fakeReplicatedJob' in failure policy does not appear in "
            ".spec.ReplicatedJobs"
        ],
    ),
    (
        "jobset failure policy rule name is 0 characters long a.k.a unset",
        _jobset([{}]),
        [BAD_LENGTH.format(0)],
    ),
    (
        "jobset failure policy rule name is greater than 128 characters long",
        _jobset([{"name": "a" * 129}]),
        [BAD_LENGTH.format(129)],
    ),
    (
        "there are two failure policy rules with the same name",
        _jobset([{"name": "repeatedRuleName"}, {"name": "repeatedRuleName"}]),
        ["rule names are not unique, rules with indices [0 1] all have the same name 'repeatedRuleName'"],
    ),
    (
        "failure policy rule name does not start with an alphabetic character",
        _jobset([{"name": "1ruleToRuleThemAll"}]),
        [BAD_NAME.format("1ruleToRuleThemAll")],
    ),
    (
        "failure policy rule name does not end with an alphanumeric nor '_'",
        _jobset([{"name": "ruleToRuleThemAll,"}]),
        [BAD_NAME.format("ruleToRuleThemAll,")],
    ),
]


def test_every_case_of_the_vendored_table_is_transcribed():
    names = re.findall(r'^\t\t\tname: "(.*)",$', (VENDORED / "jobset_webhook_test.go").read_text(), re.M)
    assert names == [c[0] for c in CASES]


@pytest.mark.parametrize(("case", "jobset", "want"), CASES, ids=[c[0] for c in CASES])
def test_validate_create_as_upstream(case, jobset, want):
    """The table's own check (TestValidateCreate's loop): no error when it wants none (errors.Join() is
    nil), else every wanted message among the errors returned."""
    got = jobset_webhook.validate_create(jobset)
    if not want:
        assert got == []
    for message in want:
        assert any(message in g for g in got), (message, got)


def test_default_names_an_unnamed_rule_so_trainer_jobsets_pass():
    defaulted = jobset_webhook.default(_jobset([{"action": "FailJobSet"}]))
    assert defaulted["spec"]["failurePolicy"]["rules"][0]["name"] == "failurePolicyRule0"
    assert jobset_webhook.validate_create(defaulted) == []


@pytest.mark.parametrize(
    ("name", "refused"),
    [("permanent-exit-code", True), ("PermanentExitCode", False), ("permanent_exit:code", False)],
)
def test_the_rule_name_rule_that_stopped_every_train_job(name, refused):
    assert bool(jobset_webhook.validate_create(_jobset([{"name": name}]))) is refused


def test_names_too_long_for_the_generated_jobs_or_pods_are_refused():
    jobset = _jobset([{"name": "ok"}])
    jobset["metadata"]["name"] = "j" * 55  # j...-rj-0 fits 63; with "-0-abcde" the pod name does not
    got = jobset_webhook.validate_create(jobset)
    assert got == [
        f"spec.replicatedJobs[0].name: Invalid value: '{'j' * 55}-rj-0': {jobset_webhook.POD_NAME_TOO_LONG}"
    ]


def test_the_committed_stacks_jobsets_pass_and_set_nothing_the_port_leaves_out(stack_lives):
    jobsets = [c.obj for _, _, life in stack_lives.values() for c in life if c.obj["kind"] == "JobSet"]
    assert jobsets
    for jobset in jobsets:
        assert jobset_webhook.validate_create(jobset_webhook.default(jobset)) == []
        assert not set(jobset["spec"]) & set(jobset_webhook.UNPORTED_FIELDS), jobset["metadata"]["name"]
        assert "subdomain" not in (jobset["spec"].get("network") or {})
