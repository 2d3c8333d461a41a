"""The deletion report (issue 16): for live, pending, undone and erased users, through the
team API and the CLI; the checks it runs again; its proof, verified offline by
`healthledger verify-report` and by the script in docs/compliance-verify.md as written;
tampering found; no personal value in its JSON, HTML or PDF."""

from __future__ import annotations

import copy
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any
from uuid import UUID, uuid4

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from healthledger.adapters import printing
from healthledger.adapters.cli import main
from healthledger.adapters.compliance import report_rendering
from healthledger.adapters.compliance.deletion_report import deletion_report, sign_report
from healthledger.adapters.compliance.report_rendering import render_html
from healthledger.adapters.compliance.report_verification import verify_report
from healthledger.adapters.composition import Service, build_service
from healthledger.adapters.embedded import HealthLedger
from healthledger.adapters.http.team_api import create_team_api
from healthledger.adapters.persistence.engine.schema import chain_heads, link_tokens, stored_events
from healthledger.adapters.persistence.eventstore.chain import link_hash, state_digest
from healthledger.adapters.persistence.keys.key_store import canonical_json
from healthledger.adapters.printing import render_pdf
from healthledger.adapters.settings import Settings
from healthledger.domain.context import CommandContext
from healthledger.domain.users.user import User
from sqlalchemy import func, insert, select, update

from tests.conftest import Team, TestClient
from tests.integration.populated import place_an_order
from tests.receivers import Receiver, http_receiver

ROOT = Path(__file__).resolve().parents[2]
T0 = datetime(2026, 3, 2, 9, 30, tzinfo=UTC)
GRACE = timedelta(days=7)
CTX = CommandContext(actor="test:setup", request_id="req-setup")

# A person's values, each of which must never appear in a report. The service refuses a
# client_user_id that is plainly an e-mail address; an internationalised one gets through,
# as teams' e-mail addresses do in one form or another.
EMAIL = "ada.lovelace@почта.рф"
DEMOGRAPHICS: dict[str, Any] = {
    "first_name": "Augusta",
    "last_name": "Lovelace",
    "email": "augusta.king@example.net",
    "phone_number": "+44 20 7946 0958",
    "gender": "female",
    "dob": "1985-12-10",
    "address": {
        "first_line": "12 Analytical Row",
        "second_line": "Marylebone",
        "zip_code": "10001",
        "state": "NY",
        "city": "Babbageton",
        "country": "GB",
    },
}
PERSONAL = [
    EMAIL,
    "ada.lovelace",
    "почта",
    "Augusta",
    "Lovelace",
    "augusta.king",
    # The phone number in both its given and its digits-only form. A shorter piece of it
    # ("7946") turns up by chance in the report's hex digests about once in a few hundred
    # runs.
    "7946 0958",
    "79460958",
    "Analytical Row",
    "Marylebone",
    "Babbageton",
    "1985-12-10",
    "1970-01-02",
]


class Clock:
    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now

    def advance(self, delta: timedelta) -> None:
        self.now += delta


@pytest.fixture
def clock() -> Clock:
    return Clock(T0)


@pytest.fixture
def svc(settings: Settings, clock: Clock) -> Iterator[Service]:
    built = build_service(settings, clock=clock)
    yield built
    built.close()


@pytest.fixture
def home(svc: Service) -> Team:
    created = svc.bootstrap()
    assert created is not None
    return Team(created.team_id, created.team_api_key.plain)


@pytest.fixture
def api(svc: Service) -> Iterator[TestClient]:
    with TestClient(create_team_api(svc), raise_server_exceptions=False) as test_client:
        yield test_client


@dataclass
class Tools:
    chromium: Path
    pdftoppm: Path
    pdftotext: Path


@pytest.fixture
def tools() -> Tools:
    """Debian's chromium and poppler-utils; a test needing them skips only outside CI."""
    found = Tools(Path("/usr/bin/chromium"), Path("/usr/bin/pdftoppm"), Path("/usr/bin/pdftotext"))
    missing = [str(p) for p in vars(found).values() if not p.exists()]
    if missing:
        if os.environ.get("CI"):
            pytest.fail(f"CI must have {', '.join(missing)} (.ci/run installs them)")
        pytest.skip(f"not installed: {', '.join(missing)} (apt-get install chromium poppler-utils)")
    return found


def report_of(api: TestClient, team: Team, user_id: UUID, **params: str) -> Any:
    response = api.get(
        f"/v2/audit/user/{user_id}/deletion_report", params=params, headers=team.headers
    )
    assert response.status_code == 200, response.text
    return response.json() if params.get("format", "json") == "json" else response.text


def verified(report: dict[str, Any]) -> dict[str, Any]:
    assert verify_report(report) == []
    return report


def user_events(svc: Service, user_id: UUID) -> list[Any]:
    return list(svc.ledger.events.get(user_id))


