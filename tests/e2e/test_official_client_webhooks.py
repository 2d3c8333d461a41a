"""Every webhook body we send validates against the official client's event model for its
event type (issue 17), with the values of the event it announces.

Demo users are connected for every demo provider of the catalog (one of them with a broken
grant, for `provider.connection.error`), pulled, synced a day later (for the `updated`
events), and the dispatcher delivers to a real local receiver over HTTP. The map from
event type to model is read off the client itself (each model's `event_type` field), so a
type the client does not know fails the test unless it is listed in
`WITHOUT_CLIENT_MODEL` with the reason. Our own lifecycle types (a user deleted, its
deletion undone, a user erased) are not the production service's: the client has no model
for them, and they are held to our own shape instead (`OURS`). On both databases."""

from __future__ import annotations

import enum
import json
import typing
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

import pydantic
import pytest
from healthledger.adapters.composition import Service, build_service
from healthledger.adapters.persistence.engine.schema import teams
from healthledger.adapters.settings import Settings
from healthledger.domain.context import CommandContext
from sqlalchemy import select

from tests.conftest import CLIENTS_PARSE_ANSWERS
from tests.receivers import Receiver, http_receiver

pytestmark = CLIENTS_PARSE_ANSWERS

# The official client (`pip install vital==2.1.569`): the models the bodies must satisfy.
vital_types = pytest.importorskip("vital.types", reason="the official client is not installed")

# A Sunday: the next day's sync holds the demo devices' weekly (Monday) profile.
T0 = datetime(2026, 3, 8, 12, 0, tzinfo=UTC)
CTX = CommandContext(actor="test:actor", request_id="req-official-client")
# The summary kinds whose daily events the demo devices must produce within this many
# days of syncs.
DAILY_SUMMARIES = ("sleep", "sleep_cycle", "activity", "workouts", "body", "profile", "meal")
MAX_SYNC_DAYS = 6
# The provider whose grant breaks during its pulls, and the resource that breaks it.
BROKEN = ("fitbit", "sleep", "token_refresh_failed")

# Our own event types (docs/webhooks.md, "Our own types"): not in the production service's
# catalog, so the official client has no model for them (if it gains one, the test says
# so). They tell a receiver's mirror of deletions and erasures; each is checked against
# our documented data fields instead, and none carries a personal value.
OURS = {
    "user.deleted": {"user_id", "team_id", "deleted_at", "erasure_due_at", "request_id"},
    "user.deletion_undone": {"user_id", "team_id", "undone_at", "request_id"},
    "user.erased": {"user_id", "erased_at", "removed"},
}

# Event types we send that the client has no model for, with why they are sent anyway.
# They are checked against the generic timeseries shape instead.
WITHOUT_CLIENT_MODEL = {
    # sleep_stream is a resource of the catalog (spec 2.6) that the client only knows
    # nested in a sleep summary; our catalog announces it as its own timeseries.
    "historical.data.sleep_stream.created": "historical",
    "daily.data.sleep_stream.created": "timeseries",
    "daily.data.sleep_stream.updated": "timeseries",
}


class Clock:
    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock(T0)


@pytest.fixture
def svc(settings: Settings, clock: Clock) -> Iterator[Service]:
    built = build_service(settings, clock=clock)
    built.bootstrap()
    yield built
    built.close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with http_receiver() as running:
        yield running


def client_models() -> dict[str, type[pydantic.BaseModel]]:
    """event type -> the client's model, from every client model whose `event_type` field
    is a literal or an enumeration of event types."""
    found: dict[str, type[pydantic.BaseModel]] = {}
    for name in dir(vital_types):
        model = getattr(vital_types, name)
        if not (isinstance(model, type) and issubclass(model, pydantic.BaseModel)):
            continue
        field = model.model_fields.get("event_type")
        if field is None or not {"data", "user_id", "team_id"} <= set(model.model_fields):
            continue
        annotation = field.annotation
        if typing.get_origin(annotation) is typing.Literal:
            values = [str(v) for v in typing.get_args(annotation)]
        elif isinstance(annotation, type) and issubclass(annotation, enum.Enum):
            values = [str(m.value) for m in annotation if not m.name.startswith("_")]
        else:
            continue
        for value in values:
            assert found.get(value, model) is model, f"two client models for {value}"
            found[value] = model
    return found


def the_team(svc: Service) -> UUID:
    with svc.db.read() as conn:
        return conn.execute(select(teams.c.team_id)).scalar_one()


def resource_of(event_type: str) -> str | None:
    parts = event_type.split(".")
    return parts[2] if parts[0] in ("historical", "daily") else None


