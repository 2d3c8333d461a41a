"""Where appointments happen (issue 33), from the shipped reference data: each central
lab's patient service centers (`patient_service_centers.json`) and the at-home
phlebotomy networks (`phlebotomy.json`), with their opening hours and slot lengths
(`appointment_hours.json`: per lab and per network; editable without code).

A center's site code is `<lab>-<zip>-<n>`, its n-th center in that zip code in the file's
order (so that appending centers keeps every code). An at-home place is a network in one
zip code (`<network>:<zip>`), at the zip's centroid. Time zones are the zip codes' (the
`zipcodes` data, looked up one zip at a time, never its whole list). The reference data
holds no street lines: a center's first line is its name (docs/labs.md).
"""

from __future__ import annotations

import functools
import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import time
from importlib import resources

import zipcodes
from healthledger.adapters.reference.labs import LabDetails, LabReference, ServiceCenterEntry
from healthledger.adapters.reference.labs.areas import great_circle_miles, zip_centroids
from healthledger.domain.labs.appointments import PHLEBOTOMY, PSC
from healthledger.domain.labs.booking import OpeningHours, Place
from pydantic import BaseModel, ConfigDict, Field

HOURS_FILE = "appointment_hours.json"
# The official client's cap on the centers one question answers.
MAX_CENTERS = 30
_WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_HOUR = r"^([01]\d|2[0-3]):[0-5]\d$"


