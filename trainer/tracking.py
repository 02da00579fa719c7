"""MLflow as an optional sink of a run's params, metrics and summary (rank 0), sent by a thread of its own.

The training loop never waits for the tracking server: `log` queues the values and a background thread
sends them in batches. A server that cannot be reached never stops training, because the progress since the
last checkpoint is worth more than the dashboard: the first failure of an outage is a warning in the log,
the values stay queued (the oldest dropped beyond MAX_QUEUED) and are sent again with exponential backoff
(mlflow.retry_backoff_s, doubling up to MAX_BACKOFF_S), the end of the run waits up to
mlflow.flush_timeout_s for them, and summary.json's `mlflow` says what reached the server and what did not.
A value the server refuses (HTTP 4xx: bad credentials, a name it does not accept) is dropped and counted;
a run or experiment it refuses stops the sink for the rest of the run, saying why.

One MLflow run per checkpoint run: the MLflow run carries the tag RUN_TAG = <checkpoint run id>, so a
restart that resumes the checkpoint run (Spot reclaim, eviction, a crash) finds the MLflow run by that tag
and resumes it (status RUNNING again, as `mlflow.start_run(run_id=...)` does) instead of starting another;
`checkpoint.resume false` or `resume_from` start a new checkpoint run, hence a new MLflow run. MLflow
params cannot change: a resumed run keeps its first values, and a param this attempt changed (a larger
train.max_steps) is set as the tag `mlops-eks.resumed_with.<param>`.

Nothing here imports mlflow until the sink's thread starts: a run without mlflow.tracking_uri never does.
"""

from __future__ import annotations

import importlib.util
import itertools
import os
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any, NamedTuple

from trainer.config import ConfigError, MlflowConfig

EXTRA = "mlflow"  # pyproject.toml's extra with mlflow-skinny
RUN_TAG = "mlops-eks.run"  # the checkpoint run an MLflow run records; a restart finds its run by it
CHANGED_PARAM_TAG = "mlops-eks.resumed_with."
MAX_QUEUED = 100_000  # metric values waiting for the server (about 10 MB); the oldest go first beyond
MAX_BACKOFF_S = 60.0
STOP_FLUSH_S = 5.0  # after a SIGTERM or a failure: the checkpoint had the grace period, not the dashboard
# MLflow's own batch limits (mlflow/utils/validation.py: MAX_METRICS_PER_BATCH, MAX_PARAMS_TAGS_PER_BATCH).
METRICS_PER_BATCH = 1000
PARAMS_PER_BATCH = 100
PARAM_CHARS = 6000  # MAX_PARAM_VAL_LENGTH: a longer value (a chat template) is cut here, as a server would
# MLflow's client retries a failing request 7 times with backoff, about 4 minutes, and waits up to 120 s for
# each answer (MLFLOW_HTTP_REQUEST_MAX_RETRIES, _BACKOFF_FACTOR, _TIMEOUT): the sink retries by itself, so an
# attempt is one request and an outage is said at once. It also sends usage telemetry to MLflow's servers
# unless told not to: a training pod talks to the tracking server only. A variable already set wins.
CLIENT_ENV = {
    "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0",
    "MLFLOW_HTTP_REQUEST_TIMEOUT": "30",
    "MLFLOW_DISABLE_TELEMETRY": "true",
}
# MLflow 3.x refuses its file store unless this is set ("maintenance mode", mlflow/store/tracking/
# file_store.py); a file: URI asks for that store, and mlflow-skinny has no other local one (no SQL).
FILE_STORE_ENV = {"MLFLOW_ALLOW_FILE_STORE": "true"}


def require_package(cfg: MlflowConfig) -> None:
    """A config error (exit 2, one line) naming the extra when mlflow is not installed."""
    if importlib.util.find_spec("mlflow") is None:
        raise ConfigError(
            f"mlflow.tracking_uri={cfg.tracking_uri!r} needs the '{EXTRA}' extra (mlflow-skinny is not "
            f"installed): pip install 'mlops-eks[{EXTRA}]' (make dev installs it; the cuda image has it), or "
            "leave mlflow.tracking_uri empty"
        )


def set_client_env(cfg: MlflowConfig) -> None:
    """Before any thread starts (os.environ is not safe to change while others read it)."""
    file_store = cfg.tracking_uri.startswith("file:")
    for name, value in (CLIENT_ENV | (FILE_STORE_ENV if file_store else {})).items():
        os.environ.setdefault(name, value)


