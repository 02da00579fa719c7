"""Refresh upstream/ (the upstream contracts that the tests and `python -m policy.scan` read) from where
upstream/sources.yaml says each file comes from, and check that the two agree.

    .venv/bin/python scripts/refresh_upstream.py check            # offline; tests/test_upstream.py runs it
    .venv/bin/python scripts/refresh_upstream.py fetch [FILE...]  # download every file (or FILE...)
    .venv/bin/python scripts/refresh_upstream.py charts           # add and fetch what infra/pins.py pins

upstream/sources.yaml has one entry per file (its path relative to upstream/):
  project, version  the upstream project (GitHub owner/name) and the release the file comes from
  url               https: the file at that release (raw.githubusercontent.com), downloaded as is; or a Helm
                    chart's repository (https, with `chart`: the chart's name) or oci:// reference, from which
                    `fetch` pulls the published archive of `version` with Helm's own client (helm-python-sdk)
  from              instead of url: a chart archive of upstream/, whose values.yaml this file is
  sha256            of the file as vendored: `check` fails on any difference, so an edit cannot go unnoticed
  note              how the vendored file differs from what `url` serves; `fetch` drops it
`fetch` writes each file and records its sha256. To move a file to another release, edit its version and url
and fetch it; after a chart pin changes in infra/pins.py, `charts` adds the new archive and values file
(the old ones stay until removed by hand: some tests compare releases). Needs the network, except `check`.
"""

from __future__ import annotations

import argparse
import hashlib
import shutil
import sys
import tarfile
import tempfile
import urllib.request
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
UPSTREAM = REPO / "upstream"
SOURCES = "sources.yaml"
# Written here, not vendored: how the archives were packaged, and what the directory holds.
OWN_FILES = {SOURCES, "README.md", "helm/PROVENANCE.txt"}


def load(root: Path) -> dict[str, dict[str, Any]]:
    return yaml.safe_load((root / SOURCES).read_text())


def save(root: Path, sources: dict[str, dict[str, Any]]) -> None:
    text = yaml.safe_dump(dict(sorted(sources.items())), sort_keys=False, width=200)
    (root / SOURCES).write_text(text)


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def archive_values(archive: Path) -> bytes:
    """The values.yaml of a chart archive (its top folder is the chart's name)."""
    with tarfile.open(archive) as tar:
        tops = {m.name.split("/", 1)[0] for m in tar.getmembers()}
        if len(tops) != 1:
            raise ValueError(f"{archive.name}: not one chart (top folders {sorted(tops)})")
        member = tar.extractfile(f"{tops.pop()}/values.yaml")
        if member is None:
            raise ValueError(f"{archive.name}: no values.yaml")
        return member.read()


def problems(root: Path) -> list[str]:
    """Every way upstream/ and sources.yaml disagree."""
    sources = load(root)
    on_disk = {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()} - OWN_FILES
    found = [f"{p}: not in {SOURCES} (where does it come from?)" for p in sorted(on_disk - set(sources))]
    found += [f"{p}: in {SOURCES} but not in upstream/" for p in sorted(set(sources) - on_disk)]
    for path, entry in sorted(sources.items()):
        missing = [k for k in ("project", "version", "sha256") if not entry.get(k)]
        if ("url" in entry) == ("from" in entry):
            missing.append("url or from (one of them)")
        if missing:
            found.append(f"{path}: {SOURCES} lacks {', '.join(missing)}")
        if path not in on_disk:
            continue
        if entry.get("sha256") != sha256(root / path):
            found.append(f"{path}: sha256 {sha256(root / path)}, {SOURCES} records {entry.get('sha256')}")
        archive = entry.get("from")
        values = (root / archive).is_file() and archive_values(root / archive) if archive else None
        if values and values != (root / path).read_bytes():
            found.append(f"{path}: differs from the values.yaml of {archive}")
    return found


