"""What a lab test order answers: the order (`GET /v3/order/{id}`, listings, webhooks,
time travel), its results (`GET /v3/order/{id}/result`) and a critical result's notice
(`labtest.result.critical`), in the official client's shapes (`ClientFacingOrder`,
`LabResultsRaw`, `ClientFacingCriticalResult`) with the spec's fields among them.

What the order answers beside its statuses is what the service holds of it: when its
results are expected (the simulated lab's estimate, ADR 0041: computed from the row's
status and next step as its tracking computes it), its booked appointment, its billing
and its requisition's address. Members the service cannot know are null, each saying
why (`order`).

Every answer is rendered from an `OrderRow`: the `orders` read model's row for the live
reads, or the aggregate as it was (`OrderRow.of`) for `as_of` and for the webhook of an
event, which carries the order as that event left it. Sealed values are opened with the
vault given: the key store for live answers, a `PlaceholderVault` for the past (a value
erased since shows as the erased placeholder).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, timedelta
from decimal import Decimal
from typing import Any, Protocol
from uuid import UUID, uuid5

from healthledger.adapters.persistence.projections.orders import statuses_of
from healthledger.adapters.reference.labs import slugify
from healthledger.domain.instants import as_utc
from healthledger.domain.labs.appointments import ORDER_SCHEDULED, appointment_id_of
from healthledger.domain.labs.billing import CLIENT_BILL
from healthledger.domain.labs.catalog import LabCatalog, Marker
from healthledger.domain.labs.documents import REQUISITION, printable
from healthledger.domain.labs.orders import (
    COMPLETED,
    CRITICAL,
    Order,
    OrderedTest,
    ResultsNotReady,
    low_level,
    top_level,
)
from healthledger.domain.labs.sandbox import SandboxPolicy
from healthledger.domain.labs.tracking import results_expected
from healthledger.domain.personal_data import ERASED_PLACEHOLDER, address_answer

# The order's collection details' id (ClientFacingOrderDetails.data.id): fixed per order.
_DETAILS_NAMESPACE = UUID("0b7e2d5c-4a19-5f83-b6e2-9c1d7a3f5e08")
_LAB_NAME = "healthledger sandbox lab"
# The members a past answer shows, each as the placeholder, once the values are erased.
_DETAIL_MEMBERS = ("first_name", "last_name", "dob", "gender", "phone_number", "email")
_ADDRESS_MEMBERS = ("first_line", "second_line", "zip_code", "zip", "country", "state", "city")


class OpensSealed(Protocol):
    """What opens an order's sealed values: the key store (the vault), the past's
    placeholder vault, or one user's key (`UsersKey`)."""

    def open(self, user_id: UUID, sealed: str) -> Any | None: ...


class UsersKey:
    """One user's key, unwrapped once for the several values of one answer (None: the
    key is gone, every value opens to None)."""

    def __init__(self, cipher: Any | None) -> None:
        self.cipher = cipher

    def open(self, user_id: UUID, sealed: str) -> Any | None:
        return None if self.cipher is None else self.cipher.open(sealed)


@dataclass(frozen=True)
class OrderRow:
    """An order as the `orders` read model holds it (the columns its answers read), with
    its interpretation opened (the row holds it sealed). `clear_lab_test`: the test of an
    order replayed from an event recorded before the test was sealed (none once the start
    redacted it)."""

    order_id: UUID
    team_id: UUID
    user_id: UUID
    environment: str
    sealed_lab_test: str | None
    lab_id: int
    collection_method: str
    status: str
    detailed_status: str
    interpretation: str | None
    sample_id: str | None
    sealed_patient_details: str
    sealed_patient_address: str
    sealed_results: str | None
    events: list[dict[str, Any]]
    created_at: datetime
    updated_at: datetime
    clear_lab_test: OrderedTest | None = None
    # The day it is to be dispatched to the lab (None: at once; domain/labs/activation.py).
    activate_by: date | None = None
    # When the simulated lab takes its next step (None: none is due by itself).
    due_at: datetime | None = None
    # As placed: a priority (STAT) order, its diagnoses and the team's string (both sealed;
    # None: none sent).
    priority: bool = False
    sealed_icd_codes: str | None = None
    sealed_passthrough: str | None = None

    @classmethod
    def from_row(cls, row: Any, vault: OpensSealed) -> OrderRow:
        """The read model's row, its interpretation opened with `vault`."""
        values = {
            name: getattr(row, name)
            for name in cls.__dataclass_fields__
            if name not in ("events", "clear_lab_test", "interpretation")
        }
        return cls(
            **values,
            events=statuses_of(row.events),
            interpretation=_opened(vault, row.user_id, row.sealed_interpretation),
        )

    @classmethod
    def of(cls, order: Order, vault: OpensSealed) -> OrderRow:
        """The row the projection made of `order` (as it was: loaded at a version)."""
        interpretation = _opened(vault, order.user_id, order.sealed_interpretation)
        return cls(
            order_id=order.id,
            team_id=order.team_id,
            user_id=order.user_id,
            environment=order.environment,
            sealed_lab_test=order.sealed_lab_test,
            lab_id=order.lab_id,
            collection_method=order.collection_method,
            status=order.top_level_status,
            detailed_status=order.status,
            interpretation=interpretation,
            sample_id=order.sample_id,
            sealed_patient_details=order.sealed_patient_details,
            sealed_patient_address=order.sealed_patient_address,
            sealed_results=order.sealed_results,
            events=[
                {"status": status, "created_at": as_utc(at).isoformat()}
                for status, at in order.history
            ],
            created_at=order.created_on,
            updated_at=order.modified_on,
            clear_lab_test=order.clear_lab_test,
            activate_by=order.activate_by,
            due_at=order.next_step_at,
            priority=order.priority,
            sealed_icd_codes=order.sealed_icd_codes,
            sealed_passthrough=order.sealed_passthrough,
        )


