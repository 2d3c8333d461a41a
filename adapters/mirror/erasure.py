"""What a `user.erased` message destroys in the customer's database, in the transaction
that records the mirror's `Erased` event (the mirror recorder's `on_record`, beside the
received-message row): the user's key in the mirror's key store, which makes every sealed
identifier in its events unreadable for good, and the user's snapshots, which may hold
what a version 1 event recorded in clear.

`received_webhooks` keeps its rows: they hold no personal value (message id, type, our
user id, outcome, time) and they are the duplicate check, so that a late copy of an old
message is not applied to the erased user.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from healthledger.adapters.persistence.engine.mirror_schema import (
    mirror_snapshots,
    mirror_user_keys,
)
from healthledger.adapters.persistence.keys.key_store import KeyStore
from healthledger.domain.mirror.users import MirroredUser
from sqlalchemy import Connection, delete


def mirror_erasure_effects(conn: Connection, events: Sequence[Any]) -> bool:
    """Destroy the key and the snapshots of each user erased among `events`; whether
    there was one (the caller then clears the key store's old copies)."""
    erased = False
    for event in events:
        if isinstance(event, MirroredUser.Erased):
            KeyStore.destroy(conn, event.originator_id, mirror_user_keys)
            conn.execute(
                delete(mirror_snapshots).where(
                    mirror_snapshots.c.originator_id == event.originator_id
                )
            )
            erased = True
    return erased
