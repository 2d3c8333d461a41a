"""Both OpenAPI documents (the team API's and the management API's /openapi.json) are valid
OpenAPI 3.1, declare the error responses of every operation, and show an example of every
named response schema, so that generated clients and the docs of both are complete."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from fastapi import FastAPI
from healthledger.adapters.composition import Service
from healthledger.adapters.http.management_api import create_management_api
from healthledger.adapters.http.team_api import create_team_api
from openapi_spec_validator import validate
from openapi_spec_validator.validation import OpenAPIV31SpecValidator

APPS: dict[str, Callable[[Service], FastAPI]] = {
    "team": create_team_api,
    "management": create_management_api,
}

# Operations that take no key, so answer no 401: the token is itself the credential.
KEYLESS = {
    ("team", "POST", "/v2/link/token/isValid"),
    # The link token in the body is the credential (ADR 0038), and a mobile SDK's code.
    ("team", "POST", "/v2/link/start"),
    ("team", "POST", "/v2/link/code/exchange"),
    # The makers' webhooks: each maker authenticates with its own signature scheme.
    *(("team", method, "/makers/{provider}/webhook") for method in ("GET", "HEAD", "POST")),
}

_REF = re.compile(r"^#/components/schemas/(.+)$")
_METHODS = {"get", "put", "post", "delete", "options", "head", "patch", "trace"}


@pytest.fixture(params=sorted(APPS))
def document(request: pytest.FixtureRequest, service: Service) -> Iterator[tuple[str, Any]]:
    name = request.param
    yield name, APPS[name](service).openapi()


def operations(doc: dict[str, Any]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    for path, item in doc["paths"].items():
        for method, operation in item.items():
            if method in _METHODS:
                yield method.upper(), path, operation


def schema_refs(schema: Any) -> Iterator[str]:
    """The named schemas a response schema is, or is a list or union of (not their
    members' schemas: a model used only inside another is that model's concern)."""
    if not isinstance(schema, dict):
        return
    if "$ref" in schema:
        match = _REF.match(schema["$ref"])
        assert match, schema["$ref"]
        yield match.group(1)
    if schema.get("type") == "array":
        yield from schema_refs(schema.get("items"))
    for key in ("anyOf", "oneOf", "allOf"):
        for member in schema.get(key, []):
            yield from schema_refs(member)


def has_example(schema: dict[str, Any]) -> bool:
    if "examples" in schema or "example" in schema:
        return True
    properties = schema.get("properties") or {}
    return bool(properties) and all("examples" in p or "example" in p for p in properties.values())


def test_the_document_is_valid_openapi_3_1(document: tuple[str, Any]) -> None:
    _, doc = document
    assert doc["openapi"].startswith("3.1.")
    validate(doc, cls=OpenAPIV31SpecValidator)  # raises with the first problem found


def test_every_operation_declares_its_error_responses(document: tuple[str, Any]) -> None:
    name, doc = document
    problems = []
    for method, path, operation in operations(doc):
        responses = operation.get("responses", {})
        where = f"{method} {path}"
        parameters = operation.get("parameters", [])
        expected = set()
        if (name, method, path) not in KEYLESS:
            # Every other operation needs a key, and says so (a security requirement).
            if not operation.get("security"):
                problems.append(f"{where}: no security requirement")
            expected.add("401")
        if any(p["in"] == "path" for p in parameters):
            expected.add("404")  # an unknown, another team's or a malformed id
        if parameters or "requestBody" in operation:
            expected.add("422")
        missing = expected - set(responses)
        if missing:
            problems.append(f"{where}: no {sorted(missing)} response")
        if not any(code.startswith("2") for code in responses):
            problems.append(f"{where}: no success response")
        for code, response in responses.items():
            if not code.startswith("4"):
                continue
            # Each error response documents its body: ErrorBody, or the pydantic shape.
            schema = response.get("content", {}).get("application/json", {}).get("schema")
            wanted = "ValidationErrors" if code == "422" else "ErrorBody"
            if list(schema_refs(schema)) != [wanted]:
                problems.append(f"{where}: {code} body is not {wanted}")
    assert problems == []


def test_every_named_response_schema_has_an_example(document: tuple[str, Any]) -> None:
    name, doc = document
    schemas = doc.get("components", {}).get("schemas", {})
    named: set[str] = set()
    for _, _, operation in operations(doc):
        for response in operation.get("responses", {}).values():
            for content in response.get("content", {}).values():
                named.update(schema_refs(content.get("schema")))
    assert named, "no named response schema at all: the walk is broken"
    # An example is model_config json_schema_extra examples, or Field examples on every field.
    without = sorted(model for model in named if not has_example(schemas[model]))
    assert without == [], f"{name}: response models without an example"
