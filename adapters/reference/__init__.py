"""Reference data that ships with the service as data files, editable without code."""

from __future__ import annotations

import functools
import json
from importlib import resources


@functools.cache
def provider_slugs() -> frozenset[str]:
    """Every provider slug of the catalog (gaps.md, Provider catalog)."""
    text = resources.files(__package__).joinpath("providers.json").read_text()
    return frozenset(entry["slug"] for entry in json.loads(text)["providers"])
