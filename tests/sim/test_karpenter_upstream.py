"""Karpenter's own specs (kubernetes-sigs/karpenter v1.14.1, vendored under sim/vendored/) run on
sim/karpenter_disruption.py: pkg/utils/pod/suite_test.go (IsDoNotDisruptActive, IsDisruptable) and
pkg/controllers/node/termination/terminator/suite_test.go's "Pod Deletion API" (DeleteExpiringPods; its
"Eviction API" context, PDBs and the eviction queue, is not modelled: a do-not-disrupt pod is never
evicted). Each case keeps upstream's spec name. Times are seconds: a pod started 10 minutes ago has run
600 s."""

from __future__ import annotations

import pytest

from sim.karpenter_disruption import (
    DO_NOT_DISRUPT,
    do_not_disrupt_active,
    expiring_pod_grace,
    go_duration,
    is_disruptable,
)
from tests.sim.upstream_tables import assert_covered, ginkgo_cases

POD_SUITE = "kubernetes-sigs/karpenter/v1.14.1/pkg/utils/pod/suite_test.go"
TERMINATOR_SUITE = (
    "kubernetes-sigs/karpenter/v1.14.1/pkg/controllers/node/termination/terminator/suite_test.go"
)
TEN_MINUTES = 600.0


def _annotated(value: str | None) -> dict[str, str]:
    return {} if value is None else {DO_NOT_DISRUPT: value}


# Describe("IsDoNotDisruptActive"): spec -> (annotation, seconds since startTime or None, active)
DO_NOT_DISRUPT_ACTIVE = {
    "should return false when no annotation exists": (None, TEN_MINUTES, False),
    "should return true for 'true' annotation": ("true", TEN_MINUTES, True),
    "should return false and emit event for invalid duration format": ("invalid-format", TEN_MINUTES, False),
    "should return false and emit event for zero duration": ("0s", TEN_MINUTES, False),
    "should return false and emit event for negative duration": ("-5m", TEN_MINUTES, False),
    "should return true and emit disruptable-at event when duration has not expired": (
        "15m",
        TEN_MINUTES,
        True,
    ),
    "should return false and emit grace period elapsed event when duration has expired": (
        "5m",
        TEN_MINUTES,
        False,
    ),
    "should fail safe when start time is nil": ("5m", None, True),
    "should not emit disruptable-at event for indefinite protection": ("true", TEN_MINUTES, True),
}
# Describe("IsDisruptable"): spec -> (annotation, phase, disruptable)
DISRUPTABLE = {
    "should be disruptable for active pod without annotation": (None, "Running", True),
    "should not be disruptable for active pod with 'true' annotation and not emit invalid annotation event": (
        "true",
        "Running",
        False,
    ),
    "should be disruptable for active pod with expired duration and not emit invalid annotation event": (
        "5m",
        "Running",
        True,
    ),
    "should not be disruptable for active pod with non-expired duration": ("15m", "Running", False),
    "should be disruptable for terminal pod even with annotation": ("true", "Succeeded", True),
}
# Context("Pod Deletion API"): spec -> (pod terminationGracePeriodSeconds, node termination in s,
# the grace it is deleted with or None)
DELETE_EXPIRING = {
    "should not delete a pod with no nodeTerminationTime": (30, None, None),
    "should not delete a pod with terminationGracePeriodSeconds still remaining before nodeTerminationTime": (
        60,
        5 * 60,
        None,
    ),
    "should delete a pod with less than terminationGracePeriodSeconds remaining before nodeTerminationTime": (
        120,
        60,
        60,
    ),
    "should clamp gracePeriodSeconds to >= 1 when nodeTerminationTime is in the past": (120, -3600, 1),
}
EVICTION = (
    "the Eviction API, PDBs and the eviction queue are not modelled (a do-not-disrupt pod is never evicted)"
)
SKIPPED_TERMINATOR: dict[str, str] = {}  # the vendored lines hold the Pod Deletion API context only


def test_every_pod_spec_is_run():
    assert_covered(ginkgo_cases(POD_SUITE), [*DO_NOT_DISRUPT_ACTIVE, *DISRUPTABLE], {})


def test_every_pod_deletion_spec_is_run():
    assert_covered(ginkgo_cases(TERMINATOR_SUITE), DELETE_EXPIRING, {})


@pytest.mark.parametrize("spec", DO_NOT_DISRUPT_ACTIVE)
def test_is_do_not_disrupt_active(spec):
    value, running, expected = DO_NOT_DISRUPT_ACTIVE[spec]
    assert do_not_disrupt_active(_annotated(value), running) is expected


@pytest.mark.parametrize("spec", DISRUPTABLE)
def test_is_disruptable(spec):
    value, phase, expected = DISRUPTABLE[spec]
    assert is_disruptable(phase, _annotated(value), TEN_MINUTES) is expected


@pytest.mark.parametrize("spec", DELETE_EXPIRING)
def test_delete_expiring_pods(spec):
    grace, termination_in, expected = DELETE_EXPIRING[spec]
    assert expiring_pod_grace(grace, termination_in) == expected


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("15m", 900.0), ("1h30m", 5400.0), ("-5m", -300.0), ("1.5h", 5400.0), ("300ms", 0.3), ("0", 0.0)],
)
def test_go_durations(text, seconds):
    assert go_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["invalid-format", "", "5", "1x", ".s", "1h 30m"])
def test_go_duration_refuses(text):
    with pytest.raises(ValueError, match="invalid duration"):
        go_duration(text)
