"""Reading a lab report's text into its results (the lab report parser, docs/labs.md).

The text is a report's pages as laid out (columns kept as runs of spaces, which is what a
PDF's text extraction in layout mode gives). A results table is found by its header line:
a line whose cells (runs separated by two spaces or more) are all column names a lab uses
(`Test`/`Analyte`, `Result`/`Value`, `Unit(s)`, `Reference range`/`Ref. interval`,
`Flag`, `LOINC`, `Code`...), with at least a name, a value and a unit or a range. Each
following line is cut into the same columns by where its cells start; a line with a name
and a value is a result, and a line without a value continues the result above it (a
name's second line is the panel it came from, a code or a LOINC cut in two is joined).
A header printed again on the next page starts no new table.

What a result says is read as a lab prints it: the reference range (`65-99`, `3.5 - 5.0`,
`<199`, `>40`, `≤ 5.6`), the flag (`H`, `L`, `A`, `HIGH`, `LOW`, `CRITICAL`...), then the
interpretation: critical if flagged so or past the catalog's critical limits, abnormal if
flagged or outside the range, normal inside it, unknown when nothing says. A result whose
name is one of our catalog's expected results (the report's lab's first) is matched to it,
and its LOINC is the catalog's (or the one printed). The patient's name, date of birth,
the specimen number and the dates come from the labelled lines above the table.

Nothing here logs or raises with a value of the report: a report that has no table is
`ReportRefused` with a fixed text.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from healthledger.domain.labs.catalog import ExpectedResult, Lab, Marker

# Why a report could not be read (the job's `failure_code`), each with the client's
# `failure_reason` (junction-api-sdk's ParsingJobFailureReason) it is reported as.
NOT_A_PDF = "not_a_pdf"
EMPTY_FILE = "empty_file"
TOO_LARGE = "file_too_large"
TOO_MANY_PAGES = "too_many_pages"
ENCRYPTED = "encrypted_pdf"
UNREADABLE = "unreadable_pdf"
NO_TEXT = "no_text"
NO_RESULTS = "no_results_found"
USER_GONE = "user_erased"
FILE_GONE = "upload_missing"
GAVE_UP = "worker_gave_up"
FAILURE_REASONS: Mapping[str, str] = {
    NOT_A_PDF: "invalid_input",
    EMPTY_FILE: "invalid_input",
    TOO_LARGE: "invalid_input",
    TOO_MANY_PAGES: "too_many_pages",
    ENCRYPTED: "invalid_input",
    UNREADABLE: "invalid_input",
    NO_TEXT: "low_quality",
    NO_RESULTS: "low_quality",
    USER_GONE: "processing_error",
    FILE_GONE: "processing_error",
    GAVE_UP: "processing_error",
}


class ReportRefused(Exception):
    """A report that cannot be read: `code` is one of the reasons above, `message` a fixed
    text safe to show (it never quotes the report)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message

    @property
    def failure_reason(self) -> str:
        return FAILURE_REASONS.get(self.code, "processing_error")


# -- the table's columns -------------------------------------------------------------------

NAME, CODE, VALUE, UNIT, RANGE, FLAG, LOINC = (
    "name",
    "code",
    "value",
    "unit",
    "range",
    "flag",
    "loinc",
)
_HEADERS: Mapping[str, str] = {
    **dict.fromkeys(
        ("test", "test name", "tests", "analyte", "component", "test description"), NAME
    ),
    **dict.fromkeys(("code", "test code", "lab code", "order code"), CODE),
    **dict.fromkeys(("result", "results", "value", "your value", "result value"), VALUE),
    **dict.fromkeys(("unit", "units", "uom"), UNIT),
    **dict.fromkeys(
        (
            "reference",
            "reference range",
            "ref range",
            "ref. range",
            "reference interval",
            "ref. interval",
            "ref interval",
            "normal range",
            "standard range",
            "range",
        ),
        RANGE,
    ),
    **dict.fromkeys(("flag", "flags", "abnormal flag", "status"), FLAG),
    **dict.fromkeys(("loinc", "loinc code"), LOINC),
}
# A header's own second line (`Reference` / `range`): not a continuation of a result.
_HEADER_WORDS = frozenset(_HEADERS) | {"interval", "name", "code"}
_CELL = re.compile(r"\S+(?: \S+)*")
# Cells a column's start may be off by (centred or right-aligned values).
_SLACK = 4

