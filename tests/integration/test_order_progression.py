"""Sandbox orders move by themselves (issue 14): the simulated lab's sweep, driven by the
scheduler from the `orders` read model, takes each due order one step on after its
configured delay, fails or cancels some orders by their ids, reports results, cancels the
open orders of users deleted meanwhile, and two processes sweeping together record every
status once. Every status change is announced once (`labtest.order.created`, then
`labtest.order.updated` per change; `labtest.result.critical` for a critical result),
each body valid for the official client's event models. On both databases."""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

import pytest
from healthledger.adapters.composition import Service, build_service, start_scheduler
from healthledger.adapters.persistence.engine.schema import teams
from healthledger.adapters.settings import Settings
from healthledger.domain.context import CommandContext
from healthledger.domain.labs.ordering import OrderRequest
from healthledger.domain.labs.orders import SANDBOX_LAB, Order
from healthledger.domain.labs.patients import PatientAddress, PatientDetails
from sqlalchemy import select
from vital.types import ClientFacingCriticalResultIdentified, ClientFacingOrderChanged

from tests.receivers import Receiver, http_receiver
from tests.recorded import logged_events

T0 = datetime(2026, 3, 10, 12, 0, tzinfo=UTC)
CTX = CommandContext(actor="test:actor", request_id="req-progression", environment="sandbox")
WELLNESS = UUID("0b7e5a52-3c1d-4f6e-8a9b-1c2d3e4f5a01")  # walk-in
THYROID_KIT = UUID("0b7e5a52-3c1d-4f6e-8a9b-1c2d3e4f5a03")  # test kit
# The seconds each step takes after the one before: requisition, collection, lab, results.
DELAYS = (60, 600, 3600, 7200)
PATIENT = PatientDetails.model_validate(
    {
        "first_name": "Grace",
        "last_name": "Hopper",
        "email": "grace.hopper@example.org",
        "phone_number": "+1 555 010 1906",
        "gender": "female",
        "dob": "1956-12-09",
    }
)
ADDRESS = PatientAddress.model_validate(
    {"first_line": "1 Navy Yard", "city": "Washington", "state": "DC", "zip": "20374"}
)


class Clock:
    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


def lab_settings(base: Settings, **changes: Any) -> Settings:
    values = {
        "lab_order_step_delays": list(DELAYS),
        "lab_order_failure_rate": 0.0,
        "lab_order_cancellation_rate": 0.0,
        **changes,
    }
    return base.model_copy(update=values)


@pytest.fixture
def clock() -> Clock:
    return Clock(T0)


@pytest.fixture
def svc(settings: Settings, clock: Clock) -> Iterator[Service]:
    built = build_service(lab_settings(settings), clock=clock)
    built.bootstrap()
    yield built
    built.close()


def the_team(svc: Service) -> UUID:
    with svc.db.read() as conn:
        return conn.execute(select(teams.c.team_id)).scalar_one()


def order_for(svc: Service, team: UUID, name: str, lab_test: UUID = WELLNESS) -> Order:
    user = svc.users.create_user(CTX, team, client_user_id=name)
    request = OrderRequest(user.id, lab_test, None, PATIENT, ADDRESS)
    return svc.lab_orders.place(CTX, team, request)


def is_completed(svc: Service, team: UUID, order_id: UUID) -> bool:
    row = svc.order_queries.order(team, order_id)
    assert row is not None, order_id
    return bool(row.status == "completed")


def history(svc: Service, order_id: UUID) -> list[str]:
    order = svc.ledger.find(order_id)
    assert isinstance(order, Order)
    return [status for status, _ in order.history]


