"""The trainer's exit codes, in one table, and which failures are worth a retry.

PyTorchJob `restartPolicy: ExitCode` and the TrainJob runtime rendered by `workloads` treat exit codes
1-127 as permanent (the job fails) and 128-255 as retryable (the gang restarts from its last checkpoint):

  0    done
  1    a bug (an unexpected exception, with its traceback): permanent
  2    invalid configuration or data: permanent, the same pod would fail the same way
  3    training diverged: more than train.max_bad_steps steps in a row with a non-finite loss or gradient
       (each skipped, no weight update), or non-finite weights at a checkpoint; permanent, since a resume
       replays the same data in the same order; `latest` still names the last finite checkpoint
  4    the job's restart budget is spent (a PyTorchJob pod that failed more often: trainer/attempts.py)
  137  killed by SIGKILL (OOM kill, grace period over), as the launcher reports it: 128 + 9
  143  stopped by SIGTERM after a checkpoint (Spot reclaim, eviction): 128 + 15
       (or, with no step to checkpoint yet, while waiting for the node's tokenized data)
  200  storage unavailable: S3 unreachable, no credentials yet, or failing after the retries; the
       Hugging Face Hub unreachable while an hf: model is staged (trainer/llm/source.py); or the
       output volume full when the final outputs are written (the final checkpoint is committed: the
       restart only rewrites the outputs)
  201  a GPU job that sees no GPU (device plugin not ready, a GPU fallen off the bus): never trains on CPU
  202  a peer rank went away or hung: a collective failed (lost connection, gloo "Timed out waiting" after
       train.dist_timeout_s) or no training step finished within train.step_timeout_s (trainer.guards)
  203  the torchrun rendezvous did not complete in time (a replacement node slower than its timeout)

The dedicated codes sit above 128 + 64 (the highest Linux signal), so none reads as "killed by signal N".
"""

from __future__ import annotations

INVALID = 2
DIVERGED = 3
BUDGET_SPENT = 4
STOPPED = 143
STORAGE_UNAVAILABLE = 200
NO_GPU = 201
PEER_LOST = 202
RENDEZVOUS_TIMEOUT = 203


class Retryable(RuntimeError):
    """A failure of the infrastructure, not of the job: a restart (elsewhere, later) can succeed."""

    exit_code = STORAGE_UNAVAILABLE


class GpuUnavailable(Retryable):
    exit_code = NO_GPU


class Diverged(RuntimeError):
    """The loss or the weights went non-finite and stayed so: no restart cures it (same data, same order)."""

    exit_code = DIVERGED


# What a surviving rank sees when a peer process or its node is gone (Spot reclaim of another pod) or
# hangs: NCCL raises DistBackendError (unless its watchdog aborts the process first, which the launcher
# reports as 128 + SIGABRT, retryable as well); gloo raises a plain RuntimeError from its TCP transport,
# "Timed out waiting <ms> for recv operation to complete" when the peer is alive but stuck.
_PEER_MESSAGES = ("Connection reset by peer", "Connection closed by peer", "Broken pipe", "Timed out waiting")

# S3 error codes that no retry cures (S3 is strongly consistent): the job names a bucket or an object that
# does not exist.
_S3_PERMANENT = {"NoSuchBucket", "InvalidBucketName", "NoSuchKey", "404", "NotFound"}


def _storage_verdict(err: BaseException) -> tuple[int, str] | None:
    try:
        from boto3.exceptions import Boto3Error
        from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError, NoRegionError
    except ImportError:  # no boto3: the run never touched S3
        return None
    if isinstance(err, NoRegionError):
        return INVALID, "S3 needs a region: set AWS_REGION (or AWS_DEFAULT_REGION)"
    if isinstance(err, NoCredentialsError):
        return STORAGE_UNAVAILABLE, (
            "cannot find AWS credentials (yet): in a pod the Pod Identity agent or IRSA token may lag"
        )
    if isinstance(err, ClientError):
        code = err.response.get("Error", {}).get("Code", "")
        if code in _S3_PERMANENT:
            return INVALID, f"S3 request failed for good ({code}): check the s3:// locations in the config"
        # AccessDenied too: a fresh IAM role or Pod Identity association takes a while to reach S3.
        return STORAGE_UNAVAILABLE, f"S3 failed after the retries ({code}: {err})"
    if isinstance(err, Boto3Error) and any(code in str(err) for code in _S3_PERMANENT):
        # s3transfer's wrapper keeps only the message of the ClientError it wraps.
        return INVALID, f"S3 request failed for good: check output.dir and checkpoint.dir ({err})"
    if isinstance(err, (BotoCoreError, Boto3Error)):
        return STORAGE_UNAVAILABLE, f"S3 failed after the retries ({type(err).__name__}: {err})"
    return None


def _peer_lost(err: BaseException) -> bool:
    import torch.distributed as dist

    if isinstance(err, dist.DistError):
        return True
    return isinstance(err, RuntimeError) and any(m in str(err) for m in _PEER_MESSAGES)


def verdict(err: BaseException) -> tuple[int, str] | None:
    """(exit code, one-line reason) for a failure with a known cure, or None for a bug (exit 1)."""
    if isinstance(err, (Retryable, Diverged)):
        return err.exit_code, str(err)
    storage = _storage_verdict(err)
    if storage is not None:
        return storage
    if _peer_lost(err):
        first = str(err).splitlines()[0][:200] if str(err) else ""
        return PEER_LOST, f"a collective failed: lost or hung peer rank ({type(err).__name__}: {first})"
    return None


def describe(code: int) -> str:
    return "retryable: the job restarts from its last checkpoint" if code >= 128 else "permanent"
