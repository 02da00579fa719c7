"""The input checks pulumi-eks runs inside its provider, ported as predicates over the inputs our program
passes to `eks.Cluster` and `eks.ManagedNodeGroup` (camelCase, as `infra synth` records them).

Under Pulumi mocks a remote component registers only itself, so these checks never run in our tests;
a violated one fails the real `pulumi up` in the provider. Each predicate returns pulumi-eks's own error
text, or None. Source: pulumi/pulumi-eks `nodejs/eks/` at v4.3.0 (0f5a544); the files are unchanged
through 7bf0c1b (2026-08-12), the newest commit of the snapshot read, which holds no v4.4.0 tag; the
pinned pulumi-eks 4.4.0 was released from that line. JavaScript truthiness is kept: an empty list or
object counts as set where upstream tests `if (x)`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

AUTH_MODE = "nodejs/eks/cluster/authenticationMode.ts (validateAuthenticationMode)"
CREATE_CORE = "nodejs/eks/cluster/cluster.ts (createCore)"
MANAGED_NODE_GROUP = "nodejs/eks/nodes/nodegroup.ts (createManagedNodeGroup)"
CLUSTER = "eks:index:Cluster"
NODE_GROUP = "eks:index:ManagedNodeGroup"
MODES = ("CONFIG_MAP", "API_AND_CONFIG_MAP", "API")


def _truthy(value: Any) -> bool:
    return value is not None and value is not False and value != 0 and value != ""


def supports_config_map(mode: str | None) -> bool:
    return not mode or mode in ("CONFIG_MAP", "API_AND_CONFIG_MAP")


def supports_access_entries(mode: str | None) -> bool:
    return mode in ("API", "API_AND_CONFIG_MAP")


def auth_mode_valid(c: Mapping[str, Any]) -> str | None:
    mode = c.get("authenticationMode")
    if mode and mode not in MODES:
        return f"Invalid value for authenticationMode: {mode}. Allowed values are: {', '.join(MODES)}."
    return None


def api_mode_no_config_map_mappings(c: Mapping[str, Any]) -> str | None:
    mode = c.get("authenticationMode")
    if supports_config_map(mode):
        return None
    for prop in ("roleMappings", "userMappings", "instanceRoles"):
        value = c.get(prop)
        if value is not None and len(value) != 0:
            return (
                f"The '{prop}' property does not support non-empty values when 'authenticationMode' "
                f"is set to '{mode}'."
            )
    return None


def access_entries_need_api_mode(c: Mapping[str, Any]) -> str | None:
    mode = c.get("authenticationMode")
    if not supports_access_entries(mode) and _truthy(c.get("accessEntries")):
        shown = f"set to '{mode}'" if mode is not None else "not set"
        return f"The 'accessEntries' property is not supported when 'authenticationMode' is {shown}."
    return None


def instance_role_exclusive(c: Mapping[str, Any]) -> str | None:
    if _truthy(c.get("instanceRole")) and _truthy(c.get("instanceRoles")):
        return "instanceRole and instanceRoles are mutually exclusive, and cannot both be set."
    return None


def subnet_ids_exclusive(c: Mapping[str, Any]) -> str | None:
    if _truthy(c.get("subnetIds")) and (
        _truthy(c.get("publicSubnetIds")) or _truthy(c.get("privateSubnetIds"))
    ):
        return (
            "subnetIds, and the use of publicSubnetIds and/or privateSubnetIds are mutually exclusive. "
            "Choose a single approach."
        )
    return None


SINGULAR_NODE_GROUP_OPTIONS = (
    "nodeSubnetIds",
    "nodeAssociatePublicIpAddress",
    "instanceType",
    "instanceProfileName",
    "nodePublicKey",
    "nodeRootVolumeSize",
    "nodeUserData",
    "minSize",
    "maxSize",
    "desiredCapacity",
    "nodeAmiId",
    "gpu",
)


def node_group_options_exclusive(c: Mapping[str, Any]) -> str | None:
    if _truthy(c.get("nodeGroupOptions")) and any(_truthy(c.get(k)) for k in SINGULAR_NODE_GROUP_OPTIONS):
        return (
            "Setting nodeGroupOptions, and any set of singular node group option(s) on the cluster, is "
            "mutually exclusive. Choose a single approach."
        )
    return None


def auto_mode_needs_access_entries(c: Mapping[str, Any]) -> str | None:
    auto = c.get("autoMode") or {}
    if auto.get("enabled") and not supports_access_entries(c.get("authenticationMode")):
        return (
            "Access entries are required when using EKS Auto Mode. Use the authentication mode 'API' or "
            "'API_AND_CONFIG_MAP'."
        )
    return None


def public_cidrs_need_public_endpoint(c: Mapping[str, Any]) -> str | None:
    public = c.get("endpointPublicAccess")
    if _truthy(c.get("publicAccessCidrs")) and not (True if public is None else public):
        return "`publicAccessCidrs` can only be set when `endpointPublicAccess` is true"
    return None


def node_role_exclusive(g: Mapping[str, Any], _: Mapping[str, Any]) -> str | None:
    if _truthy(g.get("nodeRole")) and _truthy(g.get("nodeRoleArn")):
        return "You cannot specify both nodeRole and nodeRoleArn when creating a managed node group."
    return None


def node_role_required(g: Mapping[str, Any], _: Mapping[str, Any]) -> str | None:
    if not _truthy(g.get("nodeRoleArn")) and not _truthy(g.get("nodeRole")):
        return "An IAM role, or role ARN must be provided to create a managed node group"
    return None


def ami_id_exclusive(g: Mapping[str, Any], _: Mapping[str, Any]) -> str | None:
    for key in ("gpu", "amiType"):
        if _truthy(g.get("amiId")) and _truthy(g.get(key)):
            return f"You cannot specify both amiId and {key} when creating a managed node group."
    return None


def node_role_in_instance_roles(g: Mapping[str, Any], c: Mapping[str, Any]) -> str | None:
    # Access entries can be added out of band, so only config-map clusters need the role listed.
    if not supports_access_entries(c.get("authenticationMode")) and g.get("nodeRole") not in (
        c.get("instanceRoles") or []
    ):
        return (
            "A managed node group cannot be created without first setting its role in the cluster's "
            "instanceRoles"
        )
    return None


def efa_needs_placement_zone(g: Mapping[str, Any], _: Mapping[str, Any]) -> str | None:
    if _truthy(g.get("enableEfaSupport")) and not _truthy(g.get("placementGroupAvailabilityZone")):
        return "You must specify placementGroupAvailabilityZone when enabling EFA support."
    return None


CUSTOM_USER_DATA_ARGS = (
    "bootstrapExtraArgs",
    "kubeletExtraArgs",
    "bottlerocketSettings",
    "nodeadmExtraOptions",
)
CUSTOM_LAUNCH_TEMPLATE_ARGS = (
    *CUSTOM_USER_DATA_ARGS,
    "enableIMDSv2",
    "userData",
    "amiId",
    "enableEfaSupport",
)


def launch_template_exclusive(g: Mapping[str, Any], _: Mapping[str, Any]) -> str | None:
    if _truthy(g.get("launchTemplate")) and any(g.get(k) is not None for k in CUSTOM_LAUNCH_TEMPLATE_ARGS):
        return (
            f"If you provide a custom launch template, you cannot provide any of "
            f"{', '.join(CUSTOM_LAUNCH_TEMPLATE_ARGS)}. Please include these in the launch template that "
            "you are providing."
        )
    return None


def user_data_exclusive(g: Mapping[str, Any], _: Mapping[str, Any]) -> str | None:
    if _truthy(g.get("userData")) and any(g.get(k) is not None for k in CUSTOM_USER_DATA_ARGS):
        return (
            f"If you provide custom userData, you cannot provide any of {', '.join(CUSTOM_USER_DATA_ARGS)}. "
            "Please include these in the userData that you are providing."
        )
    return None


TAINT_EFFECTS = ("NO_SCHEDULE", "NO_EXECUTE", "PREFER_NO_SCHEDULE")


def taint_effects_valid(g: Mapping[str, Any], _: Mapping[str, Any]) -> str | None:
    # nodegroup.ts mapMngTaintEffect; the EKS NodeGroup API takes the same enum.
    for taint in g.get("taints") or []:
        if taint.get("effect") not in TAINT_EFFECTS:
            return f"Invalid taint effect: {taint.get('effect')}. Must be one of {', '.join(TAINT_EFFECTS)}."
    return None


@dataclass(frozen=True)
class UpstreamRule:
    name: str
    type: str
    source: str
    # Cluster rules take the cluster's inputs; node group rules (group inputs, its cluster's inputs).
    check: Callable[..., str | None]


RULES = (
    UpstreamRule("authentication-mode-valid", CLUSTER, AUTH_MODE, auth_mode_valid),
    UpstreamRule("api-mode-no-config-map-mappings", CLUSTER, AUTH_MODE, api_mode_no_config_map_mappings),
    UpstreamRule("access-entries-need-api-mode", CLUSTER, AUTH_MODE, access_entries_need_api_mode),
    UpstreamRule("instance-role-exclusive", CLUSTER, CREATE_CORE, instance_role_exclusive),
    UpstreamRule("subnet-ids-exclusive", CLUSTER, CREATE_CORE, subnet_ids_exclusive),
    UpstreamRule("node-group-options-exclusive", CLUSTER, CREATE_CORE, node_group_options_exclusive),
    UpstreamRule("auto-mode-needs-access-entries", CLUSTER, CREATE_CORE, auto_mode_needs_access_entries),
    UpstreamRule(
        "public-cidrs-need-public-endpoint", CLUSTER, CREATE_CORE, public_cidrs_need_public_endpoint
    ),
    UpstreamRule("node-role-exclusive", NODE_GROUP, MANAGED_NODE_GROUP, node_role_exclusive),
    UpstreamRule("node-role-required", NODE_GROUP, MANAGED_NODE_GROUP, node_role_required),
    UpstreamRule("ami-id-exclusive", NODE_GROUP, MANAGED_NODE_GROUP, ami_id_exclusive),
    UpstreamRule("node-role-in-instance-roles", NODE_GROUP, MANAGED_NODE_GROUP, node_role_in_instance_roles),
    UpstreamRule("efa-needs-placement-zone", NODE_GROUP, MANAGED_NODE_GROUP, efa_needs_placement_zone),
    UpstreamRule("launch-template-exclusive", NODE_GROUP, MANAGED_NODE_GROUP, launch_template_exclusive),
    UpstreamRule("user-data-exclusive", NODE_GROUP, MANAGED_NODE_GROUP, user_data_exclusive),
    UpstreamRule("taint-effects-valid", NODE_GROUP, MANAGED_NODE_GROUP, taint_effects_valid),
)


def violations(resources: Iterable[Mapping[str, Any]]) -> list[str]:
    """`rule: resource: upstream message` for every rule a synthesized resource breaks. `resources` are
    `infra synth --json` records ({"type", "name", "inputs"}); a node group's cluster is the one its
    `cluster` input references."""
    resources = list(resources)
    clusters = {r["name"]: r["inputs"] for r in resources if r["type"] == CLUSTER}
    found = []
    for r in resources:
        if r["type"] == CLUSTER:
            args: tuple = (r["inputs"],)
        elif r["type"] == NODE_GROUP:
            ref = str(r["inputs"].get("cluster", ""))
            cluster = clusters.get(ref.removeprefix("[resource ").removesuffix("]"))
            if cluster is None:
                found.append(f"cluster: {r['name']}: references no eks.Cluster of this stack ({ref})")
                continue
            args = (r["inputs"], cluster)
        else:
            continue
        for rule in RULES:
            if rule.type == r["type"] and (message := rule.check(*args)):
                found.append(f"{rule.name}: {r['name']}: {message}")
    return found
