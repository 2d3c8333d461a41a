"""Time travel on the team API's reads (`as_of`, adapters/compliance/time_travel.py), on both
databases: the live answers of each route are recorded at each step of a user's life
(freezegun), and `as_of` each step's instant must answer them again, from the log, while
the user lives, after it is deleted, and after it is erased (its personal values then as
the audit's placeholder)."""

from __future__ import annotations

import typing
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

import pydantic
import pytest
from eventsourcing.application import project_aggregate
from fastapi.testclient import TestClient
from freezegun import freeze_time
from healthledger.adapters.compliance.time_travel import ReadsAsOf, aggregate_as_of, state_as_of
from healthledger.adapters.composition import Service
from healthledger.adapters.operations.schemas import ErasedValue
from healthledger.domain.connections.connection import Connection
from healthledger.domain.context import CommandContext
from healthledger.domain.personal_data import ERASED_PLACEHOLDER
from healthledger.domain.users.user import User
from vital.types import (
    ClientFacingProviderWithStatus,
    ClientFacingUser,
    UserHistoricalPullsResponse,
)

from tests.conftest import Team, create_user
from tests.stream_ids import stream_of_connection

T0 = datetime(2026, 3, 10, 12, 0, tzinfo=UTC)
GRACE = timedelta(days=7)  # the settings fixture's grace period
CTX = CommandContext.system("test:setup")

Answer = tuple[int, Any]


# The teams are made before the instants the tests travel to: an as_of before the team
# existed is a 422.
@pytest.fixture
def team(service: Service) -> Team:
    with freeze_time(T0 - timedelta(days=1)):
        created = service.bootstrap()
    assert created is not None
    return Team(created.team_id, created.team_api_key.plain)


@pytest.fixture
def other_team(service: Service, team: Team) -> Team:
    ctx = CommandContext.system("test:setup")
    with freeze_time(T0 - timedelta(days=1)):
        org_id = service.teams.create_organization(ctx, "Other org")
        team_id = service.teams.create_team(ctx, org_id, "Other team", "eu")
        issued = service.teams.issue_team_api_key(ctx, team_id)
    return Team(team_id, issued.plain)


def routes(user_id: str) -> dict[str, tuple[str, dict[str, Any]]]:
    """Every read that takes `as_of`, as (path, query) by name."""
    return {
        "user": (f"/v2/user/{user_id}", {}),
        "providers": (f"/v2/user/providers/{user_id}", {}),
        "pulls": ("/v2/introspect/historical_pull", {"user_id": user_id}),
        "oura_pulls": ("/v2/introspect/historical_pull", {"user_id": user_id, "provider": "oura"}),
        "team_pulls": ("/v2/introspect/historical_pull", {}),
        "team_first_page": ("/v2/introspect/historical_pull", {"user_limit": 1}),
        "resources": ("/v2/introspect/resources", {"user_id": user_id}),
        "oura_resources": ("/v2/introspect/resources", {"user_id": user_id, "provider": "oura"}),
        "team_resources": ("/v2/introspect/resources", {}),
        "team_first_resources": ("/v2/introspect/resources", {"user_limit": 1}),
    }


def answers(
    client: TestClient, team: Team, user_id: str, as_of: datetime | None = None
) -> dict[str, Answer]:
    found = {}
    for name, (path, query) in routes(user_id).items():
        params = query if as_of is None else {**query, "as_of": as_of.isoformat()}
        response = client.get(path, params=params, headers=team.headers)
        assert response.status_code != 500, response.text
        found[name] = (response.status_code, response.json())
    return found


# A provider named by no one: a connection of a user erased since (ADR 0032).
ERASED_PROVIDER = dict.fromkeys(("logo", "name", "slug"), ERASED_PLACEHOLDER)