def _opened(vault: OpensSealed, user_id: UUID, sealed: str | None) -> str | None:
    """A sealed interpretation opened (None: no results yet, or the key is gone)."""
    opened = None if sealed is None else vault.open(user_id, sealed)
    return None if opened is None else str(opened)


class OrderAnswers:
    """`policy` and `lag`: the simulated lab's step delays and how late its sweep may take
    a step (the sweep's interval), which date the results; `base_url`: the service's
    public address, of the requisition's URL."""

    def __init__(
        self,
        catalog: LabCatalog,
        vault: OpensSealed,
        policy: SandboxPolicy,
        *,
        lag: timedelta,
        base_url: str,
    ) -> None:
        self.catalog = catalog
        self.vault = vault
        self.policy = policy
        self.lag = lag
        self.base_url = base_url.rstrip("/")

    def with_vault(self, vault: OpensSealed) -> OrderAnswers:
        """The same answers, opening sealed values with another vault (the past's)."""
        return OrderAnswers(self.catalog, vault, self.policy, lag=self.lag, base_url=self.base_url)

    def row_of(self, stored: Any) -> OrderRow:
        """The `orders` read model's row, its sealed interpretation opened."""
        return OrderRow.from_row(stored, self.vault)

    # -- the order ----------------------------------------------------------------------

    def order(self, row: OrderRow) -> dict[str, Any]:
        """ClientFacingOrder, and ours: `detailed_status`, the current full status."""
        details = self._open(row, row.sealed_patient_details)
        address = self._open(row, row.sealed_patient_address)
        if not isinstance(details, dict):  # erased since (a past answer): every member
            details = dict.fromkeys(_DETAIL_MEMBERS, details)
        address = (
            address_answer(address)
            if isinstance(address, dict)
            else dict.fromkeys(_ADDRESS_MEMBERS, address)
        )
        has_results = row.sealed_results is not None
        events = [
            {"id": index, "created_at": event["created_at"], "status": event["status"]}
            for index, event in enumerate(row.events, start=1)
        ]
        expected, worst_case = self._results_by(row)
        return {
            "id": str(row.order_id),
            "user_id": str(row.user_id),
            "team_id": str(row.team_id),
            "patient_details": details,
            "patient_address": address,
            "lab_test": self.lab_test(row),
            "details": {
                "type": row.collection_method,
                "data": {
                    "id": str(uuid5(_DETAILS_NAMESPACE, str(row.order_id))),
                    "created_at": row.created_at,
                    "updated_at": row.updated_at,
                    "appointment_id": _appointment_id(row),
                },
            },
            "sample_id": row.sample_id,
            # Nothing gives an order notes: neither the placing request (the official
            # clients' create_order has none) nor a later one. An appointment's notes are
            # the appointment's own (its answer).
            "notes": None,
            "created_at": row.created_at,
            "updated_at": row.updated_at,
            "events": events,
            # An order always has its first event (ordered): the newest is the last.
            "last_event": events[-1],
            "status": row.status,
            "detailed_status": row.detailed_status,
            "interpretation": row.interpretation,
            "has_missing_results": False if has_results else None,
            # No order has insurance: this deployment bills the team only (billing.py),
            # and a request that attaches insurance is refused.
            "health_insurance_id": None,
            "requisition_form_url": (
                f"{self.base_url}/v3/order/{row.order_id}/requisition/pdf"
                if printable(REQUISITION, row.detailed_status)
                else None
            ),
            "priority": row.priority,
            "activate_by": None if row.activate_by is None else row.activate_by.isoformat(),
            "passthrough": self._opened_or_none(row, row.sealed_passthrough),
            # Every order is billed to the team: the only bill type placing accepts.
            "billing_type": CLIENT_BILL,
            "icd_codes": self.icd_codes(row),
            "has_abn": False,
            "expected_result_by_date": expected,
            "worst_case_result_by_date": worst_case,
        }

    def _results_by(self, row: OrderRow) -> tuple[str | None, str | None]:
        """The (UTC) days the results are expected by: as the simulated lab's steps come
        when due, and at the latest, each step to come taken a sweep late (a completed
        order's: the day they came). Null when no estimate is known: a production order
        (its lab's times are not told ahead), a cancelled or failed one, or one waiting for
        an appointment to be booked (ADR 0041)."""
        at = as_utc(datetime.fromisoformat(row.events[-1]["created_at"]))
        days = []
        for lag in (timedelta(0), self.lag):
            due = results_expected(
                row.collection_method, row.detailed_status, at, row.due_at, self.policy, lag=lag
            )
            days.append(None if due is None else as_utc(due).date().isoformat())
        return days[0], days[1]

    def ordered_test(self, row: OrderRow) -> OrderedTest | None:
        """The test ordered, opened with the user's key (None: erased since)."""
        if row.sealed_lab_test is None:
            return row.clear_lab_test
        return OrderedTest.of_opened(self._open(row, row.sealed_lab_test))

    def lab_test(self, row: OrderRow) -> dict[str, Any]:
        """The lab test ordered, as ClientFacingLabTest: its markers and lab from the
        catalog (a marker the catalog dropped since is left out). Erased since (a past
        answer): its id, slug and name as the placeholder, and no markers."""
        lab = self.catalog.lab(row.lab_id)
        test = self.ordered_test(row)
        marker_ids = () if test is None else test.marker_ids
        markers = [m for m in map(self.catalog.marker, marker_ids) if m is not None]
        return {
            "id": ERASED_PLACEHOLDER if test is None else str(test.lab_test_id),
            # As `GET /v3/lab_tests` answers the test (adapters/http/lab_tests.py).
            "slug": ERASED_PLACEHOLDER if test is None else slugify(test.name),
            "name": ERASED_PLACEHOLDER if test is None else test.name,
            # A test kit's sample is the lab's kit sample (its first type); a draw is serum.
            "sample_type": lab.sample_types[0]
            if lab and lab.sample_types and row.collection_method == "testkit"
            else "serum",
            "method": row.collection_method,
            "price": float(sum((marker_price(m) for m in markers), Decimal(0))),
            "is_active": True,
            "status": "active",
            "fasting": False,
            "lab": None
            if lab is None
            else {
                "id": lab.id,
                "slug": lab.slug,
                "name": lab.name,
                "first_line_address": lab.first_line_address,
                "city": lab.city,
                "zipcode": lab.zipcode,
                "collection_methods": list(lab.collection_methods),
                "sample_types": list(lab.sample_types),
            },
            "markers": [_marker(m) for m in markers],
            "is_delegated": False,
            "auto_generated": False,
        }

    # -- results ------------------------------------------------------------------------

    def results(self, row: OrderRow) -> dict[str, Any]:
        """LabResultsRaw: the report's metadata and one result per expected result.
        ResultsNotReady until the order is completed."""
        if row.sealed_results is None or row.status != COMPLETED:
            raise ResultsNotReady()
        values = self._open(row, row.sealed_results)
        details = self._open(row, row.sealed_patient_details)
        reported = as_utc(datetime.fromisoformat(row.events[-1]["created_at"]))
        collected = _stage_time(row, "sample_with_lab") or reported
        lab = self.catalog.lab(row.lab_id)
        laboratory = lab.name if lab is not None else _LAB_NAME
        results = (
            [_result(value, reported, laboratory, row.sample_id) for value in values]
            if isinstance(values, list)
            else values
        )
        return {
            "metadata": {
                **_patient_metadata(details, reported.date()),
                "clia_#": None,
                "provider": None,
                "laboratory": laboratory,
                "date_reported": reported.isoformat(),
                "date_collected": collected.isoformat(),
                "specimen_number": row.sample_id or "",
                "date_received": collected.isoformat(),
                "status": "final",
                "interpretation": row.interpretation,
                "patient_id": str(row.user_id),
                "account_id": None,
            },
            "results": results,
            "missing_results": [],
            "sample_information": {},
            "order_id": str(row.order_id),
            "interpretation": row.interpretation,
        }

    def critical(self, row: OrderRow) -> dict[str, Any]:
        """ClientFacingCriticalResult: the notice of a critical result (no value in it)."""
        return {
            "order_id": str(row.order_id),
            "sample_id": row.sample_id or "",
            "status": "final",
            "interpretation": CRITICAL,
            "team_id": str(row.team_id),
            "user_id": str(row.user_id),
            "created_at": row.updated_at,
            "updated_at": row.updated_at,
        }

    def icd_codes(self, row: OrderRow) -> list[str] | None:
        """The diagnoses the order was placed with (None: none). Erased since (a past
        answer): one member, the placeholder, so that the answer keeps the client's type
        (a list of strings)."""
        codes = self._opened_or_none(row, row.sealed_icd_codes)
        if codes is None or isinstance(codes, list):
            return codes
        return [str(codes)]

    def _open(self, row: OrderRow, sealed: str) -> Any:
        return self.vault.open(row.user_id, sealed)

    def _opened_or_none(self, row: OrderRow, sealed: str | None) -> Any:
        return None if sealed is None else self._open(row, sealed)