_NUMBER = r"[-+]?\d+(?:[.,]\d+)?"
_BETWEEN = re.compile(rf"^({_NUMBER})\s*(?:-|\u2013|to)\s*({_NUMBER})$")
_BELOW = re.compile(rf"^(?:<|<=|≤|less than|up to)\s*({_NUMBER})$", re.IGNORECASE)
_ABOVE = re.compile(rf"^(?:>|>=|≥|greater than)\s*({_NUMBER})$", re.IGNORECASE)
_PLAIN_NUMBER = re.compile(rf"^{_NUMBER}$")
_COMPARED = re.compile(rf"^(?:<|<=|≤|>|>=|≥)\s*{_NUMBER}$")
_BOOLEANS = frozenset(
    ("positive", "negative", "detected", "not detected", "reactive", "non-reactive", "nonreactive")
)
_CRITICAL_FLAGS = frozenset(("critical", "c", "hh", "ll", "panic", "crit", "*"))
_HIGH_FLAGS = frozenset(("h", "high", "hi", "above"))
_LOW_FLAGS = frozenset(("l", "low", "lo", "below"))
_ABNORMAL_FLAGS = frozenset(("a", "abnormal", "abn", "ab"))
_LOINC_CODE = re.compile(r"^\d{1,7}-\d$")

# Labelled facts above the table: the label (case-insensitive, alone in its cell and
# followed by its value's cell, or followed by `:` and the value) and which of the
# report's metadata it gives.
_LABELS: Sequence[tuple[re.Pattern[str], str]] = [
    (re.compile(r"patient(?: name)?|name", re.IGNORECASE), "patient"),
    (re.compile(r"date of birth|dob|birth date|d\.o\.b\.?", re.IGNORECASE), "dob"),
    (
        re.compile(
            r"specimen(?: number| no\.?| id)?|accession(?: number| no\.?)?|sample id",
            re.IGNORECASE,
        ),
        "specimen_number",
    ),
    (re.compile(r"collected|collection date|date collected", re.IGNORECASE), "date_collected"),
    (re.compile(r"reported|report date|date reported", re.IGNORECASE), "date_reported"),
    (re.compile(r"sex|gender", re.IGNORECASE), "gender"),
]
# Ligatures a PDF's fonts print (`Diﬀerential`), read as their letters.
_LIGATURES = str.maketrans({"ﬀ": "ff", "ﬁ": "fi", "ﬂ": "fl", "ﬃ": "ffi", "ﬄ": "ffl"})
_DATE = re.compile(r"(\d{4}-\d{2}-\d{2})|(\d{1,2})/(\d{1,2})/(\d{4})")


@dataclass
class _Row:
    cells: dict[str, str] = field(default_factory=dict)
    panel: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class _Column:
    kind: str
    start: int


def read_report(
    pages: Sequence[str], markers: Sequence[Marker], labs: Sequence[Lab]
) -> dict[str, Any]:
    """The report's `ParsedLabReportData` (the official clients' shape): `metadata` and
    `results`. Raises ReportRefused(NO_TEXT) for pages without text, (NO_RESULTS) for text
    without a results table."""
    lines = [line.rstrip() for page in pages for line in page.translate(_LIGATURES).splitlines()]
    if not any(line.strip() for line in lines):
        raise ReportRefused(NO_TEXT, "The file has no text to read (a scanned image?).")
    rows, before_table = _table_rows(lines)
    if not rows:
        raise ReportRefused(NO_RESULTS, "No table of results was found in the report.")
    lab = _lab_of(lines, labs)
    matcher = _Matcher(markers, None if lab is None else lab.id)
    metadata = _metadata(before_table, lab)
    return {"metadata": metadata, "results": [_result(row, matcher) for row in rows]}


# -- the table -------------------------------------------------------------------------------


def _cells(line: str) -> list[tuple[int, str]]:
    """A line's cells: runs of text separated by two spaces or more, with where each
    starts."""
    return [(m.start(), m.group()) for m in _CELL.finditer(line.replace("\t", "  "))]


def _header(line: str) -> list[_Column] | None:
    cells = _cells(line)
    kinds = [_HEADERS.get(text.casefold().rstrip(":")) for _, text in cells]
    if len(cells) < 3 or any(kind is None for kind in kinds):
        return None
    found = {kind for kind in kinds if kind is not None}
    if not ({NAME, VALUE} <= found and found & {UNIT, RANGE}):
        return None
    return [_Column(kind, start) for (start, _), kind in zip(cells, kinds, strict=True) if kind]


def _column_of(columns: Sequence[_Column], start: int) -> str:
    chosen = columns[0].kind
    for column in columns:
        if column.start <= start + _SLACK:
            chosen = column.kind
    return chosen


