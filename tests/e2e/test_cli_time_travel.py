"""The command line's time travel, on both databases: `audit ID --as-of` for every kind of
stream, and `replay --until --into`, which builds the read models as of an instant into a
SQLite file of their own."""

from __future__ import annotations

import json
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
from freezegun import freeze_time
from healthledger.adapters.cli import main
from healthledger.adapters.compliance.time_travel import FUTURE, before_message, stream_began
from healthledger.adapters.composition import Service
from healthledger.adapters.persistence.engine.schema import (
    READ_MODEL_TABLES,
    connections,
    stored_events,
    users,
)
from healthledger.adapters.settings import Settings
from healthledger.domain.context import CommandContext
from healthledger.domain.personal_data import ERASED_PLACEHOLDER, SEALED_PLACEHOLDER
from sqlalchemy import Engine, create_engine, func, select

from tests.conftest import Team
from tests.stream_ids import stream_of_connection, stream_of_feed

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def at(hours: float) -> datetime:
    return T0 + timedelta(hours=hours)


@pytest.fixture(autouse=True)
def cli_env(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HEALTHLEDGER_DATABASE_URL", settings.database_url)
    monkeypatch.setenv("HEALTHLEDGER_MASTER_KEY_FILE", str(settings.master_key_file))


@pytest.fixture
def team(service: Service) -> Team:
    """The first-run team, made before the instants the tests travel to."""
    with freeze_time(at(-1)):
        created = service.bootstrap()
    assert created is not None
    return Team(created.team_id, created.team_api_key.plain)


def state(capsys: pytest.CaptureFixture[str], stream: UUID, instant: datetime) -> dict[str, Any]:
    assert main(["audit", str(stream), "--as-of", instant.isoformat(), "--json"]) == 0
    found: dict[str, Any] = json.loads(capsys.readouterr().out)
    return found


def test_audit_as_of_shows_every_kind_of_stream_as_it_was(
    service: Service, team: Team, ctx: CommandContext, capsys: pytest.CaptureFixture[str]
) -> None:
    with freeze_time(at(0)):
        user = service.users.create_user(
            ctx, team.team_id, client_user_id="tt-cli", fallback_birth_date=date(1990, 1, 2)
        )
        endpoint = service.webhooks.create(
            ctx, team.team_id, "sandbox", url="https://hooks.example/in"
        )
    with freeze_time(at(1)):
        service.connections.connect_demo(ctx, team.team_id, user.id, "freestyle_libre", ["glucose"])
        token = service.link_tokens.issue(ctx, team.team_id, "sandbox", user_id=user.id)
    with freeze_time(at(2)):
        service.jobs.run_due_pulls()
        service.webhooks.update(
            ctx, team.team_id, "sandbox", endpoint.id, {"description": "the second"}
        )
    with freeze_time(at(3)):
        service.connections.deregister(ctx, team.team_id, user.id, "freestyle_libre")
        service.users.delete_user(ctx, team.team_id, user.id)
    connection_id = stream_of_connection(service, user.id, "freestyle_libre")
    feed_id = stream_of_feed(service, user.id, "freestyle_libre", "glucose")
    claim_id = state(capsys, user.id, at(0.5))["claim_id"]

    expected: list[tuple[UUID, float, str, dict[str, Any]]] = [
        (user.id, 0.5, "User", {"status": "active", "fallback_birth_date": SEALED_PLACEHOLDER}),
        (user.id, 3.5, "User", {"status": "pending_erasure"}),
        (UUID(claim_id), 0.5, "ClientUserIdClaim", {"holder": str(user.id)}),
        (UUID(claim_id), 3.5, "ClientUserIdClaim", {"holder": None}),
        (
            connection_id,
            1.5,
            "Connection",
            {"status": "connected", "sealed_external_user_id": SEALED_PLACEHOLDER},
        ),
        (connection_id, 3.5, "Connection", {"status": "deregistered"}),
        (feed_id, 1.5, "ResourceFeed", {"status": "scheduled"}),
        (feed_id, 2.5, "ResourceFeed", {"status": "success"}),
        (token.token_id, 1.5, "LinkToken", {"user_id": str(user.id)}),
        (team.team_id, 0.5, "Team", {"deleted_at": None}),
        (
            endpoint.id,
            0.5,
            "WebhookEndpoint",
            {"description": "", "sealed_secret": SEALED_PLACEHOLDER},
        ),
        (endpoint.id, 2.5, "WebhookEndpoint", {"description": "the second"}),
    ]
    for stream, hours, aggregate, fields in expected:
        shown = state(capsys, stream, at(hours))
        assert shown["aggregate"] == aggregate, (stream, hours)
        assert datetime.fromisoformat(shown["as_of"]) == at(hours)
        assert {name: shown[name] for name in fields} == fields, (aggregate, hours)
        # The plain text of no secret, and the sealed text of no value, is printed.
        text = json.dumps(shown)
        assert token.plain not in text and '"v1.' not in text

    # Erased: the sealed values of the user's streams are erased, not sealed; the team's
    # are still sealed.
    with freeze_time(at(3) + service.settings.grace_period):
        assert service.jobs.sweep_erasures() == 1
    assert state(capsys, user.id, at(0.5))["fallback_birth_date"] == ERASED_PLACEHOLDER
    assert state(capsys, connection_id, at(1.5))["sealed_external_user_id"] == ERASED_PLACEHOLDER
    assert state(capsys, endpoint.id, at(0.5))["sealed_secret"] == SEALED_PLACEHOLDER

    # Before a stream began, and for an id that is no stream: nothing, and exit 1.
    assert main(["audit", str(connection_id), "--as-of", at(0.5).isoformat()]) == 1
    assert "no stream" in capsys.readouterr().err
    assert main(["audit", str(UUID(int=7)), "--as-of", at(9).isoformat()]) == 1
    # The text form names each field.
    assert main(["audit", str(feed_id), "--as-of", at(2.5).isoformat()]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert any(line.split() == ["status", "success"] for line in lines)


def test_audit_as_of_refuses_what_the_api_refuses_in_its_words(
    service: Service, team: Team, ctx: CommandContext, capsys: pytest.CaptureFixture[str]
) -> None:
    with freeze_time(at(0)):
        user = service.users.create_user(ctx, team.team_id, client_user_id="tt-refused")
    with freeze_time(at(1)):
        # In the future: refused, as the API refuses it (a 422 there).
        assert main(["audit", str(user.id), "--as-of", at(1.5).isoformat()]) == 2
        assert capsys.readouterr().err.strip() == f"--as-of: {FUTURE}"
        # Before the user's team existed: the API's message too.
        assert main(["audit", str(user.id), "--as-of", at(-2).isoformat()]) == 2
        began = stream_began(service, team.team_id)
        assert began is not None
        err = capsys.readouterr().err.strip()
        assert err == f"--as-of: {before_message('team', began)}"
        # Unparseable: argparse's usage error, with the API's words.
        with pytest.raises(SystemExit) as bad:
            main(["audit", str(user.id), "--as-of", "garbage"])
        assert bad.value.code == 2
        assert "ISO 8601 with an offset" in capsys.readouterr().err
        # Now is the past's last instant: answered.
        assert main(["audit", str(user.id), "--as-of", at(1).isoformat(), "--json"]) == 0


def rows(engine: Engine) -> dict[str, list[tuple[Any, ...]]]:
    """Every read model's rows, sorted."""
    with engine.connect() as conn:
        return {
            table.name: sorted((tuple(row) for row in conn.execute(select(table))), key=repr)
            for table in READ_MODEL_TABLES
        }


def test_replay_builds_the_read_models_as_of_an_instant_into_a_new_file(
    service: Service,
    team: Team,
    ctx: CommandContext,
    settings: Settings,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    with freeze_time(at(0)):
        kept = service.users.create_user(ctx, team.team_id, client_user_id="tt-kept")
        gone = service.users.create_user(ctx, team.team_id, client_user_id="tt-gone")
        service.connections.connect_demo(ctx, team.team_id, kept.id, "oura", ["sleep"])
    with freeze_time(at(1)):
        service.jobs.run_due_pulls()
        service.users.delete_user(ctx, team.team_id, gone.id)
    source = create_engine(settings.database_url)
    then = rows(source)
    with freeze_time(at(2)):
        service.users.update_user(ctx, team.team_id, kept.id, {"fallback_time_zone": "UTC"})
        service.connections.deregister(ctx, team.team_id, kept.id, "oura")
    with freeze_time(at(1) + service.settings.grace_period):
        service.jobs.sweep_erasures()
    now = rows(source)
    with source.connect() as conn:
        events_now = conn.execute(select(func.count()).select_from(stored_events)).scalar_one()
        events_then = conn.execute(
            select(func.count())
            .select_from(stored_events)
            .where(stored_events.c.timestamp <= at(1.5))
        ).scalar_one()

    target = tmp_path / "replay" / "then.db"
    target.parent.mkdir()
    until = at(1.5).isoformat()
    assert main(["replay", "--until", until, "--into", str(target)]) == 0
    printed = capsys.readouterr()
    assert f"replayed {events_then} events" in printed.out
    # The bar counted the events up to the instant, not the whole log (issue 34: it
    # stopped short of 100%), each copied then projected.
    bar = printed.err.replace("\r", "\n").strip().splitlines()[-1]
    assert "100%" in bar and f"{2 * events_then}/{2 * events_then}" in bar, printed.err
    replayed = create_engine(f"sqlite:///{target}")
    try:
        got = rows(replayed)
        # Every read model as it was then: the users' client_user_ids sealed as their
        # events hold them (never in clear); the copy holds no key nor team secret to
        # digest them with, nor the service key of the makers' account digests (ADR 0031)
        # and of the connections' providers (ADR 0032).
        with replayed.connect() as conn:
            shown = dict(conn.execute(select(users.c.user_id, users.c.client_user_id_digest)).all())
            accounts = conn.execute(
                select(connections.c.account_digest, connections.c.provider_digest)
            ).all()
        assert shown == {kept.id: None, gone.id: None}
        assert accounts and set(accounts) == {(None, None)}
        digests = {
            "users": {[c.name for c in users.columns].index("client_user_id_digest")},
            "connections": {
                [c.name for c in connections.columns].index(name)
                for name in ("account_digest", "provider_digest")
            },
        }

        def without_digest(tables: dict[str, list[tuple[Any, ...]]]) -> Any:
            return {
                **tables,
                **{
                    table: sorted(
                        (tuple(v for i, v in enumerate(r) if i not in at) for r in tables[table]),
                        key=repr,
                    )
                    for table, at in digests.items()
                },
            }

        assert without_digest(got) == without_digest(then)
        assert then != now  # the source moved on, the copy did not
        with replayed.connect() as conn:
            copied = conn.execute(select(func.count()).select_from(stored_events)).scalar_one()
        assert copied == events_then < events_now
    finally:
        replayed.dispose()
    # The source was only read.
    assert rows(source) == now
    source.dispose()

    # An existing target is replaced only with --force; the source never.
    assert main(["replay", "--until", until, "--into", str(target)]) == 1
    assert "exists" in capsys.readouterr().err
    assert main(["replay", "--until", until, "--into", str(target), "--force"]) == 0
    capsys.readouterr()
    if settings.database_url.startswith("sqlite"):
        own = settings.database_url.removeprefix("sqlite:///")
        assert main(["replay", "--until", until, "--into", own, "--force"]) == 1
        assert "own database" in capsys.readouterr().err
    with pytest.raises(SystemExit) as naive:
        main(["replay", "--until", "2026-03-01T12:00", "--into", str(target)])
    assert naive.value.code == 2
