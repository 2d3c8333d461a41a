"""What an order is placed with beside its test and patient (`POST /v3/order`): `priority`
(in clear), `icd_codes` (the diagnoses, checked as `POST /v3/insurance/validate_icd_codes`
checks them) and `passthrough` (the team's own string), both sealed with the user's key
in the order's `Created` event (version 3) and its row, answered on create, on reads,
listings and `as_of`, and erased with the user: after it no code nor the passthrough is
anywhere in the database's files (SQLite's file and WAL; on PostgreSQL every page of the
event log and of the orders table). On both databases, through the HTTP API."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import timedelta
from typing import Any
from uuid import UUID

import pytest
from fastapi.testclient import TestClient
from freezegun import freeze_time
from healthledger.adapters.compliance.audit import history
from healthledger.adapters.composition import Service
from healthledger.adapters.http.order_schemas import MAX_PASSTHROUGH_LENGTH
from healthledger.adapters.persistence.engine.schema import orders, stored_events
from healthledger.adapters.reference import icd10
from healthledger.domain.labs.orders import Order
from healthledger.domain.personal_data import ERASED_PLACEHOLDER
from sqlalchemy import func, select

from tests.conftest import Team
from tests.integration.test_client_user_id_at_rest import sqlite_bytes
from tests.integration.test_health_facts_sealed import holding, postgres_pages
from tests.integration.test_orders import T0, events_of, place, placed
from tests.integration.test_orders import settings as orders_settings
from tests.integration.test_orders import team as orders_team
from tests.integration.test_orders import user as orders_user

# The orders' fixtures (no lab failure or cancellation; a user with demographics).
settings = orders_settings
team = orders_team
user = orders_user

# Sent in lower case and twice: kept in their dotted form, each once.
SENT_CODES = ["e6601", "Z68.41", "E66.01"]
CODES = ["E66.01", "Z68.41"]
PASSTHROUGH = "crm-needle-passthrough-7f3a; visit 4711"
# What the database's files must never hold in clear (a dot or a hyphen: never in the
# base64 of a sealed value).
NEEDLES = (b"E66.01", b"Z68.41", b"crm-needle-passthrough-7f3a")


# In clear in the order's event and row: shows that the searches do read them.
CONTROL = b"received.walk_in_test.ordered"


def storage(service: Service) -> dict[str, bytes]:
    """SQLite: the file and its WAL. PostgreSQL: every page of the event log and of the
    orders table (dead rows too), read with pageinspect (skipped without it)."""
    if service.db.is_sqlite:
        places = {"sqlite": sqlite_bytes(service)}
    else:
        found = postgres_pages(service, ("stored_events", "orders"))
        if found is None:
            pytest.skip("pageinspect is not available: the pages cannot be read")
        places = found
    assert holding(places, CONTROL), "the search reads the order's event and row"
    return places


def orders_count(service: Service) -> int:
    with service.db.read() as conn:
        return int(conn.execute(select(func.count()).select_from(orders)).scalar_one())


def test_priority_codes_and_passthrough_are_kept_sealed_and_answered(
    client: TestClient, team: Team, user: str, service: Service
) -> None:
    with freeze_time(T0) as frozen:
        created = placed(
            client,
            team,
            user,
            priority=True,
            icd_codes=SENT_CODES,
            passthrough=PASSTHROUGH,
            idempotency_key="diagnosed-1",
        )
        routine = placed(client, team, user)
        frozen.tick(timedelta(hours=1))
        order_id = created["id"]
        assert (created["priority"], created["icd_codes"], created["passthrough"]) == (
            True,
            CODES,
            PASSTHROUGH,
        )
        assert created["order"]["icd_codes"] == CODES
        # An order placed without them: routine, none, none.
        assert (routine["priority"], routine["icd_codes"], routine["passthrough"]) == (
            False,
            None,
            None,
        )
        read = client.get(f"/v3/order/{order_id}", headers=team.headers).json()
        assert {k: v for k, v in read.items()} == {
            k: v for k, v in created.items() if k not in ("order", "message", "updated_at")
        } | {"updated_at": read["updated_at"]}
        listed = client.get("/v3/orders", headers=team.headers).json()["orders"]
        assert {o["id"]: o["icd_codes"] for o in listed} == {order_id: CODES, routine["id"]: None}
        past = client.get(
            f"/v3/order/{order_id}", params={"as_of": T0.isoformat()}, headers=team.headers
        ).json()
        assert (past["priority"], past["icd_codes"], past["passthrough"]) == (
            True,
            CODES,
            PASSTHROUGH,
        )

        # The same key and body: the order placed first; the same key with other codes, or
        # another passthrough, or another priority: another request (409).
        again = place(
            client,
            team,
            user,
            priority=True,
            icd_codes=SENT_CODES,
            passthrough=PASSTHROUGH,
            idempotency_key="diagnosed-1",
        )
        assert again.status_code == 200 and again.json()["id"] == order_id
        for changed in (
            {"icd_codes": ["E66.01"], "passthrough": PASSTHROUGH, "priority": True},
            {"icd_codes": SENT_CODES, "passthrough": "other", "priority": True},
            {"icd_codes": SENT_CODES, "passthrough": PASSTHROUGH},
        ):
            reused = place(client, team, user, idempotency_key="diagnosed-1", **changed)
            assert reused.status_code == 409, (changed, reused.text)

    # The event: version 3, the priority in clear, the codes and the string sealed.
    created_event = events_of(service, order_id)[0]
    assert isinstance(created_event, Order.Created)
    assert created_event.priority is True
    assert created_event.sealed_icd_codes is not None
    assert created_event.sealed_passthrough is not None
    assert service.key_store.open(UUID(user), created_event.sealed_icd_codes) == CODES
    assert service.key_store.open(UUID(user), created_event.sealed_passthrough) == PASSTHROUGH
    with service.db.read() as conn:
        state = conn.execute(
            select(stored_events.c.state).where(stored_events.c.originator_id == UUID(order_id))
        ).scalars()
        row = conn.execute(select(orders).where(orders.c.order_id == UUID(order_id))).one()
    stored = b"".join(bytes(s) for s in state)
    assert not any(needle in stored for needle in NEEDLES)
    assert b'"priority":true' in stored.replace(b" ", b"")
    assert row.priority is True
    assert row.sealed_icd_codes == created_event.sealed_icd_codes
    assert row.sealed_passthrough == created_event.sealed_passthrough
    # Nowhere in the database's files in clear, even while the user lives.
    for needle in NEEDLES:
        assert holding(storage(service), needle) == [], needle


def test_what_cannot_be_placed_is_refused_naming_only_the_codes(
    client: TestClient, team: Team, user: str, service: Service
) -> None:
    secret = "never-echoed-note"
    refused: list[tuple[dict[str, Any], str]] = [
        # Not billable: a category; not a code at all.
        ({"icd_codes": ["E11"]}, "E11 is a category, not a billable code"),
        ({"icd_codes": ["XYZ"]}, "'XYZ' is not an ICD-10-CM code"),
        # An Excludes1 pair: never coded together.
        ({"icd_codes": ["E10.9", "E11.9"]}, "E10.9 and E11.9 cannot be coded together"),
        # More codes than a validation takes; a code longer than any.
        ({"icd_codes": ["E11.9"] * (icd10.MAX_CODES + 1)}, "at most 50 items"),
        ({"icd_codes": ["E11.9000000X"]}, "at most 10 characters"),
        ({"icd_codes": "E11.9"}, "valid list"),
        # Control characters, as in any free text; too long.
        ({"passthrough": "line\x00break"}, "control characters"),
        ({"passthrough": "escape\x1b[31m"}, "control characters"),
        ({"passthrough": "x" * (MAX_PASSTHROUGH_LENGTH + 1)}, "at most 4096 characters"),
        ({"passthrough": 42}, "valid string"),
        # JSON true or false only.
        ({"priority": "yes"}, "valid boolean"),
        ({"priority": "true"}, "valid boolean"),
        ({"priority": 1}, "valid boolean"),
    ]
    with freeze_time(T0):
        for body, reason in refused:
            extra = {} if "passthrough" in body else {"passthrough": secret}
            response = place(client, team, user, **body, **extra)
            assert response.status_code == 422, (body, response.text)
            assert reason in response.text, (body, response.text)
            assert secret not in response.text
        # The sent values are never echoed: the detail names the code, no other input.
        assert "line" not in place(client, team, user, passthrough="line\x00break").text
        assert orders_count(service) == 0
        # The longest string, and an Excludes2 pair (both conditions may be coded), are
        # accepted.
        longest = placed(
            client,
            team,
            user,
            passthrough="x" * MAX_PASSTHROUGH_LENGTH,
            icd_codes=[],
            priority=False,
        )
        assert len(longest["passthrough"]) == MAX_PASSTHROUGH_LENGTH
        assert longest["icd_codes"] is None and longest["priority"] is False
        warned = icd10.validate(["E11.9", "E78.5"])
        assert warned.refusal() is None


def test_erasure_leaves_no_code_nor_passthrough_readable(
    client: TestClient, team: Team, user: str, service: Service
) -> None:
    with freeze_time(T0) as frozen:
        order_id = placed(
            client, team, user, priority=True, icd_codes=SENT_CODES, passthrough=PASSTHROUGH
        )["id"]
        frozen.tick(timedelta(hours=1))
        assert client.delete(f"/v2/user/{user}", headers=team.headers).status_code == 200
        frozen.tick(timedelta(days=8))
        assert service.jobs.sweep_erasures() == 1
        assert client.get(f"/v3/order/{order_id}", headers=team.headers).status_code == 404
        # The past answer keeps the priority; the codes and the string show as erased.
        past = client.get(
            f"/v3/order/{order_id}", params={"as_of": T0.isoformat()}, headers=team.headers
        ).json()
    assert past["priority"] is True
    assert past["icd_codes"] == [ERASED_PLACEHOLDER]
    assert past["passthrough"] == ERASED_PLACEHOLDER
    # The event stays, its sealed values opened by no key; the audit shows them erased.
    created = events_of(service, order_id)[0]
    assert service.key_store.open(UUID(user), created.sealed_icd_codes) is None
    assert service.key_store.open(UUID(user), created.sealed_passthrough) is None
    audited = [e for e in history(service, UUID(user)) if e.stream_id == UUID(order_id)]
    text = json.dumps([e.changes for e in audited], default=str)
    assert f'"sealed_icd_codes": "{ERASED_PLACEHOLDER}"' in text
    assert f'"sealed_passthrough": "{ERASED_PLACEHOLDER}"' in text
    assert '"priority": true' in text
    # No code nor the string anywhere in the database's files.
    places = storage(service)
    for needle in NEEDLES:
        assert holding(places, needle) == [], needle


def test_a_created_event_stored_before_version_3_reads_as_placed_without_them(
    client: TestClient, team: Team, user: str, service: Service
) -> None:
    """An order's Created of class version 2 (its topic the same, stored before the three
    fields existed): read back by today's class as routine, no codes, no passthrough."""
    with freeze_time(T0):
        order_id = UUID(placed(client, team, user, activate_by=T0.date().isoformat())["id"])
    (record,) = service.ledger.events.recorder.select_events(order_id, lte=1)
    state = json.loads(record.state)
    assert state["class_version"] == 3
    for added in ("priority", "sealed_icd_codes", "sealed_passthrough"):
        del state[added]
    state["class_version"] = 2
    older = replace(record, state=json.dumps(state, separators=(",", ":")).encode())
    created = service.ledger.mapper.to_domain_event(older)
    assert isinstance(created, Order.Created)
    assert (created.priority, created.sealed_icd_codes, created.sealed_passthrough) == (
        False,
        None,
        None,
    )
    # What version 2 held reads as it was.
    assert created.activate_by == T0.date()
