"""Copy the upstream source the models in sim/ mirror, and the upstream test tables their ports pass, into
sim/vendored/.

    .venv/bin/python scripts/vendor_model_sources.py                   # raw.githubusercontent.com
    .venv/bin/python scripts/vendor_model_sources.py --git-dir-root D  # bare clones D/<owner>+<name>/repo

Each file is the upstream text at the pinned tag, whole or the listed line ranges (joined), under
sim/vendored/<owner>/<name>/<tag>/<path>; PROVENANCE.txt lists repository, tag, path and lines, and for
a file first copied from another commit holding the same text, that commit (NOTES).
tests/sim/test_operator_pods.py reads the constants the model copies (label keys, ports, default
images, the init-container template) from these files, so a model that drifts from its source fails
there; the tests/sim/test_*_upstream.py and admission ports' tests run the vendored test tables' cases
(sim/models.yaml `upstream_tests`). Where this machine cannot reach GitHub, the text was read through the
public code index at a commit whose lines are the same as the tag's (checked against a clone:
`--git-dir-root`).
Change a tag here when its operator's pin changes (infra/pins.py), rerun, and fix what the tests report.
"""

from __future__ import annotations

import argparse
import subprocess
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "sim" / "vendored"

K8S = "release-1.35"
TERMINATOR = "pkg/controllers/node/termination/terminator"
STAGING = "staging/src/k8s.io"
Span = tuple[int, int]  # first and last line, counted from 1
# (repository, tag, path, a span, spans whose lines are joined, or None for the whole file)
SOURCES: list[tuple[str, str, str, Span | list[Span] | None]] = [
    # Training Operator v1.9.2 (PyTorchJob, MPIJob); the repository is kubeflow/trainer now.
    ("kubeflow/trainer", "v1.9.2", "pkg/controller.v1/pytorch/initcontainer.go", None),
    ("kubeflow/trainer", "v1.9.2", "pkg/config/config.go", None),
    ("kubeflow/trainer", "v1.9.2", "manifests/base/deployment.yaml", None),
    ("kubeflow/trainer", "v1.9.2", "pkg/apis/kubeflow.org/v1/pytorch_types.go", (20, 32)),
    ("kubeflow/trainer", "v1.9.2", "pkg/apis/kubeflow.org/v1/common_types.go", (20, 40)),
    ("kubeflow/trainer", "v1.9.2", "pkg/controller.v1/mpi/mpijob.go", (27, 48)),
    ("kubeflow/trainer", "v1.9.2", "pkg/controller.v1/pytorch/initcontainer_test.go", None),
    # Kubeflow Trainer 2.3.0 (TrainJob) and the JobSet its chart bundles (0.12.0).
    ("kubeflow/trainer", "v2.3.0", "pkg/constants/constants.go", None),
    ("kubernetes-sigs/jobset", "v0.12.0", "api/jobset/v1alpha2/jobset_types.go", (20, 80)),
    # Upstream test tables of the admission ports (sim/admission): the cases their tests transcribe.
    ("kubernetes-sigs/jobset", "v0.12.0", "pkg/webhooks/jobset_webhook_test.go", (1234, 1486)),
    ("kubeflow/trainer", "v2.3.0", "pkg/webhooks/trainingruntime_webhook_test.go", (32, 78)),
    # KubeRay 1.7.0.
    ("ray-project/kuberay", "v1.7.0", "ray-operator/controllers/ray/utils/constant.go", (1, 140)),
    ("ray-project/kuberay", "v1.7.0", "ray-operator/controllers/ray/common/pod.go", (595, 660)),
    # Kueue 0.19.2.
    ("kubernetes-sigs/kueue", "v0.19.2", "pkg/constants/constants.go", (55, 80)),
    ("kubernetes-sigs/kueue", "v0.19.2", "pkg/controller/constants/constants.go", (20, 40)),
    ("kubernetes-sigs/kueue", "v0.19.2", "apis/kueue/v1beta2/topology_types.go", (70, 82)),
    ("kubernetes-sigs/kueue", "v0.19.2", "pkg/controller/jobs/trainjob/trainjob_controller.go", (70, 80)),
    # Test tables of the Kubernetes functions the models port (release-1.35: the platform's version).
    ("kubernetes/kubernetes", K8S, f"{STAGING}/api/core/v1/toleration_test.go", (1, 255)),
    (
        "kubernetes/kubernetes",
        K8S,
        f"{STAGING}/component-helpers/scheduling/corev1/nodeaffinity/nodeaffinity_test.go",
        (372, 1057),
    ),
    ("kubernetes/kubernetes", K8S, f"{STAGING}/apimachinery/pkg/api/resource/quantity_test.go", (267, 554)),
    # The name validators' tests (sim/kubernetes/names.py): the DNS label and subdomain tables, the
    # domain-prefixed path table, and the label key and value tables of pkg/api/validate/content.
    (
        "kubernetes/kubernetes",
        K8S,
        f"{STAGING}/apimachinery/pkg/util/validation/validation_test.go",
        [(1, 117), (541, 586)],
    ),
    ("kubernetes/kubernetes", K8S, f"{STAGING}/apimachinery/pkg/api/validate/content/kube_test.go", None),
    (
        "kubernetes/kubernetes",
        K8S,
        f"{STAGING}/apiextensions-apiserver/pkg/apiserver/schema/pruning/algorithm_test.go",
        (1, 610),
    ),
    # Karpenter 1.14.1's specs of the functions sim/karpenter_disruption.py ports.
    ("kubernetes-sigs/karpenter", "v1.14.1", "pkg/utils/pod/suite_test.go", (1, 246)),
    ("kubernetes-sigs/karpenter", "v1.14.1", f"{TERMINATOR}/suite_test.go", (221, 283)),
    # The Pulumi CLI's config merge (the commit sim/pulumi/merge_config.py was read at).
    ("pulumi/pulumi", "1b59498", "pkg/workspace/config_test.go", None),
    # The tests of the provider checks sim/pulumi/eks_rules.py ports, at the commit it was read at.
    ("pulumi/pulumi-eks", "0f5a544", "nodejs/eks/cluster/authenticationMode.test.ts", None),
    ("pulumi/pulumi-eks", "0f5a544", "nodejs/eks/cluster/cluster.test.ts", None),
]
# Where a file's text was first read, when that was not the tag itself (the search tools' read_file): a
# commit or stored copy whose lines are the same, as checked against the tag's staging repository.
NOTES: dict[str, str] = {
    f"{STAGING}/api/core/v1/toleration_test.go": "read at kubernetes/kubernetes@aceb89debc26; identical "
    "to kubernetes/api v0.35.7 core/v1/toleration_test.go",
    f"{STAGING}/component-helpers/scheduling/corev1/nodeaffinity/nodeaffinity_test.go": "lines 362-1047 "
    "of a 2021 copy (read_file id 35213290), identical to these lines of kubernetes/component-helpers "
    "v0.35.7",
    f"{STAGING}/apimachinery/pkg/api/resource/quantity_test.go": "read_file id 32563121; identical to "
    "kubernetes/apimachinery v0.35.7",
    f"{STAGING}/apiextensions-apiserver/pkg/apiserver/schema/pruning/algorithm_test.go": "read_file id "
    "173246349; identical to kubernetes/apiextensions-apiserver v0.35.7",
    f"{STAGING}/apimachinery/pkg/util/validation/validation_test.go": "read_file id 54684831008 (a later "
    "file whose group and user ID tables differ; these lines are identical to kubernetes/apimachinery "
    "v0.35.7)",
    f"{STAGING}/apimachinery/pkg/api/validate/content/kube_test.go": "read_file id 1737895142; identical "
    "to kubernetes/apimachinery v0.35.7",
    "pkg/controller.v1/pytorch/initcontainer_test.go": "read at kubeflow/training-operator@2b9eb8ad6b3b "
    "(read_file id 29153549595); identical to the file at v1.9.2",
    "pkg/utils/pod/suite_test.go": "read_file id 52636684223 (an earlier file, whose 246 lines v1.14.1 "
    "keeps unchanged)",
    f"{TERMINATOR}/suite_test.go": "read_file id 54655719692 (the v1.14.1 file)",
    "pkg/workspace/config_test.go": "read at pulumi/pulumi@b9b4efd7ff6a; identical to the file at 1b59498",
    "nodejs/eks/cluster/authenticationMode.test.ts": "read at pulumi/pulumi-eks@3328fbefede6; identical "
    "to the file at 0f5a544",
    "nodejs/eks/cluster/cluster.test.ts": "read at pulumi/pulumi-eks@3328fbefede6; identical to the file "
    "at 0f5a544",
}


