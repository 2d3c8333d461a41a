"""Verifying a deletion report offline (`healthledger verify-report REPORT.json`): no
database, no settings, only the report (and, if the auditor has it from elsewhere, the
service's public key to pin).

What is checked, each failure named:
- the report's signature: Ed25519 over the canonical JSON of the report without its
  `signature` field, by the key the report names (and the pinned key, if given), which is
  also the key of the proof and of its signed head;
- each event's hash recomputes from its fields and its `prev_hash` (the chain's
  `link_hash`); positions rise; an event at the position right after another names that
  one's hash as its `prev_hash`; each stream's versions run from 1 without a gap;
- the signed head's signature (the chain's `verify_signed_head`), and that the head
  covers the last event;
- each order the report says the deletion cancelled names an event of the proof: the
  order's stream at that version, an order's cancellation.

Formats 1 and 2 verify alike: format 2 adds sections (categories, recipients) that the
signature covers, and renames format 1's `mirror_told`; a report of a format this
version does not know is named as such.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import Any, TextIO
from uuid import UUID

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from healthledger.adapters.persistence.eventstore.chain import (
    SignedHead,
    link_hash,
    verify_signed_head,
)
from healthledger.adapters.persistence.keys.key_store import canonical_json
from healthledger.domain.labs.orders import Order

SIGNATURE_FIELD = "signature"
# The report formats this version reads (deletion_report.FORMATS).
KNOWN_FORMATS = (1, 2)


class MalformedReport(ValueError):
    """The document is not a deletion report this version can read."""


def _bytes(value: Any, what: str) -> bytes:
    try:
        return bytes.fromhex(value)
    except (TypeError, ValueError):
        raise MalformedReport(f"{what} is not hex") from None


def _instant(value: Any, what: str) -> datetime:
    try:
        found = datetime.fromisoformat(value)
    except (TypeError, ValueError):
        raise MalformedReport(f"{what} is not an ISO 8601 instant") from None
    if found.tzinfo is None:
        raise MalformedReport(f"{what} has no UTC offset")
    return found


def verify_report(report: Mapping[str, Any], *, pinned_key: bytes | None = None) -> list[str]:
    """Every check that failed, in words (empty: the report verifies)."""
    try:
        return _problems(report, pinned_key)
    except MalformedReport as exc:
        return [f"the report is malformed: {exc}"]
    except (KeyError, TypeError, AttributeError, ValueError, OverflowError, struct.error) as exc:
        # A field missing, of another type, or out of range (a bad id, a position that
        # does not fit the link's 8 bytes): named, never a traceback.
        return [f"the report is malformed: {type(exc).__name__} {exc}"]


def _problems(report: Mapping[str, Any], pinned_key: bytes | None) -> list[str]:
    problems: list[str] = []
    if report.get("format") not in KNOWN_FORMATS:
        raise MalformedReport(
            f"format {report.get('format')!r} is not one this version reads "
            f"({', '.join(map(str, KNOWN_FORMATS))})"
        )
    signature = report[SIGNATURE_FIELD]
    key = _bytes(signature["public_key"], "the signature's public key")
    proof = report["proof"]
    if pinned_key is not None and key != pinned_key:
        problems.append("the report is signed by another key than the pinned public key")
    if _bytes(proof["public_key"], "the proof's public key") != key:
        problems.append("the proof's public key is not the key that signed the report")
    unsigned = {k: v for k, v in report.items() if k != SIGNATURE_FIELD}
    try:
        Ed25519PublicKey.from_public_bytes(key).verify(
            _bytes(signature["value"], "the signature"), canonical_json(unsigned)
        )
    except (InvalidSignature, ValueError):
        problems.append(
            "the report's signature does not verify: the report was changed after it was "
            "signed, or signed by another key"
        )
    events = proof["events"]
    problems += _chain_problems(events)
    problems += _head_problems(proof["signed_head"], key, events)
    problems += _order_problems(report["request"]["orders"]["cancelled"], events)
    return problems


def _order_problems(cancelled: list[dict[str, Any]], events: list[dict[str, Any]]) -> list[str]:
    """Each cancelled order's event, found in the proof with the cancellation's topic."""
    proven = {(e["originator_id"], e["version"]): e["topic"] for e in events}
    return [
        f"order {order['order_id']}: its cancellation (version {order['version']}) is not an "
        "event of the proof"
        for order in cancelled
        if proven.get((order["order_id"], order["version"])) != Order.Cancelled.TOPIC
    ]


def _chain_problems(events: list[dict[str, Any]]) -> list[str]:
    problems: list[str] = []
    previous: dict[str, Any] | None = None
    versions: dict[str, list[int]] = {}
    for event in events:
        position = event["position"]
        where = f"event at position {position}"
        recomputed = link_hash(
            _bytes(event["prev_hash"], f"{where}: prev_hash"),
            position,
            UUID(event["originator_id"]),
            event["version"],
            event["topic"],
            _instant(event["timestamp"], f"{where}: timestamp"),
            _bytes(event["state_digest"], f"{where}: state_digest"),
        )
        if recomputed != _bytes(event["hash"], f"{where}: hash"):
            problems.append(f"{where}: its hash does not recompute from its fields")
        if previous is not None:
            if position <= previous["position"]:
                problems.append(f"{where}: positions do not rise (after {previous['position']})")
            elif position == previous["position"] + 1 and event["prev_hash"] != previous["hash"]:
                problems.append(
                    f"{where}: prev_hash is not the hash of the event at position "
                    f"{previous['position']}"
                )
        versions.setdefault(event["originator_id"], []).append(event["version"])
        previous = event
    for stream, found in versions.items():
        if sorted(found) != list(range(1, len(found) + 1)):
            problems.append(
                f"stream {stream}: versions {sorted(found)} do not run from 1 without a gap "
                "(an event is missing or repeated)"
            )
    return problems


def _head_problems(head: Mapping[str, Any], key: bytes, events: list[dict[str, Any]]) -> list[str]:
    problems: list[str] = []
    head_key = _bytes(head["public_key"], "the signed head's public key")
    if head_key != key:
        problems.append("the signed head's public key is not the key that signed the report")
    signed = SignedHead(
        position=head["position"],
        chain_hash=_bytes(head["chain_hash"], "the signed head's chain_hash"),
        signed_at=_instant(head["signed_at"], "the signed head's signed_at"),
        signature=_bytes(head["signature"], "the signed head's signature"),
        key_id=head["key_id"],
        public_key=head_key,
    )
    if not verify_signed_head(key, signed):
        problems.append("the signed head's signature does not verify with the service's key")
    if events and head["position"] < max(e["position"] for e in events):
        problems.append(
            f"the signed head (position {head['position']}) does not cover the last event"
        )
    return problems


def verify_report_file(path: Path, pinned_key: bytes | None, out: TextIO, err: TextIO) -> int:
    """`healthledger verify-report`: 0 when the report verifies, 1 naming each failure."""
    try:
        report = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        print(f"healthledger: cannot read {path} as JSON: {exc}", file=err)
        return 1
    if not isinstance(report, dict):
        print(f"healthledger: {path} is not a deletion report (not a JSON object)", file=err)
        return 1
    problems = verify_report(report, pinned_key=pinned_key)
    if problems:
        print(f"FAILED: {path}", file=err)
        for problem in problems:
            print(f"- {problem}", file=err)
        return 1
    events = len(report["proof"]["events"])
    head = report["proof"]["signed_head"]["position"]
    pinned = "the pinned key" if pinned_key is not None else "the key it names"
    print(
        f"verified: {path}: signed by {pinned} ({report['signature']['public_key']}); "
        f"{events} event hashes recompute and link; signed head at position {head} verifies",
        file=out,
    )
    return 0
