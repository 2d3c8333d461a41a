"""The lab catalog, lab tests and area info through the official Python client
`vital==2.1.569` (issue 14, docs/compatibility.md): the real team API under uvicorn, each
call's answer parsed by the client's models (`ClientFacingLab`, `GetMarkersResponse`,
`ClientFacingLabTest`, `AreaInfo`), its values checked, and its errors raised as the
client's error types. On both databases."""

from __future__ import annotations

import uuid

import pytest
import vital
from vital.core.api_error import ApiError
from vital.errors import UnprocessableEntityError
from vital.types import (
    AddOnOrder,
    AreaInfo,
    ClientFacingLab,
    ClientFacingLabTest,
    GetMarkersResponse,
    OrderSetRequest,
)

from tests.conftest import CLIENTS_PARSE_ANSWERS

pytestmark = CLIENTS_PARSE_ANSWERS

DEMO_QUEST_TEST = "0b7e5a52-3c1d-4f6e-8a9b-1c2d3e4f5a01"


def test_labs_and_markers_through_the_official_client(api: vital.Vital) -> None:
    labs = api.lab_tests.get_labs()
    assert all(isinstance(lab, ClientFacingLab) for lab in labs)
    quest = next(lab for lab in labs if lab.slug == "quest")
    assert (quest.city, quest.zipcode) == ("Secaucus", "07094")
    assert {m.value for m in quest.collection_methods} == {"walk_in_test", "at_home_phlebotomy"}

    page = api.lab_tests.get_markers(lab_id=quest.id, name="lipid", size=5)
    assert isinstance(page, GetMarkersResponse)
    assert page.total == len(page.markers) and page.page == 1 and page.size == 5
    lipid = next(m for m in page.markers if m.provider_id == "7600")
    assert lipid.type is not None and lipid.type.value == "panel"
    loincs = {r.loinc.code for r in lipid.expected_results if r.loinc is not None}
    assert {"2093-3", "2085-9", "2571-8", "13457-7"} <= loincs

    second = api.lab_tests.get_markers(page=2, size=100)
    first = api.lab_tests.get_markers(page=1, size=100)
    assert second.total == first.total and second.pages == first.pages
    assert not {m.id for m in first.markers} & {m.id for m in second.markers}

    with pytest.raises(UnprocessableEntityError):
        api.lab_tests.get_markers(size=101)


def test_lab_tests_and_order_sets_through_the_official_client(
    api: vital.Vital,
) -> None:
    created = api.lab_tests.create(
        name="Thyroid and HbA1c",
        method="walk_in_test",
        description="Morning draw.",
        marker_ids=[1038, 1046],
    )
    assert isinstance(created, ClientFacingLabTest)
    assert created.lab is not None and created.lab.slug == "quest"
    assert [m.provider_id for m in created.markers or []] == ["899", "496"]
    assert created.status.value == "active" and created.method.value == "walk_in_test"

    listed = api.lab_tests.get()
    assert created.id in {t.id for t in listed}
    assert DEMO_QUEST_TEST in {t.id for t in listed}
    assert api.lab_tests.get_by_id(created.id).name == "Thyroid and HbA1c"
    own_markers = api.lab_tests.get_markers_for_lab_test(created.id)
    assert [m.id for m in own_markers.markers] == [1038, 1046]

    order_set = api.lab_tests.get_markers_for_order_set(
        request=OrderSetRequest(lab_test_ids=[created.id], add_on=AddOnOrder(provider_ids=["7600"]))
    )
    assert [m.provider_id for m in order_set.markers] == ["899", "496", "7600"]

    with pytest.raises(ApiError) as unknown:
        api.lab_tests.get_markers_for_order_set(
            request=OrderSetRequest(lab_test_ids=[str(uuid.UUID(int=1))])
        )
    assert unknown.value.status_code == 404
    with pytest.raises(UnprocessableEntityError):
        api.lab_tests.create(
            name="Two labs", method="walk_in_test", description="-", marker_ids=[1001, 2001]
        )


def test_area_info_through_the_official_client(api: vital.Vital) -> None:
    info = api.lab_tests.get_area_info(zip_code="85281", radius="50", labs=["quest", "labcorp"])
    assert isinstance(info, AreaInfo)
    assert info.zip_code == "85281" and info.phlebotomy.is_served
    assert {p.name.value for p in info.phlebotomy.providers} == {"getlabs", "quest"}
    assert sorted(info.central_labs) == ["labcorp", "quest"]
    quest = info.central_labs["quest"].patient_service_centers
    assert quest.radius == "50" and quest.within_radius > 0

    deprecated = api.lab_tests.with_raw_response.get_area_info(zip_code="10001", lab="quest")
    assert deprecated.headers["deprecation"] == "true"
    assert list(deprecated.data.central_labs) == ["quest"]

    with pytest.raises(UnprocessableEntityError):
        api.lab_tests.get_area_info(zip_code="00000")