def download(url: str, destination: Path) -> None:
    with urllib.request.urlopen(url, timeout=120) as response, destination.open("wb") as out:
        shutil.copyfileobj(response, out)


def pull_chart(entry: dict[str, Any], destination: Path) -> None:
    """The published archive of the chart at entry's version, as `helm pull` fetches it."""
    from helm_python import registry  # the dev extra; only a fetch needs it

    with tempfile.TemporaryDirectory() as tmp:
        if entry["url"].startswith("oci://"):
            registry.pull(entry["url"], version=entry["version"], destination=tmp)
        else:
            registry.pull(entry["chart"], repo_url=entry["url"], version=entry["version"], destination=tmp)
        (pulled,) = Path(tmp).glob("*.tgz")
        shutil.move(pulled, destination)


def fetch(root: Path, paths: list[str]) -> list[str]:
    """Download `paths` (every file when empty) from their sources; archives before the values files
    taken from them. Returns what was written."""
    sources = load(root)
    unknown = sorted(set(paths) - set(sources))
    if unknown:
        raise SystemExit(f"not in upstream/{SOURCES}: {', '.join(unknown)}; add an entry first")
    chosen = list(paths) or sorted(sources)
    chosen += [p for p, e in sources.items() if e.get("from") in chosen and p not in chosen]
    written = []
    for path in sorted(chosen, key=lambda p: "from" in sources[p]):
        entry, target = sources[path], root / path
        print(f"==> {path} ({entry['project']} {entry['version']})", flush=True)
        with tempfile.TemporaryDirectory() as tmp:
            staged = Path(tmp) / target.name
            if "from" in entry:
                staged.write_bytes(archive_values(root / entry["from"]))
            elif "chart" in entry or entry["url"].startswith("oci://"):
                pull_chart(entry, staged)
            else:
                download(entry["url"], staged)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.move(staged, target)
        entry["sha256"] = sha256(target)
        entry.pop("note", None)
        written.append(path)
        save(root, sources)  # after each file: an interrupted refresh keeps what it fetched
    return written


def chart_entries(root: Path) -> list[str]:
    """Add sources.yaml entries for every chart version infra/pins.py pins and upstream/ lacks."""
    sys.path.insert(0, str(REPO))
    from infra.pins import CHARTS

    sources = load(root)
    added = []
    for chart in CHARTS.values():
        archive = f"helm/{chart.short_name}-{chart.version}.tgz"
        if archive in sources:
            continue
        earlier = [e for p, e in sources.items() if p.startswith(f"helm/{chart.short_name}-")]
        project = earlier[0]["project"] if earlier else "unknown (fill in: GitHub owner/name)"
        entry = {"project": project, "version": chart.version, "url": chart.repository or chart.name}
        if chart.repository:
            entry["chart"] = chart.name
        sources[archive] = {**entry, "sha256": ""}
        values = f"charts/{chart.short_name}-{chart.version}-values.yaml"
        sources[values] = {"project": project, "version": chart.version, "from": archive, "sha256": ""}
        added += [archive, values]
    save(root, sources)
    return added


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="scripts/refresh_upstream.py",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("check", help="check upstream/ against sources.yaml (offline)")
    fetch_parser = sub.add_parser("fetch", help="download files from their sources and record their sha256")
    fetch_parser.add_argument("files", nargs="*", help="paths relative to upstream/ (default: every file)")
    sub.add_parser("charts", help="add and fetch the archive and values of every chart version pinned")
    parser.add_argument("--root", type=Path, default=UPSTREAM, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.command == "fetch":
        fetch(args.root, args.files)
    elif args.command == "charts":
        added = chart_entries(args.root)
        print("every pinned chart is vendored" if not added else f"added {', '.join(added)}")
        if added:
            fetch(args.root, added)
    found = problems(args.root)
    for problem in found:
        print(problem, file=sys.stderr)
    if args.command == "check" and not found:
        print(f"upstream/: {len(load(args.root))} files, each as {SOURCES} records it")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