def _appointment_id(row: OrderRow) -> str | None:
    """The order's appointment, once one was booked (a walk-in's or an at-home draw's:
    one per order, its id derived from the order's, so it stays through a cancellation
    and a new booking, its own answer saying which). Null before: an at-home draw
    requested of a network that has not booked its time shows in the order's statuses as
    the lab's own wait for an appointment (`appointment_pending`), so the order's row
    cannot tell it apart; the appointment's own route answers it."""
    if any(low_level(event["status"]) == ORDER_SCHEDULED for event in row.events):
        return str(appointment_id_of(row.order_id))
    return None


def _stage_time(row: OrderRow, stage: str) -> datetime | None:
    for event in row.events:
        if top_level(event["status"]) == stage:
            return as_utc(datetime.fromisoformat(event["created_at"]))
    return None


def marker_price(marker: Marker) -> Decimal:
    """A marker's catalog price; 0 where the lab gives a textual placeholder."""
    try:
        return Decimal(marker.price)
    except ArithmeticError:
        return Decimal(0)  # a textual placeholder where the lab gives no price


def _marker(marker: Marker) -> dict[str, Any]:
    return {
        "id": marker.id,
        "name": marker.name,
        "slug": marker.slug,
        "description": marker.description,
        "lab_id": marker.lab_id,
        "provider_id": marker.provider_id,
        "type": marker.type,
        "unit": marker.unit,
        "price": marker.price,
        "a_la_carte_enabled": marker.a_la_carte_enabled,
    }


