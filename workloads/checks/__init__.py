"""The checks `workloads plan` runs on a workload stack, one module each, every one a function
`check(job: PlannedJob) -> Finding`: what the plan shows, why the job will not run, and what only the
cluster can confirm. workloads/plan.py lists them in CHECKS, in the order the plan prints them; a new check
is a module here and a line there."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from sim.kubernetes.scheduling import Verdict
from workloads.platform import PlatformFacts
from workloads.stacks import WorkloadStack

if TYPE_CHECKING:
    from workloads.checks.reservation import Reservation


@dataclass(frozen=True)
class PlannedJob:
    """What every check reads: the stack, its platform's facts, the objects `render` makes and the
    scheduling simulation's verdict on each of the pods the operators create from them."""

    stack: WorkloadStack
    facts: PlatformFacts
    objects: list[dict[str, Any]]
    verdicts: list[Verdict]
    # `plan --reservations FILE`: the account's capacity reservations (None: no file given), and when the
    # job would start (`--start`; None: now).
    reservations: Sequence[Reservation] | None = None
    start: datetime | None = None


@dataclass
class Finding:
    lines: list[str] = field(default_factory=list)  # shown in the plan
    problems: list[str] = field(default_factory=list)  # each one a reason the job will not run
    warnings: list[str] = field(default_factory=list)  # what the plan cannot see and the cluster decides
