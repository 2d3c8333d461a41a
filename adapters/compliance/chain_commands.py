"""`healthledger verify` and `healthledger chain sign`: the hash chain on the command
line (ADR 0015)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from healthledger.adapters.persistence.eventstore.chain import (
    Chain,
    EmptyChain,
    describe,
)
from healthledger.adapters.persistence.keys.head_anchors import AnchorFileError, read_anchors

if TYPE_CHECKING:
    from healthledger.adapters.composition import Service


def verify_command(
    chain: Chain, since: int | None, out: TextIO, anchors: Path | None = None
) -> int:
    """Walk the chain and check every signed head (and, with `anchors`, every head of
    that head file): 0 and a summary, or 1 naming the first bad record and what kind of
    change it looks like."""
    anchored = None
    if anchors is not None:
        try:
            anchored = read_anchors(anchors)
        except AnchorFileError as exc:
            print(f"FAILED: {exc}", file=out)
            return 1
    result = chain.verify(since, anchored)
    in_file = (
        ""
        if result.anchored_heads_checked is None
        else f"; {result.anchored_heads_checked} head(s) in {anchors}"
    )
    if result.problem is not None:
        print(f"FAILED: {describe(result.problem)}", file=out)
        print(
            f"checked {result.records_checked} record(s) from position "
            f"{result.first_position} before it; {result.signed_heads_checked} signed "
            f"head(s) in the log{in_file}",
            file=out,
        )
        return 1
    last = "none" if result.last_position is None else str(result.last_position)
    redacted = result.redacted_records_checked
    # Said, so that an auditor knows some payloads are not the ones first written.
    among = (
        f"; {redacted} redacted record(s) among them, each as its redaction says (ADR 0028)"
        if redacted
        else ""
    )
    print(
        f"ok: {result.records_checked} record(s) checked from position "
        f"{result.first_position}, last position {last}; "
        f"{result.signed_heads_checked} signed head(s) checked{in_file}{among}",
        file=out,
    )
    return 0


def sign_command(chain: Chain, out: TextIO) -> int:
    try:
        head = chain.sign_head()
    except EmptyChain as exc:
        print(f"nothing signed: {exc}", file=out)
        return 1
    print(
        f"signed head at position {head.position}: chain hash {head.chain_hash.hex()}, "
        f"signed at {head.signed_at.isoformat()} by key {head.key_id}",
        file=out,
    )
    return 0


def verify_read_models_command(service: Service, out: TextIO) -> int:
    """Rebuild the read models into a scratch copy and compare them with the live ones:
    0 and a summary, or 1 naming every row that differs."""
    from healthledger.adapters.persistence.integrity.read_model_check import (
        CheckRefused,
        check_read_models,
    )

    try:
        result = check_read_models(service.read_models, service.recorder, service.ledger.mapper)
    except CheckRefused as exc:
        print(f"not checked: {exc}", file=out)
        return 1
    for difference in result.differences:
        print(f"FAILED: {difference.describe()}", file=out)
    summary = (
        f"read models: {result.rows_compared} row(s) compared with the log's "
        f"{result.events} event(s) rebuilt"
    )
    if result.differences:
        print(f"{summary}; {len(result.differences)} differ", file=out)
        return 1
    print(f"ok: {summary}; none differs", file=out)
    return 0
