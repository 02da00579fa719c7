"""Scanner gates: checkov over every Kubernetes object the stacks render (the platform's own objects, every
object its Helm releases install, rendered from the pinned chart packages by sim/helm_render.py, and
the workload stacks) and over docker/, hadolint over
the Dockerfiles, and the CrossGuard policies run offline over the same stacks. `python -m policy.scan`
(what `make lint` runs) prints the findings and exits 1 on a mandatory policy violation, a hadolint
finding, or a checkov failure that policy/checkov_skips.yaml does not explain.

checkov's Kubernetes checks only know built-in kinds, so the pods each training job's operator creates
(sim/operators/pods.py: init containers and sidecars included) and the pod templates of other custom
resources (TrainingRuntime, ClusterTrainingRuntime) are also written out as Pods named
`<kind>-<name>-<n>`: the training pods get the same container checks. Objects of kinds checkov has no
check for (CustomResourceDefinitions above all) are not written: checkov would parse them and judge nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from infra.config import stack_files
from infra.extras import needs_dev_install


def parser() -> argparse.ArgumentParser:
    raw = argparse.RawDescriptionHelpFormatter
    return argparse.ArgumentParser(prog="python -m policy.scan", description=__doc__, formatter_class=raw)


if __name__ == "__main__":
    parser().parse_args()  # no options: --help answers before the scanners and the Helm engine load

with needs_dev_install("python -m policy.scan"):  # the policy pack, Helm's engine, kubernetes-validate
    from policy import chart_exceptions
    from policy.core import evaluate, from_synth, stack_is_prod
    from policy.k8s import from_manifests, pod_specs
    from policy.pack import RULES, STACK_RULES
    from sim import helm_render
    from sim.operators.pods import operator_pods
    from workloads.platform import example_outputs_path, load_platform_outputs
    from workloads.stacks import load_stack

REPO = Path(__file__).resolve().parents[1]
SKIPS_FILE = Path(__file__).with_name("checkov_skips.yaml")
# The hadolint config (docker/.hadolint.yaml; each ignored rule explained there); failure threshold: warning.
HADOLINT_CONFIG = REPO / "docker" / ".hadolint.yaml"
VENV_BIN = Path(sys.executable).parent
PLATFORM_STACKS = tuple(stack_files.platform_stacks(REPO))
# No network calls from checkov: it would try to fetch its guideline mappings on every run.
CHECKOV_ENV = {"BC_SKIP_MAPPING": "TRUE", "CHECKOV_RUN_SCA_PACKAGE_SCAN_V2": "false", "LOG_LEVEL": "ERROR"}


def _run(args: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(args, capture_output=True, text=True, cwd=REPO)


def workload_stacks() -> list[str]:
    """Every stack file that sets mlops-eks:platformStack (a workload stack)."""
    return stack_files.workload_stacks(REPO)


def synth_resources(stack: str) -> list[dict[str, Any]]:
    """`python -m infra synth --stack <stack> --json`: [{"type", "name", "parent", "inputs", "deps"}]."""
    p = _run([sys.executable, "-m", "infra", "synth", "--stack", stack, "--json"])
    if p.returncode != 0:
        raise RuntimeError(f"infra synth --stack {stack} failed ({p.returncode}):\n{p.stderr[-3000:]}")
    return json.loads(p.stdout)


def rendered_objects(stack: str) -> list[dict[str, Any]]:
    """`python -m workloads render --stack <stack>`: the Kubernetes objects of a workload stack."""
    p = _run([sys.executable, "-m", "workloads", "render", "--stack", stack, "--kubernetes-only"])
    if p.returncode != 0:
        raise RuntimeError(f"workloads render --stack {stack} failed ({p.returncode}):\n{p.stderr[-3000:]}")
    return [d for d in yaml.safe_load_all(p.stdout) if isinstance(d, dict)]


def platform_objects(resources: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The Kubernetes objects among synthesized resources (CustomResources, StorageClasses, ...)."""
    return [
        r["inputs"]
        for r in resources
        if r["type"].startswith("kubernetes:") and "apiVersion" in r["inputs"] and "kind" in r["inputs"]
    ]


def helm_objects(resources: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every object the platform's Helm releases install, rendered with their real charts at the
    cluster's Kubernetes version (the eks:index:Cluster's `version`)."""
    kube_version = next(r["inputs"]["version"] for r in resources if r["type"] == "eks:index:Cluster")
    rendered = helm_render.render_platform(resources, kube_version)
    if rendered.errors:
        raise RuntimeError("Helm releases that do not render:\n" + "\n".join(rendered.errors.values()))
    if rendered.invalid:  # the API server would refuse these: judging the rest would pass a broken install
        raise RuntimeError("rendered objects the Kubernetes schema rejects:\n" + "\n".join(rendered.invalid))
    return rendered.all_objects


def _name(obj: dict[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name", "unnamed"))


JOB_KINDS = {"TrainJob", "PyTorchJob", "MPIJob", "RayJob"}


def template_pods(obj: dict[str, Any]) -> list[dict[str, Any]]:
    """Pods for checkov from the pod templates nested in a custom resource that is not a job (a training
    runtime, say); a job's pods are the ones its operator creates (job_pods)."""
    if obj.get("apiVersion", "").split("/")[0] in ("v1", "apps", "batch") or obj.get("kind") in JOB_KINDS:
        return []
    meta = obj.get("metadata") or {}
    pods = []
    specs = [spec for _, spec in pod_specs(obj.get("spec") or {}) if spec.get("containers")]
    for i, spec in enumerate(specs):
        metadata = {"name": f"{obj.get('kind', 'object').lower()}-{_name(obj)}-{i}"}
        if meta.get("namespace"):
            metadata["namespace"] = meta["namespace"]
        pods.append({"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": dict(spec)})
    return pods