def _table_rows(lines: Sequence[str]) -> tuple[list[_Row], list[str]]:
    """The results of every table (a header again, on a next page, goes on with the same
    rows), and the lines before the first table."""
    rows: list[_Row] = []
    before: list[str] = []
    columns: list[_Column] | None = None
    # A blank line since the last result: what follows continues no result (a footer).
    gap = False
    for line in lines:
        header = _header(line)
        if header is not None:
            columns, gap = header, False  # a next page's header: its first lines continue
            continue
        if columns is None:
            before.append(line)
            continue
        cells = _cells(line)
        if not cells:
            gap = True
            continue
        placed: dict[str, list[str]] = {}
        for start, text in cells:
            placed.setdefault(_column_of(columns, start), []).append(text)
        cell = {kind: " ".join(texts) for kind, texts in placed.items()}
        if cell.get(NAME) and cell.get(VALUE):
            rows.append(_Row(cells=cell))
            gap = False
            continue
        if all(text.casefold() in _HEADER_WORDS for _, text in cells):
            continue  # a header's second line
        if not rows or gap or len(cells) > 3:
            continue  # text between tables, a footer
        last = rows[-1]
        for kind, text in cell.items():
            if kind == NAME:
                last.panel.append(text)
            elif kind in (CODE, LOINC, UNIT):
                last.cells[kind] = last.cells.get(kind, "") + text
    return rows, before


# -- a result --------------------------------------------------------------------------------


def _number(text: str) -> float | None:
    text = text.replace(",", ".") if text.count(",") == 1 and "." not in text else text
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return None


def reference_bounds(text: str | None) -> tuple[float | None, float | None]:
    """A printed reference range's low and high bounds (None where it has none)."""
    if not text:
        return None, None
    text = text.strip()
    if between := _BETWEEN.match(text):
        return _number(between.group(1)), _number(between.group(2))
    if below := _BELOW.match(text):
        return None, _number(below.group(1))
    if above := _ABOVE.match(text):
        return _number(above.group(1)), None
    return None, None


def _value_type(value: str) -> str:
    if _PLAIN_NUMBER.match(value):
        return "numeric"
    if _COMPARED.match(value):
        return "range"
    if value.casefold() in _BOOLEANS:
        return "boolean"
    return "comment"


def _result(row: _Row, matcher: _Matcher) -> dict[str, Any]:
    cells = row.cells
    name = cells[NAME]
    value = cells[VALUE]
    flag = cells.get(FLAG, "").strip().casefold()
    unit = cells.get(UNIT) or None
    printed_range = cells.get(RANGE) or None
    low, high = reference_bounds(printed_range)
    number = _number(value) if _PLAIN_NUMBER.match(value) else None
    printed_loinc = cells.get(LOINC, "").replace(" ", "")
    expected = matcher.match(name, printed_loinc if _LOINC_CODE.match(printed_loinc) else None)
    # Against a range with a bound: a side without one is not passed (False).
    bounded = number is not None and (low is not None or high is not None)
    above = (high is not None and number > high) if bounded and number is not None else None
    below = (low is not None and number < low) if bounded and number is not None else None
    if flag in _HIGH_FLAGS:
        above = True
    if flag in _LOW_FLAGS:
        below = True
    critical = flag in _CRITICAL_FLAGS or (
        number is not None and expected is not None and _past_critical(number, expected)
    )
    if critical:
        interpretation = "critical"
    elif flag in _HIGH_FLAGS | _LOW_FLAGS | _ABNORMAL_FLAGS or above or below:
        interpretation = "abnormal"
    elif (
        above is False
        or below is False
        or value.casefold() in ("negative", "not detected", "non-reactive", "nonreactive")
    ):
        interpretation = "normal"
    else:
        interpretation = "unknown"
    loinc_matches = []
    if expected is not None:
        loinc_matches.append(
            {
                "loinc_code": expected.loinc.code,
                "loinc_name": expected.loinc.name,
                "display_name": expected.name,
                "aliases": [],
                "confidence_score": 1.0 if _fold(expected.name) == _fold(name) else 0.9,
            }
        )
    elif _LOINC_CODE.match(printed_loinc):
        loinc_matches.append(
            {
                "loinc_code": printed_loinc,
                "loinc_name": name,
                "display_name": name,
                "aliases": [],
                "confidence_score": 0.5,
            }
        )
    return {
        "test_name": name,
        "value": value,
        "type": _value_type(value),
        "units": unit,
        "max_reference_range": high,
        "min_reference_range": low,
        "reference_range": printed_range,
        "source_panel_name": " ".join(row.panel) or None,
        "loinc_matches": loinc_matches,
        "loinc_match_status": "matched" if loinc_matches else "unmatched",
        "interpretation": interpretation,
        "is_above_max_range": above,
        "is_below_min_range": below,
        "flag": cells.get(FLAG) or None,
        "lab_code": cells.get(CODE) or None,
        "expected_result": (
            None if expected is None else _catalog_match(expected, matcher, " ".join(row.panel))
        ),
    }


