"""What a platform stack costs per hour with no job running, from the catalog's indicative prices.

Idle means: the EKS control plane, the NAT gateways, the system nodes at their desired size, every
Karpenter GPU pool at zero nodes and every managed (reserved) GPU pool at its fixed size. GPU pools are
priced on demand even when Spot: an upper bound. Data transfer, EBS, S3, CloudWatch logs and KMS are left out.
"""

from __future__ import annotations

from datetime import date

from infra.accelerators import (
    EKS_CONTROL_PLANE_USD_PER_HOUR,
    EKS_EXTENDED_SUPPORT_USD_PER_HOUR,
    NAT_GATEWAY_USD_PER_HOUR,
    PRICE_REGION,
    PRICES_READ,
    SYSTEM_INSTANCE_USD_PER_HOUR,
)
from infra.config.cluster_rules import in_extended_support
from infra.config.platform import PlatformConfig


def idle_cost_lines(config: PlatformConfig, today: date | None = None) -> list[tuple[str, float]]:
    """(item, USD per hour) for each idle cost of the stack, at the control-plane rate of `today`."""
    nats = 1 if config.nat_gateways == "single" else config.availability_zone_count
    system = config.system_nodes
    system_type = system.instance_types[0]
    extended = in_extended_support(config.kubernetes_version, today or date.today())
    lines = [
        (
            "EKS control plane (extended support)" if extended else "EKS control plane",
            EKS_EXTENDED_SUPPORT_USD_PER_HOUR if extended else EKS_CONTROL_PLANE_USD_PER_HOUR,
        ),
        (f"NAT gateways ({nats})", nats * NAT_GATEWAY_USD_PER_HOUR),
        (
            f"system nodes ({system.desired} x {system_type})",
            system.desired * SYSTEM_INSTANCE_USD_PER_HOUR[system_type],
        ),
    ]
    for pool in config.gpu_pools:
        instance = pool.catalog_entry.instance(pool.instance_type_names[0])
        # Karpenter pools run no node without a job; a managed (reserved) pool always runs its size.
        idle_nodes = pool.max_nodes if pool.source == "managed" else 0
        item = f"GPU pool {pool.name} ({idle_nodes} x {instance.name})"
        if idle_nodes and instance.usd_per_hour is None:
            # No published on-demand price (a reservation's is the user's contract): named, not guessed.
            lines.append((f"{item}: no published price, not counted", 0.0))
            continue
        lines.append((item, idle_nodes * (instance.usd_per_hour or 0.0)))
    return lines


def idle_cost_report(config: PlatformConfig) -> str:
    lines = idle_cost_lines(config)
    width = max(len(item) for item, _ in lines)
    rows = [f"  {item:<{width}}  ${usd:8.3f}" for item, usd in lines]
    total = sum(usd for _, usd in lines)
    return "\n".join(
        [
            f"Estimated idle cost (indicative {PRICE_REGION} on-demand prices read {PRICES_READ}):",
            *rows,
            f"  {'total per hour':<{width}}  ${total:8.3f}   (~${total * 730:,.0f} per month)",
        ]
    )
