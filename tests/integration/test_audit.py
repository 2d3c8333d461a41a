"""The audit of a user (issue 16): its own history and every stream that belongs to it
(its client_user_id claim, connections, pulls, link token, the webhook deliveries about
it), merged in time order, from `healthledger audit` and `GET /v2/audit/user/{user_id}`;
every sealed field of every aggregate shown as sealed or erased by the key that sealed it;
`stream_owners` projected with the events, kept at erasure, rebuilt, and backfilled by
migration 0005; a user's audit read by index lookups only."""

from __future__ import annotations

import gzip
import importlib
import json
import pkgutil
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any
from uuid import UUID

import healthledger.domain
import pytest
import sqlalchemy as sa
from eventsourcing.domain import Aggregate
from fastapi.testclient import TestClient
from healthledger.adapters.cli import main
from healthledger.adapters.compliance.audit import history, stream_history
from healthledger.adapters.composition import Service, build_service
from healthledger.adapters.http.team_api import create_team_api
from healthledger.adapters.makers.fake_libreview import FakeLibreView, running_fake_libreview
from healthledger.adapters.persistence.engine.database import Database
from healthledger.adapters.persistence.engine.migrating import upgrade
from healthledger.adapters.persistence.engine.schema import stream_owners
from healthledger.adapters.persistence.eventstore.infrastructure import LedgerInfrastructure
from healthledger.adapters.persistence.eventstore.recorder import LedgerRecorder, SnapshotRecorder
from healthledger.adapters.persistence.migrations.service.versions import (
    step_05_r0005_stream_owners as MIGRATION_0005,
)
from healthledger.adapters.persistence.projections.read_models import ReadModels
from healthledger.adapters.persistence.queries.audit import owned_events_query
from healthledger.adapters.settings import Settings
from healthledger.domain.connections.credential_links import Pending
from healthledger.domain.context import CommandContext
from healthledger.domain.labs.appointments import PSC
from healthledger.domain.labs.ordering import OrderRequest
from healthledger.domain.labs.orders import TESTKIT
from healthledger.domain.labs.patients import PatientAddress, PatientDetails
from healthledger.domain.labs.sandbox import SandboxPolicy
from healthledger.domain.ledger import Ledger
from healthledger.domain.personal_data import ERASED_PLACEHOLDER, SEALED_PLACEHOLDER
from healthledger.domain.teams.custom_credentials import CustomCredentials
from healthledger.domain.teams.directory import DEFAULT_ORG_ID
from healthledger.domain.users.user import ClientUserIdClaim
from healthledger.domain.webhooks.event_destinations import Route
from sqlalchemy import select

from tests.conftest import (
    BACKENDS,
    Team,
    create_postgres_database,
    drop_postgres_database,
    postgres_database_url,
)
from tests.integration.databases import LEGACY, load_dump
from tests.lab_report_pdfs import riverside_report
from tests.receivers import Receiver, http_receiver
from tests.stream_ids import stream_of_connection

T0 = datetime(2026, 3, 10, 12, 0, tzinfo=UTC)
CTX = CommandContext(actor="test:actor", request_id="req-audit")
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
        "city": "NY",
    },
}
# What the story seals: none of it may show in an audit, live or erased.
PERSONAL = ["Lovelace", "ada.lovelace", "Analytical", "1985-12-10", "1970-01-02", "1971-02-03"]
SECRET = "client-secret-of-the-team"
# Every kind of stream a user owns.
KINDS = {"user", "claim", "connection", "pull", "link_token", "webhook_delivery"}
# The events of the aggregates sealed with their team's key.
TEAM_SEALED = ("Team.", "CustomCredentials.", "WebhookEndpoint.", "EventDestination.")


class Clock:
    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now

    def tick(self, delta: timedelta = timedelta(minutes=1)) -> datetime:
        self.now += delta
        return self.now


@dataclass
class Story:
    svc: Service
    clock: Clock
    team: Team
    user: UUID
    bystander: UUID
    endpoint: UUID
    client: TestClient

    def connection(self, provider: str) -> UUID:
        return stream_of_connection(self.svc, self.user, provider)


@pytest.fixture
def clock() -> Clock:
    return Clock(T0)


@pytest.fixture
def libreview(clock: Clock) -> Iterator[FakeLibreView]:
    with running_fake_libreview(clock=clock) as fake:
        yield fake


@pytest.fixture
def svc(settings: Settings, clock: Clock, libreview: FakeLibreView) -> Iterator[Service]:
    # LibreView's sign-in is the fake's: a password sign-in's challenge is sealed too.
    configured = settings.model_copy(update={"libreview_api_url": libreview.base})
    built = build_service(configured, clock=clock)
    yield built
    built.close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with http_receiver() as running:
        yield running


def bootstrap(svc: Service) -> Team:
    made = svc.bootstrap()
    assert made is not None
    return Team(made.team_id, made.team_api_key.plain)


