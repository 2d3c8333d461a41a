"""A user's summary and device ids (issue 29 §1, ADR 0057).

A summary's public id names one summary for good: the same user, provider, resource and
day (or session: the provider's id), so that an `updated` webhook names the object its
`created` one announced and a getter answers it with that id. A device's id is stable per
user and provider. They were `uuid5(user, provider, resource, key)` and `uuid5(user,
provider)`: the user's id stays in clear after the erasure (the proof of it), so whoever
holds a stored id (the session index names every sleep and workout by it, and PostgreSQL's
WAL, replicas and backups keep its rows as inserted) tries the catalog's few dozen slugs
against it and learns which makers the person had (ADR 0049).

A user whose data key is of the keyed-ids format (every key made since ADR 0057:
`adapters/persistence/keys/key_store.py`) has keyed ids: 128 bits of HMAC-SHA256 under
the user's digest key over the names, shaped as a version-4 UUID (`stream_ids.keyed_uuid`,
as the keyed stream ids). They are as stable as before (the key never changes while the
user exists; a master key rotation rewraps the same key) and, once the key is destroyed,
no one can recompute or test them. A user whose key is older keeps the uuid5s it has been
answered with: an id a customer holds must not change. Its days from the cut-over on
(revision 0050: a week after the revision ran, days no one can have been answered yet)
take keyed ids too; a session's id goes by the day it is stored under. Devices' ids are
never stored: an older user's stay as they were.

Every derivation of these ids is here (`SummaryIds`); a user's comes with its key
(`UserCipher.summary_ids`).
"""

from __future__ import annotations

import uuid
from datetime import date
from uuid import UUID

from healthledger.domain.connections.stream_ids import UsersDigest, keyed_uuid

# The id answered in place of one that can no longer be derived: a device of an erased
# user read as of an instant before its erasure (its key is gone, its maker a placeholder).
ERASED_ID = uuid.UUID(int=0)

# The namespaces of the unkeyed ids (users whose keys predate keyed ids).
_SUMMARY_NAMESPACE = uuid.UUID("0d5f0c1e-8a61-5b7e-9c2f-4e3a1b6d7c80")
_DEVICE_NAMESPACE = uuid.UUID("6c1b7e5a-3f0d-5a8e-b2c4-9d7e1f0a3b6c")


def legacy_summary_id(user_id: UUID, provider: str, resource: str, key: str) -> UUID:
    """The unkeyed id of a summary of a user whose key predates keyed ids (guessable by
    whoever holds the user's id)."""
    return uuid.uuid5(_SUMMARY_NAMESPACE, f"{user_id}\x1f{provider}\x1f{resource}\x1f{key}")


def legacy_device_id(user_id: UUID, provider: str) -> UUID:
    """The unkeyed id of a device of a user whose key predates keyed ids."""
    return uuid.uuid5(_DEVICE_NAMESPACE, f"{user_id}\x1f{provider}")


class SummaryIds:
    """One user's summary and device ids. `digest`: the user's keyed digest (None: every id
    unkeyed). `keyed_from`: with a digest, the first day whose summary ids are keyed, for a
    user whose key predates keyed ids (the cut-over); None: every id keyed."""

    __slots__ = ("_digest", "_keyed_from", "user_id")

    def __init__(
        self, user_id: UUID, digest: UsersDigest | None, keyed_from: date | None = None
    ) -> None:
        self.user_id = user_id
        self._digest = digest
        self._keyed_from = keyed_from

    @property
    def keyed(self) -> bool:
        """Whether every id is keyed (a user created since ADR 0057)."""
        return self._digest is not None and self._keyed_from is None

    def summary(self, provider: str, resource: str, day: date, key: str) -> UUID:
        """The id of the user's summary of `resource` from `provider` stored under `day`,
        named by `key`: the day's iso date for a daily summary, the provider's id for a
        session."""
        if self._digest is None or (self._keyed_from is not None and day < self._keyed_from):
            return legacy_summary_id(self.user_id, provider, resource, key)
        label = "\x1f".join((provider, resource, key)).encode()
        return keyed_uuid(self._digest, b"summary-id\x1f" + label)

    def device(self, provider: str) -> UUID:
        """The id of the user's device of `provider` (one per connection)."""
        if self._digest is None or self._keyed_from is not None:
            return legacy_device_id(self.user_id, provider)
        return keyed_uuid(self._digest, b"device-id\x1f" + provider.encode())
