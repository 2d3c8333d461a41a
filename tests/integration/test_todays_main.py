"""A database written by main at 1809f39 (tests/data/main_1809f39, on SQLite and on
PostgreSQL) with this code: it has nothing to migrate (or migrates) to the metadata's
schema, its hash chain and signed heads verify, every read the writing script recorded
from the team and management APIs answers exactly as 1809f39 answered it
(`expected.json`), and the service still writes on it: a user created, deleted and
restored, and the user 1809f39 left pending erased after its grace period."""

from __future__ import annotations

import gzip
import io
import json
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any
from uuid import UUID

import pyarrow.compute  # noqa: F401  (see below)
import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient
from freezegun import freeze_time
from healthledger.adapters.compliance.chain_commands import verify_command
from healthledger.adapters.compliance.report_verification import verify_report
from healthledger.adapters.composition import Service, build_service
from healthledger.adapters.http.management_api import create_management_api
from healthledger.adapters.http.team_api import create_team_api
from healthledger.adapters.persistence.engine.migrating import SERVICE, schema_state, upgrade
from healthledger.adapters.persistence.engine.schema import (
    health_data,
    metadata,
    session_index_backfill,
)
from healthledger.adapters.persistence.health_data.store import open_block
from healthledger.adapters.settings import Settings
from healthledger.domain.audited import events_of
from healthledger.domain.connections.connection import Connection
from healthledger.domain.connections.resource_feeds import ResourceFeed
from healthledger.domain.personal_data import ERASED_PLACEHOLDER, SEALED_PLACEHOLDER
from healthledger.domain.webhooks.deliveries import WebhookDelivery, lifecycle_type_of

from tests.conftest import (
    BACKENDS,
    create_postgres_database,
    drop_postgres_database,
    postgres_database_url,
)
from tests.integration.databases import load_dump, schema_differences

# pyarrow.compute is imported before any clock is frozen: the aggregate query imports it
# at its first use, and a compiled module imported under freezegun meets freezegun's
# datetime classes in place of the real ones (a binary incompatibility warning).

DATA = Path(__file__).resolve().parents[1] / "data" / "main_1809f39"
# The schema the PostgreSQL dump creates and fills.
SCHEMA = "main_1809f39"
# Each read sent with this request id, as the writing script sent it (the deletion
# reports name the request that asked for them).
REQUEST_ID = "req-expected"
# The signed heads in the log: one after the lab order's course, one at the end.
SIGNED_HEADS = 2


@dataclass
class Written:
    """A copy of the database 1809f39 wrote, its keys and what 1809f39 answered on it."""

    url: str
    master_key_file: Path
    signing_key_file: Path
    expected: dict[str, Any]

    @property
    def now(self) -> datetime:
        """The instant the script read its answers at (time stood still since)."""
        return datetime.fromisoformat(self.expected["now"])

    def settings(self) -> Settings:
        return Settings(
            database_url=self.url,
            master_key_file=self.master_key_file,
            signing_key_file=self.signing_key_file,
            grace_period=timedelta(days=self.expected["grace_period_days"]),
        )

    def headers(self, api: str) -> dict[str, str]:
        if api == "team":
            key = {"x-service-api-key": self.expected["team_api_key"]}
        else:
            key = {"X-Management-Key": self.expected["management_key"]}
        return {**key, "x-request-id": REQUEST_ID}

    def user(self, client_user_id: str) -> str:
        return str(self.expected["ids"][client_user_id])


def private_copy(source: Path, target: Path) -> None:
    """A key file as the service wants one: 0600, in a 0700 directory of its own."""
    target.touch(mode=0o600)
    shutil.copyfile(source, target)


