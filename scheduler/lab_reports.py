"""The lab report parser's job the scheduler wakes: parse the uploaded reports whose job is
due (domain/labs/report_parsing.py). An upload's `Created` wakes it at once; its interval
finds the jobs that a restart or another process's crash left due."""

from __future__ import annotations

from healthledger.domain.labs.report_parsing import LabReportParsingJob


def makes_a_parse_due(event: object) -> bool:
    """Whether a committed event gives the parser work at once: an upload."""
    return isinstance(event, LabReportParsingJob.Created)