@pytest.fixture
def story(svc: Service, clock: Clock, receiver: Receiver) -> Iterator[Story]:
    """A user with a birth date, demographics, a link token, two connections and their
    pulls, and a webhook endpoint delivering about it; a bystander of the same team with
    a connection of its own. A minute between steps."""
    team = bootstrap(svc)
    endpoint = svc.webhooks.create(CTX, team.team_id, "sandbox", url=receiver.url("ok"))
    clock.tick()
    user = svc.users.create_user(
        CTX,
        team.team_id,
        client_user_id="audited",
        fallback_birth_date=date(1970, 1, 2),
        fallback_time_zone="Europe/Rome",
    ).id
    clock.tick()
    bystander = svc.users.create_user(CTX, team.team_id, client_user_id="bystander").id
    clock.tick()
    svc.users.update_user(
        CTX,
        team.team_id,
        user,
        {"fallback_birth_date": date(1971, 2, 3), "fallback_time_zone": "Asia/Tokyo"},
    )
    clock.tick()
    svc.users.record_demographics(CTX, team.team_id, user, DEMOGRAPHICS)
    clock.tick()
    svc.link_tokens.issue(CTX, team.team_id, "sandbox", user_id=user)
    clock.tick()
    svc.connections.connect_demo(CTX, team.team_id, user, "freestyle_libre", ["glucose"])
    clock.tick()
    svc.connections.connect_demo(CTX, team.team_id, user, "oura", ["sleep"])
    clock.tick()
    svc.connections.connect_demo(CTX, team.team_id, bystander, "freestyle_libre", ["glucose"])
    clock.tick()
    svc.jobs.run_due_pulls()
    clock.tick()
    svc.jobs.dispatch_webhooks()
    assert receiver.on("ok"), "the endpoint was delivered to"
    with TestClient(create_team_api(svc), raise_server_exceptions=False) as client:
        yield Story(svc, clock, team, user, bystander, endpoint.id, client)


def erase(story: Story) -> None:
    story.clock.tick()
    story.svc.users.delete_user(CTX, story.team.team_id, story.user)
    story.clock.tick(timedelta(days=8))
    assert story.svc.jobs.sweep_erasures() >= 1
    assert story.svc.user_queries.status(story.user) is None  # erased: no row left


# -- what the audit should hold: found by reading the whole log (the test's own oracle) --


def log_events(svc: Service) -> list[tuple[int, Any]]:
    """Every event of the log, decoded, with its notification id."""
    notifications = svc.recorder.select_notifications(1, 100_000)
    return [(n.id, svc.ledger.mapper.to_domain_event(n)) for n in notifications]


def belonging_to(svc: Service, user_id: UUID) -> list[tuple[UUID, int, str]]:
    """The events of the user's audit, in time then log order, as (stream, version,
    event name): the user's own, and those of every stream with an event that names the
    user, but for an event that names another user (a claim's next holder)."""
    events = log_events(svc)
    streams = {user_id} | {
        e.originator_id for _, e in events if getattr(e, "user_id", None) == user_id
    }
    chosen = [
        (e.timestamp, n, e)
        for n, e in events
        if e.originator_id in streams and getattr(e, "user_id", user_id) == user_id
    ]
    return [
        (e.originator_id, e.originator_version, type(e).__qualname__)
        for _, _, e in sorted(chosen, key=lambda item: (item[0], item[1]))
    ]


def audit_pages(story: Story, user_id: UUID, **params: Any) -> tuple[list[dict[str, Any]], int]:
    """Every entry of the user's audit through the API, page after page; the pages."""
    entries: list[dict[str, Any]] = []
    cursor = None
    pages = 0
    while True:
        query = {**params, **({"next_cursor": cursor} if cursor else {})}
        response = story.client.get(
            f"/v2/audit/user/{user_id}", params=query, headers=story.team.headers
        )
        assert response.status_code == 200, response.text
        body = response.json()
        assert body["user_id"] == str(user_id)
        entries += body["data"]
        pages += 1
        cursor = body["next_cursor"]
        if cursor is None:
            return entries, pages


def erased_values(changes: dict[str, Any]) -> dict[str, Any]:
    """`changes` as they show once the key is destroyed: each sealed placeholder erased."""

    def erased(value: Any) -> Any:
        return ERASED_PLACEHOLDER if value == SEALED_PLACEHOLDER else value

    shown = {name: erased(value) for name, value in changes.items()}
    if isinstance(changes.get("changes"), dict):
        shown["changes"] = {name: erased(value) for name, value in changes["changes"].items()}
    return shown


def keyed(entries: list[dict[str, Any]]) -> list[tuple[UUID, int, str]]:
    return [(UUID(e["stream_id"]), e["version"], e["event"]) for e in entries]


