"""The scheduler's daily integrity check (issue 30 §3): the chain walked with its signed
heads and the head file's, the read models compared with the log; the result in the logs
and recorded as an `IntegrityCheck` event, the first problem named without personal data.
On both databases."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import pytest
from freezegun import freeze_time
from healthledger.adapters.composition import Service
from healthledger.adapters.persistence.engine.schema import stored_events
from healthledger.adapters.persistence.integrity.integrity_check import LatestCheck
from healthledger.domain.context import SCHEDULER, CommandContext
from healthledger.domain.integrity import IntegrityCheck, IntegrityChecks, IntegrityFindings
from healthledger.scheduler.runner import INTEGRITY_CHECK, Intervals, Jobs, LedgerScheduler
from sqlalchemy import select, text, update

from tests.conftest import Team
from tests.integration.test_chain import execute, write_log
from tests.integration.test_erasure_batches import T0

SCHEDULER_CTX = CommandContext.system(SCHEDULER)


def recorded_checks(service: Service) -> list[IntegrityCheck]:
    e = stored_events.c
    with service.db.read() as conn:
        ids = conn.execute(
            select(e.originator_id)
            .where(e.topic == IntegrityCheck.Created.TOPIC)
            .order_by(e.notification_id)
        ).scalars()
        found = [service.ledger.find(i) for i in ids]
    assert all(isinstance(check, IntegrityCheck) for check in found)
    return found  # type: ignore[return-value]


def test_a_clean_log_is_recorded_as_passed_and_a_changed_read_model_as_failed(
    service: Service, team: Team, caplog: pytest.LogCaptureFixture
) -> None:
    with freeze_time(T0):
        made = write_log(service, team, users=4)
        service.chain.sign_head()  # a head in the head file too
        with caplog.at_level("INFO", logger="healthledger.scheduler.integrity"):
            assert service.jobs.check_integrity() == 1
    (check,) = recorded_checks(service)
    assert check.passed and check.first_problem is None
    assert check.records_checked > 0 and check.signed_heads_checked >= 1
    assert check.anchored_heads_checked is not None and check.anchored_heads_checked >= 1
    assert check.read_model_rows_compared > 0 and check.read_model_differences == 0
    assert "integrity check passed" in caplog.text

    # Not due again before a day has passed since the recorded one.
    with freeze_time(T0 + timedelta(hours=23)):
        assert service.jobs.check_integrity() == 0
    assert len(recorded_checks(service)) == 1

    # Every pending erasure deleted behind the log's back: recorded as a failure.
    execute(service, text("DELETE FROM pending_erasures"))
    caplog.clear()
    with (
        freeze_time(T0 + timedelta(days=1)),
        caplog.at_level("INFO", logger="healthledger.scheduler.integrity"),
    ):
        assert service.jobs.check_integrity() == 1
    failed = recorded_checks(service)[-1]
    assert not failed.passed and failed.read_model_differences == 1
    assert failed.first_problem == (
        "read models: a row of pending_erasures made by the log is missing from the live "
        "table (1 row(s) differ in 1 table(s))"
    )
    assert "integrity check FAILED: read models: a row of pending_erasures" in caplog.text
    # Named by table and kind only: no user's id, in the event or in the log.
    for user_id in made:
        assert str(user_id) not in caplog.text and user_id.hex not in caplog.text
    # The chain still verifies (the check's own events are chained like any other).
    assert service.chain.verify().ok


def test_a_changed_log_is_recorded_as_failed(service: Service, team: Team) -> None:
    with freeze_time(T0):
        write_log(service, team, users=3)
        service.chain.sign_head()
    # A record's time changed: its hash no longer recomputes.
    execute(
        service,
        update(stored_events)
        .where(stored_events.c.chain_position == 2)
        .values(timestamp=T0 + timedelta(seconds=1)),
    )
    with freeze_time(T0):
        assert service.jobs.check_integrity() == 1
    failed = recorded_checks(service)[-1]
    assert not failed.passed
    assert failed.first_problem is not None and failed.first_problem.startswith("chain: ")
    assert "position 2" in failed.first_problem


def test_the_scheduler_runs_the_check_when_it_has_an_interval() -> None:
    ran = threading.Event()

    def check() -> int:
        ran.set()
        return 1

    jobs = Jobs(
        sweep_erasures=lambda: 0,
        run_due_pulls=lambda: 0,
        sync_connected_feeds=lambda: 0,
        dispatch_webhooks=lambda: 0,
        apply_cut_overs=lambda: [],
        check_integrity=check,
    )
    hour = timedelta(hours=1)
    off = LedgerScheduler(jobs, Intervals(hour, hour, hour, hour, hour))
    assert off.get_job(INTEGRITY_CHECK) is None
    scheduler = LedgerScheduler(
        jobs, Intervals(hour, hour, hour, hour, hour, integrity_check=timedelta(days=1))
    )
    job = scheduler.get_job(INTEGRITY_CHECK)
    assert job is not None
    # It looks hourly whether a check is due, the first time an hour after start (not at
    # start: a rebuild of every read model is no work for every process starting at once).
    assert job.trigger.interval == hour
    scheduler.start()
    try:
        assert not ran.wait(0.3)
        scheduler.modify_job(INTEGRITY_CHECK, next_run_time=datetime.now(UTC))
        assert ran.wait(10)
    finally:
        scheduler.shutdown()


def test_the_latest_check_is_read_from_the_log_only_once_one_could_be_due(
    service: Service,
) -> None:
    day = timedelta(days=1)
    now = [T0]
    latest = LatestCheck(service.db, lambda: now[0], day)
    found = IntegrityFindings(1, 0, None, 0, 0, None)
    checks = IntegrityChecks(service.ledger, lambda: now[0])
    assert latest() is None  # nothing recorded: read, and due
    checks.record(SCHEDULER_CTX, found)
    assert latest() == T0  # none seen yet: read again, the check found
    # Another process records one an hour later: not read before a day has passed since
    # the one seen (it could not make a check due), then read.
    now[0] = T0 + timedelta(hours=1)
    checks.record(SCHEDULER_CTX, found)
    now[0] = T0 + timedelta(hours=23)
    assert latest() == T0
    now[0] = T0 + day
    assert latest() == T0 + timedelta(hours=1)