def _past_critical(number: float, expected: ExpectedResult) -> bool:
    reference = expected.reference_range
    return (reference.critical_low is not None and number < reference.critical_low) or (
        reference.critical_high is not None and number > reference.critical_high
    )


def _catalog_match(expected: ExpectedResult, matcher: _Matcher, panel: str) -> dict[str, Any]:
    """The expected result and its marker: the panel the report names it under, else the
    first marker that reports it."""
    markers = matcher.markers_of.get(expected.id, [])
    named = [m for m in markers if panel and _fold(m.name) == _fold(panel)]
    marker = next(iter(named or markers), None)
    return {
        "id": expected.id,
        "slug": expected.slug,
        "lab_id": expected.lab_id,
        "marker_id": None if marker is None else marker.id,
        "marker_name": None if marker is None else marker.name,
    }


def _fold(text: str) -> str:
    return " ".join(re.sub(r"[^0-9a-z%/]+", " ", text.casefold()).split())


class _Matcher:
    """The catalog's expected results by their folded name (and by LOINC): the report's
    lab's own first, then any lab's."""

    def __init__(self, markers: Sequence[Marker], lab_id: int | None) -> None:
        self.markers_of: dict[int, list[Marker]] = {}
        self.by_name: dict[str, list[ExpectedResult]] = {}
        self.by_loinc: dict[str, list[ExpectedResult]] = {}
        self.lab_id = lab_id
        for marker in markers:
            for expected in marker.expected_results:
                self.markers_of.setdefault(expected.id, []).append(marker)
                self.by_name.setdefault(_fold(expected.name), []).append(expected)
                self.by_loinc.setdefault(expected.loinc.code, []).append(expected)

    def match(self, name: str, loinc: str | None) -> ExpectedResult | None:
        named = self.by_name.get(_fold(name), [])
        if loinc is not None:
            coded = [e for e in named if e.loinc.code == loinc] or self.by_loinc.get(loinc, [])
            if coded:
                return self._preferred(coded)
        return self._preferred(named) if named else None

    def _preferred(self, found: Iterable[ExpectedResult]) -> ExpectedResult:
        candidates = list(found)
        own = [e for e in candidates if e.lab_id == self.lab_id]
        return (own or candidates)[0]


# -- the report's facts ----------------------------------------------------------------------


def _lab_of(lines: Sequence[str], labs: Sequence[Lab]) -> Lab | None:
    """The catalog's lab the report names first."""
    text = "\n".join(lines).casefold()
    found = [(text.find(lab.name.casefold()), lab) for lab in labs]
    named = sorted(((at, lab.id, lab) for at, lab in found if at >= 0), key=lambda f: f[:2])
    return named[0][2] if named else None


def _iso_date(text: str) -> str | None:
    found = _DATE.search(text)
    if found is None:
        return None
    if found.group(1):
        return found.group(1)
    month, day, year = int(found.group(2)), int(found.group(3)), int(found.group(4))
    return f"{year:04d}-{month:02d}-{day:02d}"


def _split_name(name: str) -> tuple[str, str]:
    name = " ".join(name.split())
    if "," in name:
        last, first = (part.strip() for part in name.split(",", 1))
    else:
        first, _, last = name.rpartition(" ")
        if not first:
            first, last = last, ""
    return first.title() if first.isupper() else first, last.title() if last.isupper() else last


def _metadata(lines: Sequence[str], lab: Lab | None) -> dict[str, Any]:
    found: dict[str, str] = {}
    for line in lines:
        cells = [text for _, text in _cells(line)]
        for at, text in enumerate(cells):
            label, colon, value = text.partition(":")
            if not colon and at + 1 < len(cells):
                label, value = text, cells[at + 1]
            name = _label(label.strip())
            if name is not None and value.strip() and name not in found:
                found[name] = value.strip()
    first, last = _split_name(found.get("patient", ""))
    gender = found.get("gender", "").casefold()[:1]
    lab_name = lab.name if lab is not None else next((ln.strip() for ln in lines if ln.strip()), "")
    return {
        "patient_first_name": first,
        "patient_last_name": last,
        "dob": _iso_date(found.get("dob", "")) or "",
        "gender": {"m": "male", "f": "female"}.get(gender),
        "lab_name": lab_name,
        "date_reported": _iso_date(found.get("date_reported", "")),
        "date_collected": _iso_date(found.get("date_collected", "")),
        "specimen_number": found.get("specimen_number"),
    }


def _label(text: str) -> str | None:
    for pattern, name in _LABELS:
        if pattern.fullmatch(text):
            return name
    return None
