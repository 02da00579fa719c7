"""What a run reports: rank 0's progress lines (stdout, with step N/total and an ETA), metrics JSON lines
(metrics.jsonl), optional TensorBoard events and MLflow run (trainer/tracking.py), and Prometheus gauges
served by local rank 0 of each node.

One /metrics endpoint per pod however many ranks it runs: every rank writes its latest values to a small
JSON file in a directory the node's ranks share, and local rank 0's HTTP server reads them at scrape time.
Job-wide values (loss, learning rate, throughput: already averaged over ranks by the loop) come from the
lowest local rank; per-GPU values (memory) carry a `rank` label.
"""

from __future__ import annotations

import atexit
import json
import math
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from trainer import mfu
from trainer.config import MlflowConfig
from trainer.shards import is_disk_full
from trainer.token_store import claim_scratch
from trainer.tracking import MlflowSink

# Prometheus gauge name -> (metrics.jsonl key, help). Job-wide; per-rank GPU memory is added separately.
GAUGES = {
    "trainer_step": ("step", "optimizer steps done"),
    "trainer_total_steps": ("total_steps", "optimizer steps in the whole run (train.max_steps)"),
    "trainer_loss": (
        "loss",
        "training loss since the previous report, per example (classifier) or labelled token (LLM), "
        "over every rank; skipped steps left out",
    ),
    "trainer_learning_rate": ("lr", "learning rate"),
    "trainer_grad_norm": ("grad_norm", "gradient norm before clipping, at the last step of the report"),
    "trainer_samples_per_second": ("samples_per_s", "training samples per second, all ranks"),
    "trainer_tokens_per_second": ("tokens_per_s", "non-padding tokens per second, all ranks"),
    "trainer_mfu_ratio": (
        "mfu",
        "model FLOPs utilisation: model FLOPs per token x tokens/s over the GPUs' peak",
    ),
    "trainer_val_accuracy": ("val_accuracy", "validation accuracy at the last evaluation"),
    "trainer_val_loss": ("val_loss", "validation loss at the last evaluation"),
    "trainer_val_perplexity": ("val_perplexity", "exp(validation loss per token): causal LMs (trainer/llm)"),
    "trainer_last_report_timestamp_seconds": ("time", "when the run last reported (stalled-job alerts)"),
}


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def strict_json(value: Any, indent: int | None = None) -> str:
    """JSON that every parser reads: a NaN or infinite number (a diverged loss) is written as null, never
    as Python's bare NaN / Infinity."""
    return json.dumps(_finite(value), indent=indent, allow_nan=False)


class Exporter:
    """Every rank: `publish` its values. Local rank 0: serve them all on `port` (0.0.0.0)."""

    def __init__(self, shared_dir: Path, *, local_rank: int, rank: int, port: int):
        self.dir, self.local_rank, self.rank = shared_dir, local_rank, rank
        self.dir.mkdir(parents=True, exist_ok=True)
        self.values: dict[str, Any] = {"rank": rank}
        self.server = None
        self.error = ""
        if local_rank == 0:
            claim_scratch(self.dir)
            atexit.register(shutil.rmtree, self.dir, ignore_errors=True)
            from prometheus_client import CollectorRegistry, start_http_server

            registry = CollectorRegistry(auto_describe=False)
            registry.register(_SharedFilesCollector(self.dir))
            try:
                self.server, _ = start_http_server(port, registry=registry)
            except OSError as err:  # a port in use must not stop training; the warning says why
                self.error = f"Prometheus metrics not served on port {port}: {err}"

    def publish(self, values: dict[str, Any]) -> None:
        self.values.update({k: v for k, v in values.items() if isinstance(v, int | float)})
        target = self.dir / f"rank-{self.local_rank}.json"
        tmp = target.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(self.values))
        tmp.replace(target)  # atomic: a scrape never reads half a file

    def close(self) -> None:
        server, self.server = self.server, None  # idempotent: the trainer closes on every way out
        if server is not None:
            server.shutdown()
            server.server_close()