def owner_rows(url: str) -> list[tuple[Any, ...]]:
    engine = sa.create_engine(url, poolclass=sa.NullPool)
    try:
        with engine.connect() as conn:
            o = stream_owners.c
            query = select(o.user_id, o.originator_id, o.team_id, o.kind, o.first_seen_at)
            return sorted(tuple(row) for row in conn.execute(query))
    finally:
        engine.dispose()


# -- a user's audit ------------------------------------------------------------------------


def test_a_users_audit_holds_everything_that_belongs_to_it_in_time_order(story: Story) -> None:
    expected = belonging_to(story.svc, story.user)
    entries, pages = audit_pages(story, story.user, limit=500)
    assert pages == 1
    assert keyed(entries) == expected
    assert {e["stream_kind"] for e in entries} == KINDS
    times = [datetime.fromisoformat(e["timestamp"]) for e in entries]
    assert times == sorted(times) and times[0] == T0 + timedelta(minutes=1)
    streams = {UUID(e["stream_id"]) for e in entries}
    assert {story.connection("freestyle_libre"), story.connection("oura")} <= streams
    # The bystander's streams stay out, though it shares the team, a provider and an
    # endpoint with the user.
    bystanders = {s for s, _, _ in belonging_to(story.svc, story.bystander)}
    assert streams.isdisjoint(bystanders)
    # Each entry: time, event, version, actor, request id, what changed.
    created = next(e for e in entries if e["event"] == "Connection.Created")
    assert created["actor"] == "test:actor" and created["request_id"] == "req-audit"
    # The device says what the person measures: sealed with the user's key (ADR 0032).
    assert created["changes"]["provider"] == SEALED_PLACEHOLDER
    assert created["changes"]["resource_availability"] == SEALED_PLACEHOLDER
    assert created["changes"]["sealed_external_user_id"] == SEALED_PLACEHOLDER
    deliveries = [e for e in entries if e["stream_kind"] == "webhook_delivery"]
    assert {e["event"] for e in deliveries} >= {
        "WebhookDelivery.Created",
        "WebhookDelivery.AttemptMade",
    }
    assert all(e["changes"].get("user_id", str(story.user)) == str(story.user) for e in entries)

    # The command line prints the same entries, in the same order.
    assert [(e.stream_id, e.version, e.event) for e in history(story.svc, story.user)] == expected


