"""sim/kubernetes/job_validation.py against Kubernetes' own test table: the podFailurePolicy, restart and
replacement cases of TestValidateJob (kubernetes/kubernetes pkg/apis/batch/validation/validation_test.go),
transcribed case by case under the upstream key (the error the case expects). The file is not vendored:
the public code index holds it at commits other than release-1.35 (sim/models.yaml says so); the
podFailurePolicy code these cases exercise is the same in those versions and the k8s.io/api v0.35.0 types
(the limits: 20 rules, 255 exit codes, 20 condition patterns). Then the Jobs the controllers create from
the committed stacks."""

from __future__ import annotations

import copy

import pytest

from sim.kubernetes.job_validation import UNPORTED_FIELDS, validate_job, validate_job_spec

# validPodTemplateSpecForGeneratedRestartPolicyNever: container abc, init container def, restartPolicy Never.
TEMPLATE = {
    "spec": {"restartPolicy": "Never", "containers": [{"name": "abc"}], "initContainers": [{"name": "def"}]}
}


def _spec(rules: list[dict] | None = None, template: dict | None = None, **fields) -> dict:
    spec = {"template": copy.deepcopy(template or TEMPLATE), **fields}
    if rules is not None:
        spec["podFailurePolicy"] = {"rules": rules}
    return spec


def _codes(values, operator="In", action="FailJob", container=None) -> dict:
    codes = {"operator": operator, "values": values}
    if container:
        codes["containerName"] = container
    return {"action": action, "onExitCodes": codes}


DISRUPTION = {"type": "DisruptionTarget", "status": "True"}
VALID = {
    # successCases "valid pod failure policy"
    "valid pod failure policy": _spec(
        [
            {"action": "Ignore", "onPodConditions": [DISRUPTION]},
            {"action": "FailJob", "onPodConditions": [{"type": "CustomConditionType", "status": "False"}]},
            _codes([1, 2, 3], action="Count", container="abc"),
            _codes([4], action="Ignore", container="def"),
            _codes([5, 6, 7], operator="NotIn"),
        ]
    ),
    # successCases "valid pod failure policy with FailIndex"
    "valid pod failure policy with FailIndex": _spec(
        [_codes([10], action="FailIndex")], completionMode="Indexed", completions=2, backoffLimitPerIndex=1
    ),
}
# errorCases: the upstream key (what the case expects) -> the Job spec.
ERRORS = {
    "spec.podFailurePolicy.rules[0]: Invalid value: specifying one of OnExitCodes and"
    " OnPodConditions is required": (_spec([{"action": "FailJob"}])),
    "spec.podFailurePolicy.rules[0].onExitCodes.values[1]: Duplicate value: 11": _spec([_codes([11, 11])]),
    "spec.podFailurePolicy.rules[0].onExitCodes.values: Too many: 256: must have at most 255 items": _spec(
        [_codes(list(range(256)))]
    ),
    "spec.podFailurePolicy.rules: Too many: 21: must have at most 20 items": _spec(
        [_codes([i + 1]) for i in range(21)]
    ),
    "spec.podFailurePolicy.rules[0].onPodConditions: Too many: 21: must have at most 20 items": _spec(
        [
            {
                "action": "FailJob",
                "onPodConditions": [{"type": f"CustomType_{i}", "status": "True"} for i in range(21)],
            }
        ]
    ),
    "spec.podFailurePolicy.rules[0].onExitCodes.values[2]: Duplicate value: 13": _spec(
        [_codes([12, 13, 13, 13])]
    ),
    "spec.podFailurePolicy.rules[0].onExitCodes.values: Invalid value: []int32{19, 11}: must be"
    " ordered": _spec([_codes([19, 11])]),
    "spec.podFailurePolicy.rules[0].onExitCodes.values: Invalid value: []int32{}: at least one"
    " value is required": (_spec([_codes([])])),
    'spec.podFailurePolicy.rules[0].action: Required value: valid values: ["Count" "FailIndex"'
    ' "FailJob" "Ignore"]': (_spec([_codes([1, 2, 3], action="")])),
    'spec.podFailurePolicy.rules[0].onExitCodes.operator: Required value: valid values: ["In"'
    ' "NotIn"]': _spec([_codes([1, 2, 3], operator="")]),
    "spec.podFailurePolicy.rules[0]: Invalid value: specifying both OnExitCodes and"
    " OnPodConditions is not supported": (
        _spec([{**_codes([1, 2, 3], container="abc"), "onPodConditions": [DISRUPTION]}])
    ),
    "spec.podFailurePolicy.rules[0].onExitCodes.values[1]: Invalid value: 0: must not be 0 for"
    " the In operator": (_spec([_codes([1, 0, 2], action="Ignore")])),
    'spec.podFailurePolicy.rules[1].onExitCodes.containerName: Invalid value: "xyz": '
    "must be one of the container "
    "or initContainer names in the pod template": _spec(
        [_codes([1, 2, 3], action="Ignore", container="abc"), _codes([5, 6, 7], container="xyz")]
    ),
    'spec.podFailurePolicy.rules[0].action: Unsupported value: "UnknownAction": supported values: "Count", '
    '"FailIndex", "FailJob", "Ignore"': _spec([_codes([1, 2, 3], action="UnknownAction", container="abc")]),
    'spec.podFailurePolicy.rules[0].onExitCodes.operator: Unsupported value: "UnknownOperator": '
    "supported values: "
    '"In", "NotIn"': _spec([_codes([1, 2, 3], operator="UnknownOperator", action="Ignore")]),
    'spec.podFailurePolicy.rules[0].onPodConditions[0].status: Required value: valid values: ["False" "True" '
    '"Unknown"]': _spec([{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]),
    'spec.podFailurePolicy.rules[0].onPodConditions[0].status: Unsupported value: "UnknownStatus": supported '
    'values: "False", "True", "Unknown"': _spec(
        [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "UnknownStatus"}]}]
    ),
    'spec.podFailurePolicy.rules[0].onPodConditions[0].type: Invalid value: "": name part must'
    " be non-empty": _spec([{"action": "Ignore", "onPodConditions": [{"status": "True"}]}]),
    'spec.podFailurePolicy.rules[0].onPodConditions[0].type: Invalid value: "Invalid Condition Type": '
    "name part "
    "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric "
    "character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is "
    "'([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')": _spec(
        [{"action": "Ignore", "onPodConditions": [{"type": "Invalid Condition Type", "status": "True"}]}]
    ),
    'spec.podReplacementPolicy: Unsupported value: "TerminatingOrFailed": supported values: "Failed"': _spec(
        [{"action": "Ignore", "onPodConditions": [DISRUPTION]}], podReplacementPolicy="TerminatingOrFailed"
    ),
    'spec.podReplacementPolicy: Unsupported value: "": supported values: "Failed",'
    ' "TerminatingOrFailed"': _spec(podReplacementPolicy=""),
    'spec.template.spec.restartPolicy: Invalid value: "OnFailure": only "Never" is supported when '
    "podFailurePolicy "
    "is specified": _spec(
        [], template={"spec": {"restartPolicy": "OnFailure", "containers": [{"name": "abc"}]}}
    ),
    "spec.parallelism:must be greater than or equal to 0": _spec(parallelism=-1),
    "spec.backoffLimit:must be greater than or equal to 0": _spec(backoffLimit=-1),
    "spec.completions:must be greater than or equal to 0": _spec(completions=-1),
    "spec.activeDeadlineSeconds:must be greater than or equal to 0": _spec(activeDeadlineSeconds=-1),
    "spec.template.spec.restartPolicy: Required value": _spec(
        template={"spec": {"restartPolicy": "Always", "containers": [{"name": "abc"}]}}
    ),
}


