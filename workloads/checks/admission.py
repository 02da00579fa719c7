"""Plan check: will the API server and the webhooks the platform installs admit the job's objects and every
object the controllers create from them (a TrainJob's JobSet, Jobs and pods; a PyTorchJob's pods; a
RayJob's RayCluster and submitter Job)? Runs sim/admission/chain.py, whose ledger names every webhook.

It also warns where admission depends on what the stack does not create: a job that names a Kueue queue in
a namespace the stack does not create is queued only if that namespace opts in to Kueue (its label), which
only the cluster can tell; without it Kueue's webhooks never see the job and it runs unqueued."""

from __future__ import annotations

from infra.contract import KUEUE_NAMESPACE_LABEL
from sim.admission.chain import admit, lifecycle
from workloads.checks import Finding, PlannedJob


def check(job: PlannedJob) -> Finding:
    spec, facts = job.stack.spec, job.facts
    refusals = admit(job.objects, facts)
    created = len(lifecycle(job.objects, facts))
    found = Finding()
    if refusals:
        found.lines.append(f"admission: {len(refusals)} refusal(s) among {created} objects (below)")
        found.problems += [f"admission: {r}" for r in refusals]
    else:
        found.lines.append(
            f"admission: all {created} objects admitted (ours and what the controllers create from them: "
            "sim/admission/ledger.yaml names the webhooks that judge them)"
        )
    if spec.queue and facts.gang_scheduler == "kueue" and not spec.create_namespace:
        namespace, label = spec.namespace_name, f"{KUEUE_NAMESPACE_LABEL}=true"
        found.warnings.append(
            f"namespace {namespace} is not created by this stack (createNamespace: false): Kueue queues the "
            f"job in {spec.queue!r} only if the namespace carries {label}; without it the job runs at once, "
            f"unqueued and outside the team's quota. Check: kubectl get namespace {namespace} --show-labels; "
            f"fix: kubectl label namespace {namespace} {label}"
        )
    return found
