"""The all-ranks SIGTERM vote (dist.StopFlag) with two ranks in one process: each rank a thread with a gloo
process group of its own over one in-memory store. A SIGTERM to either rank stops both at the same step
boundary; a rank that stops voting makes its peer fail within the vote's timeout, never hang."""

from __future__ import annotations

import datetime
import signal
import threading
import time
from collections.abc import Callable

import pytest
import torch
import torch.distributed as dist

from trainer import faults
from trainer.dist import DistEnv, StopFlag

CPU = torch.device("cpu")
TIMEOUT_S = 5  # of the vote's group: how long a rank waits for a peer that no longer votes
STEPS = 12


def _ranks(
    world: int, body: Callable[[int, StopFlag, DistEnv], object], interval_s: float = 0
) -> dict[int, object]:
    """Run body(rank, its StopFlag, its DistEnv) in one thread per rank; what each returned or raised.
    interval_s=0: a vote at every step boundary."""
    store = dist.HashStore()
    results: dict[int, object] = {}

    def rank_main(rank: int) -> None:
        group = dist.ProcessGroupGloo(
            dist.PrefixStore("vote", store), rank, world, datetime.timedelta(seconds=TIMEOUT_S)
        )
        env = DistEnv(rank=rank, world_size=world, local_rank=rank, device=CPU)
        try:
            results[rank] = body(rank, StopFlag(interval_s=interval_s, group=group), env)
        except Exception as err:  # a failed collective: the peer sees it, the test reads it
            results[rank] = err

    threads = [threading.Thread(target=rank_main, args=(r,), daemon=True) for r in range(world)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=4 * TIMEOUT_S)
    assert not any(t.is_alive() for t in threads), "a rank is still waiting in the vote: it never completed"
    return results


def _train(signalled: dict[int, int]) -> Callable[[int, StopFlag, DistEnv], object]:
    """A rank's loop: a SIGTERM arrives during step `signalled[rank]`; returns the step it stopped after."""

    def loop(rank: int, stop: StopFlag, env: DistEnv) -> int | None:
        for step in range(1, STEPS + 1):
            if signalled.get(rank) == step:
                stop._on_signal(signal.SIGTERM, None)  # what the handler does (threads get no signals)
            if stop.poll(env):
                return step
        return None

    return loop


@pytest.mark.parametrize("signalled", [{1: 3}, {0: 3}, {0: 3, 1: 7}, {0: 5, 1: 5}])
def test_a_sigterm_to_any_rank_stops_every_rank_at_the_same_step(signalled):
    stopped = _ranks(2, _train(signalled))
    first = min(signalled.values())
    assert stopped == {0: first + 1, 1: first + 1}  # read a step later, by every rank at once


def test_without_a_sigterm_no_rank_stops(keep_sigterm_handler):
    assert _ranks(2, _train({})) == {0: None, 1: None}


def test_a_fresh_vote_sees_a_sigterm_at_once_on_every_rank(keep_sigterm_handler):
    """At a checkpoint every rank asks `agreed`: a SIGTERM that arrived during the save is seen there."""

    def checkpoint(rank: int, stop: StopFlag, env: DistEnv) -> tuple[bool, bool]:
        before = stop.agreed(env)
        if rank == 1:
            stop._on_signal(signal.SIGTERM, None)
        return before, stop.agreed(env)

    assert _ranks(2, checkpoint) == {0: (False, True), 1: (False, True)}


def test_a_rank_that_stops_voting_makes_its_peer_fail_within_the_timeout(keep_sigterm_handler):
    """A peer lost mid-run: the other rank's next read of the vote raises (gloo's timeout), it does not
    wait for ever; the trainer maps that error to exit 202 (trainer/faults.py)."""

    def lost_after_two_steps(rank: int, stop: StopFlag, env: DistEnv) -> str:
        for step in range(1, STEPS + 1):
            if rank == 1 and step == 3:
                return "lost"
            stop.poll(env)
        return "finished"

    results = _ranks(2, lost_after_two_steps)
    assert results[1] == "lost"
    assert isinstance(results[0], RuntimeError), results[0]
    assert faults.verdict(results[0])[0] == faults.PEER_LOST, results[0]


def test_fast_steps_vote_every_so_many_steps_and_every_rank_still_stops_at_the_same_one(monkeypatch):
    """Steps of 1 ms and votes about every 20 ms: a vote every ~20 steps, not at every step; rank 1's
    steps are slower, and the ranks take the larger proposal (fewer votes), so both vote at the same steps."""
    votes = {0: 0, 1: 0}
    real = dist.all_reduce

    def counted(tensor, *args, **kwargs):
        votes[int(kwargs["group"].rank())] += 1
        return real(tensor, *args, **kwargs)

    monkeypatch.setattr(dist, "all_reduce", counted)

    def loop(rank: int, stop: StopFlag, env: DistEnv) -> int | None:
        for step in range(1, 201):
            time.sleep(0.001 * (1 + rank))
            if rank == 0 and step == 50:
                stop._on_signal(signal.SIGTERM, None)
            if stop.poll(env):
                return step
        return None

    stopped = _ranks(2, loop, interval_s=0.02)
    assert stopped[0] == stopped[1] and stopped[0] is not None, stopped
    assert 50 < stopped[0] <= 50 + 2 * StopFlag.MAX_STEPS_BETWEEN_VOTES
    assert votes[0] == votes[1] and votes[0] < stopped[0] / 3, (votes, stopped)
