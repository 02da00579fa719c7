"""Plan check: can the pods, as the operators create them, be placed: a pool with room for each, the queue's
nominal quota for the gang, the namespace's ResourceQuota (with a restarted gang beside the old one)?
Runs sim/kubernetes/scheduling.py on the job's verdicts."""

from __future__ import annotations

from infra.contract import quantity
from sim.kubernetes.scheduling import queue_use, quota_problems, unschedulable
from workloads.checks import Finding, PlannedJob


def _queue_line(job: PlannedJob) -> str:
    name = job.verdicts[0].template.queue if job.verdicts else None
    if name is None:
        return "queue: none (the job's pods are created at once, not gang-admitted)"
    queue = job.facts.queue(name)
    if queue is None:
        return f"queue: {name} (not a queue of {job.facts.cluster_name})"
    uses = queue_use(job.verdicts, job.facts)
    shown = ", ".join(
        f"{u.resource}{f' ({u.accelerator})' if u.accelerator else ''} {u.shown()} of {u.nominal or 'none'}"
        for u in uses
    )
    # Volcano limits only the resources a Queue names (scheduling._queue_problems); Kueue refuses the rest.
    refused = any(
        (u.nominal is None and queue.scheduler == "kueue") or (u.nominal and u.total > quantity(u.nominal))
        for u in uses
    )
    verdict = "never admitted (below)" if refused else "admitted at once (the gang fits the nominal quota)"
    return f"queue: {name} ({queue.scheduler}): {verdict}: {shown}"


def check(job: PlannedJob) -> Finding:
    quota = quota_problems(job.objects, job.facts)
    return Finding(
        lines=[
            _queue_line(job),
            f"namespace quota: {'fits' if not quota else 'refuses pods (below)'} (counting a restarted gang "
            "beside the old one)",
        ],
        problems=unschedulable(job.verdicts) + quota,
    )
