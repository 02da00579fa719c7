"""The pack's Kubernetes rules over every object the platform's Helm releases install (rendered from the
pinned charts by sim.helm_render), with the exceptions in policy/chart_exceptions.yaml. Each
exception names one rule, one object (Kind/namespace/name) and the exact findings it accepts, with the
reason: a chart upgrade that adds a privilege, or a values change that removes one, shows up as an
unexplained finding or a stale entry."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

from policy.core import Rule
from policy.k8s import type_token

EXCEPTIONS_FILE = Path(__file__).with_name("chart_exceptions.yaml")


def object_id(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return f"{obj.get('kind')}/{meta.get('namespace', '')}/{meta.get('name')}"


def findings(objects: Iterable[Mapping[str, Any]], rules: Iterable[Rule]) -> set[tuple[str, str, str]]:
    """(rule, object id, message) for every violation of a mandatory rule."""
    rules = [r for r in rules if r.level == "mandatory"]
    return {
        (rule.name, object_id(obj), message)
        for obj in objects
        for rule in rules
        for message in rule.violations(type_token(obj), obj)
    }


def load_exceptions(path: Path = EXCEPTIONS_FILE) -> list[dict[str, Any]]:
    return yaml.safe_load(path.read_text())["exceptions"]


def accepted(exceptions: list[dict[str, Any]]) -> set[tuple[str, str, str]]:
    return {(e["rule"], e["object"], message) for e in exceptions for message in e["accepts"]}


def unexplained(found: set[tuple[str, str, str]], exceptions: list[dict[str, Any]]) -> list[str]:
    return sorted(f"{r} {o}: {m}" for r, o, m in found - accepted(exceptions))


def stale(found: set[tuple[str, str, str]], exceptions: list[dict[str, Any]]) -> list[str]:
    """Accepted findings that no rendered object produces any more (delete them)."""
    return sorted(f"{r} {o}: {m}" for r, o, m in accepted(exceptions) - found)
