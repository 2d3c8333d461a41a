"""Who pays for an order. This deployment bills the ordering team (the official client's
`client_bill`): it holds no insurer's contract, eligibility check or claim channel, so it
cannot bill commercial insurance, Medicare or a patient's payor honestly. The insurance
and payor methods of the official clients answer `InsuranceNotBilled` (a 400 that says
so) rather than pretending to."""

from __future__ import annotations

from healthledger.domain.errors import LedgerError

CLIENT_BILL = "client_bill"


class InsuranceNotBilled(LedgerError):
    def __init__(self) -> None:
        super().__init__(
            "This deployment does not bill insurance: orders are billed to the team "
            f"({CLIENT_BILL}), so there are no payors to search or create and no insurance "
            "to attach to an order."
        )


def require_client_bill(billing_type: str | None, with_insurance: bool) -> None:
    """InsuranceNotBilled for an order that asks to be billed otherwise than to the team
    (another bill type, or health insurance attached)."""
    if with_insurance or billing_type not in (None, CLIENT_BILL):
        raise InsuranceNotBilled()