@pytest.fixture(params=BACKENDS)
def written(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Written]:
    backend = str(request.param)
    expected: dict[str, Any] = json.loads((DATA / "expected.json").read_text())[backend]
    keys = tmp_path / "keys"
    keys.mkdir(mode=0o700)
    master_key, signing_key = keys / "master.key", keys / "signing.key"
    private_copy(DATA / f"{backend}-master.key", master_key)
    private_copy(DATA / f"{backend}-signing.key", signing_key)
    if backend == "sqlite":
        path = tmp_path / "database" / "ledger.db"
        path.parent.mkdir()
        with gzip.open(DATA / "sqlite-ledger.db.gz") as packed, path.open("wb") as out:
            shutil.copyfileobj(packed, out)
        yield Written(f"sqlite:///{path}", master_key, signing_key, expected)
        return
    admin: sa.Engine = request.getfixturevalue("postgres_admin")
    name = create_postgres_database(admin)
    try:
        # The dump creates the schema: in a database of its own, it meets no other test's.
        load_dump(postgres_database_url(name), DATA / "postgres-dump.sql.gz")
        url = sa.make_url(postgres_database_url(name)).update_query_dict(
            {"options": f"-csearch_path={SCHEMA}"}
        )
        yield Written(url.render_as_string(hide_password=False), master_key, signing_key, expected)
    finally:
        drop_postgres_database(admin, name)


@pytest.fixture
def started(written: Written) -> Iterator[Service]:
    """The service of this code started on the database main wrote at 1809f39 (each test
    file of an old database's start imports it)."""
    with freeze_time(written.now):
        built = build_service(written.settings())
    yield built
    built.close()


@pytest.fixture
def service(started: Service) -> Service:
    return started


def verified(service: Service, signed_heads: int) -> str:
    """The chain's verification: the command's report, after checking the walk itself."""
    result = service.chain.verify()
    assert result.ok, result.problem
    assert result.first_position == 1 and result.signed_heads_checked == signed_heads
    out = io.StringIO()
    assert verify_command(service.chain, None, out) == 0, out.getvalue()
    return out.getvalue()


def test_it_has_nothing_to_migrate_or_migrates_to_the_metadatas_schema(written: Written) -> None:
    state = schema_state(written.url, SERVICE)
    # Written under migrations: stamped, never taken for a database from before them.
    assert state.current is not None and not state.before_migrations
    if not state.up_to_date:
        done = upgrade(written.url, SERVICE)
        assert done.after == state.head
    assert schema_state(written.url, SERVICE).up_to_date
    assert schema_differences(written.url, SERVICE, metadata) == []


def test_its_hash_chain_and_signed_heads_verify(written: Written, service: Service) -> None:
    report = verified(service, SIGNED_HEADS)
    assert report.startswith("ok: ") and f"{SIGNED_HEADS} signed head(s) checked" in report
    with service.db.read() as conn:
        events = conn.exec_driver_sql("SELECT count(*) FROM stored_events").scalar_one()
    assert f"ok: {events} record(s) checked from position 1" in report


def test_every_data_key_unwraps_and_every_sealed_row_opens(
    written: Written, service: Service
) -> None:
    # Under the master key 1809f39 rotated to (the key file shipped with the database).
    with service.db.read() as conn:
        owners = [
            UUID(str(row[0])) for row in conn.exec_driver_sql("SELECT user_id FROM user_data_keys")
        ]
        rows = conn.execute(sa.select(health_data)).all()
        # The days 1809f39 stored, one sealed row each, converted into blocks at the
        # start (ADR 0033): none left in the old form, every one in a block.
        left = conn.exec_driver_sql("SELECT count(*) FROM health_data_days").scalar_one()
    assert len(owners) >= 8 and left == 0 and sum(row.days for row in rows) > 100
    for owner in owners:
        assert service.key_store.cipher(owner) is not None
    for row in rows:
        cipher = service.key_store.cipher(row.user_id)
        assert cipher is not None and open_block(cipher, row).days.num_rows == row.days


