"""ICD-10-CM, the US diagnosis codes a requisition's diagnoses are written in: validation of
a set of codes (`POST /v3/insurance/validate_icd_codes`) and a search of the code list by
description (`GET /v3/insurance/search/diagnosis`).

The code list is the CDC's ICD-10-CM as the PyPI package `simple-icd-10-cm` ships it (its
data is in the wheel: nothing is downloaded at run time), with each code's Excludes1 and
Excludes2 notes. A code is billable when it is a leaf of the classification (`E11.9`, not
the category `E11`). Two codes where one's Excludes1 note names the other (or a category
or range holding it) cannot be coded together: a violation. An Excludes2 note is a
warning: both may be coded when the patient has both.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from types import ModuleType

# A code as a note names it, in parentheses: `(J60)`, `(J69.8)`, `(E08.-)`, `(O24.4-)`,
# a range `(E08-E13)`.
_NOTED = re.compile(r"\(([A-Z][0-9][0-9A-Z](?:\.[0-9A-Z]{0,4})?-?(?:-[A-Z][0-9][0-9A-Z])?)\)")
# What a request may send as one code: letters, digits and a dot (more is not a code).
MAX_CODE_LENGTH = 10
# Codes per request: a validation's, an order's diagnoses.
MAX_CODES = 50
# Search answers at most this many codes, best first.
SEARCH_LIMIT = 50
EXCLUDES1 = "excludes1"
EXCLUDES2 = "excludes2"


@functools.cache
def _icd() -> ModuleType:
    """The code list, read on first use: importing `simple_icd_10_cm` parses all of it
    (1.5 to 3 seconds), which every `serve` and CLI start paid before a request needed it."""
    import simple_icd_10_cm

    return simple_icd_10_cm


@dataclass(frozen=True)
class Conflict:
    code: str
    other: str
    type: str


@dataclass(frozen=True)
class Validation:
    """The codes' problems: `errors` (not codes, or not billable), `violations`
    (Excludes1 pairs) and `warnings` (Excludes2 pairs); `codes`, the billable ones in
    their dotted form, each once, in the order sent."""

    errors: list[str] = field(default_factory=list)
    violations: list[Conflict] = field(default_factory=list)
    warnings: list[Conflict] = field(default_factory=list)
    codes: list[str] = field(default_factory=list)

    @property
    def valid(self) -> bool:
        return not self.errors and not self.violations

    def refusal(self) -> str | None:
        """Why a request carrying these codes is refused (the first error, else the first
        Excludes1 pair), naming codes only; None: they may be coded together (an
        Excludes2 pair may: both conditions can be present)."""
        if self.errors:
            return self.errors[0]
        if self.violations:
            found = self.violations[0]
            return (
                f"{found.code} and {found.other} cannot be coded together: an Excludes1 note "
                f"of {found.code} excludes {found.other}."
            )
        return None


def normalized(code: str) -> str:
    """`e119`, ` E11.9 ` -> `E11.9` (the dotted form the list holds)."""
    icd = _icd()
    compact = code.strip().upper().replace(".", "")
    return icd.add_dot(compact) if icd.is_valid_item(compact) else compact


def description(code: str) -> str:
    """The list's description of a code ("" for one it does not hold: an order keeps the
    codes it was validated with, and the list may change under a later release)."""
    icd = _icd()
    code = normalized(code)
    return icd.get_description(code) if icd.is_valid_item(code) else ""


def validate(codes: Iterable[str]) -> Validation:
    icd = _icd()
    result = Validation()
    known: list[str] = []
    for sent in codes:
        code = normalized(sent)
        if len(sent) > MAX_CODE_LENGTH or not icd.is_valid_item(code):
            result.errors.append(f"{sent.strip()[:MAX_CODE_LENGTH]!r} is not an ICD-10-CM code.")
        elif not icd.is_leaf(code):
            children = ", ".join(icd.get_children(code)[:3])
            result.errors.append(
                f"{code} is a category, not a billable code: code one of its subcodes "
                f"({children}...)."
            )
        elif code not in known:
            known.append(code)
    result.codes.extend(known)
    for code in known:
        for other in known:
            if other == code:
                continue
            if _noted(other, _notes(code, icd.get_excludes1)):
                result.violations.append(Conflict(code, other, EXCLUDES1))
            elif _noted(other, _notes(code, icd.get_excludes2)):
                result.warnings.append(Conflict(code, other, EXCLUDES2))
    return result


def _notes(code: str, notes_of: object) -> list[str]:
    """The codes the notes of `code` and of its ancestors name (a category's Excludes1
    applies to every code under it)."""
    assert callable(notes_of)
    found: list[str] = []
    for holder in (code, *_icd().get_ancestors(code)):
        for note in notes_of(holder):
            found.extend(_NOTED.findall(note))
    return found


def _noted(code: str, named: list[str]) -> bool:
    """Whether `code` is one of the codes, categories (`E08.-`, `O24.4-`) or ranges
    (`E08-E13`) named."""
    for name in named:
        if "-" in name and not name.endswith("-"):
            low, high = name.split("-")
            if low <= code[:3] <= high:
                return True
            continue
        stem = name.rstrip("-").rstrip(".")
        if code == stem or code.startswith(stem if "." in stem else stem + "."):
            return True
    return False


@functools.cache
def _billable() -> tuple[tuple[str, str, str], ...]:
    """Every billable code with its description, and the description folded for search
    (read once per process: about 74,000 codes)."""
    icd = _icd()
    return tuple(
        (code, description, description.casefold())
        for code in icd.get_all_codes(True)
        if icd.is_leaf(code)
        for description in (icd.get_description(code),)
    )


def search(query: str, limit: int = SEARCH_LIMIT) -> list[tuple[str, str]]:
    """The billable codes whose code starts with `query`, or whose description holds
    every word of it, codes first, then the shortest descriptions (the most general)."""
    words = query.casefold().split()
    if not words:
        return []
    by_code = normalized(query).replace(".", "")
    codes: list[tuple[str, str]] = []
    described: list[tuple[str, str]] = []
    for code, description, folded in _billable():
        if code.replace(".", "").startswith(by_code):
            codes.append((code, description))
        elif all(word in folded for word in words):
            described.append((code, description))
    described.sort(key=lambda found: (len(found[1]), found[0]))
    return (codes + described)[:limit]
