"""sim/kubernetes/names.py against Kubernetes' own tables (release-1.35, the library of the platform's
version): k8s.io/apimachinery pkg/util/validation/validation_test.go TestIsDNS1123Label,
TestIsDNS1123Subdomain, TestIsDNS1035Label and TestIsDomainPrefixedPath, and pkg/api/validate/content/
kube_test.go TestIsLabelKey (the values of validation_test.go TestIsQualifiedName) and TestIsLabelValue,
vendored under sim/vendored/kubernetes/kubernetes/release-1.35/ (PROVENANCE.txt). The values are read
from the vendored files, so every good and bad value upstream lists is run; the other tests of
validation_test.go check validators the port does not have (ports, IDs, percentages, header and env
names, FQDNs) and are not vendored.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from sim.kubernetes import names
from tests.sim.upstream_tables import go_string_tables

APIMACHINERY = "kubernetes/kubernetes/release-1.35/staging/src/k8s.io/apimachinery/pkg"
VALIDATION_TEST = f"{APIMACHINERY}/util/validation/validation_test.go"
KUBE_TEST = f"{APIMACHINERY}/api/validate/content/kube_test.go"

# upstream test -> the port's function (the errors it returns: none for a good value)
PORTED: dict[str, Callable[[str], list]] = {
    "TestIsDNS1123Label": names.dns1123_label,
    "TestIsDNS1123Subdomain": names.dns1123_subdomain,
    "TestIsDNS1035Label": names.dns1035_label,
    "TestIsDomainPrefixedPath": lambda value: names.domain_prefixed_path("", value),
    "TestIsLabelKey": names.label_key,
    "TestIsLabelValue": names.label_value,
}
GOOD, BAD = ("goodValues", "successCases"), ("badValues", "errorCases")
# How many values each vendored table lists: a reader that skipped some would change these.
SIZES = {
    "TestIsDNS1123Label": (13, 34),
    "TestIsDNS1123Subdomain": (41, 60),
    "TestIsDNS1035Label": (7, 40),
    "TestIsDomainPrefixedPath": (13, 16),
    "TestIsLabelKey": (17, 10),
    "TestIsLabelValue": (7, 8),
}


def _tables() -> dict[str, dict[str, list[str]]]:
    return {**go_string_tables(VALIDATION_TEST), **go_string_tables(KUBE_TEST)}


def _cases() -> list:
    cases = []
    for test, lists in _tables().items():
        for kind, values in lists.items():
            good = kind in GOOD
            for index, value in enumerate(values):
                shown = value if len(value) <= 40 else f"{value[:12]}...({len(value)} chars)"
                cases.append(pytest.param(test, value, good, id=f"{test}-{kind}[{index}]-{shown}"))
    return cases


def test_every_vendored_table_is_run_whole():
    tables = _tables()
    assert set(tables) == set(PORTED)
    for test, (good, bad) in SIZES.items():
        lists = tables[test]
        assert set(lists) in ({"goodValues", "badValues"}, {"successCases", "errorCases"}), test
        counts = tuple(len(v) for k, v in sorted(lists.items(), key=lambda kv: kv[0] not in GOOD))
        assert counts == (good, bad), test


@pytest.mark.parametrize(("test", "value", "good"), _cases())
def test_upstream_value(test, value, good):
    errors = PORTED[test](value)
    assert (not errors) is good, f"{test}({value!r}): {[str(e) for e in errors]}"