def test_every_read_answers_as_1809f39_answered(written: Written, service: Service) -> None:
    answers: list[dict[str, Any]] = written.expected["answers"]
    assert len(answers) > 30
    with (
        TestClient(create_team_api(service), raise_server_exceptions=False) as team,
        TestClient(create_management_api(service), raise_server_exceptions=False) as management,
        freeze_time(written.now),
    ):
        apis = {"team": team, "management": management}
        for asked in answers:
            response = apis[asked["api"]].request(
                asked["method"],
                asked["path"],
                params=asked["params"],
                json=asked["json"],
                headers=written.headers(asked["api"]),
            )
            where = f"{asked['method']} {asked['path']} {asked['params'] or ''}"
            assert response.status_code == asked["status"], (where, response.text)
            if asked["path"].endswith("/deletion_report") and response.status_code == 200:
                # Report format 2 (issue 29): the same report as format 1, with what it
                # added and renamed, and signed anew.
                assert verify_report(response.json()) == [], where
                assert as_format_1(response.json()) == as_format_1(asked["body"]), where
                continue
            if asked["path"].startswith("/v2/audit/user/"):
                # Connections' and feeds' facts are sealed since (ADR 0032): the audit
                # shows them as it shows every sealed value.
                assert response.json() == facts_sealed(service, asked["body"]), where
                continue
            answered = response.json()
            assert answered == with_order_members_since(asked["body"], answered), where


# Members of an order that 1809f39 answered null and that the service fills since from
# what it holds (5d6fd6a): each checked for its shape here, its value in
# test_order_answer.py.
FILLED_SINCE = {
    "billing_type": lambda value, order: value == "client_bill",
    "requisition_form_url": lambda value, order: (
        value is None or value.endswith(f"/v3/order/{order['id']}/requisition/pdf")
    ),
    "expected_result_by_date": lambda value, order: value is None or date.fromisoformat(value),
    "worst_case_result_by_date": lambda value, order: value is None or date.fromisoformat(value),
}


def with_order_members_since(body: Any, answered: Any) -> Any:
    """An answer of 1809f39 with what orders answer since: `last_event`, the newest of
    their `events` (junction-api-sdk's ClientFacingOrder requires it), and the members
    `FILLED_SINCE` as answered now, once their shape is checked."""
    if isinstance(body, list):
        items = answered if isinstance(answered, list) and len(answered) == len(body) else body
        return [with_order_members_since(item, new) for item, new in zip(body, items, strict=True)]
    if not isinstance(body, dict):
        return body
    now: dict[str, Any] = answered if isinstance(answered, dict) else {}
    found = {name: with_order_members_since(value, now.get(name)) for name, value in body.items()}
    events = found.get("events")
    if "lab_test" in found and isinstance(events, list) and events:
        found.setdefault("last_event", events[-1])
        for name, shaped in FILLED_SINCE.items():
            if found.get(name) is None and name in now:
                assert shaped(now[name], found), (name, now[name])
                found[name] = now[name]
    return found


# The events whose sealed versions name the user the old ones did not.
NAME_THEIR_USER = {
    "ResourceFeed.PullScheduled",
    "ResourceFeed.PullSucceeded",
    "ResourceFeed.DailySynced",
}


def time_zone_sealed(entry: dict[str, Any], placeholder: str) -> dict[str, Any]:
    """An audit entry of 1809f39's with the user's time zone as its sealed form shows it
    (revision 0042): `sealed_fallback_time_zone`, in a Created event (version 4: the clear
    field None) and in a change of settings (in place of the clear key)."""
    changes = dict(entry["changes"])
    if entry["event"] == "User.Created":
        zone = changes["fallback_time_zone"]
        changes["fallback_time_zone"] = None
    elif entry["event"] == "User.SettingsChanged" and "fallback_time_zone" in changes:
        zone = changes.pop("fallback_time_zone")
    else:
        return entry
    changes["sealed_fallback_time_zone"] = None if zone is None else placeholder
    return {**entry, "changes": changes}


