"""The printed documents of lab testing (docs/labs.md, Documents; ADR 0037): an order's
requisition, specimen labels, ABN, collection instructions and result report, and a lab
test's collection instructions, as PDFs.

Each is a Jinja2 template under adapters/templates/labs/ (autoescaped, loading nothing
from outside), printed by headless Chromium through the one PDF path of the project
(`printing.render_pdf`, which prints the deletion report too). The patient's
details come from the order's sealed values, opened for the request and dropped with it:
nothing rendered is stored. Barcodes are Code 128 of the requisition number, drawn as
inline SVG by python-barcode.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any

import barcode
from barcode.writer import SVGWriter
from healthledger.adapters.answers.orders import OrderAnswers, OrderRow, marker_price
from healthledger.adapters.persistence.queries.lab_tests import LabTestRow
from healthledger.adapters.printing import render_pdf
from healthledger.adapters.reference import icd10
from healthledger.domain.instants import as_utc
from healthledger.domain.labs.catalog import Lab, LabCatalog, Marker
from healthledger.domain.labs.documents import (
    ABN,
    COLLECTION_INSTRUCTIONS,
    LABELS,
    REQUISITION,
    RESULT_REPORT,
    require_printable,
    requisition_number,
)
from healthledger.domain.personal_data import address_answer
from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape
from markupsafe import Markup

# Every document's own environment, as the deletion report has its own: the shared
# templates folder, autoescaping on, and a name a template misspells is an error.
_TEMPLATES = Environment(
    loader=PackageLoader("healthledger.adapters", "templates"),
    autoescape=select_autoescape(["html"]),
    undefined=StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)

_METHOD_LABELS = {
    "testkit": "Test kit, collected at home",
    "walk_in_test": "Walk-in draw at a patient service center",
    "at_home_phlebotomy": "At-home draw by a phlebotomist",
    "on_site_collection": "On-site collection",
}


def code128_svg(value: str) -> Markup:
    """`value` as a Code 128 barcode, an inline SVG element (its digits printed under
    the bars). The value is the requisition number, digits only: nothing to escape, and
    the SVG is the library's own drawing, so it is marked safe."""
    drawn = barcode.Code128(value, writer=SVGWriter()).render(
        {"module_width": 0.3, "module_height": 12.0, "font_size": 8, "text_distance": 4}
    )
    text = drawn.decode("utf-8")
    return Markup(text[text.index("<svg") :])


@dataclass(frozen=True)
class Heading:
    """Who a document is from and for: the lab, the team that ordered, the date."""

    lab: Lab | None
    team_name: str
    printed_on: date


