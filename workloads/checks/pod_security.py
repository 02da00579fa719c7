"""Plan check: do the pods, as their operators create them (init containers included), pass the Pod
Security level their namespace enforces (its pod-security.kubernetes.io/enforce label; `restricted` when
the stack does not create the namespace)?"""

from __future__ import annotations

from sim.operators.pods import operator_pods
from workloads.checks import Finding, PlannedJob
from workloads.pod_security import baseline_violations, restricted_violations

LEVEL_LABEL = "pod-security.kubernetes.io/enforce"


def check(job: PlannedJob) -> Finding:
    namespaces = {o["metadata"]["name"]: o for o in job.objects if o["kind"] == "Namespace"}
    found = Finding()
    pods = operator_pods(job.objects, job.facts)
    for namespace in sorted({p.pod["metadata"]["namespace"] for p in pods}):
        labels = (namespaces.get(namespace) or {}).get("metadata", {}).get("labels", {})
        level = labels.get(LEVEL_LABEL)
        judged = level or "restricted"
        rule = restricted_violations if judged == "restricted" else baseline_violations
        refused = sorted(
            {
                f"{p.job}/{p.role}: {v}"
                for p in pods
                if p.pod["metadata"]["namespace"] == namespace
                for v in (rule(p.spec) if judged != "privileged" else [])
            }
        )
        where = f"enforces {level}" if level else "is not created by this stack (judged as restricted)"
        found.lines.append(
            f"pod security: namespace {namespace} {where}: "
            + ("every pod passes" if not refused else f"{len(refused)} refusal(s)")
        )
        found.problems += [f"Pod Security ({judged}) refuses {r}" for r in refused]
    return found
