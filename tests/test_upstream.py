"""upstream/ holds every upstream contract the tests and `python -m policy.scan` read, each file as
upstream/sources.yaml records it (project, version, URL, sha256), and scripts/refresh_upstream.py refreshes
them; nothing in the repository reaches outside it."""

from __future__ import annotations

import functools
import hashlib
import http.server
import os
import re
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from infra.pins import CHARTS

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "refresh_upstream.py"
sys.path.insert(0, str(SCRIPT.parent))
import refresh_upstream  # noqa: E402


def test_every_vendored_file_is_the_one_its_source_entry_records():
    assert refresh_upstream.problems(refresh_upstream.UPSTREAM) == []
    sources = refresh_upstream.load(refresh_upstream.UPSTREAM)
    assert len(sources) >= 40
    for path, entry in sources.items():
        assert entry.get("url", "").startswith(("https://", "oci://")) or entry.get("from"), path


def _small_upstream(root: Path) -> Path:
    """A copy of two vendored files (a CRD, a chart archive and its values) with their entries."""
    real = refresh_upstream.UPSTREAM
    sources = refresh_upstream.load(real)
    keep = [
        "crds/kueue.x-k8s.io_localqueues.yaml",
        "helm/metrics-server-3.13.1.tgz",
        "charts/metrics-server-3.13.1-values.yaml",
    ]
    for path in keep:
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(real / path, root / path)
    refresh_upstream.save(root, {p: sources[p] for p in keep})
    return root


def test_the_check_names_an_edited_an_unlisted_and_a_missing_file(tmp_path):
    root = _small_upstream(tmp_path)
    assert refresh_upstream.problems(root) == []
    with (root / "crds/kueue.x-k8s.io_localqueues.yaml").open("a") as f:
        f.write("# edited\n")
    (root / "crds/extra.yaml").write_text("kind: X\n")
    (root / "charts/metrics-server-3.13.1-values.yaml").unlink()
    found = "\n".join(refresh_upstream.problems(root))
    assert "crds/kueue.x-k8s.io_localqueues.yaml: sha256" in found
    assert "crds/extra.yaml: not in sources.yaml" in found
    assert "charts/metrics-server-3.13.1-values.yaml: in sources.yaml but not in upstream/" in found


def test_a_values_file_must_be_its_chart_archives_values(tmp_path):
    root = _small_upstream(tmp_path)
    values = root / "charts/metrics-server-3.13.1-values.yaml"
    values.write_text(values.read_text().replace("replicas: 1", "replicas: 2"))
    sources = refresh_upstream.load(root)
    sources["charts/metrics-server-3.13.1-values.yaml"]["sha256"] = refresh_upstream.sha256(values)
    refresh_upstream.save(root, sources)
    assert refresh_upstream.problems(root) == [
        "charts/metrics-server-3.13.1-values.yaml: differs from the values.yaml of "
        "helm/metrics-server-3.13.1.tgz"
    ]


@pytest.fixture
def served(tmp_path) -> Iterator[tuple[Path, str]]:
    """A directory served over HTTP on a port the OS picks: (directory, base URL)."""
    directory = tmp_path / "served"
    directory.mkdir()
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(directory))
    handler.log_message = lambda *args: None  # type: ignore[method-assign]
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True)  # quick shutdown()
    thread.start()
    yield directory, f"http://127.0.0.1:{server.server_port}"
    server.shutdown()
    thread.join(timeout=10)


def test_fetch_downloads_files_and_pulls_charts_recording_their_hashes(tmp_path, served):
    """The real path of a refresh: a file downloaded from its URL, a chart pulled from a Helm repository
    by Helm's own client (its index.yaml, then the archive), the values file taken from that archive."""
    from helm_python import registry

    directory, base = served
    root = _small_upstream(tmp_path / "upstream")
    crd = "crds/kueue.x-k8s.io_localqueues.yaml"
    (directory / "localqueues.yaml").write_text("kind: CustomResourceDefinition  # a newer release\n")
    shutil.copy(root / "helm/metrics-server-3.13.1.tgz", directory)
    registry.repo_index_generate(directory)
    (root / "helm/metrics-server-3.13.1.tgz").unlink()
    (root / "charts/metrics-server-3.13.1-values.yaml").write_text("stale: true\n")
    sources = refresh_upstream.load(root)
    sources[crd].update(url=f"{base}/localqueues.yaml", note="to be dropped")
    sources["helm/metrics-server-3.13.1.tgz"]["url"] = base
    refresh_upstream.save(root, sources)

    home = tmp_path / "home"  # Helm keeps a repository cache under $HOME
    env = os.environ | {"HOME": str(home), "XDG_CACHE_HOME": str(home / "cache")}
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--root", str(root), "fetch"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (root / crd).read_text() == "kind: CustomResourceDefinition  # a newer release\n"
    published = (directory / "metrics-server-3.13.1.tgz").read_bytes()
    assert (root / "helm/metrics-server-3.13.1.tgz").read_bytes() == published
    assert b"stale" not in (root / "charts/metrics-server-3.13.1-values.yaml").read_bytes()
    after = refresh_upstream.load(root)
    assert after[crd]["sha256"] == hashlib.sha256((root / crd).read_bytes()).hexdigest()
    assert "note" not in after[crd] and "note" not in after["helm/metrics-server-3.13.1.tgz"]
    assert refresh_upstream.problems(root) == []


