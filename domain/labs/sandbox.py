"""The simulated lab that moves sandbox orders: its steps per collection method, how long
each takes, which orders it fails or cancels, and the results it reports.

Everything it decides about one order is deterministic, drawn from the order's id: the
same order fails (or not) at the same step and reports the same values on every machine
and every run, so a test or a team's integration can count on what it saw.

Steps per method (the official client's statuses; gaps and the issue name the stages):

    testkit             ordered, requisition_created, transit_customer (collecting the
                        sample), delivered_to_lab, completed
    walk_in_test        ordered, requisition_created, appointment_pending, partial_results
                        (the sample with the lab), completed
    at_home_phlebotomy  as walk_in_test
    on_site_collection  ordered, requisition_created, draw_completed (with the lab), completed

A lab cancellation comes instead of the step into `sample_with_lab` (the sample never
reached the lab); a lab failure instead of the step into `completed` (the sample could
not be analysed).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

from healthledger.domain.labs.catalog import ExpectedResult, Marker, ReferenceRange
from healthledger.domain.labs.orders import (
    ABNORMAL,
    COLLECTING_SAMPLE,
    COMPLETED,
    CRITICAL,
    INTERPRETATIONS,
    NORMAL,
    RECEIVED,
    SAMPLE_WITH_LAB,
    status_of,
    top_level,
)

# (top level, low level) of every status of each method, in order; the last is completed.
STEPS: dict[str, tuple[tuple[str, str], ...]] = {
    "testkit": (
        (RECEIVED, "ordered"),
        (RECEIVED, "requisition_created"),
        (COLLECTING_SAMPLE, "transit_customer"),
        (SAMPLE_WITH_LAB, "delivered_to_lab"),
        (COMPLETED, "completed"),
    ),
    "walk_in_test": (
        (RECEIVED, "ordered"),
        (RECEIVED, "requisition_created"),
        (COLLECTING_SAMPLE, "appointment_pending"),
        (SAMPLE_WITH_LAB, "partial_results"),
        (COMPLETED, "completed"),
    ),
    "at_home_phlebotomy": (
        (RECEIVED, "ordered"),
        (RECEIVED, "requisition_created"),
        (COLLECTING_SAMPLE, "appointment_pending"),
        (SAMPLE_WITH_LAB, "partial_results"),
        (COMPLETED, "completed"),
    ),
    "on_site_collection": (
        (RECEIVED, "ordered"),
        (RECEIVED, "requisition_created"),
        (SAMPLE_WITH_LAB, "draw_completed"),
        (COMPLETED, "completed"),
    ),
}
# The low-level status of a lab failure, per method.
FAILURE_STATUS = {
    "testkit": "failure_to_deliver_to_lab",
    "walk_in_test": "sample_error",
    "at_home_phlebotomy": "sample_error",
    "on_site_collection": "sample_error",
}
REQUISITION_CREATED = "requisition_created"

# What the lab does at a step.
ADVANCE = "advance"
COMPLETE = "complete"
FAIL = "fail"
CANCEL = "cancel"

# How an order's results come out when nothing forces them (shares of orders).
_OUTCOME_SHARES = ((NORMAL, 0.75), (ABNORMAL, 0.18), (CRITICAL, 0.07))


@dataclass(frozen=True)
class SandboxPolicy:
    """How the simulated lab behaves (settings): the time each step takes after the one
    before it, in step order (the requisition, collecting the sample, the sample reaching
    the lab, the results), and the shares of orders it fails or cancels."""

    step_delays: Sequence[timedelta] = field(
        default=(
            timedelta(minutes=1),
            timedelta(hours=2),
            timedelta(days=2),
            timedelta(days=1),
        )
    )
    failure_rate: float = 0.03
    cancellation_rate: float = 0.02

    def delay(self, step: int) -> timedelta:
        """The delay before step `step` (1: the first step after `ordered`); the last
        delay stands for any step beyond the list."""
        delays = self.step_delays
        if not delays:
            return timedelta(0)
        return delays[min(step, len(delays)) - 1]


@dataclass(frozen=True)
class Move:
    """The lab's next step for an order: what it does, to which status, and when the step
    after is due (None: none follows by itself)."""

    action: str
    status: str
    next_step_at: datetime | None = None
    sample_id: str | None = None


def steps_of(method: str) -> tuple[str, ...]:
    return tuple(status_of(top, method, low) for top, low in STEPS[method])


def first_status(method: str) -> str:
    return steps_of(method)[0]


def _draw(order_id: UUID, purpose: str) -> float:
    """A number in [0, 1) fixed by the order and what it is drawn for."""
    digest = hashlib.sha256(f"{order_id}\x1f{purpose}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def next_move(
    order_id: UUID, method: str, status: str, now: datetime, policy: SandboxPolicy
) -> Move | None:
    """What the simulated lab does next with an order in `status` (None: nothing, the
    status is final or not one of the method's steps)."""
    status = _in_steps(method, status)
    if status.endswith(_DRAWN_AT_HOME):
        return Move(ADVANCE, status, now + policy.delay(3))
    steps = steps_of(method)
    if status not in steps[:-1]:
        return None
    index = steps.index(status) + 1
    target = steps[index]
    if (
        top_level(target) == SAMPLE_WITH_LAB
        and _draw(order_id, "cancel") < policy.cancellation_rate
    ):
        return Move(CANCEL, status_of("cancelled", method, "cancelled"))
    if top_level(target) == COMPLETED:
        if _draw(order_id, "fail") < policy.failure_rate:
            return Move(FAIL, status_of("failed", method, FAILURE_STATUS[method]))
        return Move(COMPLETE, target)
    sample_id = sample_id_of(order_id) if target.endswith(REQUISITION_CREATED) else None
    return Move(ADVANCE, target, now + policy.delay(index + 1), sample_id)


def results_due(
    method: str,
    status: str,
    next_step_at: datetime | None,
    policy: SandboxPolicy,
    *,
    lag: timedelta = timedelta(0),
) -> datetime | None:
    """When the simulated lab reports the results of an order in `status` whose next step
    is due at `next_step_at`, if every step to them comes as usual (no lab failure or
    cancellation: those are not known ahead). None when no step is due (a final status,
    a production order, an order waiting for an appointment to be booked). `lag`: how
    late the lab may take each step after it is due (its sweep's interval); each step's
    delay runs from when the one before was taken, so the lags of the steps to come add
    up (the latest time, where none is the usual one)."""
    if next_step_at is None or method not in STEPS:
        return None
    steps = steps_of(method)
    status = _in_steps(method, status)
    if status.endswith(_DRAWN_AT_HOME):
        # The booked draw, taken at `next_step_at`, stands where `appointment_pending`
        # does: count from the step before it.
        status = status_of(RECEIVED, method, REQUISITION_CREATED)
    if status not in steps[:-1]:
        return None
    # The next step comes at `next_step_at`; each after it, its own delay later.
    following = range(steps.index(status) + 2, len(steps))
    late = lag * (len(following) + 1)
    return next_step_at + late + sum((policy.delay(step) for step in following), timedelta(0))


# An at-home draw booked (domain/labs/booking.py) is drawn at its time, before the sample
# travels to the lab; a walk-in's sample reaches the lab as it is drawn.
_DRAWN_AT_HOME = ".at_home_phlebotomy.draw_completed"
_APPOINTMENT_STATUSES = ("appointment_scheduled", "appointment_cancelled", "draw_completed")


def _in_steps(method: str, status: str) -> str:
    """The step an appointment's status stands in: a booked at-home draw moves to
    `draw_completed` (returned as the step to take); the others stand where
    `appointment_pending` does, and move on from there."""
    top, low = top_level(status), status.rsplit(".", 1)[-1]
    if top != COLLECTING_SAMPLE or low not in _APPOINTMENT_STATUSES:
        return status
    if method == "at_home_phlebotomy" and low == "appointment_scheduled":
        return status_of(COLLECTING_SAMPLE, method, "draw_completed")
    return status_of(COLLECTING_SAMPLE, method, "appointment_pending")


def sample_id_of(order_id: UUID) -> str:
    """The order's sample (specimen) number: ten digits fixed by the order."""
    digest = hashlib.sha256(f"{order_id}\x1fsample".encode()).digest()
    return f"{int.from_bytes(digest[:8], 'big') % 10**10:010d}"


# -- results ------------------------------------------------------------------------------


def outcome_of(order_id: UUID) -> str:
    """The interpretation the order's results come out with, unless one is forced."""
    draw = _draw(order_id, "outcome")
    for outcome, share in _OUTCOME_SHARES:
        if draw < share:
            return outcome
        draw -= share
    return NORMAL


def interpretation_of(value: float, reference: ReferenceRange) -> str:
    if (reference.critical_low is not None and value < reference.critical_low) or (
        reference.critical_high is not None and value > reference.critical_high
    ):
        return CRITICAL
    if (reference.low is not None and value < reference.low) or (
        reference.high is not None and value > reference.high
    ):
        return ABNORMAL
    return NORMAL


def worst(interpretations: Sequence[str]) -> str:
    return max(interpretations, key=INTERPRETATIONS.index, default=NORMAL)


def reference_text(reference: ReferenceRange) -> str | None:
    """A reference range as labs print it: `low-high`, `<high` or `>low`."""
    low, high = reference.low, reference.high
    if low is not None and high is not None:
        return f"{_number(low)}-{_number(high)}"
    if high is not None:
        return f"<{_number(high)}"
    if low is not None:
        return f">{_number(low)}"
    return None


def _number(value: float) -> str:
    return f"{value:g}"


def _decimals(reference: ReferenceRange) -> int:
    """How many decimals the values of a range are reported with (about three
    significant figures of its scale)."""
    scale = max(abs(b) for b in (reference.low, reference.high, 1.0) if b is not None)
    return max(0, 2 - math.floor(math.log10(scale)))


def _normal_value(reference: ReferenceRange, u: float) -> float:
    low, high = reference.low, reference.high
    if low is not None and high is not None:
        # Inside the range, away from its edges (rounding must not push it out).
        return low + (high - low) * (0.1 + 0.8 * u)
    if high is not None:
        return high * (0.3 + 0.6 * u)
    if low is not None:
        return low * (1.1 + 0.5 * u)
    return 1.0 + 99.0 * u


def _abnormal_value(reference: ReferenceRange, u: float) -> float | None:
    """A value out of range but not critical; None if the range has no bound to cross."""
    low, high = reference.low, reference.high
    if high is not None:
        ceiling = reference.critical_high if reference.critical_high is not None else high * 1.5
        if ceiling > high:
            return high + (ceiling - high) * (0.2 + 0.6 * u)
    if low is not None and low > 0:
        floor = reference.critical_low if reference.critical_low is not None else low * 0.5
        if floor < low:
            return low - (low - floor) * (0.2 + 0.6 * u)
    return None


def _critical_value(reference: ReferenceRange, u: float) -> float | None:
    """A value past a critical bound; None if the range has none (a lab value is never
    below zero, so a critical low of zero cannot be passed)."""
    if reference.critical_high is not None and reference.critical_high > 0:
        return reference.critical_high * (1.1 + 0.3 * u)
    if reference.critical_low is not None and reference.critical_low > 0:
        return reference.critical_low * (0.5 + 0.3 * u)
    return None


# A qualitative (presence) result: what it reads when absent, and when found. Tests by
# nucleic acid amplification say "detected"; antibody and antigen screens "reactive".
NEGATIVE = "negative"
POSITIVE = "positive"
_WORDING = {
    True: {NEGATIVE: "Not detected", POSITIVE: "Detected"},
    False: {NEGATIVE: "Non-reactive", POSITIVE: "Reactive"},
}


def is_qualitative(result: ExpectedResult) -> bool:
    """A result read as present or absent: no unit and no bound at all."""
    reference = result.reference_range
    bounds = (reference.low, reference.high, reference.critical_low, reference.critical_high)
    return result.unit is None and all(bound is None for bound in bounds)


def _reading(result: ExpectedResult, finding: str) -> str:
    amplified = "NAA" in result.loinc.name or "RNA" in result.name or "DNA" in result.name
    return _WORDING[amplified][finding]


@dataclass(frozen=True)
class Results:
    """What the lab reports: one entry per expected result (stored form), and the
    order's interpretation."""

    values: list[dict[str, Any]]
    interpretation: str


Value = float | str


def report_results(order_id: UUID, markers: Sequence[Marker], forced: str | None = None) -> Results:
    """One value per expected result of the markers (a panel's several), deterministic for
    the order. The order's outcome (`outcome_of`, or `forced`) decides which results fall
    out of range: none, one or two (abnormal), or one past a critical bound; where a
    result cannot carry the outcome (a range without the bound, a presence test that is
    never critical), the next one that can does. A presence test reads negative, or
    positive for an abnormal outcome."""
    outcome = forced or outcome_of(order_id)
    expected = [(marker, result) for marker in markers for result in marker.expected_results]
    # Which results carry the outcome: drawn per order, in a fixed order of the results.
    ranked = sorted(
        range(len(expected)), key=lambda i: _draw(order_id, f"rank:{expected[i][1].id}")
    )
    values: dict[int, Value] = {}
    if outcome == CRITICAL:
        _place(order_id, expected, ranked, values, 1, critical=True)
    if outcome in (ABNORMAL, CRITICAL):
        wanted = 1 + (_draw(order_id, "abnormal_count") < 0.4) if outcome == ABNORMAL else 1
        _place(order_id, expected, ranked, values, wanted, critical=False)
    found = []
    for index, (marker, result) in enumerate(expected):
        value = values.get(index)
        if value is None:
            value = (
                NEGATIVE
                if is_qualitative(result)
                else _normal_value(result.reference_range, _draw(order_id, f"value:{result.id}"))
            )
        found.append(_entry(marker, result, value))
    return Results(found, worst([entry["interpretation"] for entry in found]))


def _place(
    order_id: UUID,
    expected: list[tuple[Marker, ExpectedResult]],
    ranked: list[int],
    values: dict[int, Value],
    wanted: int,
    *,
    critical: bool,
) -> None:
    placed = 0
    for index in ranked:
        if placed == wanted:
            return
        if index in values:
            continue
        result = expected[index][1]
        value: Value | None
        if is_qualitative(result):
            value = None if critical else POSITIVE
        else:
            make = _critical_value if critical else _abnormal_value
            value = make(result.reference_range, _draw(order_id, f"out:{result.id}"))
        if value is not None:
            values[index] = value
            placed += 1


def _entry(marker: Marker, result: ExpectedResult, value: Value) -> dict[str, Any]:
    reference = result.reference_range
    number: float | None = None
    if isinstance(value, str):
        reading = _reading(result, value)
        interpretation = ABNORMAL if value == POSITIVE else NORMAL
    else:
        number = round(value, _decimals(reference))
        reading = _number(number)
        interpretation = interpretation_of(number, reference)
    return {
        "marker_id": marker.id,
        "marker_name": marker.name,
        "marker_slug": marker.slug,
        "marker_provider_id": marker.provider_id,
        "expected_result_id": result.id,
        "name": result.name,
        "slug": result.slug,
        "provider_id": result.provider_id,
        "loinc": result.loinc.code,
        "loinc_slug": result.loinc.slug,
        # The number (null for a presence test) and the result as the report prints it.
        "value": number,
        "result": reading,
        "type": "coded_value" if number is None else "numeric",
        "unit": result.unit,
        "reference_range": {
            "low": reference.low,
            "high": reference.high,
            "critical_low": reference.critical_low,
            "critical_high": reference.critical_high,
            "text": reference_text(reference)
            or (None if number is not None else _reading(result, NEGATIVE)),
        },
        "interpretation": interpretation,
    }
