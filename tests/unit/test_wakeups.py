"""WakeableJob: a wake-up during a run is never lost, runs never overlap, and after close
nothing more starts."""

from __future__ import annotations

import threading
import time

from healthledger.scheduler.wakeups import WakeableJob


def test_a_wake_up_during_a_run_makes_it_go_round_once_more_and_runs_never_overlap() -> None:
    started, release = threading.Event(), threading.Event()
    running = 0
    overlaps = []
    rounds = []

    def work() -> int:
        nonlocal running
        running += 1
        overlaps.append(running)
        rounds.append(1)
        if len(rounds) == 1:
            started.set()
            release.wait(5)
        running -= 1
        return 1

    job = WakeableJob("test", work)
    job.wake()
    assert started.wait(5)
    job.wake()  # while the first round runs: folded into one more round
    job.wake()
    assert job.run() == 0  # the interval's run finds one going on
    release.set()
    deadline = time.monotonic() + 5
    while len(rounds) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    job.close()
    assert len(rounds) == 2
    assert max(overlaps) == 1


def test_after_close_no_wake_up_starts_a_run() -> None:
    rounds = []
    job = WakeableJob("test", lambda: rounds.append(1) or 1)
    job.close()
    job.wake()
    time.sleep(0.05)
    assert rounds == []
