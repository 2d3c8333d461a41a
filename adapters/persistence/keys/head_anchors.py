"""The head file: every signed head of the hash chain, anchored outside the database
(issue 30 §3).

Signed heads are recorded in `chain_heads`, in the same database as the log: whoever holds
the database can delete the newest ones and then truncate the log, or rewrite the log from
an event on and recompute every hash after the older heads, and the log still verifies
against the heads left. So each head is also appended, before it is recorded in the
database, to a file kept like the signing key: beside it by default
(`healthledger.heads`), 0600 in a 0700 directory, refused in the SQLite database's own
directory. `healthledger verify --anchors PATH` then compares the log with every head the
file holds, and names a log that is shorter than, or differs from, a head it once signed.

One line per head, appended (O_APPEND, flushed to disk), never rewritten: a JSON object
with `position`, `chain_hash` (hex), `signed_at` (ISO 8601, UTC, microseconds),
`signature` (hex: Ed25519 over ADR 0015's `hl-chain-head-v1` message), `key_id` and
`public_key` (hex). A line is checked with the key alone, so a copy of the file sent
elsewhere (an auditor, a write-once bucket) proves the same.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from healthledger.adapters.persistence.keys.key_files import (
    PRIVATE_FILE_MODE,
    exposure,
    make_private_directory,
)

ANCHOR_FILE_VARIABLE = "HEALTHLEDGER_CHAIN_ANCHOR_FILE"
ANCHOR_FILE_NAME = "healthledger.heads"


class AnchorFileError(RuntimeError):
    pass


@dataclass(frozen=True)
class AnchoredHead:
    """A signed head as the head file holds it (line: its line number, from 1)."""

    line: int
    position: int
    chain_hash: bytes
    signed_at: datetime
    signature: bytes
    key_id: str
    public_key: bytes


def anchor_file_path(configured: Path | None, signing_key_file: Path) -> Path:
    """The head file: the configured one, else beside the signing key file."""
    return configured if configured is not None else signing_key_file.parent / ANCHOR_FILE_NAME


def anchor_line(
    position: int,
    chain_hash: bytes,
    signed_at: datetime,
    signature: bytes,
    key_id: str,
    public_key: bytes,
) -> bytes:
    """One head's line (with its newline)."""
    record = {
        "position": position,
        "chain_hash": chain_hash.hex(),
        "signed_at": signed_at.isoformat(timespec="microseconds"),
        "signature": signature.hex(),
        "key_id": key_id,
        "public_key": public_key.hex(),
    }
    return (json.dumps(record, separators=(",", ":")) + "\n").encode()


class HeadAnchors:
    """The service's head file: appended to when a head is signed."""

    def __init__(
        self,
        path: Path,
        *,
        database_directory: Path | None = None,
        allow_beside_database: bool = False,
    ) -> None:
        if (
            database_directory is not None
            and not allow_beside_database
            and path.absolute().parent.resolve() == database_directory.resolve()
        ):
            raise AnchorFileError(
                f"the chain's head file {path} is in the database's own directory: whoever "
                "holds the database could rewrite it with the log. Move it and set "
                f"{ANCHOR_FILE_VARIABLE}, or set HEALTHLEDGER_ALLOW_KEY_BESIDE_DATABASE=true"
            )
        self.path = path
        if path.exists():
            problem = exposure(path)
            if problem is not None:
                raise AnchorFileError(f"the chain's head file {path} is not private: {problem}")

    def append(self, line: bytes) -> None:
        """Append one head's line and flush it to disk. One write of one line: lines
        appended by several processes at once do not interleave."""
        make_private_directory(self.path.parent)
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, PRIVATE_FILE_MODE)
        try:
            written = os.write(fd, line)
            if written != len(line):
                raise AnchorFileError(f"the chain's head file {self.path}: a line was cut short")
            os.fsync(fd)
        finally:
            os.close(fd)


def read_anchors(path: Path) -> list[AnchoredHead]:
    """Every head in the file at `path`, in the file's order. AnchorFileError names the
    first line that is not a head's (a partial last line, left by a crash while it was
    written, is skipped: its head was never recorded in the database)."""
    try:
        content = path.read_bytes()
    except OSError as exc:
        raise AnchorFileError(f"cannot read the chain's head file {path}: {exc}") from exc
    lines = content.split(b"\n")
    # After the last newline: empty, or a line whose write did not finish.
    complete, _partial = lines[:-1], lines[-1]
    heads = []
    for number, raw in enumerate(complete, start=1):
        if not raw.strip():
            continue
        try:
            heads.append(_parsed(number, json.loads(raw)))
        except (ValueError, KeyError, TypeError) as exc:
            raise AnchorFileError(
                f"line {number} of the chain's head file {path} is not a signed head: {exc}"
            ) from exc
    return heads


def _parsed(number: int, record: Any) -> AnchoredHead:
    position = record["position"]
    if not isinstance(position, int) or isinstance(position, bool) or position < 1:
        raise ValueError(f"position {position!r}")
    signed_at = datetime.fromisoformat(record["signed_at"])
    if signed_at.tzinfo is None:
        raise ValueError("signed_at has no UTC offset")
    return AnchoredHead(
        line=number,
        position=position,
        chain_hash=bytes.fromhex(record["chain_hash"]),
        signed_at=signed_at,
        signature=bytes.fromhex(record["signature"]),
        key_id=str(record["key_id"]),
        public_key=bytes.fromhex(record["public_key"]),
    )