def erased(user_id: str) -> Callable[[dict[str, Answer]], dict[str, Answer]]:
    """The recorded answers with the personal values an erasure destroyed as the
    placeholder (docs: the client_user_id, which its events hold sealed, the birth date's
    value, the time zone's id (sealed since revision 0042), each connection's
    external_user_id, and its provider and resources, which its events hold sealed since
    ADR 0032: the providers as the placeholder, the maps keyed by provider without the
    user's connections, a filter by provider finding none)."""

    def unnamed(body: Any, by_provider: bool) -> Any:
        data = [
            {**entry, "provider": {}} if entry["user_id"] == user_id else entry
            for entry in body["data"]
        ]
        if by_provider:
            data = [entry for entry in data if entry["user_id"] != user_id]
        return {**body, "data": data}

    def hide(name: str, status: int, body: Any) -> Any:
        if status != 200:
            return body
        if name in ("pulls", "team_pulls", "team_first_page"):
            return unnamed(body, False)
        if name in ("resources", "team_resources", "team_first_resources"):
            return unnamed(body, False)
        if name in ("oura_pulls", "oura_resources"):
            return unnamed(body, True)
        if name == "user":
            body = {**body, "client_user_id": ERASED_PLACEHOLDER}
            sources = [
                {**s, "provider": ERASED_PROVIDER, "source": ERASED_PROVIDER}
                for s in body["connected_sources"]
            ]
            body = {**body, "connected_sources": sources}
        if name == "user" and body["fallback_birth_date"] is not None:
            body = {
                **body,
                "fallback_birth_date": {**body["fallback_birth_date"], "value": ERASED_PLACEHOLDER},
            }
        if name == "user" and body["fallback_time_zone"] is not None:
            body = {
                **body,
                "fallback_time_zone": {**body["fallback_time_zone"], "id": ERASED_PLACEHOLDER},
            }
        if name == "providers":
            body = {
                "providers": [
                    {
                        **p,
                        **ERASED_PROVIDER,
                        "resource_availability": {},
                        "external_user_id": None
                        if p["external_user_id"] is None
                        else ERASED_PLACEHOLDER,
                    }
                    for p in body["providers"]
                ]
            }
        return body

    def hidden(recorded: dict[str, Answer]) -> dict[str, Answer]:
        return {name: (code, hide(name, code, body)) for name, (code, body) in recorded.items()}

    return hidden


def connect(client: TestClient, team: Team, user_id: str, provider: str, **extra: Any) -> None:
    response = client.post(
        "/v2/link/connect/demo",
        json={"user_id": user_id, "provider": provider, **extra},
        headers=team.headers,
    )
    assert response.status_code == 200, response.text


def ok(response: Any) -> None:
    assert response.status_code in (200, 204), response.text


