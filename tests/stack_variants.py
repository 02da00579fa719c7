"""Committed stack files after one edit a user makes, written to a temporary directory for a test."""

from __future__ import annotations

from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]


def without_the_amd_pool(directory: Path) -> Path:
    """Pulumi.dev.yaml with its `amd` entry of gpuPools deleted and nothing else (docs/deploy.md's
    first-deploy checklist: no AMD AMI)."""
    document = yaml.safe_load((REPO / "Pulumi.dev.yaml").read_text())
    pools = document["config"]["mlops-eks:gpuPools"]
    assert "amd" in [p["name"] for p in pools]
    document["config"]["mlops-eks:gpuPools"] = [p for p in pools if p["name"] != "amd"]
    path = directory / "Pulumi.dev.yaml"
    path.write_text(yaml.safe_dump(document))
    return path