class _HoursEntry(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    hours: dict[str, tuple[str, str]]
    slot_minutes: int = Field(ge=5, le=240)

    def opening(self) -> OpeningHours:
        days = {}
        for name, (opens, closes) in self.hours.items():
            if name not in _WEEKDAYS:
                raise ValueError(f"{HOURS_FILE}: {name!r} is not a weekday")
            start, end = time.fromisoformat(opens), time.fromisoformat(closes)
            if start >= end:
                raise ValueError(f"{HOURS_FILE}: {name} closes before it opens")
            days[_WEEKDAYS.index(name)] = (start, end)
        return OpeningHours(days, self.slot_minutes)


class _HoursFile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    centers: dict[str, _HoursEntry]
    phlebotomy: dict[str, _HoursEntry]


@dataclass(frozen=True)
class Center:
    """A center as psc/info lists it: its place, lab, capabilities, and distance."""

    place: Place
    lab_id: int
    capabilities: tuple[str, ...]
    miles: float


@functools.cache
def _hours() -> _HoursFile:
    text = resources.files(__package__).joinpath(HOURS_FILE).read_text()
    return _HoursFile.model_validate(json.loads(text))


@functools.lru_cache(maxsize=4096)
def zip_time_zone(zip_code: str) -> str | None:
    found = zipcodes.matching(zip_code[:5]) if zip_code[:5].isdigit() else []
    return str(found[0]["timezone"]) if found and found[0].get("timezone") else None


class AppointmentPlaces:
    """The `Places` of the booking use cases, and the centers near a zip code."""

    def __init__(self, reference: LabReference) -> None:
        labs = {d.lab.slug: d for d in reference.labs}
        hours = _hours()
        # Each center's place is made when first asked for (its time zone is a lookup).
        self._sites: dict[str, tuple[ServiceCenterEntry, LabDetails, OpeningHours]] = {}
        self._made: dict[str, Place] = {}
        opening = {}
        for slug in {site.lab for site in reference.service_centers}:
            entry = hours.centers.get(slug)
            if entry is None:
                raise ValueError(f"{HOURS_FILE}: no hours for the centers of {slug}")
            opening[slug] = entry.opening()
        seen: Counter[tuple[str, str]] = Counter()
        for site in reference.service_centers:
            seen[(site.lab, site.zip_code)] += 1
            code = f"{site.lab}-{site.zip_code}-{seen[(site.lab, site.zip_code)]}"
            self._sites[code] = (site, labs[site.lab], opening[site.lab])
        self._networks = {
            p.name: p for p in reference.phlebotomy if "appointment-ready" in p.service_types
        }
        self._all_networks = reference.phlebotomy
        self._network_hours = {name: entry.opening() for name, entry in hours.phlebotomy.items()}
        missing = set(self._networks) - set(self._network_hours)
        if missing:
            raise ValueError(f"{HOURS_FILE}: no hours for the networks {sorted(missing)}")

    # -- Places ---------------------------------------------------------------------------

    def place(self, code: str) -> Place | None:
        if ":" in code:
            network, _, zip_code = code.partition(":")
            return self._home_place(network, zip_code)
        return self._center(code)

    def phlebotomy_places(self, zip_code: str) -> Sequence[Place]:
        places = (self._home_place(name, zip_code[:5]) for name in self._networks)
        return [place for place in places if place is not None]

    def time_zone_of(self, zip_code: str) -> str | None:
        return zip_time_zone(zip_code)

    def networks_serving(self, zip_code: str) -> list[str]:
        """Every network serving a zip code (those that book and those asked to)."""
        where = zip_centroids().get(zip_code[:5])
        if where is None:
            return []
        return [
            p.name
            for p in self._all_networks
            if where.state in p.states or zip_code[:3] in p.zip_prefixes
        ]

    # -- centers near a zip code ----------------------------------------------------------

    def centers_near(
        self, zip_code: str, radius: float, lab_id: int, capabilities: Sequence[str] = ()
    ) -> list[Center]:
        """The lab's centers within `radius` miles of the zip's centroid, nearest first,
        at most `MAX_CENTERS`, with every capability asked (unknown zip: none)."""
        where = zip_centroids().get(zip_code[:5])
        if where is None:
            return []
        near = []
        for code, (site, details, _hours) in self._sites.items():
            if details.lab.id != lab_id or not set(capabilities) <= set(site.capabilities):
                continue
            miles = great_circle_miles(where.lat, where.lon, site.lat, site.lon)
            if miles <= radius:
                near.append((miles, code))
        near.sort()
        found = []
        for miles, code in near[:MAX_CENTERS]:
            site, details, _hours = self._sites[code]
            place = self._center(code)
            assert place is not None
            found.append(Center(place, details.lab.id, site.capabilities, miles))
        return found

    def _center(self, code: str) -> Place | None:
        made = self._made.get(code)
        if made is None and code in self._sites:
            site, details, hours = self._sites[code]
            made = self._made[code] = _center_place(code, site, hours, details)
        return made

    def _home_place(self, network: str, zip_code: str) -> Place | None:
        where = zip_centroids().get(zip_code)
        zone = zip_time_zone(zip_code)
        if network not in self._networks or where is None or zone is None:
            return None
        if network not in self.networks_serving(zip_code):
            return None
        return Place(
            code=f"{network}:{zip_code}",
            kind=PHLEBOTOMY,
            provider=network,
            name=f"{network} at-home draw",
            address={"city": "", "state": where.state, "zip_code": zip_code},
            lat=where.lat,
            lon=where.lon,
            time_zone=zone,
            hours=self._network_hours[network],
            price=0.0,
            bookable=True,
        )


def _center_place(
    code: str, site: ServiceCenterEntry, hours: OpeningHours, details: LabDetails
) -> Place:
    name = f"{details.lab.name} Patient Service Center, {site.city}"
    zone = zip_time_zone(site.zip_code)
    if zone is None:
        raise ValueError(f"patient_service_centers.json: {site.zip_code} has no time zone")
    return Place(
        code=code,
        kind=PSC,
        provider=site.lab,
        name=name,
        address={
            "first_line": name,
            "second_line": None,
            "city": site.city,
            "state": site.state,
            "zip_code": site.zip_code,
        },
        lat=site.lat,
        lon=site.lon,
        time_zone=zone,
        hours=hours,
        price=0.0,
        bookable=details.appointment_with_service,
    )