def job_pods(stack: str, objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The pods the operators create for the jobs of workload stack `stack` on its platform's example
    outputs, what `workloads render` renders against (sim/operators/pods.py), named
    <kind>-<job>-<role>-<n>: init containers and sidecars included."""
    platform = load_platform_outputs(example_outputs_path(load_stack(stack).platform_stack))
    pods = []
    for i, created in enumerate(operator_pods(objects, platform)):
        kind, name = created.job.split("/", 1)
        pod_name = f"{kind.lower()}-{name}-{created.role.lower()}-{i}"
        meta = {"name": pod_name, "namespace": created.pod["metadata"]["namespace"]}
        meta["labels"] = created.labels
        pods.append({"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": created.spec})
    return pods


def checkov_kinds() -> frozenset[str]:
    """The kinds checkov has a check for: the kinds its resource checks register for, and those its graph
    checks name (as the resource or the connected resource)."""
    import checkov.kubernetes.checks.graph_checks as graph_checks
    import checkov.kubernetes.checks.resource  # noqa: F401  (registers every resource check)
    from checkov.kubernetes.checks.resource.registry import registry

    named: set[str] = set()
    for check in Path(graph_checks.__file__).parent.glob("*.json"):
        named |= _kinds_named(json.loads(check.read_text())["definition"])
    return frozenset(registry.checks) | frozenset(named)


def _kinds_named(condition: Any) -> set[str]:
    """The kinds a graph check's definition names: its resource_types and connected_resource_types, and the
    values of its filters on resource_type, at any depth of its and/or tree."""
    if isinstance(condition, list):
        return set().union(*map(_kinds_named, condition))
    if not isinstance(condition, dict):
        return set()
    found = {*condition.get("resource_types", []), *condition.get("connected_resource_types", [])}
    if condition.get("attribute") == "resource_type":
        value = condition.get("value")
        found.update(value if isinstance(value, list) else [value])
    return found.union(*map(_kinds_named, condition.values()))


def write_scan_tree(root: Path, objects: dict[str, list[dict[str, Any]]]) -> None:
    """root/k8s/<source>/NNN-<kind>-<name>.yaml for every object (plus template pods) of a kind checkov
    checks, root/docker/... An object several sources render alike (most chart objects of dev and prod) is
    written once, under the first: checkov's findings depend on the object alone, and the skips match its
    resource id. Objects of other kinds are left out: checkov would parse them and judge nothing (the
    CustomResourceDefinitions alone were 5 of the 6.6 MB written, and most of checkov's time)."""
    kinds = checkov_kinds()
    written: set[str] = set()
    for source, objs in objects.items():
        out = root / "k8s" / source
        out.mkdir(parents=True, exist_ok=True)
        stack = source.removeprefix("workload-") if source.startswith("workload-") else None
        docs = [d for obj in objs for d in (obj, *template_pods(obj))]
        docs += job_pods(stack, objs) if stack else []
        for i, doc in enumerate(docs):
            if doc.get("kind") not in kinds:
                continue
            text = yaml.dump(doc, Dumper=yaml.CSafeDumper)  # libyaml: hundreds of objects per scan
            if text not in written:
                written.add(text)
                (out / f"{i:03d}-{doc.get('kind', 'object').lower()}-{_name(doc)}.yaml").write_text(text)
    for dockerfile in dockerfiles():
        target = root / dockerfile.relative_to(REPO)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(dockerfile, target)


def dockerfiles() -> list[Path]:
    return sorted((REPO / "docker").glob("**/Dockerfile*"))


@dataclass(frozen=True)
class Failure:
    check: str
    name: str
    resource: str
    file: str

    def __str__(self) -> str:
        return f"{self.check} {self.name}: {self.resource} ({self.file})"


def run_checkov(root: Path) -> tuple[list[Failure], dict[str, Any]]:
    """One checkov run over `root` (kubernetes + dockerfile): every failed check, and the summaries."""
    args = [str(VENV_BIN / "checkov"), "-d", str(root), "--framework", "kubernetes", "dockerfile"]
    args += ["-o", "json", "--quiet", "--compact", "--skip-download"]
    p = subprocess.run(args, capture_output=True, text=True, env={**os.environ, **CHECKOV_ENV})
    if p.returncode not in (0, 1) or not p.stdout.strip():
        raise RuntimeError(f"checkov did not run ({p.returncode}):\n{p.stderr[-3000:]}")
    reports = json.loads(p.stdout)
    reports = reports if isinstance(reports, list) else [reports]
    failures, summary = [], {}
    for report in reports:
        summary[report.get("check_type")] = report.get("summary")
        for f in report.get("results", {}).get("failed_checks", []):
            failures.append(Failure(f["check_id"], f["check_name"], f["resource"], f["file_path"]))
    return failures, summary


def load_skips() -> list[dict[str, Any]]:
    """Explained exceptions: {check, reason} and either `applies_to` (a regex on checkov's resource id,
    for the project's own objects) or `resources` (exact resource ids: objects of third-party charts)."""
    return yaml.safe_load(SKIPS_FILE.read_text())["skips"]


def _covers(skip: dict[str, Any], failure: Failure) -> bool:
    if skip["check"] != failure.check:
        return False
    if "resources" in skip:
        return failure.resource in skip["resources"]
    return bool(re.match(skip["applies_to"], failure.resource))


def unexplained(failures: Iterable[Failure], skips: list[dict[str, Any]]) -> list[Failure]:
    return [f for f in failures if not any(_covers(s, f) for s in skips)]


def unused_skips(failures: Iterable[Failure], skips: list[dict[str, Any]]) -> list[str]:
    """Skips (or listed resources) no failure needs any more: they must be deleted, not kept "just in
    case"."""
    failures = list(failures)
    stale = []
    for s in skips:
        if "resources" in s:
            failing = {f.resource for f in failures if f.check == s["check"]}
            stale += [f"{s['check']} {r}" for r in s["resources"] if r not in failing]
        elif not any(_covers(s, f) for f in failures):
            stale.append(s["check"])
    return stale


def run_hadolint(files: Iterable[Path]) -> list[str]:
    """hadolint findings at or above the config's failure threshold, one line each."""
    findings: list[str] = []
    for path in files:
        p = _run([str(VENV_BIN / "hadolint"), "--config", str(HADOLINT_CONFIG), "--no-color", str(path)])
        if p.returncode != 0:
            findings.extend(line for line in (p.stdout + p.stderr).splitlines() if line.strip())
    return findings


def policy_findings(
    platform: dict[str, list[dict[str, Any]]], workloads: dict[str, list[dict[str, Any]]]
) -> list[str]:
    """The CrossGuard policies, run offline over the same stacks: mandatory findings only."""
    found = [
        f"{stack}: {f}"
        for stack, records in platform.items()
        for f in evaluate(from_synth(records), RULES, STACK_RULES, prod=stack_is_prod(stack))
    ]
    found += [
        f"{stack}: {f}"
        for stack, objects in workloads.items()
        for f in evaluate(from_manifests(objects), RULES, prod=stack_is_prod(stack))
    ]
    return [line for line in found if "[mandatory]" in line]


def main(argv: list[str] | None = None) -> int:
    parser().parse_args(argv)
    print(
        "rendering the platform stacks (infra synth) and the workload stacks (workloads render) ...",
        flush=True,
    )
    platform = {s: synth_resources(s) for s in PLATFORM_STACKS}
    workloads = {s: rendered_objects(s) for s in workload_stacks()}
    objects = {f"platform-{s}": platform_objects(r) for s, r in platform.items()}
    objects.update({f"helm-{s}": helm_objects(r) for s, r in platform.items()})
    objects.update({f"workload-{s}": objs for s, objs in workloads.items()})
    for source, objs in objects.items():
        print(f"  {source}: {len(objs)} Kubernetes objects")
    violations = policy_findings(platform, workloads)
    # The pack's Kubernetes rules over the Helm-rendered objects, less policy/chart_exceptions.yaml.
    charts = chart_exceptions.findings([o for s in platform for o in objects[f"helm-{s}"]], RULES)
    accepted = chart_exceptions.load_exceptions()
    violations += [f"helm: {line}" for line in chart_exceptions.unexplained(charts, accepted)]
    violations += [f"helm: stale exception {line}" for line in chart_exceptions.stale(charts, accepted)]
    print(f"CrossGuard policies (offline): {len(violations)} mandatory violations")
    for line in violations:
        print(f"  {line}")
    with tempfile.TemporaryDirectory(prefix="mlops-eks-scan-") as tmp:
        write_scan_tree(Path(tmp), objects)
        print(f"checkov over {tmp} (kubernetes, dockerfile) ...", flush=True)
        failures, summary = run_checkov(Path(tmp))
    skips = load_skips()
    bad, stale = unexplained(failures, skips), unused_skips(failures, skips)
    print(f"checkov: {summary}; {len(failures) - len(bad)} failures explained by {SKIPS_FILE.name}")
    for f in bad:
        print(f"  FAILED {f}")
    for check in stale:
        print(f"  STALE skip {check}: nothing fails it any more; delete it from {SKIPS_FILE.name}")
    lint = run_hadolint(dockerfiles())
    print(f"hadolint: {len(dockerfiles())} Dockerfiles, {len(lint)} findings")
    for line in lint:
        print(f"  {line}")
    return 1 if violations or bad or stale or lint else 0


if __name__ == "__main__":
    sys.exit(main())
