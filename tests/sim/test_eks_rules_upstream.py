"""pulumi-eks's own unit tests, at the commit the model was read at (0f5a544), run on sim/pulumi/eks_rules.py.

Vendored under sim/vendored/pulumi/pulumi-eks/0f5a544/: nodejs/eks/cluster/authenticationMode.test.ts
(validateAuthenticationMode, supportsConfigMap, supportsAccessEntries) and cluster/cluster.test.ts
(createCore's checks). nodejs/eks/nodes/nodegroup.test.ts createManagedNodeGroup's cases are transcribed
(the index holds no 0f5a544 text of them; sim/models.yaml says so). Each case keeps upstream's name; a
case that expects a throw expects exactly that message from the ported rules, one that expects none
expects no rule to fire.
"""

from __future__ import annotations

import pytest

from sim.pulumi import eks_rules as rules
from tests.sim.upstream_tables import assert_covered, jest_cases

AUTH_MODE_TEST = "pulumi/pulumi-eks/0f5a544/nodejs/eks/cluster/authenticationMode.test.ts"
CLUSTER_TEST = "pulumi/pulumi-eks/0f5a544/nodejs/eks/cluster/cluster.test.ts"
ROLE = "testRole"
ROLE_MAPPING = [{"roleArn": "roleArn", "groups": ["test-group"], "username": "test-role"}]
USER_MAPPING = [{"userArn": "userArn", "groups": ["test-group"], "username": "test-role"}]
ENTRY = {"entry1": {"principalArn": "roleArn"}}


def _api_set(prop: str) -> str:
    return (
        f"The '{prop}' property does not support non-empty values when 'authenticationMode' is set to 'API'."
    )


# describe("validateAuthenticationMode"): name -> (args, error or None)
VALIDATE_AUTH_MODE = {
    "should throw an error for invalid authentication mode": (
        {"authenticationMode": "INVALID_MODE"},
        "Invalid value for authenticationMode: INVALID_MODE. Allowed values are: CONFIG_MAP, "
        "API_AND_CONFIG_MAP, API.",
    ),
    "should throw an error for roleMappings when authentication mode is set to API": (
        {"authenticationMode": "API", "roleMappings": ROLE_MAPPING},
        _api_set("roleMappings"),
    ),
    "should throw an error for userMappings when authentication mode is set to API": (
        {"authenticationMode": "API", "userMappings": USER_MAPPING},
        _api_set("userMappings"),
    ),
    "should throw an error for instanceRoles when authentication mode is set to API": (
        {"authenticationMode": "API", "instanceRoles": [ROLE]},
        _api_set("instanceRoles"),
    ),
    "should not throw an error for instanceRoles=[] when authentication mode is set to API": (
        {"authenticationMode": "API", "instanceRoles": []},
        None,
    ),
    "should throw an error for accessEntries when authentication mode is set to CONFIG_MAP": (
        {"authenticationMode": "CONFIG_MAP", "accessEntries": ENTRY},
        "The 'accessEntries' property is not supported when 'authenticationMode' is set to 'CONFIG_MAP'.",
    ),
    "should throw an error for accessEntries when authentication mode is not set": (
        {"accessEntries": ENTRY},
        "The 'accessEntries' property is not supported when 'authenticationMode' is not set.",
    ),
}
VALID_MODES = "should not throw an error for valid authentication mode and properties"
VALID_MODE_ARGS = [  # test.each(cases)(VALID_MODES)
    {
        "authenticationMode": "CONFIG_MAP",
        "roleMappings": ROLE_MAPPING,
        "userMappings": USER_MAPPING,
        "instanceRoles": [ROLE],
    },
    {
        "authenticationMode": "API_AND_CONFIG_MAP",
        "roleMappings": ROLE_MAPPING,
        "userMappings": USER_MAPPING,
        "instanceRoles": [ROLE],
        "accessEntries": ENTRY,
    },
    {"authenticationMode": "API", "accessEntries": ENTRY},
    {"authenticationMode": "API"},
    {"authenticationMode": "CONFIG_MAP"},
    {"authenticationMode": "API_AND_CONFIG_MAP"},
]
# describe("supportsConfigMap"), describe("supportsAccessEntries"): name -> (mode, result)
SUPPORTS_CONFIG_MAP = {
    "should return true when authenticationMode is undefined": (None, True),
    "should return true when authenticationMode is CONFIG_MAP": ("CONFIG_MAP", True),
    "should return true when authenticationMode is API_AND_CONFIG_MAP": ("API_AND_CONFIG_MAP", True),
    "should return false when authenticationMode is API": ("API", False),
}
SUPPORTS_ACCESS_ENTRIES = {
    "should return true when authenticationMode is API": ("API", True),
    "should return true when authenticationMode is API_AND_CONFIG_MAP": ("API_AND_CONFIG_MAP", True),
    "should return false when authenticationMode is CONFIG_MAP": ("CONFIG_MAP", False),
    "should return false when authenticationMode is undefined": (None, False),
}
# describe("createCore"): name -> (args, error)
CREATE_CORE = {
    "should throw an error if both instanceRole and instanceRoles are set": (
        {"instanceRole": "test-role", "instanceRoles": ["test-role-1"]},
        "instanceRole and instanceRoles are mutually exclusive, and cannot both be set.",
    ),
    "should throw an error if both subnetIds and publicSubnetIds/privateSubnetIds are set": (
        {"subnetIds": ["subnet-123"], "publicSubnetIds": ["subnet-456"]},
        "subnetIds, and the use of publicSubnetIds and/or privateSubnetIds are mutually exclusive. Choose a "
        "single approach.",
    ),
    "should throw an error if both nodeGroupOptions and singular node group options are set": (
        {"nodeGroupOptions": {}, "nodeSubnetIds": ["subnet-123"]},
        "Setting nodeGroupOptions, and any set of singular node group option(s) on the cluster, is mutually "
        "exclusive. Choose a single approach.",
    ),
    "should throw an error if autoMode is enabled and authentication mode does not support access entries": (
        {"autoMode": {"enabled": True}, "authenticationMode": "CONFIG_MAP"},
        "Access entries are required when using EKS Auto Mode. Use the authentication mode 'API' or "
        "'API_AND_CONFIG_MAP'.",
    ),
}
API_CLUSTER = {"authenticationMode": "API"}
# nodegroup.test.ts describe("createManagedNodeGroup") (transcribed): name -> (group args, error or None)
MANAGED_NODE_GROUP = {
    "should default to the cluster version if no version is provided": ({"nodeRoleArn": "nodeRoleArn"}, None),
    "should use user defined version if provided": ({"nodeRoleArn": "nodeRoleArn", "version": "1.29"}, None),
    "should not default the version if a custom launch template is configured": (
        {"nodeRoleArn": "nodeRoleArn", "launchTemplate": {"id": "lt-id", "version": "lt-version"}},
        None,
    ),
    "should throw an error if placementGroupAvailabilityZone is not provided when enabling EFA support": (
        {"nodeRoleArn": "nodeRoleArn", "enableEfaSupport": True},
        "You must specify placementGroupAvailabilityZone when enabling EFA support.",
    ),
    "should return empty string for placement group name if efa support is not enabled": (
        {"nodeRoleArn": "nodeRoleArn"},
        None,
    ),
    "should return a placement group name if efa support is enabled": (
        {
            "nodeRoleArn": "nodeRoleArn",
            "enableEfaSupport": True,
            "placementGroupAvailabilityZone": "us-west-2a",
            "subnetIds": ["subnet-12345", "subnet-67890", "subnet-54321"],
        },
        None,
    ),
}