def facts_sealed(service: Service, audit: dict[str, Any]) -> dict[str, Any]:
    """An audit of 1809f39 with the facts its connections', feeds' and webhook
    deliveries' events held in clear as the placeholder their sealed versions show (and
    a delivery's type in clear where it is a user's lifecycle: ADR 0028), and the users'
    time zones sealed."""
    sealed = {
        f"{aggregate.__name__}.{event.__name__}": tuple(event.SEALED_FACTS)
        for aggregate in (Connection, ResourceFeed, WebhookDelivery)
        for event in events_of(aggregate)
        if event.SEALED_FACTS
    }
    placeholder = (
        SEALED_PLACEHOLDER
        if service.key_store.has_key(UUID(audit["user_id"]))
        else ERASED_PLACEHOLDER
    )
    entries = []
    for entry in audit["data"]:
        facts = sealed.get(entry["event"], ())
        said = entry["changes"]
        if facts:
            entry = {
                **entry,
                "changes": {
                    **entry["changes"],
                    **{name: placeholder for name in facts},
                },
            }
            if entry["event"] == "WebhookDelivery.Created":
                # The type in clear only for a user's lifecycle (the old one said it).
                clear = lifecycle_type_of(str(said["event_type"]), UUID(audit["user_id"]))
                entry["changes"] = {**entry["changes"], "lifecycle_type": clear}
            if entry["event"] in NAME_THEIR_USER:
                # A feed's pulls and syncs name their user since (revision 0034), to
                # seal their windows and days with its key; a sync counts its days.
                entry["changes"] = {**entry["changes"], "user_id": audit["user_id"]}
            if entry["event"] == "ResourceFeed.DailySynced":
                days_created = len(said["created_days"])
                entry["changes"] = {**entry["changes"], "days_created": days_created}
        entries.append(time_zone_sealed(entry, placeholder))
    return {**audit, "data": entries}


def as_format_1(report: dict[str, Any]) -> dict[str, Any]:
    """A deletion report without what format 2 added or changed: its categories,
    recipients, deletion reasons, the horizon's condition and reworded meaning, providers
    no longer named after an erasure, places erased since (the session index), and the
    signature; `user_erased_acknowledged` read as format 1's `mirror_told`."""
    old = json.loads(json.dumps(report))
    for name in ("categories", "recipients", "signature", "format"):
        old.pop(name, None)
    old["request"].pop("reason_note", None)
    for deletion in old["request"]["deletions"]:
        deletion.pop("reason", None)
        deletion.pop("ticket", None)
    for deregistered in old["request"]["connections_deregistered"]:
        deregistered.pop("provider", None)
    erasure = old.get("erasure")
    if erasure is not None:
        hooks = erasure["webhooks"]
        if "user_erased_acknowledged" in hooks:
            hooks["mirror_told"] = hooks.pop("user_erased_acknowledged")
        hooks.pop("user_erased_acknowledged_means", None)
        # The session index (revision 0030), the continuous queries and their runs (0036)
        # the raw payloads (0038) and the lab report uploads (0040) are places erasures
        # empty since: looked at again now (and empty), unknown to format 1.
        since = (
            "session_index",
            "continuous_queries",
            "continuous_query_tasks",
            "raw_payloads",
            "lab_report_uploads",
        )
        erasure["checks_now"] = [c for c in erasure["checks_now"] if c["check"] not in since]
        erasure["horizon"].pop("condition", None)
        erasure["horizon"].pop("meaning", None)
    return old


def test_its_sleeps_are_indexed_at_the_start_and_answer_their_streams(
    written: Written, service: Service
) -> None:
    """1809f39 stored sleeps before the session index (revision 0030): the migration
    listed their user, the start indexed it, and each sleep id 1809f39 answered leads to
    its night's samples."""
    with service.db.read() as conn:
        listed = conn.execute(sa.select(sa.func.count()).select_from(session_index_backfill))
        assert listed.scalar_one() == 0
    (asked,) = [
        a
        for a in written.expected["answers"]
        if a["path"].startswith("/v2/summary/sleep/") and a["status"] == 200
    ]
    sleeps = asked["body"]["sleep"]
    assert sleeps
    with (
        freeze_time(written.now),
        TestClient(create_team_api(service), raise_server_exceptions=False) as client,
    ):
        for sleep in sleeps:
            stream = client.get(
                f"/v2/timeseries/sleep/{sleep['id']}/stream", headers=written.headers("team")
            )
            assert stream.status_code == 200, stream.text
            heart = stream.json()["heartrate"]
            assert heart and all(
                sleep["bedtime_start"] <= s["timestamp"] <= sleep["bedtime_stop"] for s in heart
            )


