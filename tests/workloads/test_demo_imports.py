"""`make demo` installs only the `train` extra: `workloads run-local` must run without the Pulumi SDKs
and the Kubernetes client. Every Python process of the run (the CLI, the launcher, the trainer ranks)
gets a sitecustomize that makes those imports fail, as in a `.venv` that never installed them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.workloads.local_runs import FEW_STEPS

REPO = Path(__file__).resolve().parents[2]
BLOCKER = '''
import sys

class _NotInstalled:
    BLOCKED = ("pulumi", "pulumi_aws", "pulumi_eks", "pulumi_kubernetes", "pulumi_random", "kubernetes")

    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in self.BLOCKED:
            raise ModuleNotFoundError(f"No module named {name!r} (not in the train extra)", name=name)
        return None

sys.meta_path.insert(0, _NotInstalled())
'''


def test_run_local_needs_neither_pulumi_nor_the_kubernetes_client(tmp_path):
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "sitecustomize.py").write_text(BLOCKER)
    env = os.environ | {"PYTHONPATH": os.pathsep.join([str(tmp_path / "site"), str(REPO)])}
    probe = subprocess.run(
        [sys.executable, "-c", "import pulumi"], env=env, capture_output=True, text=True, check=False
    )
    assert "not in the train extra" in probe.stderr  # the blocker is active in child interpreters
    run = subprocess.run(
        [sys.executable, "-m", "workloads", "run-local", "--stack", "dev-zimdb", "--nproc", "1",
         "--out", str(tmp_path / "runs"), *FEW_STEPS],
        env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-3000:]
    assert (tmp_path / "runs" / "dev-zimdb" / "output" / "summary.json").is_file()
