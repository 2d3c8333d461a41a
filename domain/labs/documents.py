"""The documents of an order that a person prints: the requisition, the specimen labels,
the Advance Beneficiary Notice (ABN), the collection instructions and the result report.

They are rendered from the order as it is (adapters/documents/), never stored: the
patient's name on them is opened from the order's sealed details at each request, so that
nothing personal is kept in clear and an erased user's documents are gone with the key.
This module holds the rules a lab sets for them: which document an order can have in which
status, and the requisition number every one of them prints.
"""

from __future__ import annotations

from uuid import UUID

from healthledger.domain.errors import LedgerError
from healthledger.domain.labs.orders import CANCELLED, COMPLETED, FAILED, top_level
from healthledger.domain.labs.sandbox import sample_id_of

REQUISITION = "requisition"
LABELS = "labels"
ABN = "abn"
COLLECTION_INSTRUCTIONS = "collection_instructions"
RESULT_REPORT = "result_report"

# A void order's collection papers would send a patient to be drawn for nothing: a lab
# takes no sample for a cancelled or failed requisition.
_VOID = frozenset({CANCELLED, FAILED})
# Labels printed at once: a draw takes a few tubes; a sheet holds twenty.
MAX_LABELS = 20
DEFAULT_LABELS = 3


class DocumentNotAvailable(LedgerError):
    """The order's status does not allow the document (a 409: it may later)."""

    def __init__(self, document: str, status: str) -> None:
        what = document.replace("_", " ")
        super().__init__(f"The order is {top_level(status)}: it has no {what} to print.")


def requisition_number(order_id: UUID) -> str:
    """The number a lab files the order's specimen under, printed as a barcode: the
    order's sample id (ten digits fixed by the order; the sample id the order answers
    once the requisition is created)."""
    return sample_id_of(order_id)


def printable(document: str, status: str) -> bool:
    """Whether an order in `status` has `document`: the collection papers (requisition,
    labels, ABN, instructions) while the order is not void, the result report once it is
    completed."""
    top = top_level(status)
    if document == RESULT_REPORT:
        return top == COMPLETED
    return top not in _VOID


def require_printable(document: str, status: str) -> None:
    """DocumentNotAvailable unless an order in `status` has `document` (`printable`)."""
    if not printable(document, status):
        raise DocumentNotAvailable(document, status)