TYPES = ("Invalid value", "Duplicate value", "Too many", "Required value", "Unsupported value")


def _path_and_type(key: str) -> tuple[str, str]:
    """The field path and error type of an upstream key: `path: Type: ...`, or `path:detail` for the
    nonnegative fields (ValidateNonnegativeField: an Invalid value)."""
    path, _, rest = key.partition(":")
    return path, next((t for t in TYPES if rest.strip().startswith(t)), "Invalid value")


@pytest.mark.parametrize("case", VALID)
def test_valid_cases_pass(case):
    assert validate_job_spec(VALID[case]) == []


@pytest.mark.parametrize("key", ERRORS)
def test_error_cases_give_the_upstream_error(key):
    """The first error is the one the case's key names (upstream compares the first error's string,
    ignoring the value's rendering for some)."""
    path, kind = _path_and_type(key)
    errors = validate_job_spec(ERRORS[key])
    assert errors, key
    assert (errors[0].path, errors[0].type) == (path, kind), (key, [str(e) for e in errors])
    detail = key.split(": ")[-1] if ": " in key else key.split(":", 1)[1]
    assert detail in str(errors[0]), (key, str(errors[0]))


def test_a_job_name_must_fit_its_pods_job_name_label():
    """The Job controller labels its pods batch.kubernetes.io/job-name=<name>: a label value, 63 at most."""
    job = {"metadata": {"name": "a" * 64}, "spec": _spec()}
    (error,) = validate_job(job)
    assert error.path == "metadata.labels[batch.kubernetes.io/job-name]" and "63" in error.detail


def test_the_committed_stacks_jobs_set_no_field_the_port_leaves_out(stack_jobs):
    for job in stack_jobs:
        assert not set(job["spec"]) & set(UNPORTED_FIELDS), job["metadata"]["name"]
