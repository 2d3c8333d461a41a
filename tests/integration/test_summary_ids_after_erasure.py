"""Summary and device ids after the erasure (issue 29 §1): does any stored byte let one
holding the user's id test a guess of which makers the person had?

A user whose key predates keyed ids (ADR 0057) has the uuid5s it was always answered:
`uuid5(user, provider, resource, day or session)` for a summary, `uuid5(user, provider)`
for a device. While such a user lives, anyone with the id tries the catalog's few dozen
slugs against them; they are an oracle after the erasure only if one is still stored
then. A user created since has ids keyed by its data key: no guess is any of them, so the
session index's rows (which PostgreSQL's WAL, replicas and backups keep as inserted) name
nothing one can test, even before the erasure.

This test, on SQLite and PostgreSQL, for a user of each kind (one of before made as the
code of before made keys), erases a user with summaries of three makers (sleep, its
cycles, activity, workouts, glucose...) and their devices, every webhook delivered, and
finds none of the guesses, for each maker and each resource the catalog knows, over every
day the pulls reached (and every session key the API answered), in any stored byte:
SQLite's file and WAL; on PostgreSQL every page of every table of the schema (log, chain,
redactions, read models, their indexes and TOAST tables, dead rows included) and each
table's file. Before the erasure the same search finds the session index's ids of the
user of before (found after the erasure too on PostgreSQL until the sweep rewrote the
index, ADR 0049), and none of the keyed user's, whose ids it finds as they are."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator, Mapping
from datetime import UTC, date, datetime, timedelta
from uuid import UUID

import pytest
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from fastapi.testclient import TestClient
from freezegun import freeze_time
from healthledger.adapters.composition import Service
from healthledger.adapters.http.summaries import LISTS
from healthledger.adapters.http.team_api import create_team_api
from healthledger.adapters.persistence.engine.schema import metadata
from healthledger.adapters.persistence.keys import key_store as key_store_module
from healthledger.domain.connections.summary_ids import legacy_device_id, legacy_summary_id
from healthledger.domain.context import CommandContext

from tests.conftest import Team
from tests.integration.test_client_user_id_at_rest import sqlite_bytes
from tests.integration.test_health_facts_sealed import postgres_files, postgres_pages
from tests.integration.test_stream_ids_keyed import spellings
from tests.receivers import http_receiver

# Demo makers whose summaries cover the kinds a demo makes (sleep and its cycles,
# activity, workouts, meals, body, blood pressure, ECGs), and a glucose monitor (the
# maker whose slug says the most).
MAKERS = ("fitbit", "withings", "freestyle_libre")
# The ids' own resources beside the catalog's: a workout's stream (its webhook's
# `workout_id`).
ID_RESOURCES = ("workout_stream",)


def guesses(
    service: Service, user_id: UUID, days: Iterable[date], sessions: Iterable[str]
) -> dict[UUID, str]:
    """Every summary and device id one holding the user's id derives by trying the
    catalog: each maker's device, and each of its resources' summaries of each day (or
    session key) tried."""
    keys = [d.isoformat() for d in days] + list(sessions)
    tried: dict[UUID, str] = {}
    for slug, entry in service.catalog.items():
        tried[legacy_device_id(user_id, slug)] = f"device {slug}"
        for resource in (*entry.supported_resources, *ID_RESOURCES):
            for key in keys:
                tried[legacy_summary_id(user_id, slug, resource, key)] = f"{slug}/{resource}/{key}"
    return tried


def every_stored_byte(service: Service) -> dict[str, bytes]:
    """SQLite: the file and its WAL. PostgreSQL: every page of every table of the schema
    and of its indexes and TOAST tables (dead rows too), and each table's file."""
    if service.db.is_sqlite:
        return {"the database file and its -wal": sqlite_bytes(service)}
    tables = tuple(metadata.tables)
    places: dict[str, bytes] = {}
    for found in (postgres_pages(service, tables), postgres_files(service, tables)):
        places.update(found or {})
    assert places, "neither pageinspect nor the server's files are reachable"
    return places


# Every run of the text spellings (`spellings`), at every position (a lookahead: runs may
# overlap): lower-case hex, and the dashed form.
HEX = re.compile(rb"(?=([0-9a-f]{32}))")
DASHED = re.compile(rb"(?=([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}))")


def held(places: Mapping[str, bytes], tried: Mapping[UUID, str]) -> list[tuple[str, str]]:
    """(guess, place) of each guess held in a place in any of its spellings (`spellings`:
    hex, dashed, 16 bytes). Tens of thousands of guesses over megabytes of pages: the text
    spellings are every hex and dashed run found by a regular expression, looked up; the
    16 bytes by their 8-byte pieces: wherever they sit, their first 8 bytes hold a piece
    that starts at a multiple of 8 in the place, so only those pieces of a place are taken
    (a set, intersected with the guesses' pieces), and each hit is checked whole."""
    names: dict[bytes, str] = {}
    pieces: dict[bytes, list[tuple[bytes, int]]] = {}
    for guess, name in tried.items():
        for spelling in spellings(guess):
            names[spelling] = name
        raw = guess.bytes
        for offset in range(8):
            pieces.setdefault(raw[offset : offset + 8], []).append((raw, offset))
    found: set[tuple[str, str]] = set()
    for place, content in places.items():
        runs = {m.group(1) for pattern in (HEX, DASHED) for m in pattern.finditer(content)}
        found.update((names[run], place) for run in runs if run in names)
        aligned = {content[at : at + 8] for at in range(0, len(content) - 7, 8)}
        for piece in aligned & pieces.keys():
            at = content.find(piece)
            while at != -1:
                for raw, offset in pieces[piece]:
                    if at >= offset and content.startswith(raw, at - offset):
                        found.add((names[raw], place))
                at = content.find(piece, at + 1)
    return sorted(found)


