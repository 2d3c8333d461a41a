"""The client_user_id at rest (issue 29 §1): the read models hold it only sealed with the
user's key and as the team's keyed digest, so nothing on disk holds it in clear, before
the user's erasure or after it.

SQLite: the database file and its -wal are searched byte for byte. PostgreSQL: every page
of the users table and of its indexes, read through pageinspect (the pages as the server
holds them, written or not), and the relation files too when this process can read the
server's data directory. On both: no column of any read-model row holds the value. A
control value the users row does hold as text (its sealed client_user_id) is found by
the same searches, so they do look where the value would be. The user's fallback time
zone is searched for the same way: sealed since revision 0042, it is nowhere in clear
either."""

from __future__ import annotations

import contextlib
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from freezegun import freeze_time
from healthledger.adapters.composition import Service
from healthledger.adapters.persistence.engine.schema import READ_MODEL_TABLES
from healthledger.domain.context import CommandContext
from sqlalchemy import Connection, select, text

from tests.conftest import Team

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
NEEDLE = "hl-needle-client-7f3a9c"
# The user's fallback time zone: sealed like the client_user_id (revision 0042).
ZONE = "America/Argentina/Ushuaia"


def read_model_values(service: Service) -> list[tuple[str, str, Any]]:
    """Every value of every read-model row, as (table, column, value)."""
    found: list[tuple[str, str, Any]] = []
    with service.db.read() as conn:
        for table in READ_MODEL_TABLES:
            for row in conn.execute(select(table)).mappings():
                found.extend((table.name, column, value) for column, value in row.items())
    return found


def in_read_models(service: Service, value: str) -> list[tuple[str, str]]:
    return [(t, c) for t, c, v in read_model_values(service) if value in str(v)]


def sqlite_bytes(service: Service) -> bytes:
    path = service.db.sqlite_file
    assert path is not None
    return b"".join(
        Path(f"{path}{suffix}").read_bytes()
        for suffix in ("", "-wal")
        if Path(f"{path}{suffix}").exists()
    )


def _pageinspect(conn: Connection) -> bool:
    try:
        with conn.begin_nested():
            conn.execute(text("CREATE EXTENSION IF NOT EXISTS pageinspect SCHEMA public"))
    except Exception:  # another worker made it meanwhile, or not allowed
        pass
    return (
        conn.execute(text("SELECT 1 FROM pg_extension WHERE extname = 'pageinspect'")).first()
        is not None
    )


def postgres_pages(service: Service) -> bytes | None:
    """Every page of the users table and its indexes, as the server holds them (None
    without pageinspect)."""
    with service.db.write() as conn:
        if not _pageinspect(conn):
            return None
        relations = ["users"] + [
            str(name)
            for (name,) in conn.execute(
                text(
                    "SELECT indexrelid::regclass::text FROM pg_index"
                    " WHERE indrelid = 'users'::regclass"
                )
            )
        ]
        pages = []
        for relation in relations:
            blocks = conn.execute(
                text(
                    "SELECT pg_relation_size(CAST(:r AS regclass))"
                    " / current_setting('block_size')::int"
                ),
                {"r": relation},
            ).scalar_one()
            for block in range(blocks):
                pages.append(
                    conn.execute(
                        text("SELECT public.get_raw_page(:r, :b)"), {"r": relation, "b": block}
                    ).scalar_one()
                )
        return b"".join(bytes(page) for page in pages)


def postgres_files(service: Service) -> bytes | None:
    """The users table's and its indexes' relation files after a checkpoint, when this
    process can read the server's data directory (else None)."""
    with service.db.write() as conn:
        directory = Path(conn.execute(text("SHOW data_directory")).scalar_one())
        paths = [
            directory / str(p)
            for (p,) in conn.execute(
                text(
                    "SELECT pg_relation_filepath(c) FROM (SELECT 'users'::regclass AS c UNION ALL"
                    " SELECT indexrelid::regclass FROM pg_index"
                    " WHERE indrelid = 'users'::regclass) AS r"
                )
            )
        ]
        with contextlib.suppress(Exception):  # not allowed: read what is written
            conn.execute(text("CHECKPOINT"))
    try:
        return b"".join(path.read_bytes() for path in paths)
    except OSError:
        return None


def on_disk(service: Service) -> list[bytes]:
    """What this test can read of the database's storage: every place searched."""
    if service.db.is_sqlite:
        return [sqlite_bytes(service)]
    found = [postgres_pages(service), postgres_files(service)]
    places = [content for content in found if content is not None]
    if not places:
        pytest.skip("neither pageinspect nor the server's files are reachable")
    return places


def test_an_erased_users_client_user_id_is_nowhere_in_clear(
    service: Service, team: Team, ctx: CommandContext
) -> None:
    with freeze_time(T0):
        user = service.users.create_user(
            ctx, team.team_id, client_user_id=NEEDLE, fallback_time_zone=ZONE
        )
        kept = service.users.create_user(ctx, team.team_id, client_user_id="kept-user")
    # Answered in clear to its team, found by the value...
    assert service.user_queries.resolve(team.team_id, NEEDLE)["user_id"] == user.id
    assert service.user_queries.resolved_user(team.team_id, user.id)["client_user_id"] == NEEDLE
    listed, total = service.user_queries.list_users(team.team_id, 0, 10)
    assert (total, sorted(u["client_user_id"] for u in listed)) == (2, [NEEDLE, "kept-user"])
    # ... but held only sealed and as the team's digest.
    digest = service.client_user_id_digest(team.team_id, NEEDLE)
    assert in_read_models(service, NEEDLE) == []
    assert ("users", "client_user_id_digest") in in_read_models(service, digest)
    assert (
        service.user_queries.resolved_user(team.team_id, user.id)["fallback_time_zone"]["id"]
        == ZONE
    )
    assert in_read_models(service, ZONE) == []
    # The row's sealed value, as stored: what shows that a search sees the user's row.
    control = next(
        str(v)
        for t, c, v in read_model_values(service)
        if (t, c) == ("users", "sealed_client_user_id") and v is not None
    )
    for content in on_disk(service):
        assert NEEDLE.encode() not in content and ZONE.encode() not in content
        assert control.encode() in content  # the search sees the user's row

    with freeze_time(T0 + timedelta(minutes=1)):
        service.users.delete_user(ctx, team.team_id, user.id)
    with freeze_time(T0 + service.settings.grace_period + timedelta(minutes=2)):
        service.jobs.sweep_erasures()
    assert service.user_queries.status(user.id) is None

    assert in_read_models(service, NEEDLE) == []
    assert in_read_models(service, digest) == []
    assert in_read_models(service, ZONE) == []
    for content in on_disk(service):
        assert NEEDLE.encode() not in content and ZONE.encode() not in content
    # The other user answers as before.
    assert service.user_queries.resolve(team.team_id, "kept-user")["user_id"] == kept.id
