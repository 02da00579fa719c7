"""Plan check: what the pod will meet. The files the trainer reads in the pod (data, the LLM, its chat
template) judged where the pod sees them: a volume mounted there, else the image; a path on the
deployer's machine is no path in the pod, and a model reference the trainer refuses is refused here by the
trainer's own rules (trainer.config). The volumes the job claims judged as the cluster binds them: an EBS
StorageClass gives no ReadWriteMany."""

from __future__ import annotations

from pathlib import Path, PurePosixPath
from typing import Any

from sim.operators.pods import operator_pods
from trainer.config import ConfigError, LlmConfig
from workloads.checks import Finding, PlannedJob
from workloads.pod import s3_prefix
from workloads.render import trainer_config
from workloads.s3_keys import relative_form

# The image's home (docker/*/Dockerfile WORKDIR): a relative path in the pod resolves there.
POD_HOME = PurePosixPath("/home/trainer")
# Where a laptop keeps files; none of it exists in the image.
DEPLOYER_HOMES = ("/Users/", "/home/", "/root/", "~")
# The platform's StorageClass (infra/platform/cluster.py: gp3 on ebs.csi.aws.com) and the other EBS volume
# types: the EBS CSI driver attaches a filesystem volume to one node (ReadWriteOnce; ReadWriteMany only for
# raw block devices on io2 Multi-Attach, which a trainer's directory is not).
EBS_CLASSES = ("gp2", "gp3", "io1", "io2", "st1", "sc1")
# trainerConfig keys whose value the pod opens as a local file or directory.
POD_READS = (("data", "source"), ("data", "val_source"), ("llm", "model"), ("llm", "chat_template"))


def _local_path(key: str, value: Any) -> bool:
    if not isinstance(value, str) or not value or value in ("synthetic", "tiny"):
        return False
    if value.startswith(("hf:", "s3://")) or "://" in value:
        return False
    return not (key == "llm.chat_template" and "{%" in value)  # a template, not a file


def _mounts(job: PlannedJob) -> list[PurePosixPath]:
    """Where the pod's containers mount a volume that can hold a file before the pod starts: an emptyDir
    (the pod's /tmp, its scratch) starts empty, so a path under it is one the pod cannot see either."""
    mounts = set()
    for p in operator_pods(job.objects, job.facts):
        empty = {v["name"] for v in p.spec.get("volumes", []) if "emptyDir" in v}
        for c in p.spec.get("containers", []):
            mounts |= {
                PurePosixPath(m["mountPath"]) for m in c.get("volumeMounts", []) if m["name"] not in empty
            }
    return sorted(mounts)


def _on_deployer_machine(path: str) -> bool:
    """A path only the deployer's machine has: under a home directory other than the image's, or a file
    or directory that exists here (the plan runs on the deployer's machine, never in the pod)."""
    in_pod_home = PurePosixPath(path) == POD_HOME or POD_HOME in PurePosixPath(path).parents
    return not in_pod_home and (path.startswith(DEPLOYER_HOMES) or Path(path).expanduser().exists())


def _unseen_path(job: PlannedJob, key: str, path: str, mounts: list[PurePosixPath]) -> tuple[str, str] | None:
    """(problem, warning): at most one of them."""
    in_pod = PurePosixPath(path) if path.startswith("/") else POD_HOME / path
    if any(in_pod == m or m in in_pod.parents for m in mounts):
        return None  # on a volume: the pod opens it there
    prefix = s3_prefix(job.stack.spec)
    section, field = key.split(".")
    where = relative_form(section, field, prefix)
    upload = f"upload it under s3://<platform bucket>/{prefix}/ and set {where}"
    instead = {
        "data.source": f"{upload}, or `data: {{pvc: {{claim: <existing>}}, path: <file>}}`",
        "data.val_source": f"{upload}, or a file on the data volume",
        "llm.model": f"hf:<repo>, or {upload}",
    }.get(key, "a file in the image or on a volume of the pod, or the template itself")
    if _on_deployer_machine(path):
        return (
            f"trainerConfig.{key}: {path!r} is a path on this machine; the pod cannot see it (no volume of "
            f"the pod is mounted there, and the image does not hold it); allowed: {instead}",
            "",
        )
    if key == "llm.model":
        try:  # the trainer's own rule: a model directory must exist, else it is hf:<repo> or tiny
            LlmConfig(model=path)
        except ConfigError as err:
            return f"trainerConfig.{key}: the trainer refuses it in the pod: {err}", ""
    return "", f"trainerConfig.{key}: {path!r} must be in the image (no volume of the pod is mounted there)"


def _claim_problems(job: PlannedJob) -> list[str]:
    problems = []
    for claim in (o for o in job.objects if o["kind"] == "PersistentVolumeClaim"):
        spec = claim["spec"]
        storage_class = spec.get("storageClassName")
        if "ReadWriteMany" in spec.get("accessModes", []) and storage_class in EBS_CLASSES:
            problems.append(
                f"volume {claim['metadata']['name']}: ReadWriteMany (the job's {job.stack.spec.max_nodes} "
                f"nodes share it) on StorageClass {storage_class!r}, which EBS cannot give: an EBS volume "
                "attaches to one node, so the claim never binds and the pods stay Pending; allowed: a "
                "ReadWriteMany class (EFS, e.g. efs-sc), `s3` instead of `pvc`, or nodes: 1"
            )
    return problems


def check(job: PlannedJob) -> Finding:
    found = Finding()
    spec = job.stack.spec
    if spec.program.runs_trainer:
        config = trainer_config(spec, bucket="<platform bucket>")
        mounts = _mounts(job)
        for section, field in POD_READS:
            values = config.get(section)
            path = values.get(field) if isinstance(values, dict) else None
            key = f"{section}.{field}"
            if not _local_path(key, path):
                continue
            judged = _unseen_path(job, key, str(path), mounts)
            if judged is not None:
                problem, warning = judged
                found.problems += [problem] if problem else []
                found.warnings += [warning] if warning else []
    found.problems += _claim_problems(job)
    refusals = len(found.problems)
    found.lines.append(
        "what the pod will meet: "
        + ("its files and volumes are where it looks" if not refusals else f"{refusals} refusal(s)")
    )
    return found