def a_person(svc: Service, team: Team, client_user_id: str = EMAIL) -> UUID:
    """A user with every kind of personal value: client_user_id, birth date,
    demographics with an address, a connection with pulled health data, a link token."""
    user = svc.users.create_user(
        CTX, team.team_id, client_user_id=client_user_id, fallback_birth_date=date(1970, 1, 2)
    )
    svc.users.record_demographics(CTX, team.team_id, user.id, DEMOGRAPHICS)
    entry = svc.catalog["freestyle_libre"]
    svc.connections.connect_demo(
        CTX, team.team_id, user.id, "freestyle_libre", entry.supported_resources
    )
    svc.jobs.run_due_pulls()
    svc.link_tokens.issue(
        CTX, team.team_id, "sandbox", user_id=user.id, redirect_url="https://example.com/back"
    )
    return user.id


def erase(svc: Service, clock: Clock, api: TestClient, team: Team, user_id: UUID) -> None:
    deleted = api.delete(
        f"/v2/user/{user_id}", headers={**team.headers, "x-request-id": "req-delete-ada"}
    )
    assert deleted.status_code == 200, deleted.text
    clock.advance(GRACE)
    assert svc.jobs.sweep_erasures() == 1


# -- the request -----------------------------------------------------------------------------


def test_a_live_user_has_no_deletion_and_a_proof_that_verifies(
    svc: Service, home: Team, api: TestClient
) -> None:
    user_id = a_person(svc, home, "live-user-1")
    report = verified(report_of(api, home, user_id))

    assert report["kind"] == "healthledger.deletion_report"
    assert report["user"]["user_id"] == str(user_id)
    assert report["user"]["status"] == "active"
    assert report["user"]["created_by"] == {"actor": "test:setup", "request_id": "req-setup"}
    assert report["generated_by"]["actor"].startswith("team_api_key:")
    assert report["request"]["deletions"] == []
    assert report["request"]["undos"] == report["request"]["refused_undos"] == []
    assert report["request"]["orders"]["supported"] is True
    assert report["request"]["orders"]["cancelled"] == []
    assert report["erasure"] is None
    # Every event of the user's streams, in log order, each once.
    events = report["proof"]["events"]
    positions = [e["position"] for e in events]
    assert positions == sorted(set(positions))
    kinds = {e["stream"] for e in events}
    assert {"user", "claim", "connection", "pull", "link_token"} <= kinds
    own = [e for e in events if e["originator_id"] == str(user_id)]
    assert [e["topic"] for e in own] == [type(e).TOPIC for e in user_events(svc, user_id)]
    assert report["proof"]["signed_head"]["position"] >= positions[-1]


def test_a_pending_user_shows_who_deleted_it_the_grace_period_and_its_connections(
    svc: Service, home: Team, api: TestClient, clock: Clock
) -> None:
    user_id = a_person(svc, home, "pending-user-1")
    clock.advance(timedelta(hours=1))
    deleted = api.delete(
        f"/v2/user/{user_id}", headers={**home.headers, "x-request-id": "req-delete-42"}
    )
    assert deleted.status_code == 200
    report = verified(report_of(api, home, user_id))

    assert report["user"]["status"] == "pending_erasure"
    [deletion] = report["request"]["deletions"]
    assert deletion["requested_at"] == clock.now.isoformat(timespec="microseconds")
    assert deletion["actor"] == report["generated_by"]["actor"]  # the same team key
    assert deletion["request_id"] == "req-delete-42"
    assert deletion["grace_period_seconds"] == GRACE.total_seconds()
    assert deletion["grace_period_ends_at"] == (clock.now + GRACE).isoformat(
        timespec="microseconds"
    )
    assert deletion["outcome"] == "pending"
    [deregistered] = report["request"]["connections_deregistered"]
    assert deregistered["provider"] == "freestyle_libre"
    assert deregistered["reason"] == "user_deleted"
    assert deregistered["request_id"] == "req-delete-42"
    assert deregistered["at"] == deletion["requested_at"]
    assert report["erasure"] is None


def test_undos_and_refused_undos_are_each_in_the_report(
    svc: Service, home: Team, api: TestClient, clock: Clock
) -> None:
    first = svc.users.create_user(CTX, home.team_id, client_user_id="shared-id")
    svc.users.delete_user(CTX, home.team_id, first.id)
    # Another user takes the released client_user_id: the first one's undo is refused.
    second = svc.users.create_user(CTX, home.team_id, client_user_id="shared-id")
    clock.advance(timedelta(minutes=1))
    undo = api.post(
        "/v2/user/undo_delete",
        params={"user_id": str(first.id)},
        headers={**home.headers, "x-request-id": "req-undo-refused"},
    )
    assert undo.status_code == 409
    svc.users.delete_user(CTX, home.team_id, second.id)
    clock.advance(timedelta(minutes=1))
    undo = api.post(
        "/v2/user/undo_delete",
        params={"user_id": str(first.id)},
        headers={**home.headers, "x-request-id": "req-undo-ok"},
    )
    assert undo.status_code == 200
    # An undo of a live user concerns no deletion: refused, and not recorded.
    again = api.post(
        "/v2/user/undo_delete", params={"user_id": str(first.id)}, headers=home.headers
    )
    assert again.status_code == 400
    svc.users.delete_user(CTX, home.team_id, first.id)
    clock.advance(GRACE)
    late = api.post("/v2/user/undo_delete", params={"user_id": str(first.id)}, headers=home.headers)
    assert late.status_code == 404  # the grace period has ended
    assert svc.jobs.sweep_erasures() == 2
    gone = api.post("/v2/user/undo_delete", params={"user_id": str(first.id)}, headers=home.headers)
    assert gone.status_code == 404

    report = verified(report_of(api, home, first.id))
    request = report["request"]
    assert [d["outcome"] for d in request["deletions"]] == ["undone", "erased"]
    [undone] = request["undos"]
    assert undone["request_id"] == "req-undo-ok"
    assert [r["reason"] for r in request["refused_undos"]] == [
        "client_user_id_in_use",
        "grace_period_ended",
        "erased",
    ]
    assert request["refused_undos"][0]["request_id"] == "req-undo-refused"
    assert request["refused_undos"][0]["actor"] == report["generated_by"]["actor"]
    # Each refusal is an event on the user's own stream (no value of the caller's).
    refused = [e for e in user_events(svc, first.id) if isinstance(e, User.DeletionUndoRefused)]
    assert [e.reason for e in refused] == [r["reason"] for r in request["refused_undos"]]


