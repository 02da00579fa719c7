"""Every rule, and the pulumi-policy wrappers that hand them to the Pulumi engine."""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping, Sequence
from typing import Any

import pulumi.runtime
from pulumi_policy import (
    EnforcementLevel,
    Policy,
    ReportViolation,
    ResourceValidationArgs,
    ResourceValidationPolicy,
    Severity,
    StackValidationArgs,
    StackValidationPolicy,
)

from infra.config.environment import is_prod
from policy import (
    eks,
    eks_access,
    helm_values,
    iam,
    image_digests,
    k8s,
    k8s_access,
    k8s_exposure,
    k8s_rbac,
    network,
    placeholders,
    resource_policies,
    storage,
)
from policy.core import Resource, Rule, StackRule, in_scope

PACK_NAME = "mlops-eks-guardrails"
RULES: tuple[Rule, ...] = (
    *eks.RULES,
    *eks_access.RULES,
    *network.RULES,
    *storage.RULES,
    *resource_policies.RULES,
    *iam.RULES,
    *k8s.RULES,
    *k8s_access.RULES,
    *k8s_rbac.RULES,
    *k8s_exposure.RULES,
    *helm_values.RULES,
    *image_digests.RULES,
    *placeholders.RULES,
)
STACK_RULES: tuple[StackRule, ...] = (
    *storage.STACK_RULES,
    *iam.STACK_RULES,
    *network.STACK_RULES,
    *k8s_rbac.STACK_RULES,
    *k8s_exposure.STACK_RULES,
    *eks_access.STACK_RULES,
)


def _prod(stack_tags: Mapping[str, str]) -> bool:
    """The engine hands the pack the stack's config in PULUMI_CONFIG (pulumi/pulumi
    sdk/go/common/resource/plugin/analyzer_plugin.go, constructEnv), the same config the program reads:
    prod unless it says `mlops-eks:environment: dev` (infra/config/environment.py). Stack tags and the stack
    name do not take part, so the program and the pack cannot disagree."""
    return _prod_for(os.environ.get("PULUMI_CONFIG"))


@functools.lru_cache(maxsize=4)
def _prod_for(_config_text: str | None) -> bool:
    """Read once per config text: every rule asks for every resource, and the SDK parses the whole stack
    config on each call. Keyed by the text, so a process whose PULUMI_CONFIG changes reads it again."""
    return is_prod(pulumi.runtime.get_config_env())


def _message(text: str, remediation: str) -> str:
    return f"{text}\nRemediation: {remediation}"


def _metadata(rule: Rule | StackRule) -> dict[str, Any]:
    """What CrossGuard shows for a policy: name, description, level, severity and remediation."""
    return {
        "name": rule.name,
        "description": rule.description,
        "enforcement_level": EnforcementLevel(rule.level),
        "severity": Severity(rule.severity),
        "remediation_steps": rule.remediation,
    }


def resource_policy(rule: Rule) -> ResourceValidationPolicy:
    def validate(args: ResourceValidationArgs, report_violation: ReportViolation) -> None:
        for text in rule.violations(args.resource_type, args.props, _prod(args.stack_tags)):
            report_violation(_message(text, rule.remediation), None)

    return ResourceValidationPolicy(validate=validate, **_metadata(rule))


def _dependency_names(deps: Mapping[str, Sequence[Any]]) -> dict[str, list[str]]:
    return {prop: [d.name for d in resources] for prop, resources in deps.items()}


def stack_policy(rule: StackRule) -> StackValidationPolicy:
    def validate(args: StackValidationArgs, report_violation: ReportViolation) -> None:
        if not in_scope(rule.scope, _prod(args.stack_tags)):
            return
        resources = [
            Resource(
                type=r.resource_type,
                name=r.name,
                inputs=r.props,
                deps=_dependency_names(r.property_dependencies),
            )
            for r in args.resources
        ]
        urns = {r.name: r.urn for r in args.resources}
        for name, text in rule.check(resources):
            report_violation(_message(text, rule.remediation), urns.get(name or ""))

    return StackValidationPolicy(validate=validate, **_metadata(rule))


def policies() -> list[Policy]:
    return [*map(resource_policy, RULES), *map(stack_policy, STACK_RULES)]
