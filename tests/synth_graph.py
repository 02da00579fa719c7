"""The platform program synthesized offline, with the dependency graph the engine would receive: each
registration's dependencies, property dependencies and provider, as infra.tools.synth's mocks see them."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

from infra.config.platform import PlatformConfig
from infra.tools.synth import RecordingMonitor, Registered, stack_config, synth


@dataclass
class Edges:
    """What the engine learns about one registration's place in the graph."""

    urn: str
    dependencies: set[str]  # the request's `dependencies`: what the engine creates it after
    property_dependencies: set[str]  # per input, the URNs its value came from, together
    provider: str  # the provider reference "urn::id" ("" for none)


@dataclass
class Synth:
    config: PlatformConfig
    resources: list[Registered]
    exports: dict
    edges: list[Edges]  # one per resource, in the same order

    def of_type(self, type_: str) -> list[Registered]:
        return [r for r in self.resources if r.type == type_]

    def one(self, type_: str, name: str | None = None) -> Registered:
        found = [r for r in self.of_type(type_) if name is None or r.name == name]
        assert len(found) == 1, f"expected one {type_} {name or ''}, found {[r.name for r in found]}"
        return found[0]

    def dependencies(self) -> dict[tuple[str, str], set[str]]:
        """(type, name) -> the URNs the registration depends on, as the engine receives them."""
        return {(r.type, r.name): e.dependencies for r, e in zip(self.resources, self.edges, strict=True)}

    def as_json(self) -> list[dict]:
        """The resources as `python -m infra synth --json` prints them (a copy each call)."""
        return json.loads(json.dumps([asdict(r) for r in self.resources]))


def synth_with_edges(stack: str, values: dict | None = None) -> Synth:
    """`values`: a config mapping instead of the stack file's (a variant of a committed stack)."""
    edges: dict[int, Edges] = {}  # by registration index: a registration may finish after a later one

    class GraphMonitor(RecordingMonitor):
        def RegisterResource(self, request):  # noqa: N802 (gRPC method name)
            index = len(self.registered)
            response = super().RegisterResource(request)
            property_deps = {urn for prop in request.propertyDependencies.values() for urn in prop.urns}
            provider = request.provider or request.providers.get("kubernetes", "")
            edges[index] = Edges(response.urn, set(request.dependencies), property_deps, provider)
            return response

    values = stack_config(stack) if values is None else values
    config, resources, exports = synth(stack, values, GraphMonitor)
    return Synth(config, resources, exports, [edges[i] for i in range(len(resources))])
