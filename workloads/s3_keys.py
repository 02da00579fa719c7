"""The trainerConfig keys that may name a place in S3, and their form relative to the job's prefix.

A job spec is written before the platform exists, and the platform's bucket name is random until its
first deploy; so where `data`, `checkpoint` and `output` take `{s3: <path>}` under the job's prefix, the
other S3 keys the trainer reads (a validation file, an LLM's model directory or cache) take the same
`{s3: <path>}`, which rendering turns into s3://<the platform's bucket export>/jobs/<name>/<path>. The
prefix is the job's own because its IAM role reaches nothing else in the bucket.
"""

from __future__ import annotations

from typing import Any

# trainerConfig keys that may hold an s3:// URL, which the job's role must be able to reach.
TRAINER_S3_KEYS = (
    ("data", ("source", "val_source")),
    ("checkpoint", ("dir",)),
    ("output", ("dir",)),
    ("llm", ("model", "model_cache")),
)
# Keys a job key fills in (render puts the job's `data`, `checkpoint`, `output` there): the relative form
# is the job key's, so there is one way to say it.
JOB_KEY_OF = {("data", "source"): "data", ("checkpoint", "dir"): "checkpoint", ("output", "dir"): "output"}
_PATH_CHARS = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-/")


def relative_form(section: str, key: str, prefix: str) -> str:
    """How a spec names a place under the job's prefix for trainerConfig.<section>.<key>: the job key
    where one fills it in (JOB_KEY_OF), else the key's own `{s3: <path>}`."""
    role = JOB_KEY_OF.get((section, key))
    if role is not None:
        return f"`{role}: {{s3: <path under {prefix.rstrip('/')}/>}}`"
    return f"`trainerConfig.{section}.{key}: {{s3: <path under {prefix.rstrip('/')}/>}}`"


def _values(config: dict[str, Any]) -> list[tuple[str, str, Any]]:
    """(section, key, value) of every S3 key that is set in `config`."""
    found = []
    for section, keys in TRAINER_S3_KEYS:
        values = config.get(section)
        for key in keys:
            if isinstance(values, dict) and key in values:
                found.append((section, key, values[key]))
    return found


def _path_problem(path: Any) -> str | None:
    if not isinstance(path, str) or not path:
        return "not a path"
    if path.startswith("s3://"):
        return "an s3:// URL, where the bucket is the platform's and known only after its deploy"
    if path.startswith("/"):
        return "a path with a leading '/', which joining under the job's prefix would drop"
    if not set(path) <= _PATH_CHARS:
        return "a path with characters other than letters, digits, '.', '_', '-' and '/'"
    if ".." in path.split("/"):
        return "a path that climbs out of the job's prefix with '..'"
    return None


def relative_problems(config: dict[str, Any], prefix: str) -> list[str]:
    """What is wrong with the `{s3: <path>}` values in trainerConfig, one message per key."""
    problems = []
    for section, key, value in _values(config):
        if not isinstance(value, dict):
            continue
        name = f"trainerConfig.{section}.{key}"
        if (section, key) in JOB_KEY_OF:
            role = JOB_KEY_OF[(section, key)]
            problems.append(
                f"{name}: the job key `{role}` says where the trainer's {role} lives; got {value!r}; "
                f"allowed: `{role}: {{s3: <path under {prefix}/>}}` beside trainerConfig"
            )
        elif set(value) != {"s3"}:
            problems.append(
                f"{name}: a mapping here takes `s3` alone; got {value!r}; allowed: `{{s3: <path under "
                f"{prefix}/>}}`, an s3:// URL or a path in the pod"
            )
        elif problem := _path_problem(value["s3"]):
            problems.append(
                f"{name}.s3: {problem}; got {value['s3']!r}; allowed: a path under the job's prefix such as "
                f"data/val.jsonl (resolved to s3://<platform bucket>/{prefix}/data/val.jsonl), no '..'"
            )
    return problems


def resolve(config: dict[str, Any], bucket: str, prefix: str) -> dict[str, Any]:
    """`config` with every `{s3: <path>}` replaced by s3://<bucket>/<prefix>/<path>: the URL the trainer
    reads. Values are assumed checked by relative_problems."""
    resolved = {section: dict(v) if isinstance(v, dict) else v for section, v in config.items()}
    for section, key, value in _values(config):
        if isinstance(value, dict) and isinstance(value.get("s3"), str):
            resolved[section][key] = f"s3://{bucket}/{prefix}/{value['s3'].rstrip('/')}"
    return resolved


def reads_s3(config: dict[str, Any]) -> bool:
    """Whether trainerConfig names a place in S3 (the job then needs its IAM role)."""
    return any(
        isinstance(value, dict) or (isinstance(value, str) and value.startswith("s3://"))
        for _, _, value in _values(config)
    )
