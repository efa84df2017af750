"""``/openapi.json`` is a valid OpenAPI 3.1 document generated from the routes,
and it states what the server enforces: parameters, bounds, error answers."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from openapi_schema_validator import OAS31Validator
from openapi_spec_validator import validate
from starlette.applications import Starlette
from starlette.testclient import TestClient

from resumable.client import Client
from resumable.models.database import Database
from resumable.settings import Settings
from resumable.webhooks.app import ROUTES, create_app
from resumable.webhooks.auth import PUBLIC_ROUTES
from resumable.webhooks.openapi import openapi_document
from resumable.webhooks.operations import ApiRoute
from tests.conftest import API_TOKEN

AUTH = {"authorization": f"Bearer {API_TOKEN}"}
ERROR = {"$ref": "#/components/schemas/ErrorResponse"}


@pytest.fixture
def app(settings: Settings, db: Database, client: Client) -> Starlette:
    configured = settings.model_copy(update={"api_tokens": [API_TOKEN]})
    return create_app(configured, settings.database_url or "", settings.redis_url or "")


@pytest.fixture
def api(app: Starlette) -> Iterator[TestClient]:
    with TestClient(app, raise_server_exceptions=False) as test_client:
        yield test_client


@pytest.fixture
def document(api: TestClient) -> dict[str, Any]:
    answer = api.get("/openapi.json", headers=AUTH)
    assert answer.status_code == 200
    served: dict[str, Any] = answer.json()
    return served


def operations(document: dict[str, Any]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    for path, methods in document["paths"].items():
        for method, operation in methods.items():
            yield path, method, operation


def test_the_served_document_is_valid_openapi_3_1(document: dict[str, Any]) -> None:
    validate(document)  # openapi-spec-validator: raises on any violation
    assert document["openapi"] == "3.1.0"
    assert document == openapi_document(ROUTES)
    assert "servers" not in document  # served at the root: no prefix


def test_every_route_is_a_described_operation(app: Starlette, document: dict[str, Any]) -> None:
    ids = [operation["operationId"] for _, _, operation in operations(document)]
    assert len(ids) == len(set(ids)) == 35
    for route in app.routes:
        assert isinstance(route, ApiRoute), route
        operation = document["paths"][route.operation.path][route.operation.method.lower()]
        declared = {p["name"] for p in operation.get("parameters", []) if p["in"] == "path"}
        assert declared == set(re.findall(r"{(\w+)", route.path)), route.path
        for parameter in operation.get("parameters", []):
            assert parameter["schema"], (route.path, parameter)
        assert operation["summary"] and operation["tags"]


def test_every_error_answer_is_the_error_model(document: dict[str, Any]) -> None:
    for path, method, operation in operations(document):
        for status, response in operation["responses"].items():
            if int(status) < 400 or (path, status) == ("/readyz", "503"):
                continue
            content = response["content"]["application/json"]
            assert content["schema"] == ERROR, (path, method, status)
            assert content["examples"], (path, method, status)
            for example in content["examples"].values():
                assert set(example["value"]["error"]) == {"code", "message"}


def test_the_answers_every_route_shares_are_documented(document: dict[str, Any]) -> None:
    for path, method, operation in operations(document):
        responses = operation["responses"]
        where = (method, path)
        assert {"400", "431"} <= set(responses), where  # the guards
        if path in PUBLIC_ROUTES:
            assert operation["security"] == [], where
        else:
            assert "security" not in operation, where  # the document's default: bearer
            assert responses["401"]["headers"]["WWW-Authenticate"]["required"], where
        if "requestBody" in operation:
            assert {"413", "415"} <= set(responses), where
        if path not in ("/healthz", "/readyz", "/openapi.json"):
            assert responses["503"]["headers"]["Retry-After"]["required"], where
        parameters = operation.get("parameters", [])
        validated = any(p["in"] == "query" for p in parameters) or (
            "requestBody" in operation
            and operation["operationId"] not in ("receiveCallback", "signalSession")
        )
        if validated:
            assert "422" in responses, where
    assert document["security"] == [{"bearer": []}]
    callback = document["paths"]["/v1/callbacks/{token}"]["post"]
    assert callback["responses"]["401"]["content"]["application/json"]["examples"]
    for operation_id in ("receiveCallback", "signalSession"):
        [body] = [
            o["requestBody"] for _, _, o in operations(document) if o["operationId"] == operation_id
        ]
        assert body["content"]["application/json"]["schema"] == {
            "$ref": "#/components/schemas/JsonValue"
        }


def test_the_documented_bounds_are_the_enforced_ones(
    api: TestClient, client: Client, document: dict[str, Any]
) -> None:
    """Every integer query parameter, probed at and past its documented bounds."""
    session_id = client.start("five")
    probed = 0
    for path, methods in document["paths"].items():
        operation = methods.get("get", {})
        url = path.replace("{session_id}", str(session_id))
        for parameter in operation.get("parameters", []):
            schema = parameter["schema"]
            if parameter["in"] != "query" or schema.get("type") != "integer":
                continue
            low, high = schema["minimum"], schema["maximum"]
            for value, ok in ((low, True), (high, True), (low - 1, False), (high + 1, False)):
                answer = api.get(url, params={parameter["name"]: value}, headers=AUTH)
                assert (answer.status_code == 200) is ok, (url, parameter["name"], value)
                if not ok:
                    assert answer.status_code == 422
                probed += 1
    assert probed == 32  # limit on eight lists
    long_key = {**AUTH, "Idempotency-Key": "k" * 257}
    create = document["paths"]["/v1/sessions"]["post"]
    [key] = [p for p in create["parameters"] if p["name"] == "Idempotency-Key"]
    assert key["schema"]["maxLength"] == 256
    assert api.post("/v1/sessions", json={"agent": "five"}, headers=long_key).status_code == 400


def test_every_example_fits_its_schema(document: dict[str, Any]) -> None:
    def check(schema: dict[str, Any], example: Any, where: object) -> None:
        validator = OAS31Validator({**schema, "components": document["components"]})
        errors = [error.message for error in validator.iter_errors(example)]
        assert not errors, (where, example, errors)

    checked = 0
    for name, schema in document["components"]["schemas"].items():
        for example in schema.get("examples", []):
            check({"$ref": f"#/components/schemas/{name}"}, example, name)
            checked += 1
    for path, method, operation in operations(document):
        for status, response in operation["responses"].items():
            for media in response.get("content", {}).values():
                for example in media.get("examples", {}).values():
                    check(media["schema"], example["value"], (method, path, status))
                    checked += 1
        for parameter in operation.get("parameters", []):
            if "example" in parameter:
                check(parameter["schema"], parameter["example"], (path, parameter["name"]))
                checked += 1
    assert checked > 100