def _patient_metadata(details: Any, on: date) -> dict[str, str]:
    """The patient as a lab report names them: name, date of birth, age."""
    if not isinstance(details, dict):
        # Erased since (a past answer): the placeholder stands for each value.
        return {"patient": str(details), "dob": str(details), "age": str(details)}
    born = date.fromisoformat(details["dob"])
    age = on.year - born.year - ((on.month, on.day) < (born.month, born.day))
    return {
        "patient": f"{details['first_name']} {details['last_name']}",
        "dob": born.isoformat(),
        "age": str(age),
    }


def _result(
    value: dict[str, Any], reported: datetime, laboratory: str, sample_id: str | None
) -> dict[str, Any]:
    """One BiomarkerResult, with ours beside the client's fields: the numeric `value`
    (null for a presence test, whose `result` reads e.g. "Non-reactive") and the whole
    reference range (critical bounds included)."""
    reference = value["reference_range"]
    number = value["value"]
    low, high = reference["low"], reference["high"]
    measured = number is not None
    return {
        "name": value["name"],
        "slug": value["slug"],
        "result": value["result"],
        "value": number,
        "type": value["type"],
        "unit": value["unit"],
        "timestamp": reported.isoformat(),
        "notes": None,
        "reference_range": reference["text"],
        "min_range_value": low,
        "max_range_value": high,
        "is_above_max_range": measured and high is not None and number > high,
        "is_below_min_range": measured and low is not None and number < low,
        "interpretation": value["interpretation"],
        "critical_low": reference["critical_low"],
        "critical_high": reference["critical_high"],
        "loinc": value["loinc"],
        "loinc_slug": value["loinc_slug"],
        "provider_id": value["provider_id"],
        "expected_result_id": value["expected_result_id"],
        "source_markers": [
            {
                "marker_id": value["marker_id"],
                "name": value["marker_name"],
                "slug": value["marker_slug"],
                "provider_id": value["marker_provider_id"],
            }
        ],
        "performing_laboratory": laboratory,
        "source_sample_id": sample_id,
    }
