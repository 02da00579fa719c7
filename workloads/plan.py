"""`python -m workloads plan --stack S`: before anything is deployed, will the job run, where, how soon and
at what cost.

Every answer comes from the checks `render` and the tests already run, not from a second model: the spec
against the platform (placement), the objects (render), the pods as their operators create them; then each
check of workloads/checks in CHECKS (scheduling: the nodes, queues and namespace quota the pods need; pod
security; admission: what the API server and the platform's webhooks admit of every object the controllers
create). Node counts follow Karpenter's choice of the cheapest instance type that holds the pods; prices are
the accelerator catalog's, Spot prices those of a `aws ec2 describe-spot-price-history` file when one is
given, and a reserved pool's job is planned against the window of a `aws ec2 describe-capacity-reservations`
file when one is given (workloads/checks/reservation.py).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from infra.accelerators import CATALOG, PRICE_REGION, PRICES_READ
from infra.contract import AcceleratorPool, quantity
from sim.kubernetes.scheduling import PodTemplate, Verdict, node_selector_matches, nodes_by_type, simulate
from workloads.checks import (
    Finding,
    PlannedJob,
    admission,
    pod_inputs,
    pod_security,
    reservation,
    scheduling,
)
from workloads.placement import place
from workloads.platform import PlatformFacts
from workloads.render import render
from workloads.spec import SpecError
from workloads.stacks import WorkloadStack, program_text

# The checks, in the order the plan prints them (workloads/checks: one module each).
CHECKS = (scheduling.check, reservation.check, pod_inputs.check, pod_security.check, admission.check)


@dataclass(frozen=True)
class LaunchTime:
    """Minutes from Karpenter's launch to a Ready node for an instance family, and what that rests on."""

    minutes: tuple[int, int]
    source: str


# Not measured by this project (it has no AWS account): estimates, each with its basis. EC2 itself takes
# about the same for any family: pending to running in 16-17 s across families, 23-26 s to SSH
# (github.com/brevdev/ec2-coldboot-research, 2025, general-purpose types). The rest is the node's own
# start: the AL2023 NVIDIA AMI's boot, driver load and nodeadm join, and on the 8-GPU NVSwitch families the
# fabric manager (CUDA sees no GPU before it runs) and the EFA devices. Measure your own: the NodeClaim's
# Launched -> Initialized condition times (`kubectl get nodeclaim -o yaml`).
PCIE_GPU = "a single PCIe GPU board: EC2 launch (~0.5 min), AL2023 NVIDIA boot, driver load, nodeadm join"
NVSWITCH_GPU = (
    "8 GPUs on NVSwitch: as a PCIe board, plus the NVIDIA fabric manager's start and the EFA devices (4 on "
    "p4d, 32 on p5) before the node is ready"
)
LAUNCH_MINUTES = {
    **{family: LaunchTime((1, 3), PCIE_GPU) for family in ("g4dn", "g4ad", "g5", "g6", "g6e")},
    **{
        family: LaunchTime((3, 6), NVSWITCH_GPU) for family in ("p4d", "p4de", "p5", "p5e", "p5en", "p6-b200")
    },
}
# An instance family the table does not know: the slower of the two.
UNKNOWN_FAMILY = LaunchTime((1, 6), "an instance family this table has no figure for")
# The several-GB training image, pulled on a fresh node. A managed (reserved) group's nodes run already.
IMAGE_PULL_MINUTES = (2, 3)


def launch_time(instance_type: str) -> LaunchTime:
    return LAUNCH_MINUTES.get(instance_type.split(".")[0], UNKNOWN_FAMILY)


# The startup GPU check (infra/addons/gpu_node_check_script.py): nvidia-smi answers in seconds; a GPU that
# hangs fails the check after 120 s and the node never takes the job.
GPU_CHECK_LIMIT_SECONDS = 120
SPOT_HELP = (
    "aws ec2 describe-spot-price-history --region <region> --product-descriptions Linux/UNIX "
    "--start-time $(date -u +%Y-%m-%dT%H:%M:%SZ) --instance-types <type> > spot.json"
)


@dataclass
class PoolPlan:
    name: str
    pool: AcceleratorPool
    instance_type: str
    nodes: int
    spot: tuple[float, float] | None = None  # cheapest and dearest current AZ price, from the file

    @property
    def on_demand(self) -> float | None:
        """The catalog's on-demand price of one node; None where AWS publishes none (p5e)."""
        return CATALOG[self.pool.accelerator].instance(self.instance_type).usd_per_hour


