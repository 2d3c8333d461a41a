"""The client_user_id's old records redacted at the start (issue 29, ADR 0054, revision
0046), on SQLite and PostgreSQL.

Before ADR 0017 a change of client_user_id (`User.ClientUserIdChanged` v1) held the old and
the new value in clear, and a claim (`ClientUserIdClaim.Created` v1) its value: a team's
identifier of the person, often an e-mail address, kept for good. The start redacts them
in place (the same topic, the current class version): the change's new value sealed with
the user's key (the placeholder for a user erased already) and the claim of its time named,
the claim's value named by the team's keyed digest. The chain verifies, no page of the
database holds the values afterwards, no answer about the erased user names them, and a
live user's old claims work as before: found by the value, refused to another user, taken
again by an undo, left by a change. Records written here as the code before digests wrote
them (`write_legacy_team`); the legacy database of before migrations, whose claims are of
version 1, is redacted likewise (test_migrations.py).
"""

from __future__ import annotations

import importlib
import io
from datetime import UTC, datetime, timedelta
from uuid import UUID

import pytest
from eventsourcing.persistence import StoredEvent
from fastapi.testclient import TestClient
from freezegun import freeze_time
from healthledger.adapters.compliance.chain_commands import verify_command
from healthledger.adapters.composition import Service, build_service
from healthledger.adapters.http.team_api import create_team_api
from healthledger.adapters.persistence.engine import migrating
from healthledger.adapters.persistence.engine.schema import (
    chain_redactions,
    pending_redactions,
    snapshots,
    stored_events,
    users,
)
from healthledger.adapters.persistence.eventstore.chain import REDACTION_TOPIC
from healthledger.adapters.persistence.integrity.read_model_check import check_read_models
from healthledger.adapters.settings import Settings
from healthledger.domain.context import CommandContext
from healthledger.domain.personal_data import ERASED_PLACEHOLDER
from healthledger.domain.redaction import REMOVED, SEALED
from healthledger.domain.teams.directory import DEFAULT_ORG_ID
from healthledger.domain.users.user import ClientUserIdClaim, User
from sqlalchemy import func, insert, select

from tests.integration.test_client_user_id_digests import _uuid, _when, write_legacy_team
from tests.integration.test_health_facts_sealed import (
    holding,
    postgres_files,
    postgres_pages,
    printed_about,
    records_of,
)
from tests.integration.test_notice_windows_sealed import states
from tests.integration.test_todays_main import (  # noqa: F401  (fixtures)
    SIGNED_HEADS,
    Written,
    started,
    verified,
    written,
)
from tests.recorded import loaded

# The revision before 0046: the database as the main before it leaves it.
BEFORE = importlib.import_module(
    "healthledger.adapters.persistence.migrations.service.versions."
    "step_43_r0046_old_client_user_ids_redacted"
).down_revision

# Each user's first value and the one a change of the code before digests moved it to;
# each needle is in no other value of a test (PostgreSQL's test schema is shared).
LIVE, LIVE_MOVED = "crm-ada-r5t8", "crm-ada-r5t8-b"
GONE, GONE_MOVED = "crm-bob-k3m9", "crm-bob-k3m9-b"
# The one user of a team deleted since: its claim's value has no digest left to be named by.
OF_DELETED_TEAM = "crm-cat-p2v6"
NEEDLES = (LIVE.encode(), GONE.encode(), OF_DELETED_TEAM.encode())
CTX = CommandContext(actor="team_api_key:test", request_id="req-old-ids")


def changed_v1(team_id: UUID, user_id: UUID, old: str, new: str, at: datetime) -> list[StoredEvent]:
    """A change of client_user_id as the code before digests stored it: the user's change
    naming both values in clear (its version 2), its old claim released, and the claim of
    the new value started, named by the team and the value."""
    by = f'"actor":"{CTX.actor}","request_id":"{CTX.request_id}",'
    old_claim, new_claim = (ClientUserIdClaim.id_for(team_id, value) for value in (old, new))
    return [
        StoredEvent(
            user_id,
            2,
            User.ClientUserIdChanged.TOPIC,
            (
                '{"timestamp":' + _when(at) + "," + by + f'"old_client_user_id":"{old}",'
                f'"new_client_user_id":"{new}"}}'
            ).encode(),
        ),
        StoredEvent(
            old_claim,
            2,
            ClientUserIdClaim.Released.TOPIC,
            ('{"timestamp":' + _when(at) + "," + by + '"user_id":' + _uuid(user_id) + "}").encode(),
        ),
        StoredEvent(
            new_claim,
            1,
            ClientUserIdClaim.Created.TOPIC,
            (
                '{"timestamp":'
                + _when(at)
                + ',"originator_topic":"healthledger:ClientUserIdClaim",'
                + by
                + '"team_id":'
                + _uuid(team_id)
                + f',"client_user_id":"{new}","user_id":'
                + _uuid(user_id)
                + "}"
            ).encode(),
        ),
    ]


