"""The dependency graph the program hands the engine, as the synth mocks record it: one node per
registration, with what it waits for (its dependencies and the inputs' property dependencies)."""

from __future__ import annotations

import copy
from dataclasses import dataclass


@dataclass
class Node:
    type: str
    name: str
    urn: str
    inputs: dict
    dependencies: set[str]
    provider: str  # the provider reference "urn::id" ("" for none)


def build_graph(platform) -> list[Node]:
    """`platform`: a tests/synth_graph.py Synth (tests/conftest.py's `dev`/`prod`); inputs copied, since it
    is shared."""
    nodes = []
    for r, e in zip(platform.resources, platform.edges, strict=True):
        deps = e.dependencies | e.property_dependencies
        nodes.append(Node(r.type, r.name, e.urn, copy.deepcopy(r.inputs), deps, e.provider))
    return nodes


def depends_on(nodes: list[Node], node: Node, target_urn: str) -> bool:
    by_urn = {n.urn: n for n in nodes}
    seen, todo = set(), list(node.dependencies)
    while todo:
        urn = todo.pop()
        if urn == target_urn:
            return True
        if urn not in seen and urn in by_urn:
            seen.add(urn)
            todo += by_urn[urn].dependencies
    return False
