"""`mlops-eks:addons.nodeHealth`: how GPU nodes are watched, repaired and checked before their first job
(infra/addons/node_health.py, infra/addons/gpu_node_check.py; docs/node-health.md)."""

from __future__ import annotations

from pydantic import model_validator

from infra.addons.gpu_node_check import CHECK_IMAGE
from infra.config.base import ConfigModel, Invalid
from infra.image_refs import image_problem


class NodeHealthConfig(ConfigModel):
    # The EKS node monitoring agent add-on (on stacks with GPU pools): sets AcceleratedHardwareReady and
    # the other health conditions from XID codes, DCGM and the kernel log.
    monitoring_agent: bool = True
    # EKS node auto repair on every managed node group (the system group too): GA, replaces a node whose
    # condition stays False (10 min for GPUs, 30 for the rest).
    managed_node_repair: bool = True
    # Karpenter's node repair (feature gate `nodeRepair`, ALPHA in 1.14.1). Off unless a stack turns it on:
    # it replaces by force, past `do-not-disrupt`, so a job on the node is
    # killed without its SIGTERM checkpoint. Dev turns it on; prod leaves Karpenter GPU nodes to the alerts
    # (and a person) until the gate is beta.
    karpenter_node_repair: bool = False
    # The startup GPU check: NVIDIA nodes start tainted and take training pods once their GPUs passed it; a
    # Karpenter node that keeps failing it deletes its NodeClaim (replaced), a managed group's stays tainted.
    gpu_check: bool = True
    # Any image with Python 3 (the check uses the standard library only); pinned by digest by default.
    gpu_check_image: str = CHECK_IMAGE

    @model_validator(mode="after")
    def _check(self) -> NodeHealthConfig:
        if problem := image_problem(self.gpu_check_image):
            allowed = "an image pinned by digest or by a version tag"
            raise Invalid("gpuCheckImage", self.gpu_check_image, allowed, problem)
        return self