def test_as_of_answers_what_each_read_answered_at_every_step_of_a_users_life(
    service: Service, client: TestClient, team: Team, other_team: Team
) -> None:
    steps: list[tuple[str, Callable[[], object]]] = []
    user: dict[str, str] = {}
    h = team.headers

    def create() -> None:
        user.update(
            create_user(
                client,
                team,
                "tt-1",
                fallback_time_zone="Europe/Paris",
                fallback_birth_date="1984-05-06",
            )
        )
        # Another user of the team, connected throughout: the team-wide listing pages.
        bystander = create_user(client, team, "tt-bystander")
        connect(client, team, bystander["user_id"], "freestyle_libre")

    def path(suffix: str = "") -> str:
        return f"/v2/user/{user['user_id']}{suffix}"

    steps = [
        ("before", lambda: None),
        ("created", create),
        # A connection error on oura's activity pulls; withings' sleep retries once.
        (
            "oura",
            lambda: connect(
                client,
                team,
                user["user_id"],
                "oura",
                demo_failures={"activity": {"code": "token_refresh_failed", "times": None}},
            ),
        ),
        (
            "withings",
            lambda: connect(
                client,
                team,
                user["user_id"],
                "withings",
                demo_failures={"sleep": {"code": "provider_unavailable", "times": 1}},
            ),
        ),
        ("pulled", lambda: service.jobs.run_due_pulls() and None),
        ("retried", lambda: service.jobs.run_due_pulls() and None),
        (
            "settings",
            lambda: ok(
                client.patch(
                    path(),
                    json={
                        "fallback_time_zone": "Asia/Tokyo",
                        "fallback_birth_date": "1985-06-07",
                        "ingestion_start": "2025-01-01",
                    },
                    headers=h,
                )
            ),
        ),
        ("oura_gone", lambda: ok(client.delete(path("/oura"), headers=h))),
        ("deleted", lambda: ok(client.delete(path(), headers=h))),
        (
            "undone",
            lambda: ok(
                client.post("/v2/user/undo_delete", params={"user_id": user["user_id"]}, headers=h)
            ),
        ),
        ("deleted_again", lambda: ok(client.delete(path(), headers=h))),
    ]
    recorded: dict[str, tuple[datetime, dict[str, Answer]]] = {}
    at = T0
    for name, step in steps:
        at += timedelta(hours=1)
        with freeze_time(at):
            step()
            recorded[name] = (at, answers(client, team, user.get("user_id", str(UUID(int=1)))))
    user_id = user["user_id"]

    # The steps did what they say (so that the answers below cover each state).
    live = {name: answer for name, (_, answer) in recorded.items()}
    assert live["before"]["user"][0] == 404 and live["before"]["team_pulls"][1]["data"] == []
    withings = live["pulled"]["pulls"][1]["data"][0]["provider"]["withings"]["pulled"]
    assert withings["sleep"]["status"] == "retrying"
    retried = live["retried"]["pulls"][1]["data"][0]["provider"]["withings"]["pulled"]
    assert retried["sleep"]["status"] == "success"
    oura = live["pulled"]["providers"][1]["providers"][0]
    assert oura["status"] == "error" and oura["error_details"]["error_type"]
    assert len(live["settings"]["user"][1]["connected_sources"]) == 2
    assert live["settings"]["user"][1]["fallback_birth_date"]["value"] == "1985-06-07"
    assert [p["slug"] for p in live["oura_gone"]["providers"][1]["providers"]] == ["withings"]
    assert live["deleted"]["user"] == (404, {"detail": live["deleted"]["user"][1]["detail"]})
    assert "scheduled for deletion" in live["deleted"]["user"][1]["detail"]
    assert live["undone"]["user"][0] == 200
    assert live["created"]["team_first_page"][1]["next_cursor"] is None
    assert live["settings"]["team_first_page"][1]["next_cursor"] is not None
    # The resources' last attempts: the retried one failed, then succeeded.
    sleep = live["pulled"]["resources"][1]["data"][0]["provider"]["withings"]["sleep"]
    assert sleep["last_attempt"]["status"] == "failed" and sleep["pull_status"] == "retrying"
    sleep = live["retried"]["resources"][1]["data"][0]["provider"]["withings"]["sleep"]
    assert sleep["last_attempt"]["status"] == "success" and sleep["newest_data"] is not None
    assert live["settings"]["team_first_resources"][1]["next_cursor"] is not None

    def held_to_every_step(expect: Callable[[dict[str, Answer]], dict[str, Answer]]) -> None:
        for name, (instant, answer) in recorded.items():
            assert answers(client, team, user_id, instant) == expect(answer), name
            # Any instant up to the next change answers the same.
            later = instant + timedelta(seconds=59)
            assert answers(client, team, user_id, later) == expect(answer), name

    # While the user is pending deletion: every answer again, exactly.
    with freeze_time(at + timedelta(days=1)):
        held_to_every_step(lambda answer: answer)

    # Erased: the user is gone now, and was as it was then.
    with freeze_time(at + GRACE + timedelta(hours=1)):
        assert service.jobs.sweep_erasures() == 1
        assert client.get(f"/v2/user/{user_id}", headers=h).status_code == 404
        held_to_every_step(erased(user_id))
        then = recorded["settings"][0]
        resolved = client.get(
            f"/v2/user/{user_id}", params={"as_of": then.isoformat()}, headers=h
        ).json()
        assert resolved["fallback_birth_date"]["value"] == ERASED_PLACEHOLDER
        assert resolved["client_user_id"] == ERASED_PLACEHOLDER  # its events hold it sealed
        # The official client parses the answers about the past, placeholders included.
        ClientFacingUser.model_validate(resolved)
        providers = client.get(
            f"/v2/user/providers/{user_id}", params={"as_of": then.isoformat()}, headers=h
        ).json()
        pydantic.TypeAdapter(dict[str, list[ClientFacingProviderWithStatus]]).validate_python(
            providers
        )
        pulls = client.get(
            "/v2/introspect/historical_pull",
            params={"user_id": user_id, "as_of": then.isoformat()},
            headers=h,
        ).json()
        UserHistoricalPullsResponse.model_validate(pulls)

        # Another team's user is not found, then as now.
        for route, (path_, query) in routes(user_id).items():
            if "user_id" in path_ or "user_id" in query:
                response = client.get(
                    path_, params={**query, "as_of": then.isoformat()}, headers=other_team.headers
                )
                assert response.status_code == 404, route


