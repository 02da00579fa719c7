"""Plan check: a job on a reserved pool against its reservation's window. Which capacity reservation it lands
on, how many instances that holds and has free, when the window opens and closes, whether the job's
maxRuntimeHours ends before the block does, and how many steps the checkpoint interval risks at its end.

The reservations come from the JSON `aws ec2 describe-capacity-reservations` prints (`plan --reservations
FILE`). Karpenter 1.14 launches only into *active* reservations the pool's node class selects (provider
pkg/providers/capacityreservation: DescribeCapacityReservations with state=active), and drains a Capacity
Block's nodes 40 minutes before its end (controllers/capacityreservation/expiration,
v1.CapacityReservationFromEC2). A pool without fallback (capacityTypes [reserved]) therefore cannot run a job
that does not fit the reservations' free instances or that starts before the window opens: the plan says
"will not run". With fallback the same findings are shown, and the nodes come from on-demand or Spot instead.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from infra.contract import AcceleratorPool
from sim.kubernetes.scheduling import nodes_by_type
from trainer.config import CheckpointConfig
from workloads.checks import Finding, PlannedJob
from workloads.spec import SpecError

# Karpenter deletes a Capacity Block's NodeClaims this long before its end (EC2 reclaims from 30 min before).
KARPENTER_DRAIN_BEFORE_END = timedelta(minutes=40)
RESERVATIONS_HELP = (
    "aws ec2 describe-capacity-reservations --region <region> --capacity-reservation-ids <id> "
    "> reservations.json"
)
# Reservations that may still hold or will hold instances; EC2 CapacityReservationState's other values
# (expired, cancelled, failed, payment-failed, unsupported...) never will.
LIVE_STATES = ("active", "scheduled", "payment-pending", "pending", "assessing", "delayed")


@dataclass(frozen=True)
class Reservation:
    """One entry of describe-capacity-reservations' `CapacityReservations`."""

    id: str
    instance_type: str
    zone: str
    total: int
    available: int
    state: str
    start: datetime | None
    end: datetime | None  # None: an ODCR without an end date
    kind: str  # "default" (an ODCR) or "capacity-block"
    tags: dict[str, str]

    def window(self) -> str:
        start = _when(self.start) if self.start else "now"
        end = _when(self.end) if self.end else "no end date (until cancelled)"
        return f"{start} - {end}"


