"""The deletion report for a human auditor: one printable HTML page (inline CSS, no
external asset, nothing fetched), and a PDF printed from it by headless Chromium.

The page shows what the JSON report holds and nothing more (no personal value is in
it to show); the JSON stays the document that is signed and verified."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Iterable, Sequence
from html import escape
from pathlib import Path
from typing import Any

# Debian's package (`apt-get install chromium`) puts it here; PATH is looked at first.
CHROMIUM = "chromium"
DEBIAN_CHROMIUM = Path("/usr/bin/chromium")
PDF_TIMEOUT_SECONDS = 120

_CSS = """
@page { size: A4; margin: 16mm 14mm; }
* { box-sizing: border-box; }
body { font: 10.5pt/1.45 "DejaVu Sans", "Liberation Sans", Arial, sans-serif; color: #1b1f24;
       margin: 0 auto; max-width: 190mm; padding: 8mm 0; background: #fff; }
h1 { font-size: 19pt; margin: 0 0 2mm; }
h2 { font-size: 13pt; margin: 8mm 0 2mm; padding-bottom: 1mm; border-bottom: 2px solid #1b1f24; }
h3 { font-size: 11pt; margin: 5mm 0 1.5mm; }
p { margin: 1.5mm 0; }
.sub { color: #57606a; }
dl.facts { display: grid; grid-template-columns: 48mm 1fr; gap: 1mm 4mm; margin: 3mm 0; }
dl.facts dt { color: #57606a; }
dl.facts dd { margin: 0; }
table { width: 100%; border-collapse: collapse; margin: 2mm 0 3mm; font-size: 9pt; }
th, td { text-align: left; vertical-align: top; padding: 1.2mm 2mm;
         border-bottom: 1px solid #d0d7de; }
th { background: #f3f4f6; font-weight: 600; }
tr { page-break-inside: avoid; }
code { font-family: "DejaVu Sans Mono", "Liberation Mono", monospace; font-size: 8.5pt;
       overflow-wrap: anywhere; }
tbody.event { page-break-inside: avoid; }
tbody.event tr:first-child td { border-bottom: 0; padding-bottom: 0.3mm; }
tr.hashes td { padding-top: 0; color: #57606a; }
tr.hashes code { font-size: 7pt; }
.pass { color: #116329; font-weight: 600; }
.fail { color: #a40e26; font-weight: 600; }
.note { background: #f6f8fa; border-left: 3px solid #8c959f; padding: 2mm 3mm; margin: 2mm 0; }
.none { color: #57606a; font-style: italic; }
footer { margin-top: 8mm; font-size: 8.5pt; color: #57606a; }
"""


class PdfUnavailable(RuntimeError):
    """Headless Chromium is not installed, or failed to print."""


def _e(value: Any) -> str:
    return "" if value is None else escape(str(value))


def _code(value: Any) -> str:
    return f"<code>{_e(value)}</code>"


def _facts(rows: Iterable[tuple[str, str]]) -> str:
    items = "".join(f"<dt>{_e(label)}</dt><dd>{html}</dd>" for label, html in rows)
    return f'<dl class="facts">{items}</dl>'


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]], empty: str) -> str:
    if not rows:
        return f'<p class="none">{_e(empty)}</p>'
    head = "".join(f"<th>{_e(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{cell}</td>" for cell in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _by(entry: dict[str, Any]) -> str:
    return f"{_code(entry['actor'])}<br>request {_code(entry['request_id'])}"


def _verdict(passed: bool, yes: str = "passed", no: str = "FAILED") -> str:
    return f'<span class="pass">{yes}</span>' if passed else f'<span class="fail">{no}</span>'


def _duration(seconds: int) -> str:
    days, rest = divmod(seconds, 86400)
    return f"{days} d {rest // 3600} h" if rest else f"{days} d"


def _event_name(topic: str) -> str:
    """`healthledger:User.Deleted.v1` -> `User.Deleted`."""
    name = topic.partition(":")[2] or topic
    return name.rsplit(".v", 1)[0]


def render_html(report: dict[str, Any]) -> str:
    user = report["user"]
    title = f"Deletion report: user {user['user_id']}"
    digest = user["client_user_id_digest"]
    digest_html = (
        f"keyed digest ({_e(digest['algorithm'])}, {_e(digest['key'])}): {_code(digest['value'])}"
        if digest["value"] is not None
        else '<span class="none">no digest: the team was deleted, and its secret with it</span>'
    )
    parts = [
        f'<header><h1>Deletion report</h1><p class="sub">healthledger · generated '
        f"{_e(report['generated_at'])} for {_code(report['generated_by']['actor'])}, request "
        f"{_code(report['generated_by']['request_id'])}</p>",
        _facts(
            [
                ("User", _code(user["user_id"])),
                ("Team", _code(user["team_id"])),
                ("Status now", f"<strong>{_e(user['status'])}</strong>"),
                ("Created", f"{_e(user['created_at'])} by {_by(user['created_by'])}"),
                ("client_user_id", digest_html),
            ]
        ),
        "</header>",
        _request_html(report["request"]),
        _erasure_html(report["erasure"]),
        _proof_html(report["proof"]),
        _signature_html(report["signature"]),
    ]
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{_e(title)}</title><style>{_CSS}</style></head><body>"
        + "".join(parts)
        + "</body></html>\n"
    )


def _request_html(request: dict[str, Any]) -> str:
    deletions = _table(
        ["Requested", "By", "Grace period", "Ends", "Outcome"],
        [
            [
                _e(d["requested_at"]),
                _by(d),
                _duration(d["grace_period_seconds"]),
                _e(d["grace_period_ends_at"]),
                _e(d["outcome"]),
            ]
            for d in request["deletions"]
        ],
        "No deletion was requested: the user is live and was never deleted.",
    )
    undos = _table(
        ["Undone", "By"],
        [[_e(u["at"]), _by(u)] for u in request["undos"]],
        "No undo.",
    )
    refused = _table(
        ["Refused", "By", "Why"],
        [[_e(r["at"]), _by(r), _e(r["reason"])] for r in request["refused_undos"]],
        "No undo was refused.",
    )
    connections = _table(
        ["Provider", "Deregistered", "Why", "By", "Connection"],
        [
            [_e(c["provider"]), _e(c["at"]), _e(c["reason"]), _by(c), _code(c["connection_id"])]
            for c in request["connections_deregistered"]
        ],
        "No connection was deregistered.",
    )
    orders = request["orders"]
    return (
        "<section><h2>1. The request</h2><h3>Deletions</h3>"
        + deletions
        + "<h3>Undos</h3>"
        + undos
        + "<h3>Refused undos</h3>"
        + refused
        + "<h3>Connections deregistered</h3>"
        + connections
        + "<h3>Orders cancelled</h3>"
        + (
            _table(
                ["Order", "Cancelled", "Why", "By", "Event"],
                [
                    [_code(o["order_id"]), _e(o["at"]), _e(o["reason"]), _by(o), _e(o["version"])]
                    for o in orders["cancelled"]
                ],
                "No open order: none was cancelled.",
            )
            + f'<p class="note">{_e(orders["note"])}</p>'
            if orders["supported"]
            else f'<p class="note">{_e(orders["note"])}</p>'
        )
        + "</section>"
    )


def _erasure_html(erasure: dict[str, Any] | None) -> str:
    if erasure is None:
        return (
            '<section><h2>2. The erasure</h2><p class="none">The user is not erased: no '
            "erasure to report, no check run.</p></section>"
        )
    checked = erasure["checked_at_erasure"]
    at_erasure = (
        _table(
            ["Place", "Rows found and deleted"],
            [[_code(place), _e(count)] for place, count in checked.items()],
            "Nothing was counted.",
        )
        if checked is not None
        else '<p class="note">This erasure was recorded before erasures counted what they '
        "found (its event lists only what it removed).</p>"
    )
    checks = _table(
        ["Check", "Looked at", "Found", "Result"],
        [
            [_code(c["check"]), _e(c["looked_at"]), _e(c["found"]), _verdict(c["passed"])]
            for c in erasure["checks_now"]
        ],
        "No check.",
    )
    horizon = erasure["horizon"]
    horizon_html = (
        _facts(
            [
                (
                    "Horizon",
                    _verdict(horizon["passed"], "passed", "not yet passed")
                    + (
                        f": master key rotated {_e(horizon['rotated_at'])} (new key "
                        f"{_code(horizon['master_key_id'])}, {_e(horizon['keys_rewrapped'])} "
                        "keys rewrapped)"
                        if horizon["passed"]
                        else ": it passes at the first master key rotation from now"
                    ),
                )
            ]
        )
        + f'<p class="note">{_e(horizon["meaning"])}</p>'
    )
    hooks = erasure["webhooks"]
    hooks_html = _facts(
        [
            (
                "Deliveries by status",
                _e(", ".join(f"{k}: {v}" for k, v in hooks["deliveries_by_status"].items()))
                or '<span class="none">none</span>',
            ),
            ("Mirror told", _verdict(hooks["mirror_told"], "yes", "no")),
        ]
    ) + _table(
        ["user.erased delivery", "Endpoint", "Status", "Attempts", "Last code", "Succeeded"],
        [
            [
                _code(d["delivery_id"]),
                _code(d["endpoint_id"]),
                _e(d["status"]),
                _e(d["attempts"]),
                _e(d["last_status_code"]),
                _e(d["succeeded_at"]),
            ]
            for d in hooks["user_erased"]
        ],
        "No user.erased delivery: no endpoint of the team receives it.",
    )
    return (
        "<section><h2>2. The erasure</h2>"
        + _facts(
            [
                ("Erased", _e(erasure["erased_at"])),
                ("By", _by(erasure)),
                ("Removed", ", ".join(_code(r) for r in erasure["removed"])),
            ]
        )
        + "<h3>Counted at erasure</h3>"
        + at_erasure
        + "<h3>Checked again for this report</h3>"
        + checks
        + "<h3>Erasure horizon</h3>"
        + horizon_html
        + "<h3>Webhooks about the user</h3>"
        + hooks_html
        + "</section>"
    )


def _proof_html(proof: dict[str, Any]) -> str:
    head = proof["signed_head"]
    # Two rows an event: what it is, then its hashes across the page's width.
    rows = "".join(
        '<tbody class="event"><tr>'
        f"<td>{_e(e['position'])}</td>"
        f"<td>{_e(_event_name(e['topic']))} v{_e(e['version'])}</td>"
        f"<td>{_e(e['stream'])} {_code(e['originator_id'])}</td>"
        f"<td>{_e(e['timestamp'])}</td></tr>"
        '<tr class="hashes"><td></td><td colspan="3">'
        f"hash {_code(e['hash'])}<br>prev {_code(e['prev_hash'])}<br>"
        f"state {_code(e['state_digest'])}</td></tr></tbody>"
        for e in proof["events"]
    )
    events = (
        "<table><thead><tr><th>Pos.</th><th>Event</th><th>Stream</th><th>Time</th></tr></thead>"
        f"{rows}</table>"
        if proof["events"]
        else '<p class="none">No event.</p>'
    )
    return (
        "<section><h2>3. The proof</h2>"
        + f'<p class="note">{_e(proof["scope"])}</p>'
        + _facts(
            [
                ("Chain", _e(proof["algorithm"])),
                ("Service public key", _code(proof["public_key"])),
                ("Signed head", f"position {_e(head['position'])}, signed {_e(head['signed_at'])}"),
                ("Head chain hash", _code(head["chain_hash"])),
                ("Head key id", _code(head["key_id"])),
                ("Head signature", _code(head["signature"])),
            ]
        )
        + f"<h3>Events ({len(proof['events'])})</h3>"
        + events
        + "</section>"
    )


def _signature_html(signature: dict[str, Any]) -> str:
    return (
        "<footer><h2>4. Verifying this report</h2><p>The JSON form of this report is signed "
        f"({_e(signature['algorithm'])}, public key {_code(signature['public_key'])}): "
        f"signature {_code(signature['value'])}. Check it offline with "
        "<code>healthledger verify-report REPORT.json</code>, or with the script in the "
        "service's docs/compliance-verify.md, which needs only Python's hashlib and the "
        "cryptography package.</p></footer>"
    )


def chromium_path() -> Path:
    found = shutil.which(CHROMIUM)
    if found:
        return Path(found)
    if DEBIAN_CHROMIUM.exists():
        return DEBIAN_CHROMIUM
    raise PdfUnavailable(
        "a PDF is printed by headless Chromium, which is not installed: install Debian's "
        "package (apt-get install chromium), or ask for --format html and print that"
    )


def render_pdf(html: str) -> bytes:
    """The page printed to PDF by headless Chromium, offline (no network, no profile
    kept): the HTML loads nothing from outside."""
    browser = chromium_path()
    with tempfile.TemporaryDirectory(prefix="healthledger-pdf-") as work:
        page = Path(work) / "report.html"
        page.write_text(html, encoding="utf-8")
        pdf = Path(work) / "report.pdf"
        command = [
            str(browser),
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            f"--user-data-dir={Path(work) / 'profile'}",
            "--no-pdf-header-footer",
            f"--print-to-pdf={pdf}",
            page.as_uri(),
        ]
        try:
            done = subprocess.run(
                command, capture_output=True, timeout=PDF_TIMEOUT_SECONDS, check=False
            )
        except subprocess.TimeoutExpired as exc:
            raise PdfUnavailable(
                f"headless Chromium did not print within {PDF_TIMEOUT_SECONDS} s"
            ) from exc
        if done.returncode != 0 or not pdf.exists():
            raise PdfUnavailable(
                f"headless Chromium failed to print (exit {done.returncode}): "
                + done.stderr.decode(errors="replace").strip()[-500:]
            )
        return pdf.read_bytes()