def test_every_pinned_chart_is_vendored_from_where_the_platform_installs_it():
    sources = refresh_upstream.load(refresh_upstream.UPSTREAM)
    for key, chart in CHARTS.items():
        archive = sources.get(f"helm/{chart.short_name}-{chart.version}.tgz")
        assert archive, f"{key} {chart.version}: no archive; run scripts/refresh_upstream.py charts"
        assert archive["url"] == (chart.repository or chart.name), key
        assert archive.get("chart") == (chart.name if chart.repository else None), key
        values = sources.get(f"charts/{chart.short_name}-{chart.version}-values.yaml")
        assert values and values["from"] == f"helm/{chart.short_name}-{chart.version}.tgz", key


def test_the_provenance_record_names_every_archive():
    provenance = (refresh_upstream.UPSTREAM / "helm" / "PROVENANCE.txt").read_text()
    for path in refresh_upstream.load(refresh_upstream.UPSTREAM):
        if path.startswith("helm/"):
            assert f"=> {path.removeprefix('helm/')}" in provenance, path


# What reaches outside a clone: the old sibling checkout, or more parent directories than a file has.
OUTSIDE = re.compile(r"\.\./shared|shared/upstream|shared/tools")
SHELL_UP = re.compile(r"\.\./\.\.")  # in a shell script or the Makefile: above the repository's root
FILE_UP = re.compile(r"Path\(__file__\)(?:\.resolve\(\))?(?P<up>(?:\.parents\[\d+\]|\.parent\b)+)")
THIS_FILE = "tests/test_upstream.py"
ROOT_UP = re.compile(r"\b(?:REPO|ROOT)\.parent\b")


def outside_references(path: str, text: str) -> list[str]:
    """Lines of a repository file (`path` relative to the root) that lead outside the repository."""
    found = []
    depth = path.count("/") + 1  # parent directories between the file and the root, the file included
    for number, line in enumerate(text.splitlines(), 1):
        where = f"{path}:{number}: {line.strip()}"
        shell = path.endswith(".sh") or path.startswith(".ci/") or path == "Makefile"
        if OUTSIDE.search(line) or ROOT_UP.search(line) or (shell and SHELL_UP.search(line)):
            found.append(where)
        for match in FILE_UP.finditer(line):
            ups = re.findall(r"\.parents\[(\d+)\]|\.parent\b", match["up"])
            if sum(int(n) + 1 if n else 1 for n in ups) > depth:
                found.append(where)
    return found


def test_nothing_in_the_repository_reaches_outside_it():
    tracked = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.split()
    problems = []
    for path in tracked:
        if path.startswith("upstream/") or path == THIS_FILE or not (REPO / path).is_file():
            continue  # upstream/: third-party data, vendored as is; this file: its examples
        try:
            text = (REPO / path).read_text()
        except UnicodeDecodeError:
            continue
        problems += outside_references(path, text)
    assert problems == []


@pytest.mark.parametrize(
    ("path", "line"),
    [
        ("tests/conftest.py", 'SHARED = REPO.parent / "shared"'),
        ("tests/infra/test_x.py", 'CRD = Path(__file__).resolve().parents[3] / "crds"'),
        ("sim/helm_render.py", "ROOT = Path(__file__).resolve().parents[1].parent"),
        ("Makefile", "UPSTREAM := ../shared/upstream"),
        ("scripts/x.sh", 'cd "$(dirname "$0")/../.."'),
    ],
)
def test_each_way_out_is_found(path, line):
    assert outside_references(path, line), line
    assert not outside_references("tests/infra/test_x.py", "REPO = Path(__file__).resolve().parents[2]")
    assert not outside_references("tests/policy/test_x.py", '("/var/lib/../../etc/", "/etc")')  # data


def test_the_command_line_checks_objects_and_values_files(tmp_path):
    """`python -m sim.contracts`, the command for files: exit 1 and the offending field or key."""
    node_class = {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}
    template = {"spec": {"nodeClassRef": node_class, "requirements": []}}
    pool = {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": "gpu"},
        "spec": {"template": template, "disruptionn": {}},
    }
    objects = tmp_path / "objects.yaml"
    objects.write_text(yaml.safe_dump_all([pool, {"apiVersion": "v1", "kind": "ConfigMap"}]))
    values = tmp_path / "values.yaml"
    values.write_text("controllerManager:\n  replicass: 2\n")
    run = [sys.executable, "-m", "sim.contracts"]
    crd = subprocess.run([*run, "crd", str(objects)], capture_output=True, text=True, cwd=REPO)
    assert crd.returncode == 1, crd.stderr
    assert "INVALID NodePool/gpu" in crd.stdout and "spec.disruptionn: unknown field" in crd.stdout
    assert "1 checked against upstream CRDs, 1 invalid, 1 without a CRD here" in crd.stdout
    keys = subprocess.run([*run, "values", "kueue", "0.19.2", str(values)], capture_output=True, text=True)
    assert keys.returncode == 1, keys.stderr
    assert "UNKNOWN kueue 0.19.2: controllerManager.replicass" in keys.stdout
