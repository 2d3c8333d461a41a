"""Why a user is deleted, as the caller of `DELETE /v2/user/{user_id}` says it: the
optional headers `X-Deletion-Reason` (free text, at most 500 characters, sealed with the
user's key on `User.Deleted`: it may name the person or its health, so it goes with the
erasure) and `X-Deletion-Ticket` (a reference into the caller's own records, 1 to 128
letters, digits or `._:#/-`, kept in clear so that it outlives the erasure). Both are
shown in the user's deletion report. A bad value is a 422 naming the header, its value
redacted."""

from typing import Annotated

from fastapi import Header
from healthledger.domain.errors import InvalidRequest
from healthledger.domain.users.user import deletion_reason_problem, deletion_ticket_problem

REASON_HEADER = "X-Deletion-Reason"
TICKET_HEADER = "X-Deletion-Ticket"

DeletionReason = Annotated[
    str | None,
    Header(
        alias=REASON_HEADER,
        description="Why the user is deleted, in your words (at most 500 characters, UTF-8): "
        "sealed with the user's key, erased with it; shown in the deletion report.",
    ),
]
DeletionTicket = Annotated[
    str | None,
    Header(
        alias=TICKET_HEADER,
        description="A reference into your records (a ticket or case id: 1 to 128 letters, "
        "digits or . _ : # / -), kept in clear; shown in the deletion report.",
    ),
]


def _text(value: str) -> str:
    # HTTP carries header bytes; Starlette reads them as Latin-1. A client that sent UTF-8
    # gets its text back as it wrote it.
    raw = value.encode("latin-1")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return value


def deletion_reason(value: str | None) -> str | None:
    if value is None:
        return None
    text = _text(value)
    problem = deletion_reason_problem(text)
    if problem is not None:
        raise InvalidRequest(problem, REASON_HEADER.lower(), "header")
    return text


def deletion_ticket(value: str | None) -> str | None:
    if value is None:
        return None
    problem = deletion_ticket_problem(value)
    if problem is not None:
        raise InvalidRequest(problem, TICKET_HEADER.lower(), "header")
    return value
