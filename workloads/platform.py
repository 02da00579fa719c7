"""What a workload stack needs to know about its platform stack: the platform's exports, typed.

The same model reads a live StackReference's outputs (workloads.program), a `--platform-outputs` JSON
file, or the example outputs shipped beside this module (`examples/platform-<stack>.json`), so
`render` prints exactly what `pulumi up` would create.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

EXAMPLES = Path(__file__).resolve().parent / "examples"


class PoolTaint(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    key: str
    value: str
    effect: Literal["NoSchedule", "NoExecute", "PreferNoSchedule"]


class AcceleratorPool(BaseModel):
    """One GPU node pool (a managed node group or a Karpenter NodePool) as the platform exports it."""

    model_config = ConfigDict(frozen=True, extra="ignore")
    accelerator: str
    instance_types: tuple[str, ...]
    gpus_per_node: int
    resource_name: str
    node_labels: dict[str, str]
    taints: tuple[PoolTaint, ...]
    min_size: int
    max_size: int
    capacity_type: Literal["SPOT", "ON_DEMAND"]
    efa: bool = False


class PlatformFacts(BaseModel):
    """The platform stack's exports that rendering a job uses (extra exports are ignored)."""

    model_config = ConfigDict(frozen=True, extra="ignore")
    cluster_name: str
    region: str
    bucket_name: str
    ecr_repository_urls: dict[str, str]
    accelerator_pools: dict[str, AcceleratorPool]
    # Added by the add-ons (issue 3); absent on a platform without them.
    training_operators: dict[str, bool] = Field(default_factory=dict)
    gang_scheduler: Literal["kueue", "volcano"] | None = None
    kueue_queues: tuple[str, ...] = ()


def example_outputs_path(platform_stack: str) -> Path:
    """`organization/mlops-eks/dev` -> examples/platform-dev.json."""
    return EXAMPLES / f"platform-{platform_stack.rsplit('/', 1)[-1]}.json"


def load_platform_outputs(path: Path) -> PlatformFacts:
    return PlatformFacts.model_validate(json.loads(path.read_text()))
