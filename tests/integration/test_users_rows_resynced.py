"""The users rows an earlier start left a value sealed apart from the log's take the log's
own (revision 0048, ADR 0054), on SQLite and PostgreSQL.

Revision 0042's redaction of the old `User.Created`, before revision 0046's code, sealed
the client_user_id into the record and left the users row the value revision 0015's
conversion had sealed: the same value under another nonce, which `verify --read-models`
and the daily integrity check named as differing from the log's rebuild. Here a database
as that start left it: its Created redacted (by this code, which gives the row the log's
value), then the row's values sealed again with the user's key, as the row held them. The
start after revision 0048 gives the row the log's values back; a row holding another
value (changed by hand) is left for the check to name.
"""

from __future__ import annotations

import importlib
from uuid import UUID

from healthledger.adapters.composition import Service, build_service
from healthledger.adapters.persistence.engine import migrating
from healthledger.adapters.persistence.engine.schema import (
    pending_redactions,
    stored_events,
    user_row_resyncs,
    users,
)
from healthledger.adapters.persistence.integrity.read_model_check import check_read_models
from healthledger.adapters.settings import Settings
from healthledger.domain.context import CommandContext
from healthledger.domain.users.user import User
from sqlalchemy import func, insert, select, update

from tests.integration.test_client_user_id_digests import write_legacy_team

# The revision before 0048: the database as the main before it leaves it.
BEFORE = importlib.import_module(
    "healthledger.adapters.persistence.migrations.service.versions."
    "step_45_r0048_users_rows_resynced"
).down_revision

SAME, OTHER = "crm-dan-w4q7", "crm-eve-h8z2"
ZONE = "Europe/Lisbon"
CTX = CommandContext(actor="team_api_key:test", request_id="req-rows-resynced")


def users_differences(service: Service) -> dict[UUID, tuple[str, ...]]:
    """The users rows that differ from the log's rebuild: the columns, by user."""
    checked = check_read_models(service.read_models, service.recorder, service.ledger.mapper)
    found = {}
    for difference in checked.differences:
        assert difference.table == users.name, difference.describe()
        found[UUID(str(difference.key["user_id"]))] = difference.columns
    return found


def row_of(service: Service, user_id: UUID) -> tuple[str, str | None]:
    with service.db.read() as conn:
        row = conn.execute(
            select(users.c.sealed_client_user_id, users.c.sealed_fallback_time_zone).where(
                users.c.user_id == user_id
            )
        ).one()
    return row.sealed_client_user_id, row.sealed_fallback_time_zone


def test_rows_sealed_apart_by_an_earlier_start_take_the_logs_values(settings: Settings) -> None:
    service = build_service(settings)
    # A team of before digests, two users whose Created held the client_user_id in clear;
    # one has a time zone, set by this code (sealed in its change).
    legacy = write_legacy_team(service, SAME, OTHER)
    same = legacy.user_id
    with service.db.read() as conn:
        found = conn.execute(select(users.c.user_id).where(users.c.team_id == legacy.team_id))
        (other,) = {UUID(str(user_id)) for (user_id,) in found} - {same}
    service.users.update_user(CTX, legacy.team_id, same, {"fallback_time_zone": ZONE})
    # Their Created listed as revision 0042 listed every user's, and redacted by a start.
    c = stored_events.c
    with service.db.write() as conn:
        conn.execute(
            insert(pending_redactions).from_select(
                ["position"],
                select(c.chain_position).where(
                    c.topic == User.Created.TOPIC, c.originator_id.in_([same, other])
                ),
            )
        )
    service.close()
    service = build_service(settings)
    assert users_differences(service) == {}
    logs = row_of(service, same)

    # The rows as the start before revision 0046's code left them: the same values sealed
    # apart (another nonce). The other user's row changed by hand: another value.
    keys = service.key_store
    with service.db.write() as conn:
        conn.execute(
            update(users)
            .where(users.c.user_id == same)
            .values(
                sealed_client_user_id=keys.seal(same, SAME),
                sealed_fallback_time_zone=keys.seal(same, ZONE),
            )
        )
        conn.execute(
            update(users)
            .where(users.c.user_id == other)
            .values(sealed_client_user_id=keys.seal(other, "crm-someone-else"))
        )
    # The false alarm, and the real one.
    assert users_differences(service) == {
        same: ("sealed_client_user_id", "sealed_fallback_time_zone"),
        other: ("sealed_client_user_id",),
    }
    apart = row_of(service, same)
    assert apart != logs
    assert [keys.open(same, sealed or "") for sealed in apart] == [SAME, ZONE]
    service.close()

    # The database as the main before revision 0048 leaves it; then this code's start.
    migrating.downgrade(settings.database_url, BEFORE)
    started = build_service(settings)
    try:
        # The same values take the log's ciphertexts; the other value is still named.
        assert row_of(started, same) == logs
        assert users_differences(started) == {other: ("sealed_client_user_id",)}
        assert started.key_store.open(other, row_of(started, other)[0]) == "crm-someone-else"
        with started.db.read() as conn:
            assert conn.execute(select(func.count()).select_from(user_row_resyncs)).scalar() == 0
    finally:
        started.close()