def _read(repo: str, tag: str, path: str, git_dir_root: Path | None) -> str:
    if git_dir_root is not None:
        git_dir = git_dir_root / repo.replace("/", "+") / "repo"
        command = ["git", f"--git-dir={git_dir}", "show", f"{tag}:{path}"]
        return subprocess.run(command, check=True, capture_output=True, text=True).stdout
    url = f"https://raw.githubusercontent.com/{repo}/{tag}/{path}"
    with urllib.request.urlopen(url, timeout=60) as response:  # noqa: S310 (a fixed https URL)
        return response.read().decode()


def main(argv: list[str] | None = None) -> int:
    raw = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=raw)
    parser.add_argument("--git-dir-root", type=Path, default=None)
    args = parser.parse_args(argv)
    for repo, tag, path, lines in SOURCES:
        text = _read(repo, tag, path, args.git_dir_root)
        if lines is not None:
            every = text.splitlines(keepends=True)
            text = "".join("".join(every[first - 1 : last]) for first, last in _spans(lines))
        target = OUT / repo / tag / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
        print(f"{repo}@{tag} {path}")
    (OUT / "PROVENANCE.txt").write_text(provenance())
    return 0


def _spans(lines: Span | list[Span]) -> list[Span]:
    return lines if isinstance(lines, list) else [lines]


def provenance() -> str:
    """PROVENANCE.txt: one line per vendored file, then where it was first read when that was elsewhere."""
    lines = ["Copied by scripts/vendor_model_sources.py from:"]
    for repo, tag, path, span in SOURCES:
        shown = "lines " + ", ".join(f"{a}-{b}" for a, b in _spans(span)) if span else "whole file"
        lines.append(f"https://github.com/{repo}/blob/{tag}/{path} ({shown})")
        if path in NOTES:
            lines.append(f"    first read: {NOTES[path]}")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
