"""The scheduled rotation of the master key (HEALTHLEDGER_MASTER_KEY_ROTATION_INTERVAL).

A rotation rewraps every live data key under a new master key and destroys the old one,
so that no older copy of a destroyed data key (SQLite's WAL, PostgreSQL's WAL, a replica,
a backup) opens any more: the first rotation after an erasure is its horizon. The job
runs often (hourly at most) and rotates only once the latest rotation is an interval old,
so a process restarted every day still rotates weekly; the database's table and lock
decide it, so of several processes one rotates and the others find it done.

Only a key the service keeps itself (the key file) can be replaced unattended. A key from
the environment or a secrets manager needs the operator to store the new one: the job
then says in the log, while a rotation is due, that it cannot, and does nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta

log = logging.getLogger("healthledger.scheduler.key_rotation")


@dataclass(frozen=True)
class KeyRotationPorts:
    """What the job reads and calls; the composition root wires them."""

    interval: timedelta
    # Whether the latest rotation (before the first: the oldest data key) is at least
    # this old.
    is_due: Callable[[timedelta], bool]
    # Rotate if still due under the database's lock: the data keys rewrapped, or None if
    # another process rotated first.
    rotate_if_due: Callable[[timedelta], int | None]
    # Whether the key's source takes the new key by itself (the key file), and its name.
    unattended: bool
    source: str


def rotate_master_key_if_due(ports: KeyRotationPorts) -> int:
    """Rotate the master key if it is due; the data keys rewrapped (0 if nothing done)."""
    if not ports.is_due(ports.interval):
        return 0
    if not ports.unattended:
        log.warning(
            "a master key rotation is due, but the key comes from %s, which the service "
            "cannot write: run `healthledger keys rotate-master --new-key-file PATH` and "
            "store the new key there (docs/operations.md#rotating-the-master-key)",
            ports.source,
        )
        return 0
    try:
        rewrapped = ports.rotate_if_due(ports.interval)
    except Exception as exc:
        # The rotation rolled back (or settled its staged key): the old key still
        # stands, and the next run tries again. The type and first line only: a driver's
        # message may quote the statement's parameters.
        first_line = (str(exc).splitlines() or [""])[0][:200]
        log.error(
            "master key rotation failed, tried again later: %s: %s", type(exc).__name__, first_line
        )
        return 0
    if rewrapped is None:
        return 0  # another process rotated first
    log.info("master key rotated: %d data key(s) rewrapped", rewrapped)
    return rewrapped
