"""The audit trail of one user: its full history, and its state at any instant.

Personal values are never printed, before or after erasure: a sealed field shows as a
placeholder that says whether it can still be opened (its key exists) or was erased.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

from healthledger.adapters.composition import Service
from healthledger.domain.context import attributed
from healthledger.domain.personal_data import ERASED_PLACEHOLDER, SEALED_PLACEHOLDER
from healthledger.domain.users.user import User

_BASE_FIELDS = {
    "originator_id",
    "originator_version",
    "originator_topic",
    "timestamp",
    "actor",
    "request_id",
}


@dataclass(frozen=True)
class AuditEntry:
    timestamp: datetime
    version: int
    event: str
    actor: str
    request_id: str
    changes: dict[str, Any]

    def line(self) -> str:
        changed = ", ".join(f"{k}={_show(v)}" for k, v in self.changes.items())
        return (
            f"{self.timestamp.isoformat()}  v{self.version:<3} {self.event:<20} "
            f"actor={self.actor} request={self.request_id}" + (f"  {changed}" if changed else "")
        )


def _show(value: Any) -> str:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}={_show(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_show(v) for v in value) + "]"
    return str(value)


def _personal_placeholder(key_exists: bool) -> str:
    return SEALED_PLACEHOLDER if key_exists else ERASED_PLACEHOLDER


def history(service: Service, user_id: UUID) -> list[AuditEntry]:
    key_exists = service.key_store.has_key(user_id)
    entries = []
    for event in map(attributed, service.ledger.events.get(user_id)):
        personal = set(getattr(type(event), "PERSONAL_FIELDS", ()))
        changes: dict[str, Any] = {}
        for name, value in vars(event).items():
            if name in _BASE_FIELDS:
                continue
            if name in personal and value is not None:
                changes[name] = _personal_placeholder(key_exists)
            elif name == "changes" and isinstance(value, dict):
                changes.update(
                    {
                        k: (_personal_placeholder(key_exists) if k in personal and v else v)
                        for k, v in value.items()
                    }
                )
            else:
                changes[name] = value
        entries.append(
            AuditEntry(
                timestamp=event.timestamp,
                version=event.originator_version,
                event=type(event).__name__,
                actor=event.actor,
                request_id=event.request_id,
                changes=changes,
            )
        )
    return entries


def state_as_of(service: Service, user_id: UUID, instant: datetime) -> dict[str, Any] | None:
    """The user as it was at `instant` (None if it did not exist yet)."""
    version = service.recorder.version_at(user_id, instant)
    if version is None:
        return None
    user = service.ledger.find(user_id, version=version)
    if not isinstance(user, User):
        return None
    key_exists = service.key_store.has_key(user_id)

    def sealed(value: Any) -> str | None:
        return None if value is None else _personal_placeholder(key_exists)

    time_zone = user.fallback_time_zone
    birth_date = user.sealed_birth_date
    return {
        "as_of": instant,
        "version": user.version,
        "user_id": user.id,
        "team_id": user.team_id,
        "client_user_id": user.client_user_id,
        "status": user.status,
        "created_on": user.created_on,
        "modified_on": user.modified_on,
        "fallback_time_zone": None if time_zone is None else time_zone[0],
        "fallback_birth_date": sealed(birth_date and birth_date[0]),
        "ingestion_start": user.ingestion_start,
        "ingestion_end": user.ingestion_end,
        "demographics": sealed(user.sealed_demographics),
        "deleted_at": user.deleted_at,
        "erasure_due_at": user.erasure_due_at,
        "erased_at": user.erased_at,
    }