def test_another_teams_or_an_unknown_user_is_404_and_bad_input_a_json_422(
    svc: Service, home: Team, api: TestClient
) -> None:
    ctx = CommandContext.system("test:setup")
    org_id = svc.teams.create_organization(ctx, "Other org")
    other_team_id = svc.teams.create_team(ctx, org_id, "Other team", "eu")
    other = Team(other_team_id, svc.teams.issue_team_api_key(ctx, other_team_id).plain)
    user_id = svc.users.create_user(CTX, home.team_id, client_user_id="mine").id
    before = len(user_events(svc, user_id))

    for team, target in ((other, user_id), (home, uuid4())):
        for form in ("json", "html"):
            response = api.get(
                f"/v2/audit/user/{target}/deletion_report",
                params={"format": form},
                headers=team.headers,
            )
            assert response.status_code == 404
            assert response.json() == {"detail": "User not found."}
    refused = api.post(
        "/v2/user/undo_delete", params={"user_id": str(user_id)}, headers=other.headers
    )
    assert refused.status_code == 404
    assert len(user_events(svc, user_id)) == before  # nothing recorded on another team's user

    bad = api.get(
        f"/v2/audit/user/{user_id}/deletion_report", params={"format": "pdf"}, headers=home.headers
    )
    assert bad.status_code == 422
    assert bad.json()["detail"][0]["loc"] == ["query", "format"]
    assert (
        api.get("/v2/audit/user/not-a-uuid/deletion_report", headers=home.headers).status_code
        == 422
    )
    assert api.get(f"/v2/audit/user/{user_id}/deletion_report").status_code == 401


# -- the erasure -------------------------------------------------------------------------------


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with http_receiver() as running:
        yield running


def test_an_erased_user_shows_its_erasure_the_checks_again_and_the_horizon(
    svc: Service, home: Team, api: TestClient, clock: Clock, receiver: Receiver
) -> None:
    svc.webhooks.create(CTX, home.team_id, "sandbox", url=receiver.url("ok"))
    user_id = a_person(svc, home)
    svc.jobs.dispatch_webhooks()
    erase(svc, clock, api, home, user_id)
    svc.jobs.dispatch_webhooks()

    report = verified(report_of(api, home, user_id))
    assert report["user"]["status"] == "erased"
    erasure = report["erasure"]
    erased = user_events(svc, user_id)[-1]
    assert isinstance(erased, User.Erased)
    assert erasure["erased_at"] == erased.timestamp.isoformat(timespec="microseconds")
    assert erasure["actor"] == "system:scheduler"
    assert erasure["request_id"] == erased.request_id
    assert erasure["removed"] == erased.removed
    assert erasure["checked_at_erasure"] == erased.checked
    assert erasure["checked_at_erasure"]["health_data"] > 0  # it had pulled data

    checks = {c["check"]: c for c in erasure["checks_now"]}
    assert set(checks) == {
        "user_data_key",
        "health_data",
        "read_model:users",
        "read_model:pending_erasures",
        "read_model:connections",
        "read_model:resource_feeds",
        "read_model:link_tokens",
        "read_model:orders",
        "provider_tokens",
        "session_index",
        "raw_payloads",
        "snapshots",
        "continuous_queries",
        "continuous_query_tasks",
        "lab_report_uploads",
        "webhook_deliveries:queued",
    }
    assert all(c["passed"] and c["found"] == 0 for c in checks.values())

    # The user.erased message reached the team's endpoint, which answered 2xx.
    hooks = erasure["webhooks"]
    [told] = hooks["user_erased"]
    assert told["status"] == "succeeded" and told["last_status_code"] == 200
    assert hooks["user_erased_acknowledged"] is True
    assert "2xx" in hooks["user_erased_acknowledged_means"]
    assert "mirror_told" not in hooks
    assert "user.erased" in [json.loads(r.body)["event_type"] for r in receiver.on("ok")]

    # No rotation since the erasure: the horizon is still ahead; after one, it has passed.
    assert erasure["horizon"]["passed"] is False
    assert erasure["horizon"]["rotated_at"] is None
    clock.advance(timedelta(hours=2))
    rotation = svc.key_store.rotate_master_key()
    assert rotation is not None
    horizon = verified(report_of(api, home, user_id))["erasure"]["horizon"]
    assert horizon["passed"] is True
    assert horizon["rotated_at"] == clock.now.isoformat(timespec="microseconds")
    assert horizon["master_key_id"] == str(rotation.master_key_id)


