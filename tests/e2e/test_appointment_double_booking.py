"""A slot is booked once across processes (issue 33, ADR 0039): two `healthledger serve`
processes on one PostgreSQL database, each asked at the same moment to book the same slot
for a different order. Each slot ends with one appointment and one clear 409; the loser's
order and appointment are as they were (nothing half written), and each slot's stream
holds one founding event, the winner's."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any
from uuid import UUID

import httpx
import pytest
import sqlalchemy as sa
from healthledger.adapters.persistence.engine.schema import teams
from healthledger.domain.labs.appointments import Appointment, appointment_id_of, slot_id_of
from healthledger.domain.labs.orders import Order
from sqlalchemy import select

from tests.conftest import postgres_schema
from tests.e2e.servers import KEY
from tests.e2e.test_multi_process import (
    kill_all,
    observer,
    postgres_only,
    scalar,
    serve_process,
)

WELLNESS = "0b7e5a52-3c1d-4f6e-8a9b-1c2d3e4f5a01"  # Quest, walk-in
SITE = "quest-78701-1"
CONTESTED = 12
PATIENT = {
    "first_name": "Grace",
    "last_name": "Hopper",
    "email": "grace.hopper@example.org",
    "phone_number": "+1 555 010 1906",
    "gender": "female",
    "dob": "1956-12-09",
}
ADDRESS = {"first_line": "1 Congress Avenue", "city": "Austin", "state": "TX", "zip": "78701"}


@pytest.fixture
def pg_url(request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh schema at the head of the migrations, for this test alone."""
    admin: sa.Engine = request.getfixturevalue("postgres_admin")
    with postgres_schema(admin, request.getfixturevalue("postgres_migrations_sql")) as url:
        yield url


def ready_order(client: httpx.Client, base: str, headers: dict[str, str], user_id: str) -> str:
    """A walk-in order with its requisition created (one sandbox step): bookable."""
    placed = client.post(
        f"{base}/v3/order",
        json={
            "user_id": user_id,
            "lab_test_id": WELLNESS,
            "patient_details": PATIENT,
            "patient_address": ADDRESS,
        },
        headers=headers,
    )
    assert placed.status_code == 200, placed.text
    order_id: str = placed.json()["id"]
    stepped = client.post(f"{base}/v3/order/{order_id}/test", headers=headers)
    assert stepped.status_code == 200, stepped.text
    return order_id


@postgres_only
def test_two_processes_booking_one_slot_give_one_appointment_and_one_409(
    pg_url: str, tmp_path: Path
) -> None:
    (tmp_path / "keys").mkdir()
    one = serve_process("one", pg_url, tmp_path)
    two = serve_process("two", pg_url, tmp_path)
    processes = [one, two]
    with ExitStack() as cleanup, httpx.Client(timeout=30) as client:
        cleanup.callback(kill_all, processes)
        one.start()
        two.start()
        one.wait_ready()
        two.wait_ready()
        output = one.output() + two.output()
        (key,) = [m.group(1) for line in output.splitlines() if (m := KEY.search(line))]
        headers = {"x-service-api-key": key}
        observing = cleanup.enter_context(observer(pg_url, tmp_path))
        assert scalar(observing, select(teams.c.team_id)) is not None
        made = client.post(f"{one.base}/v2/user", json={"client_user_id": "p"}, headers=headers)
        user_id = made.json()["user_id"]
        pairs = [
            (
                ready_order(client, one.base, headers, user_id),
                ready_order(client, two.base, headers, user_id),
            )
            for _ in range(CONTESTED)
        ]
        offered = client.post(
            f"{one.base}/v3/order/psc/appointment/availability",
            params={"site_codes": SITE},
            headers=headers,
        )
        assert offered.status_code == 200, offered.text
        keys = [s["booking_key"] for day in offered.json()["slots"] for s in day["slots"]]
        assert len(keys) >= CONTESTED

        # Each slot: one booking through each process, released together.
        answers: dict[tuple[int, int], httpx.Response] = {}

        def book(slot: int, side: int, order_id: str, barrier: threading.Barrier) -> None:
            base = (one, two)[side].base
            with httpx.Client(timeout=30) as own:
                barrier.wait()
                answers[(slot, side)] = own.post(
                    f"{base}/v3/order/{order_id}/psc/appointment/book",
                    json={"booking_key": keys[slot]},
                    headers=headers,
                )

        for slot, pair in enumerate(pairs):
            barrier = threading.Barrier(2)
            threads = [
                threading.Thread(target=book, args=(slot, side, pair[side], barrier))
                for side in (0, 1)
            ]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(timeout=60)

        for slot, pair in enumerate(pairs):
            got = [answers[(slot, side)] for side in (0, 1)]
            codes = sorted(r.status_code for r in got)
            assert codes == [200, 409], [r.text for r in got]
            won = next(side for side in (0, 1) if got[side].status_code == 200)
            lost = 1 - won
            assert "already booked" in got[lost].json()["detail"], got[lost].text
            winner, loser = UUID(pair[won]), UUID(pair[lost])
            # The slot's stream: founded once, by the winner.
            booked = observing.ledger.find(appointment_id_of(winner))
            assert isinstance(booked, Appointment) and booked.slot is not None
            events: list[Any] = list(
                observing.ledger.events.get(
                    slot_id_of(booked.slot.place_code, booked.slot.start_at)
                )
            )
            assert [type(e).__name__ for e in events] == ["Taken"]
            assert events[0].order_id == winner
            # The loser: no appointment, its order as the sandbox step left it.
            assert observing.ledger.find(appointment_id_of(loser)) is None
            order = observing.ledger.find(loser)
            assert isinstance(order, Order) and order.status.endswith("requisition_created")
            mine = observing.ledger.find(winner)
            assert isinstance(mine, Order) and mine.status.endswith("appointment_scheduled")