def test_the_service_still_writes_on_it(written: Written, service: Service) -> None:
    headers = written.headers("team")
    with (
        freeze_time(written.now) as frozen,
        TestClient(create_team_api(service), raise_server_exceptions=False) as client,
    ):
        listed = client.get("/v2/user", params={"limit": 100}, headers=headers).json()
        made = client.post("/v2/user", json={"client_user_id": "after-1809f39"}, headers=headers)
        assert made.status_code == 200, made.text
        user_id = made.json()["user_id"]
        after = client.get("/v2/user", params={"limit": 100}, headers=headers).json()
        assert after["total"] == listed["total"] + 1

        frozen.tick(timedelta(minutes=1))
        assert client.delete(f"/v2/user/{user_id}", headers=headers).status_code == 200
        pending = client.get(f"/v2/user/{user_id}", headers=headers)
        assert pending.status_code == 404 and "scheduled for deletion" in pending.text
        undone = client.post("/v2/user/undo_delete", params={"user_id": user_id}, headers=headers)
        assert undone.status_code == 200, undone.text
        restored = client.get(f"/v2/user/{user_id}", headers=headers)
        assert restored.status_code == 200, restored.text
        assert restored.json()["client_user_id"] == "after-1809f39"

        # The user 1809f39 deleted last is erased once its grace period is over; the one
        # restored here is not.
        left_pending = written.user("main-2")
        still = client.get(f"/v2/user/{left_pending}", headers=headers)
        assert still.status_code == 404 and "scheduled for deletion" in still.text
        frozen.tick(timedelta(days=written.expected["grace_period_days"], hours=1))
        assert service.jobs.sweep_erasures() == 1
        erased = client.get(f"/v2/user/{left_pending}", headers=headers)
        assert erased.status_code == 404 and "scheduled for deletion" not in erased.text
        assert service.key_store.cipher(UUID(left_pending)) is None
        assert client.get(f"/v2/user/{user_id}", headers=headers).status_code == 200
        report = client.get(f"/v2/audit/user/{left_pending}/deletion_report", headers=headers)
        assert report.status_code == 200, report.text
        assert report.json()["erasure"] is not None

        # The new events are chained onto 1809f39's, and a head signed over them.
        service.chain.sign_head()
        verified(service, SIGNED_HEADS + 1)

        # An order 1809f39 placed answers as placed without a priority, diagnoses or a
        # passthrough (its row migrated by revision 0041); one placed now with them keeps
        # them (Order.Created version 3), now and as of then.
        old_order = client.get(f"/v3/order/{written.user('order')}", headers=headers).json()
        assert (old_order["priority"], old_order["icd_codes"], old_order["passthrough"]) == (
            False,
            None,
            None,
        )
        placed = client.post(
            "/v3/order",
            json={
                "user_id": user_id,
                "lab_test_id": "0b7e5a52-3c1d-4f6e-8a9b-1c2d3e4f5a01",  # a shared demo test
                "patient_details": {
                    "first_name": "Grace",
                    "last_name": "Hopper",
                    "email": "grace.hopper@example.org",
                    "phone_number": "+1 555 010 1906",
                    "gender": "female",
                    "dob": "1956-12-09",
                },
                "patient_address": {
                    "first_line": "1 Navy Yard",
                    "city": "Washington",
                    "state": "DC",
                    "zip_code": "20374",
                },
                "priority": True,
                "icd_codes": ["Z13.1"],
                "passthrough": "after-1809f39",
            },
            headers=headers,
        )
        assert placed.status_code == 200, placed.text
        placed_at = datetime.now(UTC).isoformat()
        for params in ({}, {"as_of": placed_at}):
            read = client.get(
                f"/v3/order/{placed.json()['id']}", params=params, headers=headers
            ).json()
            assert (read["priority"], read["icd_codes"], read["passthrough"]) == (
                True,
                ["Z13.1"],
                "after-1809f39",
            ), params
