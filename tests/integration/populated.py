"""A service with something in it: users holding every kind of personal data (demographics,
a birth date, a connection with health data, link tokens, a maker's tokens, a lab test
order, queued webhook deliveries), and a log that touches every read model; what the
erasure, erasure-copies and rebuild tests (and the e2e resumed rebuild) start from, and
how they compare read models.

Plain functions over a built service; the fixtures (service, team, ctx) stay in
tests/conftest.py."""

from __future__ import annotations

import uuid
from datetime import UTC, date, datetime, timedelta
from typing import Any

from freezegun import freeze_time
from healthledger.adapters.composition import Service
from healthledger.adapters.persistence.engine.schema import (
    READ_MODEL_TABLES,
    provider_tokens,
    stored_events,
)
from healthledger.adapters.persistence.keys.provider_tokens import sealable_grant
from healthledger.adapters.persistence.queries.continuous_queries import ContinuousQueryStore
from healthledger.domain.connections.provider_tokens import ProviderTokens
from healthledger.domain.connections.raw_payloads import RawAnswer, RawPull
from healthledger.domain.context import CommandContext
from healthledger.domain.health_queries.continuous import ContinuousQueryDefinition
from healthledger.domain.labs.ordering import OrderRequest
from healthledger.domain.labs.patients import PatientAddress, PatientDetails
from healthledger.domain.users.user import User
from sqlalchemy import func, select

from tests.conftest import Team
from tests.lab_report_pdfs import riverside_report

DEMOGRAPHICS: dict[str, Any] = {
    "first_name": "Ada",
    "last_name": "Lovelace",
    "email": "ada.lovelace@example.org",
    "phone_number": "+44 20 7946 0958",
    "gender": "female",
    "dob": "1985-12-10",
    "address": {
        "first_line": "12 Analytical Row",
        "zip_code": "10001",
        "state": "NY",
        "city": "New York",
    },
}
# When the log is written (frozen time); erasures are due a grace period (7 days) later.
T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def make_user_with_personal_data(service: Service, team: Team, ctx: CommandContext) -> User:
    user = service.users.create_user(
        ctx, team.team_id, client_user_id="erase-me", fallback_birth_date=date(1970, 1, 2)
    )
    service.users.record_demographics(ctx, team.team_id, user.id, DEMOGRAPHICS)
    return user


def make_user_with_everything(service: Service, team: Team, ctx: CommandContext, name: str) -> User:
    """A user with demographics, a birth date, a connection and its pulls (health data,
    resource feeds), two link tokens, a maker's tokens left behind, a continuous query run
    once, a lab report waiting for the parser and webhook deliveries queued about it."""
    user = make_user_with_personal_data(service, team, ctx) if name == "erase-me" else None
    if user is None:
        user = service.users.create_user(
            ctx, team.team_id, client_user_id=name, fallback_birth_date=date(1970, 1, 2)
        )
        service.users.record_demographics(ctx, team.team_id, user.id, DEMOGRAPHICS)
    service.connections.connect_demo(ctx, team.team_id, user.id, "freestyle_libre", ["glucose"])
    service.jobs.run_due_pulls()
    # A night's sleep, which the session index names by its id (revision 0030).
    night = {
        "bedtime_start": "2026-01-01T23:00:00+00:00",
        "bedtime_stop": "2026-01-02T07:00:00+00:00",
    }
    # Stored with what the maker sent for it (raw_payloads, the `*.get_raw` place).
    sent = RawAnswer("/v2/usercollection/sleep", {"data": [night], "next_token": None})
    pulled = RawPull(date(2026, 1, 2), date(2026, 1, 2), datetime(2026, 1, 3, tzinfo=UTC), [sent])
    service.health_data.store(
        user.id, "oura", {"sleep": {date(2026, 1, 2): night}}, {"sleep": pulled}
    )
    for _ in range(2):
        service.link_tokens.issue(
            ctx, team.team_id, "sandbox", user_id=user.id, redirect_url="https://app.example/back"
        )
    leave_provider_tokens(service, team, user.id)
    register_a_continuous_query(service, team, user.id)
    place_an_order(service, team, ctx, user.id)
    # A lab report uploaded to the parser, waiting sealed for its parse.
    service.report_parsing.create(ctx, user, [riverside_report()], False)
    service.dispatcher.follow()  # deliveries queued, never sent (no sender runs here)
    return user