def test_due_orders_move_one_step_after_each_delay(svc: Service, clock: Clock) -> None:
    team = the_team(svc)
    walk_in = order_for(svc, team, "walk-in")
    kit = order_for(svc, team, "kit", THYROID_KIT)
    assert svc.jobs.progress_lab_orders() == 0  # nothing due yet
    elapsed = 0
    for delay in DELAYS:
        clock.now = T0 + timedelta(seconds=elapsed + delay - 1)
        svc.jobs.progress_lab_orders()
        assert len(history(svc, walk_in.id)) == DELAYS.index(delay) + 1  # not a second early
        elapsed += delay
        clock.now = T0 + timedelta(seconds=elapsed)
        assert svc.jobs.progress_lab_orders() == 2
    assert history(svc, walk_in.id) == [
        "received.walk_in_test.ordered",
        "received.walk_in_test.requisition_created",
        "collecting_sample.walk_in_test.appointment_pending",
        "sample_with_lab.walk_in_test.partial_results",
        "completed.walk_in_test.completed",
    ]
    assert history(svc, kit.id)[2:4] == [
        "collecting_sample.testkit.transit_customer",
        "sample_with_lab.testkit.delivered_to_lab",
    ]
    clock.now += timedelta(days=30)
    assert svc.jobs.progress_lab_orders() == 0  # final: nothing more to do
    assert svc.order_queries.pending_count() == 0
    for order_id in (walk_in.id, kit.id):
        row = svc.order_queries.order(team, order_id)
        assert row is not None and row.status == "completed" and row.due_at is None
        # Sealed in the row (issue 29): it opens with the user's key.
        assert svc.order_answers.row_of(row).interpretation in ("normal", "abnormal", "critical")
        events = logged_events(svc.ledger, order_id)
        assert {e.actor for e in events[1:]} == {SANDBOX_LAB}


def test_the_lab_fails_or_cancels_orders_as_configured(settings: Settings, clock: Clock) -> None:
    for changes, last in (
        ({"lab_order_failure_rate": 1.0}, "failed.walk_in_test.sample_error"),
        ({"lab_order_cancellation_rate": 1.0}, "cancelled.walk_in_test.cancelled"),
    ):
        svc = build_service(
            lab_settings(settings, lab_order_step_delays=[0.0], **changes), clock=clock
        )
        try:
            # The same database both times: bootstrapped once.
            bootstrap = svc.bootstrap()
            team = bootstrap.team_id if bootstrap is not None else the_team(svc)
            order = order_for(svc, team, f"fate-{last}")
            for _ in range(6):
                svc.jobs.progress_lab_orders()
            assert history(svc, order.id)[-1] == last
            final = svc.ledger.find(order.id)
            assert isinstance(final, Order) and not final.is_open
            reason = final.failure_reason or final.cancel_reason
            assert reason in ("the sample could not be analysed", "lab_cancelled")
        finally:
            svc.close()