def _when(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")


def _date(value: object) -> datetime | None:
    if value is None:
        return None
    moment = datetime.fromisoformat(str(value))
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def read_reservations(path: Path) -> list[Reservation]:
    """The reservations of a `describe-capacity-reservations` JSON file; SpecError names the file and what
    is allowed when it is not one."""
    try:
        entries = json.loads(path.read_text())["CapacityReservations"]
        return [
            Reservation(
                id=e["CapacityReservationId"],
                instance_type=e["InstanceType"],
                zone=e["AvailabilityZone"],
                total=int(e["TotalInstanceCount"]),
                available=int(e["AvailableInstanceCount"]),
                state=e["State"],
                start=_date(e.get("StartDate")),
                end=_date(e.get("EndDate")),
                kind=e.get("ReservationType", "default"),
                tags={t["Key"]: t["Value"] for t in e.get("Tags", [])},
            )
            for e in entries
        ]
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise SpecError(
            f"--reservations {path}: not the output of describe-capacity-reservations ({type(err).__name__}: "
            f"{err}); allowed: the JSON of `{RESERVATIONS_HELP}`"
        ) from None


def _selected(pool: AcceleratorPool, reservations: Sequence[Reservation]) -> list[Reservation]:
    assert pool.reservation is not None
    return sorted(
        (
            r
            for r in reservations
            if r.instance_type in pool.instance_types
            and pool.reservation.selects(r.id, r.tags, r.zone)
            and r.state in LIVE_STATES
        ),
        key=lambda r: (r.start or datetime.min.replace(tzinfo=UTC), r.id),
    )


def _nodes(job: PlannedJob, name: str, pool: AcceleratorPool, instance_type: str) -> int | None:
    templates = [v.template for v in job.verdicts if v.source == name]
    return nodes_by_type(templates, pool).get(instance_type)


def checkpoint_interval(job: PlannedJob) -> int | None:
    """The trainer's checkpoint.every_steps (None: the job runs no trainer that checkpoints)."""
    spec = job.stack.spec
    if not spec.program.runs_trainer or spec.checkpoint is None:
        return None
    section = spec.trainer_config.get("checkpoint", {})
    return int(section.get("every_steps", CheckpointConfig().every_steps))


def _pool_finding(job: PlannedJob, name: str, pool: AcceleratorPool, found: Finding) -> None:
    assert pool.reservation is not None
    fallback = [c for c in pool.capacity_types if c != "reserved"]
    problems = found.problems if not fallback else found.warnings
    then = f" (then {'/'.join(fallback)} nodes instead)" if fallback else ""
    selected = _selected(pool, job.reservations or ())
    if not selected:
        problems.append(
            f"pool {name}: no live reservation in the file is one of the pool's (ids "
            f"{', '.join(pool.reservation.ids) or 'none'}, tags {pool.reservation.tags or 'none'}, "
            f"{pool.reservation.availability_zone}, {'/'.join(pool.instance_types)}){then}"
        )
        return
    start = job.start or datetime.now(UTC)
    for r in selected:
        found.lines.append(
            f"reservation {r.id} ({r.kind}, {r.instance_type}, {r.zone}, {r.state}): holds {r.total}, "
            f"{r.available} free; window {r.window()}"
        )
    usable = [r for r in selected if r.state == "active" and (r.start is None or r.start <= start)]
    needed = _nodes(job, name, pool, selected[0].instance_type)
    if not usable:
        opens = min((r.start for r in selected if r.start), default=None)
        when = f"opens {_when(opens)}" if opens else "is not active"
        problems.append(
            f"pool {name}: the job would start {_when(start)}, before the window {when}: Karpenter launches "
            f"into active reservations only, so its pods wait Pending while maxRuntimeHours runs{then}; "
            "deploy it once the reservation is active"
        )
        return
    free = sum(r.available for r in usable)
    landing = usable[0]
    found.lines.append(
        f"the job lands on {', '.join(r.id for r in usable)}: needs {needed} x {landing.instance_type}, "
        f"{free} free"
    )
    if needed is None or needed > free:
        problems.append(
            f"pool {name}: the job needs {needed} x {landing.instance_type}, the reservations have "
            f"{free} free of {sum(r.total for r in usable)}{then}"
        )
    ends = [r.end for r in usable if r.end]
    if not ends:
        return
    drain = min(ends) - KARPENTER_DRAIN_BEFORE_END
    deadline = start + timedelta(hours=job.stack.spec.max_runtime_hours)
    if deadline <= drain:
        found.lines.append(
            f"maxRuntimeHours ({job.stack.spec.max_runtime_hours:g} h) ends {_when(deadline)}, before the "
            f"block does (Karpenter drains its nodes from {_when(drain)})"
        )
        return
    every = checkpoint_interval(job)
    risk = (
        f"at most {every - 1} steps since the last checkpoint (checkpoint.every_steps {every}) if the "
        "checkpoint on SIGTERM does not finish"
        if every
        else "everything since its start: the job keeps no trainer checkpoint"
    )
    found.lines.append(
        f"maxRuntimeHours ({job.stack.spec.max_runtime_hours:g} h) ends {_when(deadline)}, after the block: "
        f"Karpenter drains its nodes from {_when(drain)}; the job risks {risk}"
    )
    found.warnings.append(
        f"pool {name}: the job may outlast the reservation ({_when(drain)}); it resumes from its checkpoint "
        + (f"on {'/'.join(fallback)} nodes" if fallback else "only on a new reservation")
    )


def check(job: PlannedJob) -> Finding:
    found = Finding()
    used = {v.source for v in job.verdicts if v.source}
    for name, pool in job.facts.accelerator_pools.items():
        if name not in used or pool.reservation is None:
            continue
        if job.reservations is None:
            found.lines.append(
                f"reservation: pool {name} draws from capacity reservations; plan against their window with "
                f"--reservations FILE (`{RESERVATIONS_HELP}`)"
            )
            found.warnings.append(f"pool {name}: whether its reservation is active and has room")
            continue
        _pool_finding(job, name, pool, found)
    return found
