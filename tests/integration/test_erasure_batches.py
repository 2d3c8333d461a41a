"""The erasure sweep in batches (ADR 0021): claimed batches shared by several sweeping
processes, each user erased exactly once, one transaction per batch, and a batch that
cannot be recorded erased one user at a time."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

import pytest
from freezegun import freeze_time
from healthledger.adapters.composition import Service, build_service
from healthledger.adapters.persistence.engine.schema import pending_erasures, stored_events
from healthledger.adapters.persistence.leases.erasures import ErasureClaims
from healthledger.adapters.persistence.projections.erasure import ErasurePlaces
from healthledger.adapters.settings import Settings
from healthledger.domain.context import CommandContext
from healthledger.domain.users.lifecycle import ERASURE_REMOVES
from healthledger.domain.users.user import ERASED, User
from healthledger.domain.webhooks.deliveries import WebhookDelivery
from sqlalchemy import func, select

from tests.conftest import Team

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
DUE = T0 + timedelta(days=8)


def deleted_users(service: Service, team: Team, ctx: CommandContext, count: int) -> list[UUID]:
    """`count` users deleted at T0 (due for erasure from T0 + 7 days)."""
    with freeze_time(T0):
        made = [
            service.users.create_user(ctx, team.team_id, client_user_id=f"batch-{n}").id
            for n in range(count)
        ]
        for user_id in made:
            service.users.delete_user(ctx, team.team_id, user_id)
    return made


def erased_events(service: Service) -> Counter[UUID]:
    """Per user: the Erased events the log holds."""
    e = stored_events.c
    with service.db.read() as conn:
        rows = conn.execute(select(e.originator_id).where(e.topic == User.Erased.TOPIC)).scalars()
        return Counter(rows)


def pending_rows(service: Service) -> int:
    with service.db.read() as conn:
        return conn.execute(select(func.count()).select_from(pending_erasures)).scalar_one()


# A sweeping process: waits for a line on stdin, sweeps once at DUE, prints how many it
# erased.
SWEEPER = """
import json, sys
from datetime import datetime
from healthledger.adapters.composition import build_service
at = datetime.fromisoformat(sys.argv[1])
service = build_service(clock=lambda: at)
print("ready", flush=True)
sys.stdin.readline()
print(json.dumps(service.jobs.sweep_erasures()), flush=True)
service.close()
"""


def test_two_sweeping_processes_erase_each_due_user_exactly_once(
    settings: Settings, service: Service, team: Team, ctx: CommandContext
) -> None:
    service.webhooks.create(ctx, team.team_id, "sandbox", url="https://hooks.example/in")
    users = deleted_users(service, team, ctx, 40)
    with freeze_time(T0):
        # Some with a connection, its pulls and health data, and deliveries queued.
        for user_id in users[:6]:
            service.users.undo_deletion(ctx, team.team_id, user_id)
            service.connections.connect_demo(
                ctx, team.team_id, user_id, "freestyle_libre", ["glucose"]
            )
        service.jobs.run_due_pulls()
        for user_id in users[:6]:
            service.users.delete_user(ctx, team.team_id, user_id)
        service.dispatcher.follow()
    queued = sum(len(ids) for ids in ErasurePlaces(service.db).queued_deliveries(users).values())
    assert queued > 0  # the drops are counted below: the test must have some

    env = {
        **os.environ,
        "HEALTHLEDGER_DATABASE_URL": settings.database_url,
        "HEALTHLEDGER_MASTER_KEY_FILE": str(settings.master_key_file),
        # Small batches: the two processes take turns claiming, many times over.
        "HEALTHLEDGER_ERASURE_BATCH_SIZE": "3",
    }
    sweepers = [
        subprocess.Popen(
            [sys.executable, "-c", SWEEPER, DUE.isoformat()],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
            text=True,
        )
        for _ in range(2)
    ]
    for sweeper in sweepers:
        assert sweeper.stdout is not None and sweeper.stdout.readline().strip() == "ready"
    for sweeper in sweepers:  # both at once
        assert sweeper.stdin is not None
        sweeper.stdin.write("go\n")
        sweeper.stdin.flush()
    erased = []
    for sweeper in sweepers:
        out, _ = sweeper.communicate(timeout=120)
        assert sweeper.returncode == 0
        erased.append(json.loads(out.strip().splitlines()[-1]))

    # Every user erased once, none skipped, none twice; the two shares add up.
    assert erased_events(service) == Counter(dict.fromkeys(users, 1))
    assert sum(erased) == len(users)
    assert pending_rows(service) == 0
    for user_id in users:
        assert service.ledger.find(user_id).status == ERASED  # type: ignore[union-attr]
    # Each queued delivery dropped once.
    dropped = Counter(
        e.originator_id
        for e in service.recorder.select_notifications(1, 100_000)
        if e.topic == WebhookDelivery.Dropped.TOPIC
    )
    assert len(dropped) == queued and set(dropped.values()) == {1}


def test_a_batch_erases_its_users_in_one_transaction_and_checks_each(
    service: Service, team: Team, ctx: CommandContext
) -> None:
    users = deleted_users(service, team, ctx, 5)
    with freeze_time(DUE):
        assert service.users.erase_users(ctx, users) == 5
        # Erasing them again does nothing.
        assert service.users.erase_users(ctx, users) == 0
    events = erased_events(service)
    assert events == Counter(dict.fromkeys(users, 1))
    # One transaction: the five Erased events take five consecutive positions.
    e = stored_events.c
    with service.db.read() as conn:
        positions = sorted(
            conn.execute(select(e.notification_id).where(e.topic == User.Erased.TOPIC)).scalars()
        )
    assert positions == list(range(positions[0], positions[0] + 5))
    for user_id in users:
        erased = list(service.ledger.events.get(user_id))[-1]
        assert isinstance(erased, User.Erased)
        assert set(erased.checked) == set(ERASURE_REMOVES)
        assert erased.checked["user_data_key"] == 1 and erased.checked["read_model:users"] == 1


def test_a_batch_that_meets_another_sweepers_erasure_is_erased_one_by_one(
    settings: Settings,
    service: Service,
    team: Team,
    ctx: CommandContext,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    users = deleted_users(service, team, ctx, 5)
    other = build_service(settings)  # another process's sweeper, on the same database
    try:
        real_inventory = service.users.erasure_inventory
        raced = {"done": False}

        def erased_meanwhile(user_ids: Any) -> Any:
            # Between this sweep's loads and its save, the other erases two of them.
            if not raced["done"]:
                raced["done"] = True
                assert other.users.erase_users(ctx, users[:2]) == 2
            return real_inventory(user_ids)

        monkeypatch.setattr(service.users, "erasure_inventory", erased_meanwhile)
        with freeze_time(DUE), caplog.at_level("INFO"):
            assert service.jobs.sweep_erasures() == 3
    finally:
        other.close()
    assert "rolled back (ConcurrentChange): erased one by one" in caplog.text
    assert erased_events(service) == Counter(dict.fromkeys(users, 1))
    assert pending_rows(service) == 0


def test_a_user_whose_check_fails_holds_back_no_other_and_is_tried_again(
    service: Service,
    team: Team,
    ctx: CommandContext,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    users = deleted_users(service, team, ctx, 4)
    bad = users[2]
    real_inventory = service.users.erasure_inventory

    def miscounted(user_ids: Any) -> Any:
        found = {user_id: dict(places) for user_id, places in real_inventory(user_ids).items()}
        if bad in found:
            found[bad]["user_data_key"] += 1  # what the transaction will not find
        return found

    monkeypatch.setattr(service.users, "erasure_inventory", miscounted)
    with freeze_time(DUE), caplog.at_level("INFO"):
        assert service.jobs.sweep_erasures() == 3
    assert "rolled back (ErasureNotVerified)" in caplog.text
    assert "user_data_key held" in caplog.text
    assert erased_events(service) == Counter({u: 1 for u in users if u != bad})
    # The failed one is still due, and its claim was given back: the next sweep takes it.
    monkeypatch.setattr(service.users, "erasure_inventory", real_inventory)
    with freeze_time(DUE):
        assert service.jobs.sweep_erasures() == 1
    assert erased_events(service) == Counter(dict.fromkeys(users, 1))


def test_a_claim_keeps_the_other_sweepers_off_until_it_lapses(
    service: Service, team: Team, ctx: CommandContext
) -> None:
    users = deleted_users(service, team, ctx, 3)
    claims = ErasureClaims(service.db, timedelta(minutes=5))
    # A sweeper claims two and dies.
    claimed = claims.claim(DUE, 2)
    assert len(claimed) == 2 and set(claimed) < set(users)
    # Another claims what is left: only the third.
    assert claims.claim(DUE, 10) == [u for u in users if u not in claimed]
    assert claims.claim(DUE, 10) == []
    with freeze_time(DUE + timedelta(minutes=1)):
        assert service.jobs.sweep_erasures() == 0  # all three held
    with freeze_time(DUE + timedelta(minutes=5)):
        assert service.jobs.sweep_erasures() == 3  # the claims lapsed
    assert erased_events(service) == Counter(dict.fromkeys(users, 1))
    # Nothing is claimed before it is due.
    later = deleted_users(service, team, ctx, 1)
    assert claims.claim(T0 + timedelta(days=6), 10) == []
    assert claims.claim(DUE, 10) == later