class _SharedFilesCollector:
    def __init__(self, shared_dir: Path):
        self.dir = shared_dir

    def collect(self):
        from prometheus_client.core import GaugeMetricFamily

        ranks = []
        for path in sorted(self.dir.glob("rank-*.json"), key=lambda p: int(p.stem.split("-")[1])):
            try:
                ranks.append(json.loads(path.read_text()))
            except (OSError, ValueError):  # replaced while read: the next scrape gets it
                continue
        if not ranks:
            return
        lead = ranks[0]
        yield GaugeMetricFamily("trainer_local_ranks", "ranks of this pod reporting here", value=len(ranks))
        for name, (key, doc) in GAUGES.items():
            if key in lead:
                yield GaugeMetricFamily(name, doc, value=float(lead[key]))
        memory = GaugeMetricFamily(
            "trainer_gpu_memory_bytes", "peak GPU memory allocated by the rank's process", labels=["rank"]
        )
        for values in ranks:
            if "gpu_mem_gb" in values:
                memory.add_metric([str(values["rank"])], float(values["gpu_mem_gb"]) * 2**30)
        if memory.samples:
            yield memory


class Metrics:
    def __init__(
        self,
        jsonl_path: Path,
        *,
        enabled: bool,
        tensorboard_dir: Path | None = None,
        total_steps: int | None = None,
        exporter: Exporter | None = None,
        mlflow: MlflowConfig | None = None,
    ):
        self.enabled = enabled
        self.path = jsonl_path
        self.tensorboard_dir = tensorboard_dir
        self.total_steps = total_steps
        self.exporter = exporter
        self._tb = None
        self._flops_per_token = 0.0
        self._peak: float | None = None  # of one GPU; None: no MFU
        self._gpus = 1
        self._refused: set[str] = set()  # what a full disk refused, until a write succeeds again
        self._first: tuple[float, int] | None = None  # (time, step) of the first step: the ETA's base
        self.tracker: MlflowSink | None = None  # rank 0's MLflow run, when mlflow.tracking_uri is set
        if enabled and mlflow is not None and mlflow.tracking_uri:
            self.tracker = MlflowSink(mlflow, self.say)
        if enabled:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            if tensorboard_dir is not None:
                from torch.utils.tensorboard import SummaryWriter  # checked by OutputConfig

                self._tb = SummaryWriter(str(tensorboard_dir))
        if exporter is not None:
            exporter.publish({"total_steps": total_steps} if total_steps else {})
            if exporter.error:
                self.say(f"warning: {exporter.error}")

    def set_model(self, *, flops_per_token: float, peak_per_gpu: float | None, gpus: int) -> None:
        """Enables MFU in the `train` rows (trainer.mfu): the model's training FLOPs per token, one GPU's
        peak for the training dtype (None: unknown, no MFU) and the GPUs the tokens/s are spread over."""
        self._flops_per_token, self._peak, self._gpus = flops_per_token, peak_per_gpu, gpus

    def record(self, event: str, step: int, **values: Any) -> None:
        """Append one JSON line and print a short human-readable progress line (rank 0); publish the
        values to the node's Prometheus endpoint (every rank)."""
        now = time.time()
        if event == "first_step" or self._first is None:
            self._first = (now, step)
        if event == "train" and self._peak and "tokens_per_s" in values:
            values["mfu"] = mfu.mfu(values["tokens_per_s"], self._flops_per_token, self._peak, self._gpus)
        if self.exporter is not None:
            self._unless_disk_full(
                "the Prometheus values", self.exporter.publish, {"step": step, "time": now, **values}
            )
        if not self.enabled:
            return
        if self.tracker is not None:
            numbers = {f"{event}/{k}": v for k, v in values.items() if _is_number(v)}
            texts = {f"mlops-eks.{event}.{k}": v for k, v in values.items() if isinstance(v, str)}
            self.tracker.log(step, numbers, round(now * 1000), texts)
        row = {"event": event, "step": step, "time": round(now, 3), **values}
        self._unless_disk_full(self.path.name, self._append, strict_json(row) + "\n")
        shown = " ".join(f"{k} {_fmt(v)}" for k, v in values.items())
        progress = f"{step}/{self.total_steps}" if self.total_steps else str(step)
        eta = self._eta(now, step) if event == "train" else ""
        print(f"[trainer] {event} step {progress} {shown}{eta}", file=sys.stdout, flush=True)
        if self._tb is not None:
            scalars = {f"{event}/{k}": v for k, v in values.items() if isinstance(v, int | float)}
            self._unless_disk_full("TensorBoard events", self._add_scalars, scalars, step)

    def _append(self, line: str) -> None:
        with open(self.path, "a") as f:
            f.write(line)

    def _add_scalars(self, scalars: dict[str, float], step: int) -> None:
        assert self._tb is not None
        for tag, value in scalars.items():
            self._tb.add_scalar(tag, value, step)

    def _unless_disk_full(self, what: str, write, *args) -> None:
        """Metrics never stop training, a full disk least of all (a restart would find it as full): the
        values are lost, once said, until a write succeeds again. Other errors are raised."""
        try:
            write(*args)
        except OSError as err:
            if not is_disk_full(err):
                raise
            if what not in self._refused:
                self.say(f"warning: disk full, writing {what} failed ({err}); training goes on without them")
            self._refused.add(what)
        else:
            if what in self._refused:
                self.say(f"{what} written again: space was freed")
                self._refused.discard(what)

    def _eta(self, now: float, step: int) -> str:
        if not self.total_steps or self._first is None or step <= self._first[1]:
            return ""
        t0, s0 = self._first
        return f" eta {format_duration((self.total_steps - step) * (now - t0) / (step - s0))}"

    def say(self, message: str) -> None:
        if self.enabled:
            print(f"[trainer] {message}", file=sys.stdout, flush=True)

    def upload(self, output: Any) -> None:
        """Copy metrics.jsonl and the TensorBoard events to `output` (a Storage) so far: called at every
        checkpoint, on SIGTERM and at the end, so an interrupted attempt's metrics reach S3 too."""
        root = getattr(output, "root", None)
        if not self.enabled or (root is not None and Path(root) == self.path.parent):
            return  # a local output directory already holds them
        if self._tb is not None:
            self._unless_disk_full("TensorBoard events", self._tb.flush)
        files = [self.path] if self.path.exists() else []
        if self.tensorboard_dir is not None and self.tensorboard_dir.is_dir():
            files += sorted(p for p in self.tensorboard_dir.rglob("*") if p.is_file())
        try:
            for path in files:
                output.put_file(path.relative_to(self.path.parent).as_posix(), path)
        except Exception as err:  # metrics must never stop training; the next upload retries
            self.say(f"warning: metrics not uploaded to {getattr(output, 'uri', output)}: {err}")

    def start_tracking(self, run: str, params: dict[str, Any], tags: dict[str, str]) -> None:
        """The MLflow run of checkpoint run `run` (created, or resumed by a restart) gets `params`."""
        if self.tracker is not None:
            self.tracker.open(run, params, tags)

    def end_tracking(self, status: str, summary: dict[str, Any] | None = None) -> dict[str, Any] | None:
        """Ends the MLflow run as `status` with the summary; what reached MLflow (None: no MLflow)."""
        return None if self.tracker is None else self.tracker.close(status, summary)

    def close(self) -> None:
        """Every way out: an MLflow run not ended as FINISHED or KILLED before ends as FAILED."""
        self.end_tracking("FAILED")
        if self._tb is not None:
            self._unless_disk_full("TensorBoard events", self._tb.close)
        if self.exporter is not None:
            self.exporter.close()


def format_duration(seconds: float) -> str:
    seconds = max(0, round(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)