def test_the_checks_find_what_is_left_of_an_erased_user(
    svc: Service, home: Team, api: TestClient, clock: Clock
) -> None:
    user_id = a_person(svc, home, "leftover-1")
    erase(svc, clock, api, home, user_id)
    # What a broken erasure would leave: a snapshot and a link token row naming the user.
    svc.ledger.take_snapshot(user_id, version=1)
    with svc.db.write() as conn:
        conn.execute(
            insert(link_tokens).values(
                token_id=uuid4(),
                team_id=home.team_id,
                user_id=user_id,
                environment="sandbox",
                token_hash="0" * 64,
                issued_at=clock.now,
            )
        )
    checks = {c["check"]: c for c in report_of(api, home, user_id)["erasure"]["checks_now"]}
    assert checks["snapshots"]["found"] == 1 and checks["snapshots"]["passed"] is False
    left = checks["read_model:link_tokens"]
    assert left["found"] == 1 and left["passed"] is False
    assert checks["health_data"]["passed"] is True


# -- no personal value, in any form --------------------------------------------------------------


def test_no_personal_value_in_the_json_the_html_or_the_pdf(
    svc: Service, home: Team, api: TestClient, clock: Clock, tools: Tools, tmp_path: Path
) -> None:
    user_id = a_person(svc, home)
    for stage in ("live", "pending", "erased"):
        if stage == "pending":
            svc.users.delete_user(CTX, home.team_id, user_id)
        elif stage == "erased":
            clock.advance(GRACE)
            assert svc.jobs.sweep_erasures() == 1
        report = report_of(api, home, user_id)
        html = report_of(api, home, user_id, format="html")
        pdf = tmp_path / f"{stage}.pdf"
        pdf.write_bytes(render_pdf(render_html(report)))
        text = subprocess.run(
            [str(tools.pdftotext), str(pdf), "-"], capture_output=True, check=True, text=True
        ).stdout
        assert str(user_id) in text.replace("\n", "")  # the PDF does carry the report
        raw = json.dumps(report, ensure_ascii=False)
        for form, content in (("json", raw), ("html", html), ("pdf", text)):
            for value in PERSONAL:
                assert value not in content, f"{value!r} in the {stage} report's {form}"
    # The client_user_id is there only as the team's keyed digest.
    digest = report["user"]["client_user_id_digest"]
    assert re.fullmatch(r"[0-9a-f]{64}", digest["value"])


def test_the_html_is_one_self_contained_page_and_the_pdf_renders(
    svc: Service,
    home: Team,
    api: TestClient,
    clock: Clock,
    tools: Tools,
    tmp_path: Path,
    cli_env: None,
) -> None:
    user_id = a_person(svc, home, "printable-1")
    erase(svc, clock, api, home, user_id)
    response = api.get(
        f"/v2/audit/user/{user_id}/deletion_report",
        params={"format": "html"},
        headers=home.headers,
    )
    assert response.headers["content-type"].startswith("text/html")
    html = response.text
    assert html.startswith("<!DOCTYPE html>") and "<style>" in html
    # No external asset: nothing to fetch, so it prints the same offline.
    assert not re.search(r"""(src|href)\s*=|url\(|@import|<script|<link""", html, re.I)
    assert "system:scheduler" in html and str(user_id) in html

    pdf = tmp_path / "report.pdf"
    assert main(["report", "deletion", str(user_id), "--format", "pdf", "--output", str(pdf)]) == 0
    assert pdf.read_bytes().startswith(b"%PDF-")
    subprocess.run(
        [
            str(tools.pdftoppm),
            "-r",
            "40",
            "-f",
            "1",
            "-l",
            "1",
            "-gray",
            str(pdf),
            str(tmp_path / "page"),
        ],
        check=True,
    )
    [image] = tmp_path.glob("page*.pgm")
    pixels = pgm_pixels(image.read_bytes())
    dark = sum(1 for p in pixels if p < 128)
    assert len(pixels) > 10_000
    assert 0.005 < dark / len(pixels) < 0.5, "the first page is blank (or solid)"