@dataclass
class Plan:
    stack: WorkloadStack
    facts_source: Path | str
    facts_region: str
    verdicts: list[Verdict] = field(default_factory=list)
    pools: list[PoolPlan] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)  # one per check, in CHECKS's order
    problems: list[str] = field(default_factory=list)  # why it will not run; empty: it runs

    @property
    def warnings(self) -> list[str]:
        return [w for f in self.findings for w in f.warnings]

    @property
    def runs(self) -> bool:
        return not self.problems

    def text(self) -> str:
        spec = self.stack.spec
        out = [
            f"plan for workload stack {self.stack.name} (platform {self.stack.platform_stack}: facts from "
            f"{self.facts_source})",
            f"job {spec.name}: operator {spec.operator}, {spec.max_nodes} x {spec.gpus_per_node} "
            f"{spec.accelerator} GPU(s)",
        ]
        if self.verdicts:
            out.append("pods, as their operators create them:")
            out += [f"  {_pod_line(v)}" for v in self.verdicts]
        if self.pools:
            if self.facts_region != PRICE_REGION:
                out.append(f"(prices below are {PRICE_REGION}'s; the platform runs in {self.facts_region})")
            out.append("nodes:")
            for p in self.pools:
                out += [f"  {line}" for line in _node_lines(p)]
            out.append(f"cost while it runs (catalog prices, {PRICE_REGION} on-demand, read {PRICES_READ}):")
            out += [f"  {line}" for line in _cost_lines(self.pools, self.stack)]
        out += [line for f in self.findings for line in f.lines]
        if self.warnings:
            out.append("only the cluster can tell:")
            out += [f"  - {w}" for w in self.warnings]
        if self.runs:
            out.append("verdict: will run")
        else:
            out.append("verdict: will not run because:")
            out += [f"  - {p}" for p in self.problems]
        return "\n".join(out)


def _pod_line(v: Verdict) -> str:
    r = v.template.requests
    gpus = next((f", {amount} {k}" for k, amount in r.items() if k.endswith("/gpu")), "")
    memory = quantity(r.get("memory", "0")) / 2**30
    where = f"pool {v.source}" if v.schedulable else "no pool"
    size = f"{r.get('cpu', '0')} vCPU, {memory:g}Gi{gpus}"
    return f"{v.template.job}: {v.template.count} pod(s) of {size} -> {where}"


def _node_lines(p: PoolPlan) -> list[str]:
    capacity = "/".join(p.pool.capacity_types)
    if p.pool.source == "managed":
        return [
            f"pool {p.name}: managed node group of {p.pool.size} x {p.instance_type} ({capacity}), running "
            f"already: the job takes {p.nodes} of them; first step in roughly {IMAGE_PULL_MINUTES[0]}-"
            f"{IMAGE_PULL_MINUTES[1]} min (the image pull)"
        ]
    launch = launch_time(p.instance_type)
    low, high = (a + b for a, b in zip(launch.minutes, IMAGE_PULL_MINUTES, strict=True))
    lines = [
        f"pool {p.name}: Karpenter launches {p.nodes} x {p.instance_type} ({capacity}; the pool holds at "
        f"most {p.pool.max_nodes})",
        f"  first step in roughly {low}-{high} min: launch and join {launch.minutes[0]}-{launch.minutes[1]} "
        f"min ({launch.source}), image pull {IMAGE_PULL_MINUTES[0]}-{IMAGE_PULL_MINUTES[1]} min "
        '(estimates, not measured here: docs/workloads.md "How fast")',
    ]
    if p.pool.startup_taints:
        lines.append(f"  then the startup GPU check: seconds, at most {GPU_CHECK_LIMIT_SECONDS} s")
    return lines


def _cost_lines(pools: Sequence[PoolPlan], stack: WorkloadStack) -> list[str]:
    lines = []
    total = 0.0
    unpriced = []
    for p in pools:
        if p.on_demand is None:
            unpriced.append(p.name)
            lines.append(
                f"pool {p.name}: on-demand {p.nodes} x {p.instance_type}: price unknown (AWS publishes no "
                "on-demand price for it; a reservation bills what its contract says): not in the total"
            )
        else:
            cost = p.nodes * p.on_demand
            total += cost
            lines.append(f"pool {p.name}: on-demand {p.nodes} x ${p.on_demand:.3f} = ${cost:.3f}/h")
        if "spot" in p.pool.capacity_types:
            if p.spot:
                low, high = (p.nodes * price for price in p.spot)
                lines.append(f"  spot now: ${low:.3f}-${high:.3f}/h across the region's AZs (the given file)")
            else:
                lines.append(
                    "  spot: at most the on-demand price (AWS's default maximum price); current "
                    "prices: --spot-prices FILE (see --help)"
                )
        if "reserved" in p.pool.capacity_types:
            lines.append(
                "  reserved: billed by the reservation (a Capacity Block up front) whether used or not; the "
                "on-demand figure is what a node outside it costs"
            )
        if p.pool.source == "managed":
            lines.append("  (a managed group runs and bills around the clock, whether a job runs or not)")
    without = f" (without pool {', '.join(unpriced)}: price unknown)" if unpriced else ""
    lines.append(
        f"total on-demand: ${total:.3f}/h, ${total * stack.spec.max_runtime_hours:,.0f} at the "
        f"job's maxRuntimeHours ({stack.spec.max_runtime_hours:g} h){without}"
    )
    return lines


