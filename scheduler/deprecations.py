"""The deprecation cut-over sweep: apply every dated cut-over whose date has passed.

It runs at start and then periodically, so a date that passed while the service was down
is applied at the next start. What was applied comes from our own read model (never from
APScheduler's job store), and applying is idempotent: a second sweep, or a second process,
records nothing more.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection

from healthledger.domain.context import SCHEDULER, CommandContext
from healthledger.domain.webhooks.deprecations import Deprecations

log = logging.getLogger("healthledger.scheduler.deprecations")


def apply_cut_overs(
    deprecations: Deprecations, applied_cut_overs: Callable[[], Collection[str]]
) -> list[str]:
    """Apply the cut-overs that are due and not yet in `applied_cut_overs()` (the read
    model's keys); returns the keys this call recorded."""
    ctx = CommandContext.system(SCHEDULER)
    applied = deprecations.apply_due(ctx, applied_cut_overs())
    for key in applied:
        log.info("deprecation cut-over %s applied (sweep %s)", key, ctx.request_id)
    return applied
