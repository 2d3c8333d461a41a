"""The official Python client (`vital==2.1.569`) as the e2e tests use it, unchanged but
for its base_url: a demographics upsert, and what the client's generated code expects of our
OpenAPI document (its calls, and the fields its models require)."""

from __future__ import annotations

import re
import types
import typing
from pathlib import Path
from typing import Any

import pydantic
import vital
from vital.types import Address

# Where the client keeps its generated code: raw_client.py holds each call's method and path.
VITAL_DIR = Path(vital.__file__).parent


ADDRESS = Address(
    first_line="1 Navy Yard",
    second_line=None,
    zip="20374",
    country="US",
    city="Washington",
    state="DC",
)


def upsert_info(api: vital.Vital, user_id: str, address: Address = ADDRESS) -> Any:
    return api.user.upsert_user_info(
        user_id,
        first_name="Grace",
        last_name="Hopper",
        email="grace.hopper@example.org",
        phone_number="+1 555 010 1906",
        gender="female",
        dob="1956-12-09",
        address=address,
        race="white_caucasian",
    )


# One sync method of a raw client: its name, then (further down) its method= and path.
_RAW_METHOD = re.compile(r"^    def (\w+)\(", re.MULTILINE)
_RAW_CALL = re.compile(
    r'\.request\(\s*(f?"[^"]*"),\s*(?:base_url=[^\n]*\n\s*)?method="(\w+)"', re.MULTILINE
)
_PARAMETER = re.compile(r"\{[^{}]*\}")


def client_calls() -> dict[str, tuple[str, str]]:
    """'resource.method' -> (HTTP method, path with {} for parameters), read from the
    client's generated raw clients (sync classes only)."""
    calls: dict[str, tuple[str, str]] = {}
    for raw in sorted(VITAL_DIR.glob("*/raw_client.py")):
        source = raw.read_text().split("\nclass AsyncRaw", 1)[0]
        starts = [(m.start(), m.group(1)) for m in _RAW_METHOD.finditer(source)]
        for (start, name), (end, _) in zip(starts, [*starts[1:], (len(source), "")], strict=True):
            call = _RAW_CALL.search(source, start, end)
            if call is not None and not name.startswith("_"):
                path = "/" + _PARAMETER.sub("{}", call.group(1).lstrip("f").strip('"'))
                calls[f"{raw.parent.name}.{name}"] = (call.group(2), path)
    return calls


def shape(path: str) -> str:
    return _PARAMETER.sub("{}", path)


def resolve(document: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    """The schema with $refs followed and a nullable anyOf reduced to its non-null branch."""
    while True:
        if "$ref" in schema:
            schema = document["components"]["schemas"][schema["$ref"].rsplit("/", 1)[1]]
        elif "anyOf" in schema:
            branches = [s for s in schema["anyOf"] if s.get("type") != "null"]
            if len(branches) != 1:
                return schema
            schema = branches[0]
        else:
            return schema


def gaps(document: dict[str, Any], annotation: Any, schema: dict[str, Any], at: str) -> list[str]:
    """Where our schema lacks what the client's type requires: required members of its
    models (recursively), arrays, and maps."""
    schema = resolve(document, schema)
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        members = [a for a in typing.get_args(annotation) if a is not type(None)]
        # A union of models (no such response here) is not checked member by member.
        return gaps(document, members[0], schema, at) if len(members) == 1 else []
    if origin is list:
        if schema.get("type") != "array":
            return [f"{at}: the client reads an array, we declare {schema or 'nothing'}"]
        (item,) = typing.get_args(annotation)
        return gaps(document, item, schema.get("items", {}), f"{at}[]")
    if origin is dict:
        value = typing.get_args(annotation)[1]
        if schema.get("type") != "object":
            return [f"{at}: the client reads an object, we declare {schema or 'nothing'}"]
        found = []
        if isinstance(schema.get("additionalProperties"), dict):
            found += gaps(document, value, schema["additionalProperties"], f"{at}{{}}")
        for name, member in schema.get("properties", {}).items():
            found += gaps(document, value, member, f"{at}.{name}")
        return found
    if isinstance(annotation, type) and issubclass(annotation, pydantic.BaseModel):
        properties = schema.get("properties")
        if properties is None:
            return [f"{at}: the client reads {annotation.__name__}, we declare {schema}"]
        found = []
        for attribute, field in annotation.model_fields.items():
            name = field.alias or attribute  # the wire's name (`all`, not `all_`)
            if name not in properties:
                if field.is_required():
                    found.append(f"{at}.{name}: required by {annotation.__name__}, not declared")
                continue
            found += gaps(document, field.annotation, properties[name], f"{at}.{name}")
        return found
    return []  # a scalar, an enum, Any: not compared
