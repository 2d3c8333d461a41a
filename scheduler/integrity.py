"""The scheduled integrity check (HEALTHLEDGER_INTEGRITY_CHECK_INTERVAL, a day by
default): the hash chain walked (its signed heads, and the head file's when there is
one) and the read models rebuilt from the log and compared with the live ones (issue 30
§3); the result said in the log and recorded as an `IntegrityCheck` event.

The job runs often (hourly at most) and checks only once the latest recorded check is an
interval old, so a process restarted every day still checks daily, and a deployment of
several processes checks about once per interval (two that look at the same moment may
both check: harmless, and both are recorded).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from healthledger.domain.context import SCHEDULER, CommandContext
from healthledger.domain.integrity import IntegrityChecks, IntegrityFindings
from healthledger.domain.ledger import Clock

log = logging.getLogger("healthledger.scheduler.integrity")


@dataclass(frozen=True)
class IntegrityPorts:
    """What the job reads and calls; the composition root wires them."""

    interval: timedelta
    clock: Clock
    # When the latest check was recorded (None: never).
    last_checked_at: Callable[[], datetime | None]
    # Runs the checks (the adapters: the chain, the head file, the read models).
    run_checks: Callable[[], IntegrityFindings]
    checks: IntegrityChecks


def check_integrity_if_due(ports: IntegrityPorts) -> int:
    """Run the checks if the latest is an interval old: 1 if they ran, else 0."""
    last = ports.last_checked_at()
    if last is not None and ports.clock() < last + ports.interval:
        return 0
    return check_integrity(ports)


def check_integrity(ports: IntegrityPorts) -> int:
    """Run the checks, say the result in the log and record it; 1."""
    ctx = CommandContext.system(SCHEDULER)
    findings = ports.run_checks()
    anchored = (
        "no head file"
        if findings.anchored_heads_checked is None
        else f"{findings.anchored_heads_checked} head(s) of the head file"
    )
    differing = (
        "not compared"
        if findings.read_model_differences is None
        else f"{findings.read_model_differences} differ"
    )
    summary = (
        f"{findings.records_checked} record(s) of the chain, "
        f"{findings.signed_heads_checked} signed head(s), {anchored}; "
        f"read models: {findings.read_model_rows_compared} row(s), {differing}"
    )
    if findings.passed:
        log.info("integrity check passed: %s (check %s)", summary, ctx.request_id)
    else:
        log.error(
            "integrity check FAILED: %s; %s (check %s): `healthledger verify` and "
            "`healthledger verify --read-models` name every problem",
            findings.first_problem,
            summary,
            ctx.request_id,
        )
    ports.checks.record(ctx, findings)
    return 1