class _Value(NamedTuple):
    seq: int
    key: str
    value: float
    timestamp_ms: int
    step: int


class _Refused(Exception):
    """The server will not take this, however often it is asked."""


def _verdict(err: BaseException) -> str:
    """'retry' (unreachable, overloaded, a timeout: a later attempt may succeed), 'refused' (HTTP 4xx) or
    'broken' (not a failure of the server: an install without a working client, a bug)."""
    if isinstance(err, _Refused):
        return "refused"
    status = getattr(err, "get_http_status_code", None)
    if callable(status):  # an MlflowException; a connection error is one too, with status 500
        code = status()
        return "refused" if 400 <= code < 500 and code not in (408, 409, 429) else "retry"
    return "retry" if isinstance(err, OSError) else "broken"


def _short(err: BaseException) -> str:
    text = " ".join(str(err).split())
    return f"{type(err).__name__}: {text[:300]}{'...' if len(text) > 300 else ''}"


class MlflowSink:
    """Rank 0's MLflow run: `open` it once the checkpoint run is known, `log` values at their steps,
    `close` with the run's final status (and the summary)."""

    def __init__(self, cfg: MlflowConfig, say: Callable[[str], None]) -> None:
        self.cfg, self._say = cfg, say
        self._cv = threading.Condition()
        self._queue: deque[_Value] = deque()
        self._seq = itertools.count()
        self._params: dict[str, str] = {}
        self._tags: dict[str, str] = {}
        self._key: str | None = None
        self._end: str | None = None  # the status to set once everything is sent
        self._woken = False  # close() cuts the backoff short once
        self._abandoned = False  # close() gave up waiting: the thread stops
        self._thread: threading.Thread | None = None
        self.run_id: str | None = None
        self.experiment_id: str | None = None
        self.resumed = False
        self.terminated = False
        self.sent = self.dropped = self.refused = self.failures = 0
        self.error: str | None = None  # the failure not recovered from (None once a send succeeds)
        self.disabled: str | None = None  # why nothing more is sent

    # -- the training loop's side -------------------------------------------------------------------------

    def open(self, key: str, params: dict[str, Any], tags: dict[str, str]) -> None:
        """Start sending to the MLflow run of checkpoint run `key` (created or resumed)."""
        with self._cv:
            self._key = key
            self._params.update({k: str(v)[:PARAM_CHARS] for k, v in params.items()})
            self._tags.update(tags)
        self._thread = threading.Thread(target=self._work, name="mlflow-sink", daemon=True)
        self._thread.start()

    def log(self, step: int, values: dict[str, float], timestamp_ms: int, tags: dict[str, str]) -> None:
        with self._cv:
            if self.disabled or self._end is not None:
                self.dropped += len(values)
                return
            for key, value in values.items():
                self._queue.append(_Value(next(self._seq), key, float(value), timestamp_ms, step))
            self._tags.update(tags)
            overflow = len(self._queue) - MAX_QUEUED
            if overflow > 0:
                if not self.dropped:
                    self._say(
                        f"warning: MLflow at {self.cfg.tracking_uri}: {MAX_QUEUED} values wait for the "
                        "server; dropping the oldest from now on (counted in summary.json)"
                    )
                for _ in range(overflow):
                    self._queue.popleft()
                self.dropped += overflow
            self._cv.notify_all()

    def close(self, status: str, summary: dict[str, Any] | None = None) -> dict[str, Any]:
        """End the run as `status` (FINISHED, KILLED, FAILED) once what is queued is sent, waiting up to
        mlflow.flush_timeout_s (STOP_FLUSH_S unless FINISHED); the report summary.json holds. Idempotent."""
        wait = self.cfg.flush_timeout_s
        if status != "FINISHED":
            wait = min(wait, STOP_FLUSH_S)
        with self._cv:
            first = self._end is None
            if first:
                if summary:
                    self._add_summary(summary)
                self._end, self._woken = status, True
                self._cv.notify_all()
        if first and self._thread is not None:
            self._thread.join(wait)
        with self._cv:
            self._abandoned = True
            self._cv.notify_all()
            report = self.report()
        if first and self._thread is not None:
            self._say_outcome(report)
        return report

    def _add_summary(self, summary: dict[str, Any]) -> None:
        """The summary's numbers as metrics `summary/<key>` at its last step, the rest as tags."""
        step, now = int(summary.get("steps") or 0), int(time.time() * 1000)
        for key, value in summary.items():
            if isinstance(value, int | float) and not isinstance(value, bool):
                self._queue.append(_Value(next(self._seq), f"summary/{key}", float(value), now, step))
            elif value is not None and not isinstance(value, dict):
                self._tags[f"mlops-eks.summary.{key}"] = str(value)

    def report(self) -> dict[str, Any]:
        unsent = len(self._queue) + len(self._params) + len(self._tags)
        return {
            "tracking_uri": self.cfg.tracking_uri,
            "experiment": self.cfg.experiment,
            "experiment_id": self.experiment_id,
            "run_id": self.run_id,
            "resumed": self.resumed,
            "status": self._end if self.terminated else None,
            "complete": self.terminated and not (unsent or self.dropped or self.refused),
            "values_sent": self.sent,
            "values_unsent": unsent,
            "values_dropped": self.dropped,
            "values_refused": self.refused,
            "failed_attempts": self.failures,
            "error": self.disabled or self.error,
        }

    def _say_outcome(self, report: dict[str, Any]) -> None:
        run = f"MLflow run {report['run_id'] or '(never created)'} at {self.cfg.tracking_uri}"
        if report["complete"]:
            self._say(f"{run}: {report['status']}, every value sent ({report['values_sent']} this attempt)")
            return
        lost = {k: report[f"values_{k}"] for k in ("unsent", "dropped", "refused") if report[f"values_{k}"]}
        counts = ", ".join(f"{n} {k}" for k, n in lost.items()) or "run status not set"
        self._say(f"warning: {run} is incomplete: {counts} ({report['error'] or 'no answer in time'})")

    # -- the sink's thread --------------------------------------------------------------------------------

    def _work(self) -> None:
        delay = self.cfg.retry_backoff_s
        try:
            from mlflow.tracking import MlflowClient

            client = MlflowClient(tracking_uri=self.cfg.tracking_uri)
        except Exception as err:  # not the server: a broken install or a store MLflow refuses
            self._disable(f"the MLflow client did not start: {_short(err)}")
            return
        while True:
            with self._cv:
                self._cv.wait_for(lambda: self._abandoned or self._has_work())
                if self._abandoned:
                    return
            try:
                done = self._send_some(client)
            except Exception as err:
                verdict = _verdict(err)
                if verdict == "retry":
                    self._failed(err, delay)
                    with self._cv:
                        self._cv.wait_for(lambda: self._abandoned or self._woken, timeout=delay)
                        self._woken = False
                    delay = min(max(delay * 2, 0.1), MAX_BACKOFF_S)
                    continue
                if verdict == "broken" or self.run_id is None:  # nothing can be sent without the run
                    self._disable(f"{'refused' if verdict == 'refused' else 'failed'}: {_short(err)}")
                    return
                continue  # _send_some counted the refused batch
            if self.error is not None:
                self._say(f"MLflow at {self.cfg.tracking_uri} answers again: sending what was queued")
                self.error = None
            delay = self.cfg.retry_backoff_s
            if done:
                return

    def _has_work(self) -> bool:
        if self._key is None:
            return False
        pending = self.run_id is None or self._params or self._tags or self._queue
        return bool(pending) or (self._end is not None and not self.terminated)

    def _send_some(self, client: Any) -> bool:
        """One request's worth of work, in order: the run, params, tags, metrics, the final status. True
        once the run is terminated."""
        from mlflow.entities import Metric, Param, RunTag

        if self.run_id is None:
            self._open_run(client)
            return False
        with self._cv:
            params = dict(itertools.islice(self._params.items(), PARAMS_PER_BATCH))
            tags = dict(itertools.islice(self._tags.items(), PARAMS_PER_BATCH)) if not params else {}
            batch = list(itertools.islice(self._queue, METRICS_PER_BATCH)) if not (params or tags) else []
            end = self._end if not (params or tags or batch) else None
        if params or tags:
            try:
                client.log_batch(
                    self.run_id,
                    params=[Param(k, v) for k, v in params.items()],
                    tags=[RunTag(k, v) for k, v in tags.items()],
                )
            except Exception as err:
                if _verdict(err) != "refused":
                    raise
                self.refused += len(params) + len(tags)
                where = self.cfg.tracking_uri
                self._say(f"warning: MLflow at {where} refused params or tags, dropped: {_short(err)}")
            self._settle(params, tags)  # sent, or refused for good: either way not again
        elif batch:
            metrics = [Metric(v.key, v.value, v.timestamp_ms, v.step) for v in batch]
            try:
                client.log_batch(self.run_id, metrics=metrics)
            except Exception as err:
                if _verdict(err) != "refused":
                    raise
                self._drop_refused(batch[-1].seq, err)
                return False
            with self._cv:
                while self._queue and self._queue[0].seq <= batch[-1].seq:
                    self._queue.popleft()
                    self.sent += 1
        elif end is not None:
            client.set_terminated(self.run_id, status=end)
            self.terminated = True
            return True
        return False

    def _settle(self, params: dict[str, str], tags: dict[str, str]) -> None:
        with self._cv:
            for key, value in params.items():
                if self._params.get(key) == value:
                    del self._params[key]
            for key, value in tags.items():
                if self._tags.get(key) == value:
                    del self._tags[key]

    def _drop_refused(self, last_seq: int, err: BaseException) -> None:
        with self._cv:
            n = 0
            while self._queue and self._queue[0].seq <= last_seq:
                self._queue.popleft()
                n += 1
            self.refused += n
        self._say(f"warning: MLflow at {self.cfg.tracking_uri} refused {n} values, dropped: {_short(err)}")

    def _open_run(self, client: Any) -> None:
        """Find the experiment (create it if missing) and the run of this checkpoint run (create it if
        missing, resume it if found)."""
        name, key = self.cfg.experiment, self._key
        experiment = client.get_experiment_by_name(name)
        if experiment is not None and experiment.lifecycle_stage == "deleted":
            raise _Refused(
                f"experiment {name!r} is deleted: restore it in MLflow, or choose another mlflow.experiment"
            )
        experiment_id = experiment.experiment_id if experiment else client.create_experiment(name)
        found = client.search_runs(
            [experiment_id],
            filter_string=f"tags.`{RUN_TAG}` = '{key}'",
            max_results=1,
            order_by=["attributes.start_time ASC"],
        )
        if found:
            run = found[0]
            if run.info.status != "RUNNING":
                client.update_run(run.info.run_id, status="RUNNING")
            self._keep_logged_params(run.data.params)
        else:
            run = client.create_run(experiment_id, run_name=self.cfg.run_name or key, tags={RUN_TAG: key})
        self.experiment_id, self.run_id, self.resumed = experiment_id, run.info.run_id, bool(found)
        self._say(
            f"MLflow: {'resuming' if found else 'started'} run {run.info.run_id} ({run.info.run_name}) in "
            f"experiment {name!r} ({experiment_id}) at {self.cfg.tracking_uri}"
        )

    def _keep_logged_params(self, logged: dict[str, str]) -> None:
        """A resumed run's params stay as first logged; changed ones become tags (params are immutable)."""
        with self._cv:
            changed = {k: v for k, v in self._params.items() if k in logged and logged[k] != v}
            self._params = {k: v for k, v in self._params.items() if k not in logged}
            self._tags.update({CHANGED_PARAM_TAG + k: v for k, v in changed.items()})
        if changed:
            names = ", ".join(f"{k} {logged[k]} -> {v}" for k, v in sorted(changed.items()))
            self._say(f"MLflow params keep their first values ({names}): tags {CHANGED_PARAM_TAG}<param>")

    def _failed(self, err: BaseException, delay: float) -> None:
        self.failures += 1
        first = self.error is None
        self.error = _short(err)
        if first:
            with self._cv:
                queued = len(self._queue)
            self._say(
                f"warning: MLflow at {self.cfg.tracking_uri} failed ({self.error}); training goes on, "
                f"{queued} values queued, trying again in {delay:g} s and less often after"
            )

    def _disable(self, reason: str) -> None:
        with self._cv:
            self.disabled = reason
            self.dropped += len(self._queue)
            self._queue.clear()
        self._say(f"warning: MLflow at {self.cfg.tracking_uri} disabled for the rest of this run: {reason}")