def _cluster_messages(args: dict, source: str | None = None) -> list[str]:
    return [
        m
        for r in rules.RULES
        if r.type == rules.CLUSTER and source in (None, r.source)
        if (m := r.check(args))
    ]


def test_every_authentication_mode_case_is_run():
    run = [*VALIDATE_AUTH_MODE, VALID_MODES, *SUPPORTS_CONFIG_MAP, *SUPPORTS_ACCESS_ENTRIES]
    assert_covered(jest_cases(AUTH_MODE_TEST), run, {})


def test_every_create_core_case_is_run():
    assert_covered(jest_cases(CLUSTER_TEST), CREATE_CORE, {})


@pytest.mark.parametrize("name", VALIDATE_AUTH_MODE)
def test_validate_authentication_mode(name):
    args, error = VALIDATE_AUTH_MODE[name]
    assert _cluster_messages(args, rules.AUTH_MODE) == ([error] if error else [])


@pytest.mark.parametrize("args", VALID_MODE_ARGS)
def test_validate_authentication_mode_accepts_valid_modes(args):
    assert _cluster_messages(args, rules.AUTH_MODE) == []


@pytest.mark.parametrize("name", SUPPORTS_CONFIG_MAP)
def test_supports_config_map(name):
    mode, expected = SUPPORTS_CONFIG_MAP[name]
    assert rules.supports_config_map(mode) is expected


@pytest.mark.parametrize("name", SUPPORTS_ACCESS_ENTRIES)
def test_supports_access_entries(name):
    mode, expected = SUPPORTS_ACCESS_ENTRIES[name]
    assert rules.supports_access_entries(mode) is expected


@pytest.mark.parametrize("name", CREATE_CORE)
def test_create_core(name):
    args, error = CREATE_CORE[name]
    assert _cluster_messages(args, rules.CREATE_CORE) == [error]


@pytest.mark.parametrize("name", MANAGED_NODE_GROUP)
def test_create_managed_node_group(name):
    group, error = MANAGED_NODE_GROUP[name]
    found = [m for r in rules.RULES if r.type == rules.NODE_GROUP if (m := r.check(group, API_CLUSTER))]
    assert found == ([error] if error else [])