def test_the_audit_pages_and_filters_by_time_and_event_type(story: Story) -> None:
    everything, _ = audit_pages(story, story.user, limit=500)
    paged, pages = audit_pages(story, story.user, limit=3)
    assert paged == everything and pages == -(-len(everything) // 3)

    start, end = T0 + timedelta(minutes=3), T0 + timedelta(minutes=7)
    window, _ = audit_pages(
        story, story.user, start=start.isoformat(), end=end.isoformat(), limit=2
    )
    assert window == [
        e for e in everything if start <= datetime.fromisoformat(e["timestamp"]) < end
    ]
    assert {e["event"] for e in window} >= {"User.SettingsChanged", "LinkToken.Issued"}

    chosen, _ = audit_pages(
        story, story.user, event_type=["User.Created", "Connection.Created"], limit=1
    )
    assert [e["event"] for e in chosen] == [
        "User.Created",
        "Connection.Created",
        "Connection.Created",
    ]
    assert chosen == [e for e in everything if e["event"] in ("User.Created", "Connection.Created")]

    url, headers = f"/v2/audit/user/{story.user}", story.team.headers
    first = story.client.get(url, params={"limit": 2}, headers=headers).json()
    # A cursor is bound to its listing's filters; a forged one is refused.
    for params in (
        {"limit": 3, "next_cursor": first["next_cursor"]},
        {"limit": 2, "event_type": "User.Created", "next_cursor": first["next_cursor"]},
        {"limit": 2, "next_cursor": first["next_cursor"][:-2] + "xx"},
    ):
        refused = story.client.get(url, params=params, headers=headers)
        assert refused.status_code == 400, refused.text
        assert refused.json()["detail"]["error_type"] == "INVALID_CURSOR"
    for params in (
        {"event_type": "User.Exploded"},
        {"event_type": ["User.Created", "Team.Created"]},
        {"start": "2026-03-10T12:00:00"},  # no offset
        {"start": "yesterday"},
        {"start": "2026-03-11T00:00:00Z", "end": "2026-03-10T00:00:00Z"},
        {"start": "0001-01-01T00:00:00+01:00"},
        {"limit": 0},
        {"limit": 501},
    ):
        bad = story.client.get(url, params=params, headers=headers)
        assert bad.status_code == 422, (params, bad.text)
        assert "User.Exploded" not in bad.text


def test_another_teams_user_and_an_unknown_user_are_not_found(story: Story) -> None:
    ctx = CommandContext.system("test:setup")
    org = story.svc.teams.create_organization(ctx, "Other org")
    other_team = story.svc.teams.create_team(ctx, org, "Other team", "eu")
    other = Team(other_team, story.svc.teams.issue_team_api_key(ctx, other_team).plain)
    for user_id, headers in (
        (story.user, other.headers),
        (story.connection("oura"), story.team.headers),  # a stream, not a user
        (UUID(int=7), story.team.headers),
    ):
        response = story.client.get(f"/v2/audit/user/{user_id}", headers=headers)
        assert response.status_code == 404, response.text
    malformed = story.client.get("/v2/audit/user/not-a-uuid", headers=story.team.headers)
    assert malformed.status_code == 422  # a malformed id names its parameter (issue 34)
    assert malformed.json()["detail"][0]["loc"] == ["path", "user_id"]
    assert story.client.get(f"/v2/audit/user/{story.user}").status_code == 401


def test_a_pending_and_an_erased_users_audit_lists_everything_with_erased_placeholders(
    story: Story,
) -> None:
    before, _ = audit_pages(story, story.user, limit=500)
    story.clock.tick()
    story.svc.users.delete_user(CTX, story.team.team_id, story.user)
    pending, _ = audit_pages(story, story.user, limit=500)
    assert pending[: len(before)] == before
    assert sorted(e["event"] for e in pending[len(before) :]) == [
        "ClientUserIdClaim.Released",
        "Connection.Deregistered",
        "Connection.Deregistered",
        "User.Deleted",
    ]
    story.clock.tick(timedelta(days=8))
    assert story.svc.jobs.sweep_erasures() == 1

    erased, _ = audit_pages(story, story.user, limit=500)
    assert keyed(erased) == belonging_to(story.svc, story.user)
    # Every stream the user had is still listed, and the erasure itself.
    assert {(e["stream_kind"], e["stream_id"]) for e in before} <= {
        (e["stream_kind"], e["stream_id"]) for e in erased
    }
    # What the audit showed before, entry for entry, with every sealed value now erased.
    assert erased[: len(pending)] == [
        {**e, "changes": erased_values(e["changes"])} for e in pending
    ]
    assert "User.Erased" in {e["event"] for e in erased[len(pending) :]}
    text = json.dumps(erased)
    assert SEALED_PLACEHOLDER not in text
    assert text.count(ERASED_PLACEHOLDER) == json.dumps(before).count(SEALED_PLACEHOLDER) > 0
    for value in PERSONAL:
        assert value not in text


# -- sealed fields: the key that sealed them, never a stream's own id --------------------------


def sealed_fields() -> set[tuple[str, str]]:
    """Every (event, field) of every aggregate of the service's domain that holds a sealed
    value: its PERSONAL_FIELDS and any field named `sealed_...`. Not the webhook
    receiver's (domain/mirror): they are in its own log, never in the service's audit;
    nor an old version's, recorded no more (`SUPERSEDED_BY`: redacted at the start)."""
    found = set()
    for info in pkgutil.walk_packages(healthledger.domain.__path__, "healthledger.domain."):
        if info.name.startswith("healthledger.domain.mirror"):
            continue
        module = importlib.import_module(info.name)
        for aggregate in vars(module).values():
            if not (isinstance(aggregate, type) and issubclass(aggregate, Aggregate)):
                continue
            for event in vars(aggregate).values():
                if (
                    isinstance(event, type)
                    and "TOPIC" in vars(event)
                    and getattr(event, "SUPERSEDED_BY", None) is None
                ):
                    names = set(getattr(event, "PERSONAL_FIELDS", ()))
                    names |= {n for n in event.__annotations__ if n.startswith("sealed_")}
                    found |= {(event.__qualname__, name) for name in names}
    return found


def shown(entries: list[Any]) -> dict[tuple[str, str], set[str]]:
    """What each sealed field of these entries showed: (event, field) -> placeholders."""
    found: dict[tuple[str, str], set[str]] = {}
    # Facts stored sealed though the domain reads them in clear (ADR 0032: a
    # connection's provider) are named by their events' PERSONAL_FIELDS.
    personal = sealed_fields()
    for entry in entries:
        changes = entry.changes if hasattr(entry, "changes") else entry["changes"]
        event = entry.event if hasattr(entry, "event") else entry["event"]
        values = {**changes, **(changes.get("changes") or {})}
        for name, value in values.items():
            if (name.startswith("sealed_") or (event, name) in personal) and value is not None:
                found.setdefault((event, name), set()).add(value)
    return found


def order_request(user_id: UUID) -> OrderRequest:
    """An order of a shared demo lab test with the patient's details and address sent."""
    details = PatientDetails.model_validate(
        {
            "first_name": "Ada",
            "last_name": "Lovelace",
            "email": "ada.lovelace@example.org",
            "phone_number": "+44 20 7946 0958",
            "gender": "female",
            "dob": "1985-12-10",
        }
    )
    address = PatientAddress.model_validate(
        {"first_line": "12 Analytical Row", "zip_code": "10001", "state": "NY", "city": "NYC"}
    )
    return OrderRequest(
        user_id, UUID("0b7e5a52-3c1d-4f6e-8a9b-1c2d3e4f5a01"), None, details, address
    )


# A shared demo lab test collected at home (Labcorp): what an at-home draw is for.
HEART_AT_HOME = UUID("0b7e5a52-3c1d-4f6e-8a9b-1c2d3e4f5a02")
# A shared demo test kit (ZRT).
THYROID_KIT = UUID("0b7e5a52-3c1d-4f6e-8a9b-1c2d3e4f5a03")
# A person of the fake LibreView whose account asks for a code by SMS.
MFA_PERSON = ("omar@example.com", "staple 42")


def test_every_sealed_field_shows_by_the_key_that_sealed_it(
    story: Story, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    svc, team = story.svc, story.team.team_id
    monkeypatch.setenv("HEALTHLEDGER_DATABASE_URL", svc.settings.database_url)
    monkeypatch.setenv("HEALTHLEDGER_MASTER_KEY_FILE", str(svc.settings.master_key_file))
    # The team's sealed values: custom credentials' secret, webhook signing secrets (and
    # the team's own: its client_user_id digest secret).
    svc.teams.prepare_credentials(CTX, team, "oura")
    svc.teams.set_credentials(CTX, team, "oura", "client-id", SECRET)
    svc.webhooks.rotate_secret(CTX, team, "sandbox", story.endpoint)
    # An event destination's broker password (issue 35), sealed with the team's key too,
    # and a rotation of it.
    destination = svc.event_destinations.create(
        CTX,
        team,
        "sandbox",
        kind="rabbitmq",
        connection={"host": "127.0.0.1", "port": 5999, "username": "hl", "exchange": "events"},
        routes=[Route(prefix="", target="events.all")],
        secret="broker-password-1",
    )
    svc.event_destinations.update(
        CTX, team, "sandbox", destination.id, {"secret": "broker-password-2"}
    )
    # A connection deregistered and connected again (Reconnected carries its own).
    story.clock.tick()
    svc.connections.deregister(CTX, team, story.user, "oura")
    story.clock.tick()
    svc.connections.connect_demo(CTX, team, story.user, "oura", ["sleep"])
    story.clock.tick()
    svc.users.update_user(CTX, team, story.user, {"client_user_id": "audited-again"})
    # A lab test order (issue 14), placed with an idempotency key, diagnoses and a
    # passthrough string (both sealed), taken to its results.
    monkeypatch.setattr(
        svc.lab_orders, "policy", SandboxPolicy(failure_rate=0, cancellation_rate=0)
    )
    order = svc.lab_orders.place(
        CTX,
        team,
        replace(order_request(story.user), icd_codes=("E11.9",), passthrough="crm-audited"),
        "audited-order",
    )
    while svc.lab_orders.advance(CTX, team, order.id).is_open:
        story.clock.tick()
    # Its appointments (issue 33): one at a center booked with notes, rescheduled and
    # cancelled with a note; a draw at home requested with notes.
    walk_in = svc.lab_orders.place(CTX, team, order_request(story.user))
    svc.lab_orders.advance(CTX, team, walk_in.id)
    center = svc.appointment_places.centers_near("10001", 25, 1)[0].place
    slots = [s for day in svc.appointments.availability([center], None) for s in day.slots]
    book = svc.appointments.book
    book(CTX, team, walk_in.id, PSC, center.code, slots[0].start_at, "An interpreter")
    svc.appointments.reschedule(CTX, team, walk_in.id, PSC, center.code, slots[1].start_at, "Later")
    svc.appointments.cancel(CTX, team, walk_in.id, PSC, "patient_requested", "Travelling")
    at_home = svc.lab_orders.place(
        CTX, team, replace(order_request(story.user), lab_test_id=HEART_AT_HOME)
    )
    svc.lab_orders.advance(CTX, team, at_home.id)
    home = {"first_line": "12 Analytical Row", "city": "NYC", "state": "NY", "zip_code": "10001"}
    svc.appointments.request(CTX, team, at_home.id, home, "getlabs", "Ring twice")
    # A test kit, registered by the sample id on it to its patient (sealed again).
    kit = svc.lab_orders.place(
        CTX,
        team,
        replace(order_request(story.user), lab_test_id=THYROID_KIT, collection_method=TESTKIT),
    )
    kit = svc.lab_orders.advance(CTX, team, kit.id)
    patient = order_request(story.user)
    assert kit.sample_id and patient.patient_details and patient.patient_address
    svc.kit_registrations.register(
        CTX, team, kit.sample_id, patient.patient_details, patient.patient_address
    )
    # A lab report parsed (issue 34): the report found in it sealed in the job's Completed.
    user = svc.users.load_live(team, story.user)
    svc.report_parsing.create(CTX, user, [riverside_report()], False)
    assert svc.jobs.parse_lab_reports() == 1
    # A password sign-in at LibreView (issue 34) that asks for a second factor, and again
    # on the same link: the maker's challenge sealed with the user's key, twice.
    token = svc.link_tokens.issue(CTX, team, "sandbox", user_id=story.user).plain
    for _ in range(2):
        story.clock.tick()
        pending = svc.credential_links.sign_in(
            token, "req-sign-in", "abbott_libreview", *MFA_PERSON, region=None
        )
        assert isinstance(pending, Pending)
    # Two days on, the daily sync: the days it found (DailySynced's) sealed, as the
    # pulls' windows and spans are (PullScheduled's, PullSucceeded's: the story's pulls).
    story.clock.tick(timedelta(days=2))
    assert svc.jobs.sync_connected_feeds()
    # A deletion that says why (its reason sealed with the user's key), undone.
    story.clock.tick()
    svc.users.delete_user(CTX, team, story.user, reason="asked in writing", ticket="SUP-1")
    story.clock.tick()
    svc.users.undo_deletion(CTX, team, story.user)
    team_streams = [team, CustomCredentials.id_for(team, "oura"), story.endpoint, destination.id]
    connection = story.connection("oura")

    def everything() -> list[Any]:
        entries: list[Any] = list(history(svc, story.user))
        for stream in team_streams:
            entries += stream_history(svc, stream)
        return entries

    def cli(stream: UUID) -> str:
        capsys.readouterr()
        assert main(["audit", str(stream)]) == 0
        return capsys.readouterr().out

    live = shown(everything())
    # A Garmin push's records (ADR 0034) need a maker's sign-in, not a demo device:
    # test_garmin.py shows them sealed into the notice's receipt and gone with the user.
    # A maker's notice likewise: test_oura_webhooks.py shows its receipt's maker,
    # resources and window sealed in the user's audit (ADR 0032).
    # An unmatched lab result's fields (ADR 0040) are sealed with its own key, not a
    # user's or the team's: test_an_unmatched_results_audit_shows_it_sealed_until_decided.
    # A link token's consumption (the story connects without one): the maker it connected
    # is shown sealed in the user's audit by test_link_redirects_sealed.py (revision 0044).
    # An OAuth flow's maker (the story signs in with a password, not through a maker's
    # OAuth page): test_oauth_makers_sealed.py (revision 0045).
    # A demo device's injected failures (the story's devices fail nothing):
    # test_demo_failures_sealed.py (revision 0049).
    elsewhere = {
        ("Connection.DemoFailuresConfigured", "failures"),
        ("LinkToken.Consumed", "provider"),
        ("OAuthFlow.Started", "provider"),
        ("NoticeReceipt.Delivered", "sealed_delivery"),
        ("NoticeReceipt.Received", "provider"),
        ("NoticeReceipt.Received", "resources"),
        ("NoticeReceipt.Received", "start"),
        ("NoticeReceipt.Received", "end"),
        *UNMATCHED_SEALED,
    }
    assert set(live) == sealed_fields() - elsewhere, "every sealed field is covered"
    assert all(values == {SEALED_PLACEHOLDER} for values in live.values()), live
    # The stream of a live user's connection, alone: sealed, not a false "erased".
    assert shown(stream_history(svc, connection)) == {
        ("Connection.Created", "sealed_external_user_id"): {SEALED_PLACEHOLDER},
        ("Connection.Created", "provider"): {SEALED_PLACEHOLDER},
        ("Connection.Created", "resource_availability"): {SEALED_PLACEHOLDER},
        ("Connection.Reconnected", "sealed_external_user_id"): {SEALED_PLACEHOLDER},
        ("Connection.Reconnected", "resource_availability"): {SEALED_PLACEHOLDER},
    }
    printed = cli(connection)
    assert f"sealed_external_user_id={SEALED_PLACEHOLDER}" in printed
    assert ERASED_PLACEHOLDER not in printed

    erase(story)
    after = shown(everything())
    assert set(after) == set(live)
    for (event, _), values in after.items():
        team_sealed = event.startswith(TEAM_SEALED)
        # The user's erasure erases the user's values; the team's key still holds.
        assert values == {SEALED_PLACEHOLDER if team_sealed else ERASED_PLACEHOLDER}, event
    printed = cli(connection)
    assert f"sealed_external_user_id={ERASED_PLACEHOLDER}" in printed
    assert SEALED_PLACEHOLDER not in printed
    printed = cli(order.id)
    assert f"sealed_results={ERASED_PLACEHOLDER}" in printed and "Order.Completed" in printed
    assert SEALED_PLACEHOLDER not in printed and "Lovelace" not in printed

    # The team's deletion destroys the team's key: its sealed values follow it.
    svc.teams.delete_team(CTX, DEFAULT_ORG_ID, team)
    gone = shown([entry for stream in team_streams for entry in stream_history(svc, stream)])
    assert gone and all(values == {ERASED_PLACEHOLDER} for values in gone.values())
    text = json.dumps([vars(e) for e in everything()], default=str)
    # The sign-in's e-mail and password were handed to the maker, never recorded.
    for value in [*PERSONAL, SECRET, *MFA_PERSON]:
        assert value not in text


UNMATCHED_SEALED = {
    ("UnmatchedResult.Received", "sealed_result"),
    ("UnmatchedResult.Escalated", "sealed_note"),
    ("UnmatchedResult.Accepted", "sealed_note"),
    ("UnmatchedResult.Rejected", "sealed_note"),
}


def test_an_unmatched_results_audit_shows_it_sealed_until_decided(story: Story) -> None:
    """Each unmatched result's stream, in the audit: its report and notes sealed while it
    waits (escalated too), erased once it is decided (its key destroyed), whichever way."""
    svc, team = story.svc, story.team

    def result(action: str, body: dict[str, Any]) -> UUID:
        created = api.post(
            "/v3/unmatched_result_test",
            json={"case": "no_match", "order_source": "managed"},
            headers={**team.headers, "X-Idempotency-Key": f"audit-{action}"},
        )
        assert created.status_code == 200, created.text
        run = api.get(f"/v3/unmatched_result_test/{created.json()['run_id']}", headers=team.headers)
        result_id = run.json()["raw_result_id"]
        unsure = api.post(
            f"/v3/unmatched_result/{result_id}/resolve",
            json={"action": "unsure", "note": "asked the lab"},
            headers=team.headers,
        )
        assert unsure.status_code == 200, unsure.text
        assert shown(stream_history(svc, UUID(result_id))) == {
            ("UnmatchedResult.Received", "sealed_result"): {SEALED_PLACEHOLDER},
            ("UnmatchedResult.Escalated", "sealed_note"): {SEALED_PLACEHOLDER},
        }
        decided = api.post(
            f"/v3/unmatched_result/{result_id}/{action}", json=body, headers=team.headers
        )
        assert decided.status_code == 200, decided.text
        return UUID(result_id)

    with TestClient(create_team_api(svc), raise_server_exceptions=False) as api:
        rejected = result("resolve", {"action": "reject", "note": "not ours"})
        accepted = result("accept", {"user_id": str(story.user), "note": "hers"})
    decided = shown(stream_history(svc, rejected)) | shown(stream_history(svc, accepted))
    assert set(decided) == UNMATCHED_SEALED
    assert all(values == {ERASED_PLACEHOLDER} for values in decided.values()), decided


def test_the_cli_prints_a_users_audit_with_its_streams(
    story: Story, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HEALTHLEDGER_DATABASE_URL", story.svc.settings.database_url)
    monkeypatch.setenv("HEALTHLEDGER_MASTER_KEY_FILE", str(story.svc.settings.master_key_file))
    assert main(["audit", str(story.user), "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    expected = belonging_to(story.svc, story.user)
    assert [(UUID(e["stream_id"]), e["version"], e["event"]) for e in printed] == expected
    assert main(["audit", str(story.user)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[2] for line in lines] == [name for _, _, name in expected]
    assert f"connection={story.connection('oura')}" in "\n".join(lines)


# -- stream ownership ----------------------------------------------------------------------


def test_stream_owners_survive_erasure_and_come_back_the_same_from_a_rebuild(
    story: Story,
) -> None:
    url = story.svc.settings.database_url
    before = owner_rows(url)
    mine = {row[1]: row[3] for row in before if row[0] == story.user}
    assert set(mine.values()) == KINDS
    assert {row[2] for row in before} == {story.team.team_id}
    erase(story)
    assert owner_rows(url) == before
    story.svc.read_models.rebuild(story.svc.recorder, story.svc.ledger.mapper)
    assert owner_rows(url) == before


def test_a_claim_held_by_one_user_after_another_belongs_to_each_for_its_own_events(
    svc: Service, clock: Clock
) -> None:
    team = bootstrap(svc).team_id
    first = svc.users.create_user(CTX, team, client_user_id="shared").id
    clock.tick()
    svc.users.delete_user(CTX, team, first)
    clock.tick()
    second = svc.users.create_user(CTX, team, client_user_id="shared").id  # takes the claim
    clock.tick()
    svc.users.update_user(CTX, team, second, {"client_user_id": "moved"})  # releases it
    clock.tick()
    third = svc.users.create_user(CTX, team, client_user_id="shared").id
    for user in (first, second, third):
        claims = [e for e in history(svc, user) if e.stream_kind == "claim"]
        assert claims, user
        # A user's audit shows the claim's events about that user only.
        assert all(e.changes["user_id"] == user for e in claims)
        assert [(e.stream_id, e.version, e.event) for e in history(svc, user)] == belonging_to(
            svc, user
        )
    assert len({e.stream_id for e in history(svc, second) if e.stream_kind == "claim"}) == 2


def test_migration_0005_backfills_what_the_projection_writes(story: Story, clock: Clock) -> None:
    svc, team = story.svc, story.team.team_id
    # A claim taken again by another user, and by its first holder after an undo.
    shared = svc.users.create_user(CTX, team, client_user_id="shared").id
    svc.users.delete_user(CTX, team, shared)
    clock.tick()
    svc.users.undo_deletion(CTX, team, shared)
    clock.tick()
    svc.users.delete_user(CTX, team, shared)
    clock.tick()
    svc.users.create_user(CTX, team, client_user_id="shared")
    erase(story)
    url = svc.settings.database_url
    # Connections, feeds, webhook deliveries and link tokens are founded by versions newer
    # than revision 0005 (ADR 0032, ADR 0028; a link token's since revision 0043), which no
    # log of its time holds: its backfill does not know their topics.
    newer = {"connection", "pull", "webhook_delivery", "link_token"}
    projected = [row for row in owner_rows(url) if row[3] not in newer]
    assert len({row[0] for row in projected if row[1] in claims_of(svc)}) > len(claims_of(svc))
    # Migration 0005's backfill, run again on the same log into an empty table.
    with svc.db.write() as conn:
        conn.execute(stream_owners.delete())
        for statement in MIGRATION_0005.backfill(conn.dialect.name):
            conn.exec_driver_sql(statement)
    assert owner_rows(url) == projected


def claims_of(svc: Service) -> set[UUID]:
    return {e.originator_id for _, e in log_events(svc) if isinstance(e, ClientUserIdClaim.Event)}


@pytest.fixture(params=BACKENDS)
def legacy_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """The database main wrote before migrations (tests/data/legacy_main), as it was."""
    if request.param == "sqlite":
        path = tmp_path / "legacy" / "ledger.db"
        path.parent.mkdir()
        with gzip.open(LEGACY / "sqlite-ledger.db.gz") as packed, path.open("wb") as out:
            shutil.copyfileobj(packed, out)
        yield f"sqlite:///{path}"
        return
    admin: sa.Engine = request.getfixturevalue("postgres_admin")
    name = create_postgres_database(admin)
    load_dump(postgres_database_url(name), LEGACY / "postgres-dump.sql.gz")
    url = sa.make_url(postgres_database_url(name)).update_query_dict(
        {"options": "-csearch_path=legacy_main"}
    )
    yield url.render_as_string(hide_password=False)
    drop_postgres_database(admin, name)


def test_migration_0005_backfills_a_log_written_before_it_as_a_rebuild_projects_it(
    legacy_url: str,
) -> None:
    upgrade(legacy_url)  # from before migrations to the head, 0005's backfill on the way
    backfilled = owner_rows(legacy_url)
    assert {row[3] for row in backfilled} == KINDS and len(backfilled) > 100
    # The read models projected again from the same log by today's projections.
    db = Database(legacy_url)
    try:
        recorder = LedgerRecorder(db)
        ledger = Ledger(LedgerInfrastructure(recorder, SnapshotRecorder(db)))
        ReadModels(db).rebuild(recorder, ledger.mapper)
    finally:
        db.dispose()
    assert owner_rows(legacy_url) == backfilled


# -- read by index lookups only ------------------------------------------------------------


def test_a_users_audit_reads_by_index_lookups_only(story: Story) -> None:
    query = owned_events_query(
        story.user, T0, T0 + timedelta(days=1), ["healthledger:User.Created.v1"], (T0, 3)
    ).limit(101)
    with story.svc.db.read() as conn:
        sql = str(query.compile(dialect=conn.dialect, compile_kwargs={"literal_binds": True}))
        if story.svc.db.is_sqlite:
            plan = [row[-1] for row in conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {sql}")]
            assert not [step for step in plan if step.startswith("SCAN")], plan
            assert any("USING PRIMARY KEY (user_id=?" in step for step in plan), plan
            assert any("ix_stored_events_originator_time" in step for step in plan), plan
        else:
            # With sequential scans priced out, what is left is the plan through indexes,
            # if there is one: a log without one would still be scanned whole.
            conn.exec_driver_sql("SET LOCAL enable_seqscan = off")
            plan = [row[0] for row in conn.exec_driver_sql(f"EXPLAIN {sql}")]
            text = "\n".join(plan)
            assert "Seq Scan" not in text, text
            assert "stream_owners_pkey" in text and "ix_stored_events_originator_time" in text
