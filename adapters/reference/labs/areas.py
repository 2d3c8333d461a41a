"""Area info (spec 2.10, endpoint 9): which at-home phlebotomy networks serve a zip code,
and how many patient service centers of each central lab lie within a radius of it.

Zip codes are the US Postal Service's, with their centroids, from the `zipcodes` package
(its data ships in the wheel: nothing is downloaded at run time). Distances are
great-circle (haversine) miles from the zip's centroid to each service center. Every index
is built once per process: the zip codes by code, the service centers in a grid of
one-degree cells, so that a question reads a few cells instead of every center.
"""

from __future__ import annotations

import functools
import math
import re
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import zipcodes
from healthledger.adapters.reference.labs import (
    LabReference,
    PhlebotomyProviderEntry,
    ServiceCenterEntry,
)

# Spec section 8: the radii area info answers for, in miles.
RADII = (10, 20, 25, 50, 100)
DEFAULT_RADIUS = 25
# Five digits, or ZIP+4 (spec 2.10).
ZIP_CODE = r"^\d{5}(-\d{4})?$"
_ZIP = re.compile(ZIP_CODE)
EARTH_RADIUS_MILES = 3958.8
# Miles per degree of latitude (and of longitude at the equator).
_MILES_PER_DEGREE = 69.17


@dataclass(frozen=True, slots=True)
class ZipCentroid:
    zip_code: str
    state: str
    lat: float
    lon: float


@functools.cache
def zip_centroids() -> dict[str, ZipCentroid]:
    """Every active US zip code with its centroid, by code; read once per process
    (under two seconds: the package's 42,000 entries), a hundredth at a time (by the zip
    code's first two digits). The package's `list_all()` would hand over all of them at
    once as dicts of a dozen fields, about 100 MB of Python objects that its module then
    keeps for the life of the process (measured: docs/performance.md, the Oura history);
    a prefix's few hundred dicts are dropped as soon as their centroids are taken."""
    found = {}
    for prefix in range(100):
        for entry in zipcodes.similar_to(f"{prefix:02d}"):
            if not entry.get("active") or not entry.get("lat") or not entry.get("long"):
                continue
            code = entry["zip_code"]
            found[code] = ZipCentroid(
                code, entry["state"], float(entry["lat"]), float(entry["long"])
            )
    return found


def great_circle_miles(lat1: float, lon1: float, lat2: float, lon2: float) -> float:
    """Haversine distance on a sphere of the Earth's mean radius."""
    p1, p2 = math.radians(lat1), math.radians(lat2)
    dp, dl = p2 - p1, math.radians(lon2 - lon1)
    return _miles(math.sin(dp / 2) ** 2 + math.cos(p1) * math.cos(p2) * math.sin(dl / 2) ** 2)


class UnknownZipCode(ValueError):
    """A well-formed zip code that is not an active US zip code."""


@dataclass(frozen=True)
class _Site:
    lab_id: int
    # In radians, with the cosine of the latitude: what the haversine needs, computed once.
    lat: float
    lon: float
    cos_lat: float
    capabilities: tuple[str, ...]


@dataclass(frozen=True)
class CentralLabArea:
    lab_id: int
    within_radius: int
    capabilities: tuple[str, ...]
    # The nearest center's distance in miles (None: none within the radius).
    nearest_miles: float | None


@dataclass(frozen=True)
class Area:
    zip_code: str
    state: str
    phlebotomy: Sequence[PhlebotomyProviderEntry]
    central_labs: Sequence[CentralLabArea]