def test_every_webhook_body_validates_against_the_official_client(
    svc: Service, receiver: Receiver, clock: Clock
) -> None:
    models = client_models()
    assert "provider.connection.error" in models and "daily.data.sleep.created" in models
    team = the_team(svc)
    svc.webhooks.create(CTX, team, "sandbox", url=receiver.url("ok"))
    demo = sorted(slug for slug, entry in svc.catalog.items() if entry.demo)
    assert BROKEN[0] in demo, demo
    users: dict[UUID, tuple[str, str]] = {}
    for slug in demo:
        client_user_id = f"official-{slug}"
        user = svc.users.create_user(CTX, team, client_user_id=client_user_id)
        failures: dict[str, Any] = {}
        if slug == BROKEN[0]:
            failures = {BROKEN[1]: {"code": BROKEN[2], "times": None}}
        svc.connections.connect_demo(
            CTX,
            team,
            user.id,
            slug,
            svc.catalog[slug].supported_resources,
            demo_failures=failures,
        )
        users[user.id] = (slug, client_user_id)
    svc.jobs.run_due_pulls()
    # Days of syncs: daily events are announced by syncs (a pull announces its history
    # once), created for the new day and updated for the day that was still running. Two
    # days at least (the Monday profile); more while a summary kind has no daily event
    # yet: the demo devices weigh on about half the days, so two days of three devices
    # miss `body` in one run of 64.
    for day in range(1, MAX_SYNC_DAYS + 1):
        clock.now += timedelta(days=1)
        svc.pulls.sync_due()
        svc.jobs.dispatch_webhooks()
        types = (json.loads(r.body)["event_type"] for r in receiver.on("ok"))
        daily = {resource_of(t) for t in types if t.startswith("daily.")}
        if day >= 2 and set(DAILY_SUMMARIES) <= daily:
            break
    assert set(svc.webhook_queries.delivery_counts()) == {"succeeded"}
    # Our lifecycle types, once the data is delivered: a deletion undone, and a deletion
    # followed by the erasure after the grace period.
    undone, erased = [u for u, (slug, _) in sorted(users.items()) if slug != BROKEN[0]][:2]
    svc.users.delete_user(CTX, team, undone)
    svc.users.undo_deletion(CTX, team, undone)
    svc.users.delete_user(CTX, team, erased)
    svc.jobs.dispatch_webhooks()
    clock.now += svc.settings.grace_period
    assert svc.jobs.sweep_erasures() == 1
    svc.jobs.dispatch_webhooks()
    assert set(svc.webhook_queries.delivery_counts()) == {"succeeded"}
    bodies = [json.loads(r.body) for r in receiver.on("ok")]
    assert bodies

    unmapped: set[str] = set()
    invalid: dict[str, str] = {}
    seen: Counter[str] = Counter()
    for body in bodies:
        event_type = body["event_type"]
        seen[event_type] += 1
        user_id = UUID(body["user_id"])
        slug, client_user_id = users[user_id]
        if event_type in OURS:
            assert event_type not in models, f"the client now has a model for {event_type}"
            assert (body["client_user_id"], body["team_id"]) == (None, str(team))
            assert set(body["data"]) == OURS[event_type]
            assert body["data"]["user_id"] == str(user_id)
            assert client_user_id not in json.dumps(body)
            continue
        # The envelope and the values of the event it announces.
        assert (body["client_user_id"], body["team_id"]) == (client_user_id, str(team))
        data = body["data"]
        assert data["user_id"] == str(user_id), event_type
        check_values(event_type, data, slug)
        model = models.get(event_type)
        if model is None:
            if event_type in WITHOUT_CLIENT_MODEL:
                check_generic(WITHOUT_CLIENT_MODEL[event_type], data)
            else:
                unmapped.add(event_type)
            continue
        try:
            parsed = model.model_validate(body)
        except pydantic.ValidationError as exc:
            invalid.setdefault(event_type, _summary(exc))
            continue
        fields = dict(parsed)  # the client's models differ, but each has these two
        assert getattr(fields["event_type"], "value", fields["event_type"]) == event_type
        assert fields["user_id"] == str(user_id)
        # A day of workouts or meals: every session of it, not only the first, in the
        # client's shape of one.
        session_model = model.model_fields["data"].annotation
        assert isinstance(session_model, type) and issubclass(session_model, pydantic.BaseModel)
        for session in data.get("sessions", []):
            try:
                session_model.model_validate(session)
            except pydantic.ValidationError as exc:
                invalid.setdefault(f"{event_type} (a session)", _summary(exc))

    assert not unmapped, f"event types we send without a client model: {sorted(unmapped)}"
    assert not invalid, "bodies the client refuses:\n" + "\n".join(
        f"{t}: {why}" for t, why in sorted(invalid.items())
    )
    # Every kind of event was exercised: connections, their error, and the data events of
    # every resource the demo providers pulled (daily ones where the demo had data).
    assert seen["provider.connection.created"] == len(demo)
    assert seen["provider.connection.error"] == 1
    for resource in {r for slug in demo for r in svc.catalog[slug].supported_resources}:
        if resource == "hypnogram":
            assert not any(resource_of(t) == resource for t in seen)  # withdrawn in 2025
            continue
        assert f"historical.data.{resource}.created" in seen, resource
    daily = {resource_of(t) for t in seen if t.startswith("daily.")}
    for summary in DAILY_SUMMARIES:
        assert summary in daily, summary
    assert any(t.endswith(".updated") for t in seen)
    assert {t: seen[t] for t in OURS} == {
        "user.deleted": 2,
        "user.deletion_undone": 1,
        "user.erased": 1,
    }


def check_values(event_type: str, data: dict[str, Any], slug: str) -> None:
    if event_type == "provider.connection.created":
        assert data["provider"]["slug"] == slug
        assert data["source"] == data["provider"]
        return
    if event_type == "provider.connection.error":
        assert (data["provider"], data["error_type"]) == (slug, BROKEN[2])
        assert data["error_details"]
        return
    if event_type.startswith("historical."):
        assert data["provider"] == slug
        assert data["is_final"] is True
        return
    # Daily data: the summary object itself, or grouped samples; either way its source.
    assert data["provider"] == slug
    source = data["source"]
    assert source["provider"] == slug and "type" in source and "app_id" in source
    assert "summary" not in data
    if "id" in data:  # a summary object: its identity and times
        assert UUID(data["id"]) and data["created_at"] <= data["updated_at"]
        if "date" in data:
            assert data["calendar_date"] == data["date"][:10]


def check_generic(kind: str, data: dict[str, Any]) -> None:
    if kind == "historical":
        vital_types.HistoricalPullCompleted.model_validate(data)
        return
    assert isinstance(data["data"], list) and data["data"]
    vital_types.ClientFacingSource.model_validate(data["source"])


def _summary(exc: pydantic.ValidationError) -> str:
    return "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['type']}" for e in exc.errors()[:6])