def places(service: Service, *, required: bool = True) -> dict[str, bytes]:
    """SQLite: the file and its -wal. PostgreSQL: the pages (and files) of the log, the
    users rows and the snapshots; none reachable, the test is skipped (`required`) or
    nothing is returned."""
    if service.db.is_sqlite:
        path = service.db.sqlite_file
        assert path is not None
        return {
            f"file{suffix}": path.with_name(path.name + suffix).read_bytes()
            for suffix in ("", "-wal")
            if path.with_name(path.name + suffix).exists()
        }
    tables = ("stored_events", "users", "snapshots")
    found: dict[str, bytes] = {}
    for place in (postgres_pages(service, tables), postgres_files(service, tables)):
        found.update(place or {})
    if not found and required:
        pytest.skip("neither pageinspect nor the server's files are reachable")
    return found


def user_of(service: Service, user_id: UUID) -> User:
    found = service.ledger.find(user_id)
    assert isinstance(found, User)
    return found


def claim_of(service: Service, claim_id: UUID) -> ClientUserIdClaim:
    found = service.ledger.find(claim_id)
    assert isinstance(found, ClientUserIdClaim)
    return found


@pytest.fixture
def snapshotting(settings: Settings) -> Settings:
    # Users snapshotted every second event: the live user's change of the code before
    # digests lands in a snapshot's state, the value in clear with it.
    return settings.model_copy(update={"user_snapshot_interval": 2})