def answered_ids(items: Iterable[Mapping[str, object]]) -> Iterator[tuple[str, str]]:
    """(id, session key or "") of each summary an answer holds, and the sleep each cycle
    points at."""
    for item in items:
        yield str(item["id"]), str(item.get("provider_id") or "")
        if item.get("sleep_id"):
            yield str(item["sleep_id"]), ""


@pytest.mark.parametrize("keyed", [True, False], ids=["keyed", "made-before-keyed-ids"])
def test_no_summary_or_device_id_can_be_tested_after_the_erasure(
    service: Service, team: Team, ctx: CommandContext, keyed: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    headers = team.headers
    start = datetime.now(UTC) + timedelta(hours=1)
    if not keyed:
        # A user of before: its key made as the code of before made every key (the AES
        # key's 32 bytes alone, format 1).
        monkeypatch.setattr(
            key_store_module, "new_data_key", lambda keyed_ids: AESGCM.generate_key(bit_length=256)
        )
    with (
        http_receiver() as receiver,
        freeze_time(start) as frozen,
        TestClient(create_team_api(service)) as client,
    ):
        made = client.post("/v2/user", json={"client_user_id": "ids-1"}, headers=headers)
        user = UUID(made.json()["user_id"])
        cipher = service.key_store.cipher(user)
        assert cipher is not None and cipher.summary_ids.keyed is keyed
        environment = service.dispatcher.environment_of(user)
        assert environment is not None
        service.webhooks.create(ctx, team.team_id, environment, url=receiver.url("ok"))
        for provider in MAKERS:
            connected = client.post(
                "/v2/link/connect/demo",
                json={"user_id": str(user), "provider": provider},
                headers=headers,
            )
            assert connected.status_code == 200, connected.text
        frozen.tick(60)
        assert service.jobs.run_due_pulls() >= len(MAKERS)
        # The summaries' webhooks name their ids: delivered, as a team hears them.
        while service.jobs.dispatch_webhooks():
            pass
        sent = [json.loads(r.body) for r in receiver.on("ok")]
        assert any(s["event_type"] == "historical.data.sleep.created" for s in sent)
        # Every id the API answers: each summary resource's, the devices'.
        window = {
            "start_date": (start - timedelta(days=60)).date().isoformat(),
            "end_date": (start + timedelta(days=1)).date().isoformat(),
        }
        ids: dict[str, str] = {}
        for resource, (key, _) in LISTS.items():
            answer = client.get(f"/v2/summary/{resource}/{user}", params=window, headers=headers)
            assert answer.status_code == 200, answer.text
            ids.update(answered_ids(answer.json()[key]))
        profile = client.get(f"/v2/summary/profile/{user}", headers=headers)
        assert profile.status_code == 200, profile.text
        ids.update(answered_ids([profile.json()]))
        devices = client.get(f"/v2/user/{user}/device", headers=headers).json()
        assert sorted(d["provider"] for d in devices) == sorted(MAKERS)
        ids.update((d["id"], "") for d in devices)
        # The guesses: each day the pulls reached (the demo's history, and today), and
        # each session key the API answered (a maker's own id, the worst case: one who
        # saw an old answer).
        first = start.date() - timedelta(days=45)
        days = [first + timedelta(days=n) for n in range((start.date() - first).days + 2)]
        tried = guesses(service, user, days, {key for key in ids.values() if key})
        assert len(tried) > 50_000
        assert len(ids) > 100
        missed = {i for i in ids if UUID(i) not in tried}
        # While the user lives, the session index holds its sleeps' and workouts' ids in
        # clear (revision 0030).
        living = held(every_stored_byte(service), tried)
        if keyed:
            # No guess is any id the service answered; the ids it stores are found as
            # they are, not by guessing.
            assert missed == set(ids)
            assert living == []
            answered = {UUID(i): f"answered {i}" for i in ids}
            assert held(every_stored_byte(service), answered) != []
        else:
            # The guesses reach every id the service answered: a guess is what it
            # derives. And the search finds the index's.
            assert missed == set(), missed
            assert any("/sleep/" in name for name, _ in living), living[:5]

        frozen.tick(60)
        assert client.delete(f"/v2/user/{user}", headers=headers).status_code == 200
        frozen.tick(service.settings.grace_period.total_seconds() + 60)
        assert service.jobs.sweep_erasures() == 1
        while service.jobs.dispatch_webhooks():
            pass
    # No stored byte holds any guess, in any spelling, live or dead row; and the key that
    # derived the keyed ids is gone.
    assert held(every_stored_byte(service), tried) == []
    assert service.key_store.cipher(user) is None
    assert service.chain.verify().ok