class AreaIndex:
    """Zip codes, service centers and phlebotomy service areas, indexed once."""

    def __init__(self, reference: LabReference) -> None:
        lab_ids = {d.lab.slug: d.lab.id for d in reference.labs}
        self._cells: dict[tuple[int, int], list[_Site]] = defaultdict(list)
        for site in reference.service_centers:
            self._cells[_cell(site.lat, site.lon)].append(_of(site, lab_ids[site.lab]))
        self._phlebotomy = reference.phlebotomy

    def warm(self) -> None:
        """Read the zip codes now (at start), not at the first question."""
        zip_centroids()

    def centroid(self, zip_code: str) -> ZipCentroid:
        """The zip's centroid; `UnknownZipCode` if it is not an active US zip code. Takes
        five digits or ZIP+4 (whose first five digits name the zip code)."""
        if not _ZIP.fullmatch(zip_code):
            raise UnknownZipCode(zip_code)
        found = zip_centroids().get(zip_code[:5])
        if found is None:
            raise UnknownZipCode(zip_code)
        return found

    def area(self, zip_code: str, radius: float, lab_ids: Sequence[int]) -> Area:
        """The phlebotomy networks serving the zip, and each of `lab_ids`'s service
        centers within `radius` miles of its centroid."""
        where = self.centroid(zip_code)
        counts: dict[int, int] = dict.fromkeys(lab_ids, 0)
        capabilities: dict[int, set[str]] = {lab_id: set() for lab_id in lab_ids}
        # The haversine's `a` of each lab's nearest center; a center is within the radius
        # when its `a` is at most the radius's (the same test as the distance's, without
        # the square root and arcsine for every center).
        nearest: dict[int, float] = {}
        lat, lon = math.radians(where.lat), math.radians(where.lon)
        cos_lat = math.cos(lat)
        within = math.sin(radius / (2 * EARTH_RADIUS_MILES)) ** 2
        sin = math.sin
        for site in self._near(where.lat, where.lon, radius):
            if site.lab_id not in counts:
                continue
            a = (
                sin((site.lat - lat) / 2) ** 2
                + cos_lat * site.cos_lat * sin((site.lon - lon) / 2) ** 2
            )
            if a <= within:
                counts[site.lab_id] += 1
                capabilities[site.lab_id].update(site.capabilities)
                if a < nearest.get(site.lab_id, math.inf):
                    nearest[site.lab_id] = a
        prefix = zip_code[:3]
        return Area(
            zip_code=zip_code,
            state=where.state,
            phlebotomy=[
                p for p in self._phlebotomy if where.state in p.states or prefix in p.zip_prefixes
            ],
            central_labs=[
                CentralLabArea(
                    lab_id=lab_id,
                    within_radius=counts[lab_id],
                    capabilities=tuple(sorted(capabilities[lab_id])),
                    nearest_miles=None
                    if lab_id not in nearest
                    else round(_miles(nearest[lab_id]), 1),
                )
                for lab_id in lab_ids
            ],
        )

    def _near(self, lat: float, lon: float, radius: float) -> list[_Site]:
        """The sites of every cell that a circle of `radius` miles around (lat, lon) can
        reach (its bounding box, widened by longitude's shrinking with latitude)."""
        dlat = radius / _MILES_PER_DEGREE
        widest = min(89.0, abs(lat) + dlat)
        dlon = min(180.0, radius / (_MILES_PER_DEGREE * math.cos(math.radians(widest))))
        sites: list[_Site] = []
        for cell_lat in range(math.floor(lat - dlat), math.floor(lat + dlat) + 1):
            for cell_lon in range(math.floor(lon - dlon), math.floor(lon + dlon) + 1):
                found = self._cells.get((cell_lat, cell_lon))
                if found:
                    sites.extend(found)
        return sites


def _miles(a: float) -> float:
    """The distance of a haversine's `a`."""
    return 2 * EARTH_RADIUS_MILES * math.asin(min(1.0, math.sqrt(a)))


def _cell(lat: float, lon: float) -> tuple[int, int]:
    return math.floor(lat), math.floor(lon)


def _of(site: ServiceCenterEntry, lab_id: int) -> _Site:
    lat = math.radians(site.lat)
    return _Site(lab_id, lat, math.radians(site.lon), math.cos(lat), site.capabilities)


def render_area(area: Area, radius: int, details: dict[int, Any]) -> dict[str, Any]:
    """Spec 2.10 plus gaps.md's newer fields; `details` are the labs' `LabDetails` by id."""
    central: dict[str, Any] = {}
    for lab_area in area.central_labs:
        lab = details[lab_area.lab_id]
        central[lab.lab.slug] = {
            "patient_service_centers": {
                "within_radius": lab_area.within_radius,
                "radius": str(radius),
                "capabilities": list(lab_area.capabilities),
                "nearest_miles": lab_area.nearest_miles,
                "appointment_with_service": lab.appointment_with_service,
                # The official client's name of the same flag (PscAreaInfoDetails).
                "appointment_with_vital": lab.appointment_with_service,
            },
            "supported_bill_types": list(lab.supported_bill_types),
            "lab_id": lab.lab.id,
            "appointment_with_service": lab.appointment_with_service,
        }
    providers = [
        {
            "name": p.name,
            "tier": list(p.service_types),
            "service_types": list(p.service_types),
        }
        for p in area.phlebotomy
    ]
    return {
        "zip_code": area.zip_code,
        "phlebotomy": {"is_served": bool(providers), "providers": providers},
        "central_labs": central,
    }