def test_old_changes_and_claims_are_redacted_and_still_hold_their_values(
    snapshotting: Settings,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    settings = snapshotting
    start = datetime.now(UTC) + timedelta(hours=1)
    service = build_service(settings)
    with freeze_time(start) as frozen:
        # A team of before digests, two users, each moved to another value, all stored
        # as that code stored them; then a start as this code's (the team's secret, the
        # users' keys and rows' digests given), as an old database has had.
        legacy = write_legacy_team(service, LIVE, GONE)
        team_id, live = legacy.team_id, legacy.user_id
        deleted = write_legacy_team(service, OF_DELETED_TEAM)
        with service.db.read() as conn:
            found = conn.execute(select(users.c.user_id).where(users.c.team_id == team_id))
            (gone,) = {UUID(str(user_id)) for (user_id,) in found} - {live}
        rows = [
            *changed_v1(team_id, live, LIVE, LIVE_MOVED, start),
            *changed_v1(team_id, gone, GONE, GONE_MOVED, start),
        ]
        service.recorder.insert_events(
            rows, aggregate_events=[loaded(service.ledger.mapper, r) for r in rows]
        )
        # Their Created, which held the first value in clear, listed as revision 0042
        # listed every user's, and redacted (the value sealed) by that start.
        c = stored_events.c
        with service.db.write() as conn:
            conn.execute(
                insert(pending_redactions).from_select(
                    ["position"],
                    select(c.chain_position).where(
                        c.topic == User.Created.TOPIC,
                        c.originator_id.in_([live, gone, deleted.user_id]),
                    ),
                )
            )
        service.close()
        service = build_service(settings)
        # The live user's state at its change, snapshotted: the value in clear in it.
        service.ledger.take_snapshot(live, version=2)
        old = [*states(service, User.ClientUserIdChanged.TOPIC)]
        old += states(service, ClientUserIdClaim.Created.TOPIC)
        # Each of the two users: its 2 claims and its change; the deleted team's: 1 claim.
        assert [len([s for s in old if needle in s]) for needle in NEEDLES] == [3, 3, 1]
        with service.db.read() as conn:
            (snapshot,) = conn.execute(
                select(snapshots.c.state).where(snapshots.c.originator_id == live)
            ).all()
        assert LIVE_MOVED.encode() in bytes(snapshot.state)

        # One of the two erased, its records of the code before digests in the log; the
        # other team deleted, and its user erased with it.
        service.users.delete_user(CTX, team_id, gone)
        assert service.teams.delete_team(CTX, DEFAULT_ORG_ID, deleted.team_id) == 1
        frozen.tick(settings.grace_period.total_seconds() + 60)
        assert service.jobs.sweep_erasures() == 2
    service.close()

    # The database as the main before this revision leaves it; then this code's start.
    migrating.downgrade(settings.database_url, BEFORE)
    later = start + timedelta(days=9)
    with freeze_time(later):
        started = build_service(settings)
    try:
        check_redacted(started, team_id, live, gone)
        # The users rows rebuilt from the redacted log are the live ones: the live user's
        # took its change's sealed value (its own was sealed anew by the first start), and
        # the erased user's change, the placeholder for its value, projects no row.
        rebuilt = check_read_models(started.read_models, started.recorder, started.ledger.mapper)
        assert [d for d in rebuilt.differences if d.table == users.name] == []
        # The deleted team's claim: its value removed, no digest to name it by (the team's
        # secret went with its key); its user's report has none to show.
        gone_with_team = claim_of(started, deleted.claim_id)
        assert (gone_with_team.client_user_id, gone_with_team.digest) == (None, None)
        assert started.client_user_id_digest_of(user_of(started, deleted.user_id)) is None
        check_the_claims_work(started, team_id, live)
        # No page holds either user's values: the old records', the snapshot's.
        stored = places(started)
        assert holding(stored, User.ClientUserIdChanged.TOPIC.encode())  # the rows are read
        for needle in NEEDLES:
            assert holding(stored, needle) == [], needle
        # Nor does any answer about the erased user, of the API or the CLI, nor the live
        # user's audit (its values shown sealed, its claims by digest).
        key = started.teams.issue_team_api_key(CommandContext.system("test:setup"), team_id)
        headers = {"x-service-api-key": key.plain}
        with freeze_time(later), TestClient(create_team_api(started)) as client:
            answers = [
                client.get(f"/v2/audit/user/{gone}", headers=headers),
                client.get(f"/v2/audit/user/{gone}/deletion_report", headers=headers),
                client.get(f"/v2/audit/user/{live}", headers=headers),
            ]
        assert [a.status_code for a in answers] == [200] * 3, [a.text for a in answers]
        printed = printed_about(
            str(gone),
            url=settings.database_url,
            master_key_file=settings.master_key_file,
            signing_key_file=None,
            monkeypatch=monkeypatch,
            capsys=capsys,
        )
        for answer in [a.text for a in answers] + printed:
            for needle in NEEDLES:
                assert needle.decode() not in answer, (needle, answer[:300])
    finally:
        started.close()


def check_redacted(service: Service, team_id: UUID, live: UUID, gone: UUID) -> None:
    """The start redacted the two changes and the team's four claims, chained: the erased
    user's change removed, the rest sealed (the claims named by digest); the chain
    verifies."""
    # (The deleted team's claim removed with it; and the first start's, of the three
    # users' Created.)
    assert sorted(
        (r["reason"], len(r["records"])) for r in records_of(service, REDACTION_TOPIC)
    ) == [(REMOVED, 2), (SEALED, 3), (SEALED, 5)]
    assert service.chain.verify().ok
    out = io.StringIO()
    assert verify_command(service.chain, None, out) == 0, out.getvalue()
    with service.db.read() as conn:
        assert conn.execute(select(func.count()).select_from(pending_redactions)).scalar() == 0
        assert (
            conn.execute(
                select(func.count()).select_from(snapshots).where(snapshots.c.originator_id == live)
            ).scalar()
            == 0
        )
    # Each change: version 2, no value in clear, the new one sealed (or the placeholder),
    # the claim of its time named.
    for record in records_of(service, User.ClientUserIdChanged.TOPIC):
        assert record["class_version"] == 2
        assert (record["old_client_user_id"], record["new_client_user_id"]) == (None, None)
    live_change, gone_change = change_of(service, live), change_of(service, gone)
    assert live_change.new_claim_id == ClientUserIdClaim.id_for(team_id, LIVE_MOVED)
    assert service.key_store.open(live, str(live_change.sealed_new_client_user_id)) == LIVE_MOVED
    assert gone_change.sealed_new_client_user_id == ERASED_PLACEHOLDER
    assert gone_change.new_claim_id == ClientUserIdClaim.id_for(team_id, GONE_MOVED)
    # Each claim: version 2, named by the team's digest of its value, its id kept.
    for value in (LIVE, LIVE_MOVED, GONE, GONE_MOVED):
        claim = claim_of(service, ClientUserIdClaim.id_for(team_id, value))
        assert claim.client_user_id is None
        assert claim.digest == service.client_user_id_digest(team_id, value)
    # The erased user's digest, for its report: its last claim's.
    assert service.client_user_id_digest_of(user_of(service, gone)) == (
        service.client_user_id_digest(team_id, GONE_MOVED)
    )


def change_of(service: Service, user_id: UUID) -> User.ClientUserIdChanged:
    (change,) = [
        event
        for event in service.ledger.events.get(user_id)
        if isinstance(event, User.ClientUserIdChanged)
    ]
    return change


def check_the_claims_work(service: Service, team_id: UUID, live: UUID) -> None:
    """The live user's claims, named by digest now, work as they did: found by the value,
    refused to another user, released and taken again by a deletion and its undo, left by
    a change of value and then free for another user."""
    key = service.teams.issue_team_api_key(CommandContext.system("test:setup"), team_id)
    headers = {"x-service-api-key": key.plain}
    legacy_claim = ClientUserIdClaim.id_for(team_id, LIVE_MOVED)
    with TestClient(create_team_api(service)) as client:
        shown = client.get(f"/v2/user/{live}", headers=headers)
        assert shown.status_code == 200, shown.text
        assert shown.json()["client_user_id"] == LIVE_MOVED
        resolved = client.get(f"/v2/user/resolve/{LIVE_MOVED}", headers=headers)
        assert resolved.json()["user_id"] == str(live)
        taken = client.post("/v2/user", json={"client_user_id": LIVE_MOVED}, headers=headers)
        assert taken.status_code == 400, taken.text
        assert taken.json()["detail"]["user_id"] == str(live)
        # Its first value's claim, released by the old change, goes to a new user.
        first = client.post("/v2/user", json={"client_user_id": LIVE}, headers=headers)
        assert first.status_code == 200, first.text
        first_id = UUID(first.json()["user_id"])
        assert user_of(service, first_id).claim_id == ClientUserIdClaim.id_for(team_id, LIVE)
        # Deleted, its claim is released; undone, it is taken again.
        assert client.delete(f"/v2/user/{live}", headers=headers).status_code == 200
        assert claim_of(service, legacy_claim).holder is None
        undone = client.post(
            "/v2/user/undo_delete", params={"client_user_id": LIVE_MOVED}, headers=headers
        )
        assert undone.status_code == 200, undone.text
        assert claim_of(service, legacy_claim).holder == live
        # Moved to a value of the new users' claims: the old claim left, free for another.
        moved = client.patch(
            f"/v2/user/{live}", json={"client_user_id": "crm-ada-new"}, headers=headers
        )
        assert moved.status_code == 204, moved.text
        assert claim_of(service, legacy_claim).holder is None
        other = client.post("/v2/user", json={"client_user_id": LIVE_MOVED}, headers=headers)
        assert other.status_code == 200, other.text
        assert user_of(service, UUID(other.json()["user_id"])).claim_id == legacy_claim
        resolved = client.get("/v2/user/resolve/crm-ada-new", headers=headers)
        assert resolved.json()["user_id"] == str(live)


# -- the database main wrote at 1809f39 -------------------------------------------------------


def test_1809f39s_changes_and_claims_of_version_2_are_left_as_they_are(
    written: Written,  # noqa: F811
    started: Service,  # noqa: F811
) -> None:
    # 1809f39 recorded them with the value sealed and by digest: listed by revision 0046,
    # none needed a redaction, and none is left pending.
    assert verified(started, SIGNED_HEADS).startswith("ok: ")
    topics = (User.ClientUserIdChanged.TOPIC, ClientUserIdClaim.Created.TOPIC)
    with started.db.read() as conn:
        redacted = conn.execute(
            select(func.count())
            .select_from(chain_redactions)
            .where(chain_redactions.c.original_topic.in_(topics))
        ).scalar()
        pending = conn.execute(select(func.count()).select_from(pending_redactions)).scalar()
    assert (redacted, pending) == (0, 0)
    assert len(records_of(started, ClientUserIdClaim.Created.TOPIC)) == 11
    for record in records_of(started, ClientUserIdClaim.Created.TOPIC):
        assert record["client_user_id"] is None and record["digest"] is not None
    (change,) = records_of(started, User.ClientUserIdChanged.TOPIC)
    assert change["new_claim_id"] is not None and change["new_client_user_id"] is None
