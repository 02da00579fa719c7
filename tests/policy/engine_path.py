"""The policy pack as `pulumi preview|up --policy-pack policy` runs it, in-process: a resource's inputs go
through the conversion the rehearsal's engine stand-in uses (sim/pulumi/engine.py `_for_analyzer`, then
`_struct`: a protobuf Struct, so every number arrives as a float, resource references as ids, `__` keys
dropped), into pulumi-policy's own analyzer servicer, which deserialises them (`deserialize_properties`,
secrets unwrapped) behind its unknown-checking proxies and calls the pack's policies. Stack policies get
the resources with their property dependencies as URNs, as AnalyzeStack sends them.

Every pack test that judges a rule's verdict goes through here, so a rule that works on the Python values
a test writes but not on what the engine hands over (an `int` check, a "0" compared with "0.0") fails."""

from __future__ import annotations

import contextlib
import functools
import json
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pulumi.runtime.proto import analyzer_pb2
from pulumi_policy.policy import EnforcementLevel, _PolicyAnalyzerServicer

from infra.config.environment import ENVIRONMENT_KEY
from policy.core import Resource
from policy.pack import PACK_NAME, policies
from sim.pulumi.engine import LEVELS, _for_analyzer, _struct

# What a computed output is during a preview (pulumi/sdk/python/lib/pulumi/runtime/rpc.py UNKNOWN).
UNKNOWN = "04da6b54-80e4-46f7-96ec-b56ff0331ba9"
STACK = "dev"
PROJECT = "mlops-eks"


@dataclass(frozen=True)
class Diagnostic:
    policy: str
    level: str
    urn: str
    message: str


@functools.cache
def servicer() -> _PolicyAnalyzerServicer:
    """The analyzer the pack's entry point serves (policy/__main__.py), each policy at its own level."""
    return _PolicyAnalyzerServicer(PACK_NAME, "0.1.0", policies(), EnforcementLevel.MANDATORY)


def urn(type_: str, name: str) -> str:
    return f"urn:pulumi:{STACK}::{PROJECT}::{type_}::{name}"


@contextlib.contextmanager
def stack_config(prod: bool) -> Iterator[None]:
    """The config the engine hands the analyzer (PULUMI_CONFIG): prod unless it says dev."""
    before = os.environ.get("PULUMI_CONFIG")
    os.environ["PULUMI_CONFIG"] = json.dumps({} if prod else {ENVIRONMENT_KEY: "dev"})
    try:
        yield
    finally:
        if before is None:
            del os.environ["PULUMI_CONFIG"]
        else:
            os.environ["PULUMI_CONFIG"] = before


def as_sent(inputs: Mapping[str, Any]) -> Any:
    """The properties message the engine sends an analyzer for these inputs."""
    return _struct(_for_analyzer(json.loads(json.dumps(dict(inputs)))))


def _diagnostics(response: analyzer_pb2.AnalyzeResponse, default_urn: str) -> list[Diagnostic]:
    return [
        Diagnostic(d.policyName, LEVELS[d.enforcementLevel], d.urn or default_urn, d.message)
        for d in response.diagnostics
    ]


def analyze(
    type_: str, inputs: Mapping[str, Any], *, prod: bool = False, name: str = "r"
) -> list[Diagnostic]:
    """What the pack reports for one resource (Analyze)."""
    request = analyzer_pb2.AnalyzeRequest(
        type=type_, properties=as_sent(inputs), urn=urn(type_, name), name=name
    )
    with stack_config(prod):
        return _diagnostics(servicer().Analyze(request, None), request.urn)


def analyze_stack(resources: Sequence[Resource], *, prod: bool = False) -> list[Diagnostic]:
    """What the pack reports for a whole stack: Analyze for each resource, then AnalyzeStack, with each
    resource's `deps` (input name -> resource names) sent as property dependencies."""
    urns = {r.name: urn(r.type, r.name) for r in resources}
    found = [d for r in resources for d in analyze(r.type, r.inputs, prod=prod, name=r.name)]
    request = analyzer_pb2.AnalyzeStackRequest(
        resources=[
            analyzer_pb2.AnalyzerResource(
                type=r.type,
                properties=as_sent(r.inputs),
                urn=urns[r.name],
                name=r.name,
                dependencies=sorted({urns[n] for names in (r.deps or {}).values() for n in names}),
                propertyDependencies={
                    k: analyzer_pb2.AnalyzerPropertyDependencies(urns=[urns[n] for n in names])
                    for k, names in (r.deps or {}).items()
                },
            )
            for r in resources
        ]
    )
    with stack_config(prod):
        return found + _diagnostics(servicer().AnalyzeStack(request, None), "")


def policies_reporting(type_: str, inputs: Mapping[str, Any], *, prod: bool = False) -> set[str]:
    """The policies that report a violation (not a "can't run during preview" note) for one resource."""
    return {d.policy for d in analyze(type_, inputs, prod=prod) if not _cannot_run(d)}


def violations(policy: str, type_: str, inputs: Mapping[str, Any], *, prod: bool = False) -> list[str]:
    """The messages `policy` reports for one resource, remediation cut off."""
    return [
        d.message.split("\nRemediation:", 1)[0]
        for d in analyze(type_, inputs, prod=prod)
        if d.policy == policy and not _cannot_run(d)
    ]


def _cannot_run(d: Diagnostic) -> bool:
    """pulumi-policy's note for a policy that read an unknown value during a preview (advisory)."""
    return d.message.startswith(f"can't run policy '{d.policy}'")