@dataclass(frozen=True)
class LabDocuments:
    """Renders the documents from an order's row (as `OrderAnswers` opens it) or a lab
    test's row. `team_name(team_id)` names the ordering team; `printer` prints a
    document's HTML (headless Chromium's PDF; the escaping tests keep the HTML itself)."""

    catalog: LabCatalog
    answers: OrderAnswers
    team_name: Callable[[Any], str]
    clock: Callable[[], datetime]
    printer: Callable[[str], bytes] = render_pdf

    # -- the order's documents ----------------------------------------------------------

    def requisition(self, row: OrderRow) -> bytes:
        require_printable(REQUISITION, row.detailed_status)
        context = self._order_context(row)
        # As placed: a STAT order is marked so, and its diagnoses (opened now; the lab
        # bills and reads the order by them) printed with their descriptions. The
        # requisition's alone: the other papers would open the codes, and the first would
        # read the code list, for nothing.
        context["priority"] = row.priority
        context["diagnoses"] = [
            (code, icd10.description(code)) for code in self.answers.icd_codes(row) or ()
        ]
        return self._print("labs/requisition.html", context)

    def labels(self, row: OrderRow, collection_date: datetime, count: int) -> bytes:
        require_printable(LABELS, row.detailed_status)
        context = self._order_context(row)
        context["collected"] = (
            as_utc(collection_date).astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")
        )
        context["labels"] = range(count)
        return self._print("labs/labels.html", context)

    def abn(self, row: OrderRow) -> bytes:
        require_printable(ABN, row.detailed_status)
        return self._print("labs/abn.html", self._order_context(row))

    def order_instructions(self, row: OrderRow) -> bytes:
        require_printable(COLLECTION_INSTRUCTIONS, row.detailed_status)
        context = self._order_context(row)
        context["fasting"] = False
        return self._print("labs/collection_instructions.html", context)

    def result_report(self, row: OrderRow) -> bytes:
        require_printable(RESULT_REPORT, row.detailed_status)
        results = self.answers.results(row)
        context = self._order_context(row)
        context["report"] = results["metadata"]
        context["results"] = results["results"]
        context["interpretation"] = results["interpretation"]
        return self._print("labs/result_report.html", context)

    # -- a lab test's -------------------------------------------------------------------

    def lab_test_instructions(self, row: LabTestRow) -> bytes:
        view = row.view
        markers = self._markers(view.marker_ids)
        context = {
            "heading": self._heading(view.lab_id, view.team_id),
            "order": None,
            "patient": None,
            "test_name": view.name,
            "method": view.method,
            "method_label": _METHOD_LABELS.get(view.method, view.method),
            "markers": markers,
            "sample_type": self._sample_type(view.lab_id, view.method),
            "fasting": row.fasting,
        }
        return self._print("labs/collection_instructions.html", context)

    # -- helpers ------------------------------------------------------------------------

    def _order_context(self, row: OrderRow) -> dict[str, Any]:
        """What every order document prints: the heading, the order and its number, the
        patient (opened now), the test and its markers."""
        test = self.answers.ordered_test(row)
        details = self.answers.vault.open(row.user_id, row.sealed_patient_details)
        address = self.answers.vault.open(row.user_id, row.sealed_patient_address)
        number = requisition_number(row.order_id)
        markers = self._markers(() if test is None else test.marker_ids)
        return {
            "heading": self._heading(row.lab_id, row.team_id),
            "order": {
                "id": str(row.order_id),
                "number": number,
                "barcode": code128_svg(number),
                "placed": row.created_at.date().isoformat(),
                "status": row.detailed_status,
            },
            "patient": _patient(details, address),
            "test_name": "" if test is None else test.name,
            "method": row.collection_method,
            "method_label": _METHOD_LABELS.get(row.collection_method, row.collection_method),
            "markers": markers,
            "total": f"{sum((marker_price(m) for m in markers), Decimal(0)):.2f}",
            "sample_type": self._sample_type(row.lab_id, row.collection_method),
        }

    def _heading(self, lab_id: int, team_id: Any) -> Heading:
        team = "" if team_id is None else self.team_name(team_id)
        return Heading(self.catalog.lab(lab_id), team, self.clock().date())

    def _markers(self, marker_ids: Any) -> list[Marker]:
        return [m for m in map(self.catalog.marker, marker_ids) if m is not None]

    def _sample_type(self, lab_id: int, method: str) -> str:
        lab = self.catalog.lab(lab_id)
        if method == "testkit" and lab is not None and lab.sample_types:
            return lab.sample_types[0].replace("_", " ")
        return "serum"

    def _print(self, template: str, context: dict[str, Any]) -> bytes:
        return self.printer(render_html(template, context))


def render_html(template: str, context: dict[str, Any]) -> str:
    """A document's page: its template under labs/ rendered with `context`, autoescaped."""
    return _TEMPLATES.get_template(template).render(**context)


def _patient(details: Any, address: Any) -> dict[str, Any] | None:
    """The patient as the documents print them; None if the values do not open (the
    order's reads are a 404 before that: the key goes with the erasure)."""
    if not isinstance(details, dict) or not isinstance(address, dict):
        return None
    where = address_answer(address)
    return {
        "name": f"{details['first_name']} {details['last_name']}",
        "dob": details["dob"],
        "gender": details.get("gender") or "",
        "phone": details.get("phone_number") or "",
        "address": ", ".join(
            part
            for part in (
                where.get("first_line"),
                where.get("second_line"),
                where.get("city"),
                f"{where.get('state') or ''} {where.get('zip_code') or ''}".strip(),
            )
            if part
        ),
    }
