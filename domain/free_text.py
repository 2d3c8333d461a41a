"""Free text: what a person types into a name, a label, an address or a description.

Free text may not hold control characters: Unicode category C, that is control codes
(NUL, BEL, ESC...), invisible format characters (direction overrides that make text read
other than it is stored), lone surrogates, private-use and unassigned code points.
PostgreSQL refuses NUL in text outright, and the others garble logs, terminals and the
pages that show the text. Multi-line fields also take line feeds, carriage returns and
tabs. A URL is checked before it is parsed, because parsing would silently drop or
percent-encode such characters instead of refusing them.
"""

from __future__ import annotations

import unicodedata
from typing import Annotated, Any

from pydantic import BeforeValidator, HttpUrl

CONTROL_CHARACTERS = "must not contain control characters"
LINE_BREAKS = frozenset("\n\r\t")


def has_control_characters(value: str, *, line_breaks: bool = False) -> bool:
    """Whether `value` holds a character of Unicode category C (line feeds, carriage
    returns and tabs excepted when `line_breaks`)."""
    # isprintable() is False for every category C character (and for separators but the
    # ASCII space): one C call clears the usual text; the rest is looked at one by one.
    if value.isprintable():
        return False
    return any(
        unicodedata.category(ch)[0] == "C" and not (line_breaks and ch in LINE_BREAKS)
        for ch in value
    )


def _refuse(line_breaks: bool) -> BeforeValidator:
    # Before the type's own validation, so that a URL is judged as it was sent; a value
    # that is not a string is left to the type to refuse.
    def check(value: Any) -> Any:
        if isinstance(value, str) and has_control_characters(value, line_breaks=line_breaks):
            raise ValueError(CONTROL_CHARACTERS)
        return value

    return BeforeValidator(check)


NO_CONTROL_CHARACTERS = _refuse(line_breaks=False)
NO_CONTROL_CHARACTERS_BUT_LINE_BREAKS = _refuse(line_breaks=True)

FreeText = Annotated[str, NO_CONTROL_CHARACTERS]
"""One line of free text (names, labels)."""

MultilineText = Annotated[str, NO_CONTROL_CHARACTERS_BUT_LINE_BREAKS]
"""Free text that may span lines (a postal address block, a description)."""

WebUrl = Annotated[HttpUrl, NO_CONTROL_CHARACTERS]
"""An http(s) URL, refused rather than altered when it holds control characters."""
