"""`run-local`: the stack's job on this machine, torchrun on CPU (gloo), for `make demo` and a quick try.

Same program, same trainer config as the cluster job, except that checkpoints, outputs and an MLflow run go
to local directories (no AWS here) and the processes are capped at the CPU cores (printed, never silently).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import yaml

from workloads.launcher_output import ChildFailedFilter, RootCause
from workloads.local_ray import LOCAL_RAY_ENV, ray_launcher, ray_missing
from workloads.render import trainer_config
from workloads.spec import CONFIG_KEY, SpecError
from workloads.stacks import REPO, WorkloadStack
from workloads.status import exit_summary

# The chat records an LLM job trains on in run-local (workloads/examples, written for it).
LLM_SAMPLE = REPO / "workloads" / "examples" / "llm-chat.jsonl"
# The platform's GPU check: its defaults need CUDA; `--device cpu` runs it over gloo.
GPU_CHECK = "trainer/gpu_check.py"


def local_processes(wanted: int, requested: int | None) -> tuple[int, str]:
    """How many processes run here, and why."""
    cores = os.cpu_count() or 1
    if requested is not None:
        if requested < 1:
            raise SpecError(f"--nproc {requested}: allowed 1 or more")
        return requested, f"--nproc {requested}"
    n = min(wanted, cores)
    return n, f"the job runs {wanted}; this machine has {cores} CPU cores"


def local_llm(config: dict, overrides: list[str]) -> list[str]:
    """An LLM job runs here on the tiny model built offline and the sample chat data (no download, no
    S3), unless --llm.model / --data.source say otherwise. Returns what was substituted, to print."""
    llm = config.get("llm")
    if not isinstance(llm, dict) or not llm.get("model"):
        return []
    notes = []
    if "--llm.model" not in overrides:
        notes.append(f"llm.model {llm['model']} -> tiny (built offline; --llm.model DIR for a local model)")
        llm["model"] = "tiny"
        llm.pop("model_cache", None)
    if "--data.source" not in overrides:
        source = config.setdefault("data", {}).get("source", "synthetic")
        notes.append(f"data.source {source} -> {LLM_SAMPLE.relative_to(REPO)} (--data.source FILE for yours)")
        config["data"]["source"] = str(LLM_SAMPLE)
    return notes


def local_mlflow(config: dict, run_dir: Path, overrides: list[str]) -> list[str]:
    """A job's MLflow server is the cluster's: here the run goes to a file store beside its other files
    (the mlflow extra reads it), unless --mlflow.tracking_uri names a server this machine reaches."""
    mlflow = config.get("mlflow")
    if not isinstance(mlflow, dict) or not mlflow.get("tracking_uri") or "--mlflow.tracking_uri" in overrides:
        return []
    store = f"file:{run_dir / 'mlruns'}"
    note = f"mlflow.tracking_uri {mlflow['tracking_uri']} -> {store} (--mlflow.tracking_uri URI for a server)"
    mlflow["tracking_uri"] = store
    return [note]


def local_trainer_config(stack: WorkloadStack, run_dir: Path, overrides: list[str]) -> dict:
    spec = stack.spec
    config = trainer_config(spec, bucket="local")
    config.setdefault("checkpoint", {})["dir"] = str(run_dir / "checkpoints")
    config.setdefault("output", {})["dir"] = str(run_dir / "output")
    for note in [*local_llm(config, overrides), *local_mlflow(config, run_dir, overrides)]:
        print(f"run-local {stack.name}: {note}", flush=True)
    source = config.get("data", {}).get("source")
    if spec.data is not None and "--data.source" not in overrides and source != str(LLM_SAMPLE):
        raise SpecError(
            f"{CONFIG_KEY}.data: {source} is not readable from this machine; run with "
            "`-- --data.source FILE` (a local .jsonl/.csv/.parquet) or `-- --data.source synthetic`"
        )
    for note in local_validation(config, overrides):
        print(f"run-local {stack.name}: {note}", flush=True)
    return config


def local_validation(config: dict, overrides: list[str]) -> list[str]:
    """A validation file in S3 is not readable here either: beside the LLM sample it is left out (the
    sample's val_fraction is held out instead, said so), otherwise --data.val_source must name one."""
    data = config.get("data")
    if not isinstance(data, dict) or "--data.val_source" in overrides:
        return []
    val_source = data.get("val_source")
    if not str(val_source).startswith("s3://"):
        return []
    if data.get("source") == str(LLM_SAMPLE):
        del data["val_source"]
        return [f"data.val_source {val_source} -> none, val_fraction of the sample (--data.val_source FILE)"]
    raise SpecError(
        f"{CONFIG_KEY}.trainerConfig.data.val_source: {val_source} is not readable from this machine; "
        "allowed: `-- --data.val_source FILE` (a local .jsonl/.csv/.parquet) or `-- --data.val_source ''` "
        "(val_fraction of data.source held out)"
    )


def command(stack: WorkloadStack, nproc: int, run_dir: Path, overrides: list[str]) -> list[str]:
    program = stack.spec.program
    # The cluster's launcher too: trainer.launch for the trainer (its exit codes), torchrun otherwise.
    launch = "trainer.launch" if program.runs_trainer else "torch.distributed.run"
    launcher = [sys.executable, "-m", launch, "--standalone", f"--nproc_per_node={nproc}"]
    if stack.spec.operator == "rayjob":  # the RayJob's entry point, Ray Train on a local Ray
        launcher = ray_launcher(nproc, run_dir, stack.spec.name)
    if program.runs_trainer:
        config_file = run_dir / "config.yaml"
        config_file.write_text(
            yaml.safe_dump(local_trainer_config(stack, run_dir, overrides), sort_keys=True)
        )
        target = ["-m", "trainer", "--config", str(config_file), "--train.device", "cpu"]
    elif program.delivery == "image":
        target = ["-m", program.module]
    elif program.delivery == "configmap":
        target = [str(REPO / (program.file or ""))]
        if program.file == GPU_CHECK and "--device" not in overrides:
            raise SpecError(
                f"run-local {stack.name}: {GPU_CHECK} checks a node's GPUs and cannot pass on this CPU; "
                "allowed: the same all-reduce sweep over gloo, `-- --device cpu --expect-gpus 0 "
                "--min-busbw-gbps 0`"
            )
    else:
        raise SpecError(
            f"{CONFIG_KEY}.program.delivery: 'volume' scripts live on a cluster PVC "
            f"({program.claim}); run-local runs `image` and `configmap` programs"
        )
    return [*launcher, *target, *program.args, *overrides]


def run_local(stack: WorkloadStack, *, nproc: int | None, out: Path, overrides: list[str]) -> int:
    overrides = overrides[1:] if overrides[:1] == ["--"] else overrides
    spec = stack.spec
    given = next((a for a in overrides if a == "--config" or a.startswith("--config=")), None)
    if spec.program.runs_trainer and given:
        # The trainer reads one --config: a second would replace the job's, output directory included.
        raise SpecError(
            f"run-local {stack.name}: `-- {given} ...` would replace the job's trainer config (and its "
            "output directory); allowed: `-- --<section>.<field> VALUE` flags, which apply over the job's "
            f"config, or the file's settings under {CONFIG_KEY}.trainerConfig"
        )
    if spec.operator == "rayjob" and (missing := ray_missing(stack.name)):
        print(missing, file=sys.stderr, flush=True)
        return 2
    wanted = spec.max_nodes * spec.processes_per_node
    n, why = local_processes(wanted, nproc)
    run_dir = (out / stack.name).resolve()
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise SpecError(
            f"--out {out}: cannot create {run_dir} ({err.strerror}); allowed: a directory"
        ) from None
    argv = command(stack, n, run_dir, overrides)
    print(f"run-local {stack.name}: {n} processes on CPU, gloo ({why}); files in {run_dir}", flush=True)
    print("  " + " ".join(argv), flush=True)
    cores = os.cpu_count() or 1
    # One intra-op thread pool per process sized to its share of the cores: no oversubscription.
    local_ray = LOCAL_RAY_ENV if spec.operator == "rayjob" else {}
    env = {**local_ray, **os.environ, **spec.env, "OMP_NUM_THREADS": str(max(1, cores // n))}
    shown = ChildFailedFilter()
    with subprocess.Popen(
        argv, cwd=REPO, env=env, stderr=subprocess.PIPE, text=True, errors="replace"
    ) as proc:
        assert proc.stderr is not None
        for line in shown.lines(proc.stderr):  # as it comes: the workers' stderr passes through here too
            sys.stderr.write(line)
            sys.stderr.flush()
    code = proc.returncode
    if code:
        print(f"run-local {stack.name}: {ending(code, shown.root_cause)}", file=sys.stderr, flush=True)
    return code


def ending(code: int, root_cause: RootCause | None) -> str:
    """The last line of a failed run: its exit code and what it means (trainer/faults.py). torchrun itself
    (a program other than the trainer) exits 1 whatever failed: the first failed worker's code is named."""
    if root_cause is None:
        return exit_summary(code)
    return (
        f"exit {code}, torchrun's code for any failed worker; rank {root_cause.rank} failed first with "
        + exit_summary(exit_code(root_cause.exit_code))
    )


def exit_code(worker_code: int) -> int:
    """A worker's code as a shell reports it (torchrun reports a worker killed by signal N as -N)."""
    return 128 - worker_code if worker_code < 0 else worker_code