def test_as_of_is_an_iso_instant_with_an_offset_and_not_in_the_future(
    service: Service, client: TestClient, team: Team
) -> None:
    with freeze_time(T0):
        user_id = create_user(client, team, "tt-params")["user_id"]
        for value in (
            "2026-03-10T12:00:00",  # no offset: which instant?
            "2026-03-10",
            "1773144000",  # a Unix time, not ISO 8601
            "yesterday",
            "2026-13-40T99:00:00Z",
            "2026-03-10T12:00:00Z" + "0" * 100,
            "0001-01-01T00:00:00+14:00",  # before the calendar's first instant in UTC
        ):
            for path in (f"/v2/user/{user_id}", f"/v2/user/providers/{user_id}"):
                response = client.get(path, params={"as_of": value}, headers=team.headers)
                assert response.status_code == 422, (value, response.text)
                (problem,) = response.json()["detail"]
                assert problem["loc"] == ["query", "as_of"]
                assert any(word in problem["msg"] for word in ("ISO 8601", "offset", "range"))
        future = (T0 + timedelta(seconds=1)).isoformat()
        reads: tuple[tuple[str, dict[str, str]], ...] = (
            (f"/v2/user/{user_id}", {}),
            (f"/v2/user/providers/{user_id}", {}),
            ("/v2/introspect/historical_pull", {}),
        )
        for path, query in reads:
            response = client.get(path, params={**query, "as_of": future}, headers=team.headers)
            assert response.status_code == 422, response.text
            assert "future" in response.json()["detail"][0]["msg"]
        # Now, in any offset, is the past's last instant: answered.
        now = T0.astimezone(UTC).isoformat().replace("+00:00", "-00:00")
        response = client.get(f"/v2/user/{user_id}", params={"as_of": now}, headers=team.headers)
        assert response.status_code == 200
        assert response.json() == client.get(f"/v2/user/{user_id}", headers=team.headers).json()


def test_a_long_lived_user_loads_as_of_an_instant_from_the_snapshot_below_it(
    service: Service, ctx: CommandContext, team: Team, monkeypatch: pytest.MonkeyPatch
) -> None:
    interval = service.settings.user_snapshot_interval
    with freeze_time(T0) as frozen:
        user = service.users.create_user(ctx, team.team_id, client_user_id="tt-long")
        zones = ["Europe/Paris", "Asia/Tokyo", "America/Lima"]
        for n in range(2 * interval + 10):
            frozen.tick(timedelta(minutes=1))
            service.users.update_user(
                ctx, team.team_id, user.id, {"fallback_time_zone": zones[n % 3]}
            )
    # The instant of version 2 * interval + 5: the snapshot at 2 * interval, then 5 events.
    version = 2 * interval + 5
    instant = T0 + timedelta(minutes=version - 1)
    assert service.recorder.version_at(user.id, instant) == version
    reads: list[dict[str, Any]] = []
    select_events = service.recorder.select_events

    def spy(originator_id: Any, **kwargs: Any) -> Any:
        reads.append(kwargs)
        return select_events(originator_id, **kwargs)

    monkeypatch.setattr(service.recorder, "select_events", spy)
    found = aggregate_as_of(service, user.id, instant)
    assert isinstance(found, User) and found.version == version
    # The events after the snapshot only: one read, of the 5 after version 2 * interval.
    assert [(r["gt"], r["lte"]) for r in reads] == [(2 * interval, version)]
    monkeypatch.undo()
    # The same state as a replay of every event up to it.
    replayed = project_aggregate(None, service.ledger.events.get(user.id, lte=version))
    assert isinstance(replayed, User)
    assert vars(found) == vars(replayed)
    assert found.sealed_fallback_time_zone is not None and found.fallback_time_zone is None
    opened = service.key_store.open(user.id, found.sealed_fallback_time_zone[0])
    assert opened == zones[(version - 2) % 3]
    state = state_as_of(service, user.id, instant)
    assert state is not None and state["fallback_time_zone"] == zones[(version - 2) % 3]


def test_the_connections_of_a_user_as_of_an_instant_are_found_from_the_log(
    service: Service, client: TestClient, team: Team
) -> None:
    with freeze_time(T0):
        user_id = create_user(client, team, "tt-conn")["user_id"]
    with freeze_time(T0 + timedelta(hours=1)):
        connect(client, team, user_id, "oura")
    reads = ReadsAsOf(service, T0 + timedelta(minutes=30))
    assert reads.live_connections(UUID(user_id)) == []
    reads = ReadsAsOf(service, T0 + timedelta(hours=1))
    (connection,) = reads.live_connections(UUID(user_id))
    assert isinstance(connection, Connection) and connection.provider == "oura"
    assert connection.id == stream_of_connection(service, UUID(user_id), "oura")