def test_a_pdf_without_chromium_is_a_clear_error(
    erased_report: tuple[dict[str, Any], UUID],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    _, user_id = erased_report
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.setattr(printing, "DEBIAN_CHROMIUM", tmp_path / "no-chromium")
    pdf = tmp_path / "report.pdf"
    assert main(["report", "deletion", str(user_id), "--format", "pdf", "--output", str(pdf)]) == 1
    err = capsys.readouterr().err
    assert "headless Chromium, which is not installed" in err
    assert "apt-get install chromium" in err and "Traceback" not in err
    assert not pdf.exists()


def pgm_pixels(data: bytes) -> bytes:
    """The pixels of a binary PGM (P5) with 8-bit samples, as pdftoppm -gray writes."""
    fields = re.match(rb"P5\s+(\d+)\s+(\d+)\s+(\d+)\s", data)
    assert fields is not None and int(fields.group(3)) == 255
    width, height = int(fields.group(1)), int(fields.group(2))
    return data[fields.end() : fields.end() + width * height]


# -- the proof, verified offline; tampering found -----------------------------------------------


@pytest.fixture
def cli_env(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    """The CLI, run in this process, on the test's database and master key."""
    monkeypatch.setenv("HEALTHLEDGER_DATABASE_URL", settings.database_url)
    monkeypatch.setenv("HEALTHLEDGER_MASTER_KEY_FILE", str(settings.master_key_file))
    for name, value in settings.model_dump().items():
        if name.endswith("_file") and value is not None and name != "master_key_file":
            monkeypatch.setenv(f"HEALTHLEDGER_{name.upper()}", str(value))


@pytest.fixture
def erased_report(
    svc: Service, home: Team, api: TestClient, clock: Clock, tmp_path: Path, cli_env: None
) -> tuple[dict[str, Any], UUID]:
    user_id = a_person(svc, home, "proof-1")
    erase(svc, clock, api, home, user_id)
    out = tmp_path / "report.json"
    assert main(["report", "deletion", str(user_id), "--output", str(out)]) == 0
    return json.loads(out.read_text()), user_id


def tampered(report: dict[str, Any], how: str) -> dict[str, Any]:
    changed = copy.deepcopy(report)
    events = changed["proof"]["events"]
    if how == "event time":
        events[1]["timestamp"] = "2020-01-01T00:00:00.000000+00:00"
    elif how == "dropped event":
        del events[1]
    elif how == "key":
        other = Ed25519PrivateKey.generate().public_key()
        raw = other.public_bytes(Encoding.Raw, PublicFormat.Raw).hex()
        changed["signature"]["public_key"] = changed["proof"]["public_key"] = raw
    elif how == "re-signed":
        # A forger rewrites an event and signs the whole report with a key of its own.
        forger = Ed25519PrivateKey.generate()
        raw = forger.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw).hex()
        events[0]["timestamp"] = "2020-01-01T00:00:00.000000+00:00"
        changed["proof"]["public_key"] = changed["proof"]["signed_head"]["public_key"] = raw
        unsigned = {k: v for k, v in changed.items() if k != "signature"}
        changed["signature"] = {
            "algorithm": "Ed25519",
            "public_key": raw,
            "value": forger.sign(canonical_json(unsigned)).hex(),
        }
    elif how == "erasure":
        changed["erasure"]["actor"] = "team_api_key:someone-else"
    return changed


TAMPERINGS = {
    "event time": ["signature does not verify", "hash does not recompute"],
    "dropped event": ["signature does not verify", "versions"],
    "key": ["signature does not verify", "signed head's public key"],
    "re-signed": ["hash does not recompute", "signed head's signature does not verify"],
    "erasure": ["signature does not verify"],
}


def test_the_proof_verifies_with_verify_report_and_tampering_fails(
    erased_report: tuple[dict[str, Any], UUID],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    report, user_id = erased_report
    assert report["user"]["user_id"] == str(user_id)
    assert report["generated_by"]["actor"] == "system:cli"
    good = tmp_path / "good.json"
    good.write_text(json.dumps(report))
    key = report["signature"]["public_key"]
    assert main(["verify-report", str(good), "--public-key", key]) == 0
    assert "verified" in capsys.readouterr().out

    for how, named in TAMPERINGS.items():
        bad = tmp_path / f"{how.replace(' ', '-')}.json"
        bad.write_text(json.dumps(tampered(report, how)))
        assert main(["verify-report", str(bad)]) == 1, how
        err = capsys.readouterr().err
        for words in named:
            assert words in err, (how, words, err)
    # Pinned to the service's key, a report re-signed by anyone else fails on that too.
    forged = tmp_path / "re-signed.json"
    assert main(["verify-report", str(forged), "--public-key", key]) == 1
    assert "another key than the pinned public key" in capsys.readouterr().err
    # Not a report at all: a clear failure, not a traceback.
    junk = tmp_path / "junk.json"
    junk.write_text('{"proof": 1}')
    assert main(["verify-report", str(junk)]) == 1
    assert "malformed" in capsys.readouterr().err


def doc_script(tmp_path: Path) -> Path:
    """The verification script of docs/compliance-verify.md, as written there."""
    doc = (ROOT / "docs" / "compliance-verify.md").read_text()
    section = doc.split("## Without healthledger: the script", 1)[1]
    found = re.search(r"```python\n(.*?)```", section, re.S)
    assert found is not None
    script = tmp_path / "verify_report.py"
    script.write_text(found.group(1))
    return script


def test_the_script_in_the_docs_verifies_the_report_and_finds_tampering(
    erased_report: tuple[dict[str, Any], UUID], tmp_path: Path
) -> None:
    report, _ = erased_report
    script = doc_script(tmp_path)
    # Only the standard library and cryptography: nothing of healthledger's.
    assert "healthledger" not in re.sub(r'""".*?"""', "", script.read_text(), flags=re.S)

    def run(document: dict[str, Any], *pin: str) -> subprocess.CompletedProcess[str]:
        path = tmp_path / "report.json"
        path.write_text(json.dumps(document, indent=2))
        return subprocess.run(
            [sys.executable, "-I", str(script), str(path), *pin],
            capture_output=True,
            text=True,
            cwd=tmp_path,
        )

    ok = run(report, report["signature"]["public_key"])
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert ok.stdout.startswith(f"verified: {len(report['proof']['events'])} events")
    for how in TAMPERINGS:
        failed = run(tampered(report, how))
        assert failed.returncode == 1, how
        assert "FAILED:" in failed.stdout
    forged = run(tampered(report, "re-signed"), report["signature"]["public_key"])
    assert "not signed by the pinned key" in forged.stdout


def test_the_cli_writes_each_format_and_names_an_unknown_user(
    erased_report: tuple[dict[str, Any], UUID],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    _, user_id = erased_report
    assert main(["report", "deletion", str(user_id)]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert verify_report(printed) == []
    assert main(["report", "deletion", str(user_id), "--format", "html"]) == 0
    assert capsys.readouterr().out.startswith("<!DOCTYPE html>")
    assert main(["report", "deletion", str(user_id), "--format", "pdf"]) == 2
    assert "--output" in capsys.readouterr().err
    unknown = uuid4()
    assert main(["report", "deletion", str(unknown)]) == 1
    assert f"no user {unknown}" in capsys.readouterr().err


def test_a_report_signs_a_head_only_when_none_covers_its_events(svc: Service, home: Team) -> None:
    user_id = svc.users.create_user(CTX, home.team_id, client_user_id="head-1").id
    ctx = CommandContext(actor="test:auditor", request_id="req-report")
    first = deletion_report(svc, user_id, ctx, team_id=home.team_id)
    again = deletion_report(svc, user_id, ctx, team_id=home.team_id)
    assert first["proof"]["signed_head"] == again["proof"]["signed_head"]
    svc.users.delete_user(CTX, home.team_id, user_id)
    later = deletion_report(svc, user_id, ctx, team_id=home.team_id)
    assert later["proof"]["signed_head"]["position"] > first["proof"]["signed_head"]["position"]
    assert verify_report(later) == []


# -- only over a sound log (issue 29, 2) --------------------------------------------------------


def stored_row(svc: Service, originator_id: UUID, topic: str) -> dict[str, Any]:
    with svc.db.read() as conn:
        found = conn.execute(
            select(stored_events).where(
                stored_events.c.originator_id == originator_id, stored_events.c.topic == topic
            )
        )
        return dict(found.mappings().one())


def write_state(svc: Service, notification_id: int, state: bytes) -> None:
    with svc.db.write() as conn:
        conn.execute(
            update(stored_events)
            .where(stored_events.c.notification_id == notification_id)
            .values(state=state)
        )


def signed_heads(svc: Service) -> int:
    with svc.db.read() as conn:
        return int(conn.execute(select(func.count()).select_from(chain_heads)).scalar_one())


def test_no_report_is_signed_over_a_changed_byte_of_the_deletion(
    svc: Service,
    home: Team,
    api: TestClient,
    tmp_path: Path,
    cli_env: None,
    capsys: pytest.CaptureFixture[str],
) -> None:
    user_id = a_person(svc, home, "tampered-1")
    deleted = api.delete(f"/v2/user/{user_id}", headers=home.headers)
    assert deleted.status_code == 200
    row = stored_row(svc, user_id, User.Deleted.TOPIC)
    original = bytes(row["state"])
    changed = bytearray(original)
    changed[len(changed) // 2] ^= 0x01
    write_state(svc, row["notification_id"], bytes(changed))
    assert signed_heads(svc) == 0

    response = api.get(f"/v2/audit/user/{user_id}/deletion_report", headers=home.headers)
    assert response.status_code == 409, response.text
    detail = response.json()["detail"]
    assert detail["error_type"] == "LOG_NOT_VERIFIED"
    assert detail["record"] == {
        "position": row["chain_position"],
        "problem": "changed",
        "stream_id": str(user_id),
        "version": row["originator_version"],
    }
    assert f"changed at position {row['chain_position']}" in detail["error_message"]
    html = api.get(
        f"/v2/audit/user/{user_id}/deletion_report",
        params={"format": "html"},
        headers=home.headers,
    )
    assert html.status_code == 409 and html.json() == response.json()

    out = tmp_path / "report.json"
    capsys.readouterr()
    assert main(["report", "deletion", str(user_id), "--output", str(out)]) == 1
    err = capsys.readouterr().err
    assert err.strip() == f"healthledger: {detail['error_message']}"
    assert not out.exists()
    assert signed_heads(svc) == 0  # nothing was signed, by either path

    # The same log, its byte put back: both paths make and sign the report.
    write_state(svc, row["notification_id"], original)
    verified(report_of(api, home, user_id))
    assert main(["report", "deletion", str(user_id), "--output", str(out)]) == 0
    assert verify_report(json.loads(out.read_text())) == []
    assert signed_heads(svc) == 1


def test_a_rewrite_after_the_reports_events_is_caught_by_the_head_that_covers_them(
    svc: Service, home: Team, api: TestClient
) -> None:
    """A record of another stream between the user's events and the signed head, changed
    with every later hash recomputed: the walk links, the signed head does not."""
    user_id = svc.users.create_user(CTX, home.team_id, client_user_id="covered-1").id
    other = svc.users.create_user(CTX, home.team_id, client_user_id="other-1").id
    verified(report_of(api, home, user_id))
    head = svc.chain.covering_head(1)
    assert head is not None
    row = stored_row(svc, other, User.Created.TOPIC)
    state = bytearray(row["state"])
    state[-3] ^= 0x01
    with svc.db.write() as conn:
        conn.execute(
            update(stored_events)
            .where(stored_events.c.notification_id == row["notification_id"])
            .values(state=bytes(state))
        )
        # Recompute the changed record's hash and every later one, as a forger would.
        rows = conn.execute(
            select(stored_events)
            .where(stored_events.c.chain_position >= row["chain_position"])
            .order_by(stored_events.c.chain_position)
        ).mappings()
        prev = bytes(
            conn.execute(
                select(stored_events.c.chain_hash).where(
                    stored_events.c.chain_position == row["chain_position"] - 1
                )
            ).scalar_one()
        )
        for later in list(rows):
            prev = link_hash(
                prev,
                later["chain_position"],
                later["originator_id"],
                later["originator_version"],
                later["topic"],
                later["timestamp"],
                state_digest(bytes(later["state"])),
            )
            conn.execute(
                update(stored_events)
                .where(stored_events.c.notification_id == later["notification_id"])
                .values(chain_hash=prev)
            )
    response = api.get(f"/v2/audit/user/{user_id}/deletion_report", headers=home.headers)
    assert response.status_code == 409, response.text
    record = response.json()["detail"]["record"]
    assert record == {"position": head.position, "problem": "changed"}  # not the user's


# -- what an auditor asks (issue 29, 4) ------------------------------------------------------------


def test_the_report_lists_the_categories_held_and_the_recipients(
    svc: Service,
    home: Team,
    api: TestClient,
    clock: Clock,
    receiver: Receiver,
    tmp_path: Path,
    cli_env: None,
    capsys: pytest.CaptureFixture[str],
) -> None:
    endpoint = svc.webhooks.create(
        CTX, home.team_id, "sandbox", url=receiver.url("ok") + "?token=secret-of-the-team"
    )
    user_id = a_person(svc, home, "audited-1")  # freestyle_libre, demographics, a link token
    entry = svc.catalog["oura"]
    svc.connections.connect_demo(CTX, home.team_id, user_id, "oura", entry.supported_resources)
    svc.jobs.run_due_pulls()
    place_an_order(svc, home, CTX, user_id)
    svc.jobs.dispatch_webhooks()

    live = verified(report_of(api, home, user_id))
    assert live["format"] == 2
    held = {c["category"]: c for c in live["categories"]["held"]}
    assert set(held) == {"demographics", "identifiers", "health_data", "lab_orders_and_results"}
    assert held["demographics"]["held"] == 1
    assert held["identifiers"]["items"] == {
        "client_user_id": 1,
        "birth_date": 1,
        "provider_user_ids": 2,  # one per connection, sealed
        "link_tokens": 1,
    }
    assert held["lab_orders_and_results"]["items"] == {"orders": 1, "results": 0}
    assert "the test ordered" in held["lab_orders_and_results"]["what"]
    resources = held["health_data"]["by_resource"]
    assert {r["provider"] for r in resources} == {"freestyle_libre", "oura"}
    assert held["health_data"]["held"] == sum(r["rows_now"] for r in resources) > 0
    assert all(c["erasure_check"] is None for c in held.values())  # not erased yet

    erase(svc, clock, api, home, user_id)
    svc.jobs.dispatch_webhooks()
    out = tmp_path / "report.json"
    assert main(["report", "deletion", str(user_id), "--output", str(out)]) == 0
    report = json.loads(out.read_text())
    capsys.readouterr()
    assert main(["verify-report", str(out)]) == 0
    assert verify_report(report) == []

    held = {c["category"]: c for c in report["categories"]["held"]}
    erased = report["erasure"]["checked_at_erasure"]
    for category in held.values():
        check = category["erasure_check"]
        assert check["passed"] is True and check["found"] == 0, category
        assert set(check["checks"]) == set(category["places"])
    health = held["health_data"]
    assert health["held"] == erased["health_data"] > 0
    assert health["counted_at_erasure"]["health_data"] == erased["health_data"]
    # After the erasure no resource is named: each is its pull stream, in the proof.
    proven = {e["originator_id"] for e in report["proof"]["events"] if e["stream"] == "pull"}
    assert {r["pull_id"] for r in health["by_resource"]} <= proven
    assert len(health["by_resource"]) == len(resources)
    assert all(r["provider"] is None and r["resource"] is None for r in health["by_resource"])
    assert all(r["rows_now"] == 0 for r in health["by_resource"])
    assert "freestyle_libre" not in json.dumps(report) and "glucose" not in json.dumps(report)
    assert held["lab_orders_and_results"]["counted_at_erasure"] == {
        "read_model:orders": 1,
        "lab_report_uploads": 0,
        "user_data_key": 1,
    }
    # Two connections, deregistered by the deletion, not named now.
    deregistered = report["request"]["connections_deregistered"]
    assert len(deregistered) == 2 and {d["provider"] for d in deregistered} == {None}

    [recipient] = report["recipients"]["webhook_endpoints"]
    assert recipient["endpoint_id"] == str(endpoint.id)
    assert recipient["origin"] == receiver.url("ok").split("/ok")[0].rstrip("/")
    assert "secret-of-the-team" not in json.dumps(report)
    assert recipient["received"] is True
    # Every POST was acknowledged; deliveries still queued at the erasure were never sent.
    assert recipient["posts"] == recipient["acknowledged"] > 2
    assert recipient["deliveries"] >= recipient["posts"]
    assert recipient["first_sent_at"] <= recipient["last_sent_at"]
    assert recipient["last_acknowledged_at"] == recipient["last_sent_at"]
    assert report["recipients"]["event_destinations"]["destinations"] == []

    horizon = report["erasure"]["horizon"]
    assert "backups made before the rotation" in horizon["condition"].lower()
    html = render_html(report)
    assert "Recipients" in html and str(endpoint.id) in html and "Condition" in html


def test_a_deletion_says_why_through_the_api_and_the_facade(
    svc: Service, home: Team, api: TestClient, clock: Clock, settings: Settings
) -> None:
    by_api = svc.users.create_user(CTX, home.team_id, client_user_id="why-1").id
    reason = "Asked by the person in writing — café letter"
    response = api.delete(
        f"/v2/user/{by_api}",
        headers={
            **home.headers,
            "X-Deletion-Reason": reason.encode(),
            "X-Deletion-Ticket": "SUP-4411",
        },
    )
    assert response.status_code == 200, response.text
    [deletion] = verified(report_of(api, home, by_api))["request"]["deletions"]
    assert (deletion["reason"], deletion["ticket"]) == (reason, "SUP-4411")
    # The reason is sealed in the log; the ticket is a reference, in clear.
    [event] = [e for e in user_events(svc, by_api) if isinstance(e, User.Deleted)]
    assert event.sealed_reason is not None and reason not in event.sealed_reason
    assert event.ticket == "SUP-4411"

    for i, (headers, loc) in enumerate(
        (
            ({"X-Deletion-Ticket": "an e-mail@example.org"}, "x-deletion-ticket"),
            ({"X-Deletion-Reason": "x" * 501}, "x-deletion-reason"),
            ({"X-Deletion-Reason": " "}, "x-deletion-reason"),
        )
    ):
        other = svc.users.create_user(CTX, home.team_id, client_user_id=f"why-bad-{i}")
        bad = api.delete(f"/v2/user/{other.id}", headers={**home.headers, **headers})
        assert bad.status_code == 422, bad.text
        [problem] = bad.json()["detail"]
        assert problem["loc"] == ["header", loc] and problem["input"] == "[redacted]"
        assert "example.org" not in bad.text

    # The facade, with a 5-minute grace period: its reason and ticket, and the period
    # shown as 5 min.
    with HealthLedger.open(
        settings.database_url,
        master_key_file=settings.master_key_file,
        team_id=home.team_id,
        run_scheduler=False,
        clock=clock,
        grace_period=timedelta(minutes=5),
    ) as ledger:
        by_facade = ledger.create_user("why-facade").user_id
        ledger.delete_user(by_facade, reason="duplicate account", ticket="CASE/2026#17")
    [deletion] = verified(report_of(api, home, by_facade))["request"]["deletions"]
    assert (deletion["reason"], deletion["ticket"]) == ("duplicate account", "CASE/2026#17")
    assert deletion["grace_period_seconds"] == 300
    html = report_of(api, home, by_facade, format="html")
    assert ">5 min<" in html and "0 d 0 h" not in html
    assert "duplicate account" in html and "CASE/2026#17" in html

    # Erased: the reason went with the user's key; the ticket stays.
    clock.advance(GRACE)
    assert svc.jobs.sweep_erasures() >= 2
    [deletion] = verified(report_of(api, home, by_api))["request"]["deletions"]
    assert deletion["reason"] == "<personal data: erased>"
    assert deletion["ticket"] == "SUP-4411"


def test_durations_show_in_their_largest_unit() -> None:
    shown = report_rendering._duration
    assert shown(300) == "5 min"
    assert shown(7 * 86400) == "7 d"
    assert shown(36 * 3600) == "1 d 12 h"
    assert shown(5400) == "1 h 30 min"
    assert shown(45) == "45 s"


def test_a_format_1_report_still_verifies(
    erased_report: tuple[dict[str, Any], UUID], svc: Service
) -> None:
    """A report as format 1 wrote it (no categories, recipients, reasons or condition;
    `mirror_told`), signed by the service: verify-report and the docs' script take it."""
    report, _ = erased_report
    old = copy.deepcopy(report)
    old["format"] = 1
    for name in ("categories", "recipients"):
        del old[name]
    del old["request"]["reason_note"]
    for deletion in old["request"]["deletions"]:
        del deletion["reason"], deletion["ticket"]
    hooks = old["erasure"]["webhooks"]
    hooks["mirror_told"] = hooks.pop("user_erased_acknowledged")
    del hooks["user_erased_acknowledged_means"]
    del old["erasure"]["horizon"]["condition"]
    signed = sign_report(svc, old)
    assert verify_report(signed) == []
    assert verify_report({**signed, "format": 3}) == [
        "the report is malformed: format 3 is not one this version reads (1, 2)"
    ]