def _allowed_types(templates: Sequence[PodTemplate], pool: AcceleratorPool) -> list[str]:
    """The pool's instance types every template's required node affinity admits (Karpenter launches no
    other for these pods)."""
    return [
        it
        for it in pool.instance_types
        if all(
            t.node_terms is None
            or any(
                node_selector_matches(t.node_terms, pool.node_labels_for(it, c)) for c in pool.capacity_types
            )
            for t in templates
        )
    ]


def pool_plans(
    verdicts: Sequence[Verdict], platform: PlatformFacts, spot: Mapping[str, tuple[float, float]]
) -> list[PoolPlan]:
    """Per pool hosting pods: the nodes they take. Karpenter picks the cheapest instance type that holds
    them (karpenter.sh docs, "Instance Types": the cheapest among those the NodePool and the pods allow);
    a managed group has its fixed nodes."""
    plans = []
    for name, pool in platform.accelerator_pools.items():
        templates = [v.template for v in verdicts if v.source == name]
        if not templates:
            continue
        counts = nodes_by_type(templates, pool)
        price_of = CATALOG[pool.accelerator].instance
        allowed = _allowed_types(templates, pool)
        # A type without a published price ranks after every priced one (Karpenter launches on demand
        # only what has an on-demand offering), then by fewest nodes.
        options = [
            (price is None, (price or 0.0) * n, n, it)
            for it in allowed
            if (n := counts.get(it)) is not None
            for price in (price_of(it).usd_per_hour,)
        ]
        if not options:
            continue
        *_, nodes, instance_type = min(options)
        plans.append(PoolPlan(name, pool, instance_type, nodes, spot.get(instance_type)))
    return plans


def read_spot_prices(path: Path, region: str) -> dict[str, tuple[float, float]]:
    """Instance type -> (cheapest, dearest) current Linux Spot price across `region`'s AZs, from the JSON
    `aws ec2 describe-spot-price-history` prints (the newest price of each AZ)."""
    try:
        history = json.loads(path.read_text())["SpotPriceHistory"]
        newest: dict[tuple[str, str], tuple[datetime, float]] = {}
        for e in history:
            linux = e["ProductDescription"].startswith("Linux/UNIX")
            if not linux or not e["AvailabilityZone"].startswith(region):
                continue
            when = datetime.fromisoformat(str(e["Timestamp"]))
            key = (e["InstanceType"], e["AvailabilityZone"])
            if key not in newest or when > newest[key][0]:
                newest[key] = (when, float(e["SpotPrice"]))
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise SpecError(
            f"--spot-prices {path}: not the output of describe-spot-price-history ({type(err).__name__}: "
            f"{err}); allowed: the JSON of `{SPOT_HELP}`"
        ) from None
    prices: dict[str, list[float]] = {}
    for (instance_type, _), (_, price) in newest.items():
        prices.setdefault(instance_type, []).append(price)
    return {t: (min(p), max(p)) for t, p in prices.items()}


def plan(
    stack: WorkloadStack,
    facts: PlatformFacts,
    source: Path | str,
    spot_file: Path | None = None,
    reservations_file: Path | None = None,
    start: datetime | None = None,
) -> Plan:
    """The plan of a loaded workload stack on its platform's facts; `start`: when it would be deployed
    (default now), judged against the reservations of `reservations_file`."""
    result = Plan(stack, source, facts.region)
    try:
        place(stack.spec, facts)
    except SpecError as err:
        result.problems.append(str(err))
        return result
    objects = render(stack.spec, facts, program_text=program_text(stack.spec))
    result.verdicts = simulate(objects, facts)
    spot = read_spot_prices(spot_file, facts.region) if spot_file else {}
    result.pools = pool_plans(result.verdicts, facts, spot)
    reservations = reservation.read_reservations(reservations_file) if reservations_file else None
    job = PlannedJob(stack, facts, objects, result.verdicts, reservations, start)
    result.findings = [check(job) for check in CHECKS]
    result.problems += [p for f in result.findings for p in f.problems]
    return result