def test_the_open_order_of_a_user_deleted_meanwhile_is_cancelled_by_the_sweep(
    svc: Service, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    team = the_team(svc)
    order = order_for(svc, team, "raced")
    # The deletion that raced the order did not see it (PostgreSQL: no shared lock).
    monkeypatch.setattr(svc.users, "deletion_targets", lambda user_id: {})
    svc.users.delete_user(CTX, team, order.user_id)
    assert history(svc, order.id) == ["received.walk_in_test.ordered"]
    assert svc.jobs.progress_lab_orders() == 1  # not due, but its user is gone
    cancelled = svc.ledger.find(order.id)
    assert isinstance(cancelled, Order) and cancelled.cancel_reason == "user_deleted"
    assert svc.jobs.progress_lab_orders() == 0


def test_two_processes_sweeping_together_record_each_status_once(
    settings: Settings, clock: Clock
) -> None:
    first = build_service(lab_settings(settings), clock=clock)
    second = build_service(lab_settings(settings), clock=clock)
    try:
        bootstrap = first.bootstrap()
        assert bootstrap is not None
        orders = [order_for(first, bootstrap.team_id, f"shared-{n}") for n in range(30)]
        for step in range(len(DELAYS)):
            clock.now = T0 + timedelta(seconds=sum(DELAYS[: step + 1]))
            threads = [
                threading.Thread(target=svc.jobs.progress_lab_orders) for svc in (first, second)
            ]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(60)
            # Whichever process took it, each order took exactly this step.
            for order in orders:
                assert len(history(first, order.id)) == step + 2
        for order in orders:
            statuses = history(first, order.id)
            assert statuses[-1] == "completed.walk_in_test.completed"
            assert len(statuses) == len(set(statuses)) == 5
    finally:
        first.close()
        second.close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with http_receiver() as running:
        yield running


def test_every_status_change_is_announced_once_in_the_clients_shapes(
    svc: Service, clock: Clock, receiver: Receiver
) -> None:
    team = the_team(svc)
    svc.webhooks.create(CTX, team, "sandbox", url=receiver.url("ok"))
    placed = [order_for(svc, team, f"announced-{n}") for n in range(3)]
    # One order stepped by the team to a critical result, one cancelled by the team, one
    # moved by the simulated lab to its results.
    critical = placed[0]
    while svc.lab_orders.advance(CTX, team, critical.id, "critical").is_open:
        pass
    svc.lab_orders.cancel(CTX, team, placed[1].id)
    for _ in DELAYS:
        clock.now += timedelta(days=1)
        svc.jobs.progress_lab_orders()
    svc.jobs.dispatch_webhooks()
    assert set(svc.webhook_queries.delivery_counts()) == {"succeeded"}
    bodies = [json.loads(r.body) for r in receiver.on("ok")]
    announced: Counter[tuple[str, str]] = Counter()
    for body in bodies:
        if body["event_type"] == "labtest.result.critical":
            notice = ClientFacingCriticalResultIdentified.model_validate(body)
            assert (notice.data.interpretation, notice.data.status) == ("critical", "final")
            assert notice.data.sample_id and notice.client_user_id.startswith("announced-")
            announced[(notice.data.order_id, "critical")] += 1
            continue
        changed = ClientFacingOrderChanged.model_validate(body)
        assert changed.event_type.value in ("labtest.order.created", "labtest.order.updated")
        assert changed.team_id == str(team) and changed.data.user_id == changed.user_id
        # The order as that event left it: its last status is the one announced.
        status = changed.data.events[-1].status.value
        announced[(changed.data.id, status)] += 1
        first = changed.event_type.value == "labtest.order.created"
        assert first == (len(changed.data.events) == 1)
    expected: Counter[tuple[str, str]] = Counter()
    for order in placed:
        for status in history(svc, order.id):
            expected[(str(order.id), status)] = 1
        # The forced one, and the lab's own if its results came out critical.
        row = svc.order_queries.order(team, order.id)
        if row is not None and svc.order_answers.row_of(row).interpretation == "critical":
            expected[(str(order.id), "critical")] = 1
    assert expected[(str(critical.id), "critical")] == 1
    assert announced == expected
    assert history(svc, placed[1].id)[-1] == "cancelled.walk_in_test.cancelled"
    assert history(svc, placed[2].id)[-1] == "completed.walk_in_test.completed"
    # Results are never in a webhook body; the patient only in the order's own shape.
    for body in bodies:
        assert '"results"' not in json.dumps(body)


def test_the_scheduler_moves_orders_to_their_results_by_itself(settings: Settings) -> None:
    svc = build_service(
        lab_settings(
            settings,
            lab_order_step_delays=[0.0],
            lab_order_poll_interval=timedelta(seconds=30),
            webhook_poll_interval=timedelta(seconds=30),
        )
    )
    scheduler = start_scheduler(svc)
    try:
        bootstrap = svc.bootstrap()
        team = bootstrap.team_id if bootstrap is not None else the_team(svc)
        orders = [order_for(svc, team, f"scheduled-{n}") for n in range(3)]
        deadline = time.monotonic() + 60
        while not all(is_completed(svc, team, o.id) for o in orders):
            assert time.monotonic() < deadline, "the sandbox lab did not complete the orders"
            time.sleep(0.05)
    finally:
        scheduler.shutdown()
        svc.close()
    for order in orders:
        assert len(history(svc, order.id)) == 5
