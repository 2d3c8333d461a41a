"""Signed heads anchored outside the database (issue 30 §3): each head the service signs is
appended to the head file beside the signing key, and `healthledger verify --anchors`
names a log that is shorter than, or differs from, a head it once signed, when whoever
holds the database deleted the heads that would have shown it. On both databases."""

from __future__ import annotations

import json
import stat
import threading
from datetime import timedelta
from pathlib import Path

import pytest
from healthledger.adapters.cli import main
from healthledger.adapters.composition import Service, build_service
from healthledger.adapters.persistence.engine.schema import stored_events
from healthledger.adapters.persistence.eventstore.chain import (
    BAD_HEAD,
    DIFFERS,
    SHORTER,
    SigningTally,
    link_hash,
    state_digest,
)
from healthledger.adapters.persistence.keys.head_anchors import (
    ANCHOR_FILE_NAME,
    AnchorFileError,
    HeadAnchors,
    read_anchors,
)
from healthledger.adapters.settings import Settings
from healthledger.scheduler.runner import Intervals, Jobs, LedgerScheduler
from sqlalchemy import select, text, update

from tests.conftest import Team
from tests.integration.test_chain import event_count, execute, row_at, write_log


@pytest.fixture(autouse=True)
def cli_env(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HEALTHLEDGER_DATABASE_URL", settings.database_url)
    monkeypatch.setenv("HEALTHLEDGER_MASTER_KEY_FILE", str(settings.master_key_file))


def head_file(settings: Settings) -> Path:
    return settings.master_key_file.parent / ANCHOR_FILE_NAME


def cli_verify(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    capsys.readouterr()
    code = main(["verify", *args])
    return code, capsys.readouterr().out


def test_each_signed_head_is_appended_to_the_head_file_beside_the_signing_key(
    service: Service, settings: Settings, team: Team, capsys: pytest.CaptureFixture[str]
) -> None:
    write_log(service, team, users=2)
    first = service.chain.sign_head()
    assert service.chain.sign_head() == first  # the same head is not anchored twice
    write_log(service, team, users=2, prefix="more")
    assert service.jobs.sign_chain_head() == 1
    path = head_file(settings)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    anchored = read_anchors(path)
    heads = service.chain.signed_heads()
    assert [(h.position, h.chain_hash, h.signed_at, h.signature) for h in anchored] == [
        (h.position, h.chain_hash, h.signed_at, h.signature) for h in heads
    ]
    assert [json.loads(line)["key_id"] for line in path.read_text().splitlines()] == [
        service.chain.key_id
    ] * 2
    result = service.chain.verify(anchored=anchored)
    assert result.ok and result.anchored_heads_checked == 2, result.problem
    code, out = cli_verify(capsys, "--anchors", str(path))
    assert code == 0 and out.startswith("ok: ") and f"2 head(s) in {path}" in out, out


def test_a_log_cut_back_with_its_newest_heads_deleted_is_named_shorter(
    service: Service, settings: Settings, team: Team, capsys: pytest.CaptureFixture[str]
) -> None:
    write_log(service, team, users=2)
    older = service.chain.sign_head()
    write_log(service, team, users=2, prefix="more")
    newest = service.chain.sign_head()
    # The holder of the database deletes the heads after the older one, then the log's
    # records after it: what is left walks clean against the heads left in the database.
    execute(service, text("DELETE FROM chain_heads WHERE position > :p"), p=older.position)
    execute(service, text("DELETE FROM stored_events WHERE chain_position > :p"), p=older.position)
    assert service.chain.verify().ok
    code, out = cli_verify(capsys)
    assert code == 0, out

    problem = service.chain.verify(anchored=read_anchors(head_file(settings))).problem
    assert problem is not None and (problem.kind, problem.position) == (SHORTER, newest.position)
    assert f"the log ends at position {older.position}" in problem.detail
    code, out = cli_verify(capsys, "--anchors", str(head_file(settings)))
    assert code == 1, out
    assert out.startswith(f"FAILED: {SHORTER} at position {newest.position}: "), out


def test_a_removed_event_with_the_chain_recomputed_after_the_older_heads_is_named(
    service: Service, settings: Settings, team: Team, capsys: pytest.CaptureFixture[str]
) -> None:
    write_log(service, team, users=2)
    older = service.chain.sign_head()
    write_log(service, team, users=2, prefix="more")
    newest = service.chain.sign_head()
    write_log(service, team, users=1, prefix="after")
    # Remove the record after the older head, move every later one a position down, and
    # recompute every hash from there; delete the heads that would no longer verify.
    removed = older.position + 2
    execute(service, text("DELETE FROM chain_heads WHERE position > :p"), p=older.position)
    execute(service, text("DELETE FROM stored_events WHERE chain_position = :p"), p=removed)
    with service.db.read() as conn:
        later = [
            row.notification_id
            for row in conn.execute(
                select(stored_events.c.notification_id)
                .where(stored_events.c.chain_position > removed)
                .order_by(stored_events.c.chain_position)
            )
        ]
    for notification_id in later:
        execute(
            service,
            update(stored_events)
            .where(stored_events.c.notification_id == notification_id)
            .values(chain_position=stored_events.c.chain_position - 1),
        )
    prev = row_at(service, removed - 1)["chain_hash"]
    for position in range(removed, event_count(service) + 1):
        row = row_at(service, position)
        prev = link_hash(
            prev,
            position,
            row["originator_id"],
            row["originator_version"],
            row["topic"],
            row["timestamp"],
            state_digest(row["state"]),
        )
        execute(
            service,
            update(stored_events)
            .where(stored_events.c.notification_id == row["notification_id"])
            .values(chain_hash=prev),
        )
    result = service.chain.verify()
    assert result.ok and result.records_checked == event_count(service), result.problem

    problem = service.chain.verify(anchored=read_anchors(head_file(settings))).problem
    named = row_at(service, newest.position)
    assert problem is not None and (problem.kind, problem.position) == (DIFFERS, newest.position)
    assert problem.notification_id == named["notification_id"]
    assert f"signed {newest.chain_hash.hex()}" in problem.detail
    code, out = cli_verify(capsys, "--anchors", str(head_file(settings)))
    assert code == 1, out
    assert out.startswith(f"FAILED: {DIFFERS} at position {newest.position} "), out


def test_a_changed_head_file_is_named_and_a_missing_one_refused(
    service: Service, settings: Settings, team: Team, capsys: pytest.CaptureFixture[str]
) -> None:
    write_log(service, team, users=1)
    head = service.chain.sign_head()
    path = head_file(settings)
    line = json.loads(path.read_text())
    line["chain_hash"] = "00" * 32
    path.write_text(json.dumps(line) + "\n")
    problem = service.chain.verify(anchored=read_anchors(path)).problem
    assert problem is not None and (problem.kind, problem.position) == (BAD_HEAD, head.position)
    code, out = cli_verify(capsys, "--anchors", str(path.with_name("nowhere")))
    assert code == 1 and out.startswith("FAILED: cannot read the chain's head file"), out
    path.write_text("not a head\n")
    with pytest.raises(AnchorFileError, match="line 1"):
        read_anchors(path)


def test_the_head_file_is_refused_in_the_sqlite_databases_directory(
    service: Service, settings: Settings
) -> None:
    if service.db.sqlite_file is None:
        pytest.skip("a SQLite database's directory")
    directory = service.db.sqlite_file.absolute().parent
    with pytest.raises(AnchorFileError, match="HEALTHLEDGER_CHAIN_ANCHOR_FILE"):
        HeadAnchors(directory / "heads", database_directory=directory)
    with pytest.raises(AnchorFileError, match="HEALTHLEDGER_CHAIN_ANCHOR_FILE"):
        build_service(settings.model_copy(update={"chain_anchor_file": directory / "heads"}))


def test_the_head_is_signed_every_n_events_committed(settings: Settings) -> None:
    tally = SigningTally(5)
    assert [tally.committed([object()] * 2) for _ in range(5)] == [
        False,
        False,
        True,
        False,
        False,
    ]
    assert not SigningTally(0).committed([object()] * 1000)
    service = build_service(settings.model_copy(update={"chain_sign_every": 3}))
    try:
        due = service.jobs.makes_head_signing_due
        assert not due([object()] * 2) and due([object()])
    finally:
        service.close()


def test_a_commit_that_makes_signing_due_wakes_the_signing_job() -> None:
    signed = threading.Event()

    def sign() -> int:
        signed.set()
        return 1

    jobs = Jobs(
        sweep_erasures=lambda: 0,
        run_due_pulls=lambda: 0,
        sync_connected_feeds=lambda: 0,
        dispatch_webhooks=lambda: 0,
        apply_cut_overs=lambda: [],
        sign_chain_head=sign,
        makes_head_signing_due=SigningTally(2).committed,
        gives_webhooks_work=lambda _event: False,
    )
    hour = timedelta(hours=1)
    scheduler = LedgerScheduler(jobs, Intervals(hour, hour, hour, hour, hour, chain_sign=hour))
    try:
        scheduler.committed([object()])
        assert not signed.wait(0.2)
        scheduler.committed([object()])
        assert signed.wait(5)
    finally:
        scheduler.chain_signer.close()
