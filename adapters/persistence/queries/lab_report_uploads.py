"""Lab reports uploaded to the parser, kept until their job ends (the domain's
`ReportUploads`, domain/labs/report_parsing.py): one row per job, its files packed
together and sealed with the user's data key as bytes, bound to the job's id (a row's
files do not open as another's). The rows are also the worker's queue, oldest first.
The user's erasure deletes them (`lab_report_uploads`, a place of ERASURE_REMOVES)."""

from __future__ import annotations

import struct
from collections.abc import Sequence
from datetime import datetime
from uuid import UUID

from healthledger.adapters.persistence.engine.database import Database
from healthledger.adapters.persistence.engine.schema import lab_report_uploads
from healthledger.adapters.persistence.keys.key_store import KeyStore
from healthledger.domain.ledger import Clock
from sqlalchemy import delete, insert, select

U = lab_report_uploads.c
# Jobs the worker is handed per look (the rest wait for the next).
_PER_LOOK = 100


def _context(job_id: UUID) -> bytes:
    return b"lab_report_upload:" + job_id.bytes


def pack(files: Sequence[bytes]) -> bytes:
    """The files as one byte string: their count, then each one's length and bytes."""
    parts = [struct.pack(">I", len(files))]
    for data in files:
        parts += [struct.pack(">Q", len(data)), data]
    return b"".join(parts)


def unpack(packed: bytes) -> list[bytes]:
    (count,) = struct.unpack_from(">I", packed)
    at, files = 4, []
    for _ in range(count):
        (size,) = struct.unpack_from(">Q", packed, at)
        at += 8
        files.append(packed[at : at + size])
        at += size
    return files


class SqlReportUploads:
    def __init__(self, db: Database, key_store: KeyStore, clock: Clock) -> None:
        self.db = db
        self.key_store = key_store
        self.clock = clock

    def keep(self, job_id: UUID, team_id: UUID, user_id: UUID, files: Sequence[bytes]) -> bool:
        with self.db.write() as conn:
            # The key read in the transaction that stores: never minted for an erased user.
            cipher = self.key_store.cipher_on(conn, user_id)
            if cipher is None:
                return False
            conn.execute(
                insert(lab_report_uploads).values(
                    job_id=job_id,
                    team_id=team_id,
                    user_id=user_id,
                    uploaded_at=self.clock(),
                    files=cipher.seal_raw(pack(files), _context(job_id)),
                )
            )
        return True

    def open(self, job_id: UUID, user_id: UUID) -> list[bytes] | None:
        with self.db.read() as conn:
            sealed = conn.execute(
                select(U.files).where(U.job_id == job_id, U.user_id == user_id)
            ).scalar_one_or_none()
            if sealed is None:
                return None
            cipher = self.key_store.cipher_on(conn, user_id)
        if cipher is None:
            return None
        return unpack(cipher.open_raw(bytes(sealed), _context(job_id)))

    def discard(self, job_id: UUID) -> None:
        with self.db.write() as conn:
            conn.execute(delete(lab_report_uploads).where(U.job_id == job_id))

    def waiting(self) -> list[tuple[UUID, datetime]]:
        with self.db.read() as conn:
            rows = conn.execute(
                select(U.job_id, U.uploaded_at).order_by(U.uploaded_at, U.job_id).limit(_PER_LOOK)
            )
            return [(row.job_id, row.uploaded_at) for row in rows]

    def count(self, user_id: UUID) -> int:
        """The user's uploads still kept (what the erasure deletes)."""
        with self.db.read() as conn:
            return len(conn.execute(select(U.job_id).where(U.user_id == user_id)).all())