def register_a_continuous_query(service: Service, team: Team, user_id: uuid.UUID) -> None:
    """A continuous query of the user, run once: its row holds the result sealed with the
    user's key, its tasks the run ended and the next one scheduled (ADR 0044)."""
    definition = ContinuousQueryDefinition.model_validate(
        {
            "slug": "glucose_count",
            "past": {"value": 90, "unit": "day"},
            "interval_minutes": 60,
            "query": {
                "select": [{"func": "count", "arg": {"timeseries": "glucose", "field": "value"}}]
            },
        }
    )
    ContinuousQueryStore(service.db).create(team.team_id, user_id, definition, service.clock())
    assert service.jobs.run_due_continuous_queries() >= 1


def place_an_order(service: Service, team: Team, ctx: CommandContext, user_id: uuid.UUID) -> None:
    """A lab test order (issue 14): its read-model row holds the patient's details and
    address, sealed; the deletion cancels it and the erasure deletes the row."""
    details = {k: v for k, v in DEMOGRAPHICS.items() if k != "address"}
    request = OrderRequest(
        user_id,
        uuid.UUID("0b7e5a52-3c1d-4f6e-8a9b-1c2d3e4f5a01"),  # a shared demo lab test
        None,
        PatientDetails.model_validate(details),
        PatientAddress.model_validate(DEMOGRAPHICS["address"]),
    )
    service.lab_orders.place(ctx, team.team_id, request)


def leave_provider_tokens(service: Service, team: Team, user_id: uuid.UUID) -> None:
    """A maker's tokens (sealed with the user's key) that no deregistration reaches: what
    a connection period whose end was not recorded would leave, and what the erasure's
    own deletion and check are there for."""
    sealed = service.key_store.seal(
        user_id, sealable_grant("polar", "service-client", ProviderTokens("at", refresh_token="rt"))
    )
    with service.db.write() as conn:
        conn.execute(
            provider_tokens.insert().values(
                connection_id=uuid.uuid4(),
                user_id=user_id,
                team_id=team.team_id,
                sealed_grant=sealed,
                version=1,
                stored_at=T0,
            )
        )


def read_models(service: Service) -> dict[str, list[tuple[Any, ...]]]:
    """Every read model's rows, in a stable order."""
    found = {}
    with service.db.read() as conn:
        for table in READ_MODEL_TABLES:
            rows = [tuple(row) for row in conn.execute(select(table))]
            found[table.name] = sorted(rows, key=repr)
    return found


def events_after(service: Service, position: int = 0) -> int:
    """The events the log holds after `position` (notification ids may skip numbers: a
    transaction rolled back on PostgreSQL still took its ids)."""
    e = stored_events.c
    with service.db.read() as conn:
        found = conn.execute(select(func.count()).where(e.notification_id > position))
        return int(found.scalar_one())


def write_a_log(service: Service, team: Team, other_team: Team, ctx: CommandContext) -> None:
    """A log that touches every read model, with what a page boundary must not break: a
    released client_user_id taken by another user, an undone deletion, a changed
    client_user_id, an erasure, team settings and features."""
    teams = service.teams
    with freeze_time(T0):
        service.webhooks.create(ctx, team.team_id, "sandbox", url="https://hooks.example/in")
        teams.set_feature(ctx, team.team_id, "demographics", True)
        make_user_with_everything(service, team, ctx, "everything")
        gone = make_user_with_everything(service, team, ctx, "erase-me")
        users = service.users
        first = users.create_user(ctx, team.team_id, client_user_id="reused")
        users.delete_user(ctx, team.team_id, first.id)
        users.create_user(ctx, team.team_id, client_user_id="reused", fallback_time_zone="UTC")
        undone = users.create_user(ctx, team.team_id, client_user_id="undone")
        users.delete_user(ctx, team.team_id, undone.id)
        users.undo_deletion(ctx, team.team_id, undone.id)
        moved = users.create_user(
            ctx, team.team_id, client_user_id="before", fallback_birth_date=date(1980, 5, 6)
        )
        users.update_user(
            ctx, team.team_id, moved.id, {"client_user_id": "after", "fallback_time_zone": "UTC"}
        )
        users.create_user(ctx, other_team.team_id, client_user_id="elsewhere")
        users.delete_user(ctx, team.team_id, gone.id)
        service.dispatcher.follow()
    with freeze_time(T0 + timedelta(days=8)):
        assert service.jobs.sweep_erasures() == 2  # `gone` and the first `reused`
        teams.set_feature(ctx, team.team_id, "demographics", False)
        service.dispatcher.follow()
