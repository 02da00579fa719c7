"""`python -m workloads logs --stack STACK [--follow]`: every node's trainer log, each line prefixed with
its node rank (`[node 1 <pod>]`); torchrun's own lines inside carry the local rank.

Without --follow each pod's log is printed whole, node by node. With --follow one thread per pod streams
its log and the lines are printed as they come; it ends when every stream ends (the pods finished).
"""

from __future__ import annotations

import queue
import sys
import threading
from typing import Any, TextIO

from workloads.spec import TrainingJobSpec
from workloads.status import JOB_APIS, Cluster, ClusterError, node_index


def _prefix(p: dict[str, Any]) -> str:
    return f"[node {node_index(p)} {p['metadata']['name']}] "


def logs(cluster: Cluster, spec: TrainingJobSpec, *, follow: bool, tail: int | None, out: TextIO) -> int:
    pods = cluster.pods(spec)
    if not pods:
        print(
            f"{spec.name}: no pods in {spec.namespace_name} (`python -m workloads status`)", file=sys.stderr
        )
        return 3
    container = JOB_APIS[spec.operator][3]
    if not follow:
        for p in pods:
            for line in (cluster.log(p, container, tail_lines=tail) or "").splitlines():
                out.write(_prefix(p) + line + "\n")
        return 0
    lines: queue.Queue[tuple[str, str] | None] = queue.Queue()
    errors: list[ClusterError] = []

    def stream(p: dict[str, Any]) -> None:
        try:
            resp = cluster.log(p, container, follow=True, tail_lines=tail)
            if resp:
                for raw in resp:
                    lines.put((_prefix(p), raw.decode(errors="replace").rstrip("\n")))
        except ClusterError as err:
            errors.append(err)
        finally:
            lines.put(None)

    for p in pods:
        threading.Thread(target=stream, args=(p,), daemon=True).start()
    open_streams = len(pods)
    while open_streams:
        item = lines.get()
        if item is None:
            open_streams -= 1
            continue
        out.write(item[0] + item[1] + "\n")
        out.flush()
    if errors:
        raise errors[0]
    return 0