def test_the_erased_placeholder_is_the_audits() -> None:
    assert typing.get_args(ErasedValue) == (ERASED_PLACEHOLDER,)


DEMOGRAPHICS = {
    "first_name": "Ada",
    "last_name": "Lovelace",
    "email": "ada.lovelace@example.org",
    "phone_number": "+1 555 010 1815",
    "gender": "female",
    "dob": "1985-12-10",
    "address": {"first_line": "12 Row", "city": "Austin", "state": "TX", "zip_code": "78701"},
}


def directory_answers(
    client: TestClient, team: Team, users: dict[str, str], as_of: datetime | None = None
) -> dict[str, Answer]:
    """The users list (pages included), resolve and demographics answers."""
    reads: dict[str, tuple[str, dict[str, Any]]] = {
        "list": ("/v2/user", {}),
        "page_1": ("/v2/user", {"limit": 2}),
        "page_2": ("/v2/user", {"limit": 2, "offset": 2}),
        **{f"resolve_{n}": (f"/v2/user/resolve/tt-{n}", {}) for n in "abc"},
        "info_a": (f"/v2/user/{users.get('a', UUID(int=1))}/info/latest", {}),
    }
    found = {}
    for name, (path, query) in reads.items():
        params = query if as_of is None else {**query, "as_of": as_of.isoformat()}
        response = client.get(path, params=params, headers=team.headers)
        assert response.status_code != 500, response.text
        found[name] = (response.status_code, response.json())
    return found


def test_the_users_list_resolve_and_demographics_answer_as_they_did(
    service: Service, client: TestClient, team: Team
) -> None:
    users: dict[str, str] = {}
    h = team.headers

    def create(name: str) -> None:
        users[name] = create_user(client, team, f"tt-{name}")["user_id"]

    def demographics(**change: Any) -> None:
        ok(client.patch(f"/v2/user/{users['a']}/info", json=change, headers=h))

    steps: list[tuple[str, Callable[[], object]]] = [
        ("before", lambda: None),
        ("a", lambda: create("a")),
        ("no_info", lambda: service.teams.set_feature(CTX, team.team_id, "demographics", True)),
        ("info", lambda: demographics(**DEMOGRAPHICS)),
        ("b", lambda: create("b")),
        ("c", lambda: create("c")),
        ("info_changed", lambda: demographics(first_name="Augusta")),
        ("b_deleted", lambda: ok(client.delete(f"/v2/user/{users['b']}", headers=h))),
        ("b_again", lambda: create("b")),  # the released client_user_id, held anew
        ("a_deleted", lambda: ok(client.delete(f"/v2/user/{users['a']}", headers=h))),
    ]
    recorded: dict[str, tuple[datetime, dict[str, Answer]]] = {}
    at = T0
    for name, step in steps:
        at += timedelta(hours=1)
        with freeze_time(at):
            step()
            recorded[name] = (at, directory_answers(client, team, users))

    live = {name: answer for name, (_, answer) in recorded.items()}
    assert live["before"]["list"][1]["total"] == 0
    assert live["a"]["info_a"][0] == 403  # the closed beta not yet switched on
    assert live["no_info"]["info_a"][0] == 404
    assert live["info_changed"]["info_a"][1]["first_name"] == "Augusta"
    assert live["c"]["page_2"][1]["total"] == 3 and len(live["c"]["page_2"][1]["users"]) == 1
    assert "scheduled for deletion" in live["b_deleted"]["resolve_b"][1]["detail"]
    assert live["b_again"]["resolve_b"][1]["user_id"] == users["b"]
    assert live["a_deleted"]["info_a"][0] == 404

    with freeze_time(at + timedelta(days=1)):
        for name, (instant, answer) in recorded.items():
            assert directory_answers(client, team, users, instant) == answer, name
            later = instant + timedelta(seconds=59)
            assert directory_answers(client, team, users, later) == answer, name

    # Erased: the list shows the user as it was, its client_user_id as the placeholder;
    # its demographics, and finding it by its client_user_id, are gone with its key.
    with freeze_time(at + GRACE + timedelta(hours=2)):
        assert service.jobs.sweep_erasures() == 2
        instant, answer = recorded["c"]
        past = directory_answers(client, team, users, instant)
        listed = {u["user_id"]: u for u in past["list"][1]["users"]}
        assert listed[users["a"]]["client_user_id"] == ERASED_PLACEHOLDER
        assert past["resolve_a"][0] == 404 and past["info_a"][0] == 404
        assert past["resolve_c"] == answer["resolve_c"]
